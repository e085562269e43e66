//! Where every value of a kernel lives in the generated CUDA C, and the shared-memory layout.
//!
//! - Scalars live in registers (every thread of the block holds the same value).
//! - Tiles whose elements are all equal (`const` tiles, `splat`, broadcasts of those) are not
//!   stored: they are one register ([`Repr::Uniform`]). `iota` tiles are computed from the
//!   element's coordinate ([`Repr::Iota`]).
//! - `broadcast`, `transpose` and contiguous `reshape` of a stored tile are views: the same
//!   shared-memory buffer read with other strides ([`Repr::Mem`] with non-contiguous strides);
//!   so is a `cast` of a stored f16 or bf16 tile to f32 (16-bit floats are stored as `float`).
//! - Every other tile is stored in its own region of dynamic shared memory. Regions are given by
//!   liveness: a region is live from the definition of its first value to the last use of any
//!   value stored in or viewing it (a use inside a loop that does not define the value counts
//!   until the loop's end), and two live regions never overlap. An elementwise op or a `dot`
//!   whose operand dies at that op writes its result in place of the operand (each thread reads
//!   and writes the same element, so this is race-free); so does a loop's carried tile.

use super::{elem_size, CudaError};
use cranelift_entity::SecondaryMap;
use kir_ir::{Attr, Block, Dtype, Kernel, Op, Opcode, Value};
use std::collections::HashMap;

/// How a value is held.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Repr {
    /// A scalar in a register.
    Reg,
    /// A tile whose every element is the given C expression (a register).
    Uniform(String),
    /// A tile whose element is its coordinate along the axis.
    Iota(usize),
    /// A tile in shared memory: the stored value `base` read with these element strides
    /// (contiguous for the stored value itself; 0 for broadcast dims).
    Mem { base: Value, strides: Vec<i64> },
}

/// One shared-memory region.
#[derive(Clone, Debug)]
pub(crate) struct Region {
    pub bytes: usize,
    pub start: usize,
    pub end: usize,
    pub offset: usize,
    members: Vec<Value>,
}

/// The placement of every value of a kernel.
pub(crate) struct Plan {
    pub repr: HashMap<Value, Repr>,
    /// The region of every stored value (the `base` of a [`Repr::Mem`]).
    pub region_of: HashMap<Value, usize>,
    /// A stored value that took over the region of a dead operand (or of a loop's initial
    /// value), and that operand.
    pub reuses: HashMap<Value, Value>,
    pub regions: Vec<Region>,
    /// Bytes of dynamic shared memory the kernel needs.
    pub shared_bytes: usize,
}

/// Row-major strides of a shape.
pub(crate) fn contiguous(shape: &[usize]) -> Vec<i64> {
    let mut st = vec![1i64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        st[d] = st[d + 1] * shape[d + 1] as i64;
    }
    st
}

/// True if `strides` address a tile of `shape` in row-major order (size-1 dims do not matter).
pub(crate) fn is_contiguous(shape: &[usize], strides: &[i64]) -> bool {
    let c = contiguous(shape);
    shape
        .iter()
        .zip(strides.iter().zip(&c))
        .all(|(&n, (s, c))| n == 1 || s == c)
}

/// The static shape and dtype of a value.
pub(crate) fn shape_dtype(k: &Kernel, v: Value) -> Result<(Vec<usize>, Dtype), CudaError> {
    let ty = k.dfg.ty(v);
    match (ty.shape(), ty.dtype()) {
        (Some(s), Some(d)) => Ok((s, d)),
        _ => Err(CudaError::at(
            k.dfg.values[v].span,
            format!("`{ty}` is not concrete: specialize the module before lowering"),
        )),
    }
}

/// Positions of ops in program order and the last use of every value.
struct Liveness {
    pos: usize,
    def: HashMap<Value, usize>,
    depth: HashMap<Value, usize>,
    /// (value, use position, loop the use must be extended to)
    uses: Vec<(Value, usize, Option<usize>)>,
    loop_end: Vec<usize>,
    op_pos: HashMap<Op, (usize, usize)>,
    last: HashMap<Value, usize>,
}

impl Liveness {
    fn define(&mut self, v: Value, at: usize, depth: usize) {
        self.def.insert(v, at);
        self.depth.insert(v, depth);
    }

    fn use_at(&mut self, v: Value, loops: &[usize]) {
        let d = self.depth.get(&v).copied().unwrap_or(0);
        self.uses.push((v, self.pos, loops.get(d).copied()));
    }

    fn walk(&mut self, k: &Kernel, b: Block, loops: &mut Vec<usize>) {
        for &a in &k.dfg.blocks[b].args {
            // Block arguments are defined by the enclosing op (numbered before the body).
            let at = self.pos.saturating_sub(1);
            self.define(a, at, loops.len());
        }
        for &o in &k.dfg.blocks[b].ops {
            let op = &k.dfg.ops[o];
            let start = self.pos;
            self.pos += 1;
            for v in op.uses() {
                self.pos = start;
                self.use_at(v, loops);
            }
            self.pos = start + 1;
            match op.opcode {
                Opcode::For => {
                    let id = self.loop_end.len();
                    self.loop_end.push(usize::MAX);
                    loops.push(id);
                    if let Some(&body) = op.regions.first() {
                        self.walk(k, body, loops);
                    }
                    loops.pop();
                    let end = self.pos;
                    self.pos += 1;
                    self.loop_end[id] = end;
                    for &r in &op.results {
                        self.define(r, end, loops.len());
                    }
                    self.op_pos.insert(o, (start, end));
                }
                _ => {
                    for &r in &op.results {
                        self.define(r, start, loops.len());
                    }
                    for &region in &op.regions {
                        self.walk(k, region, loops);
                    }
                    let end = self.pos;
                    // An `if`'s yields write its results inside the regions: they are live to
                    // the op's end even when nothing after it reads them (seed 535 of the random
                    // programs: an unused result's buffer was given to a tile of the branch).
                    for &r in &op.results {
                        self.uses.push((r, end, None));
                    }
                    self.op_pos.insert(o, (start, end));
                }
            }
        }
    }

    fn finish(&mut self) {
        for &(v, at, ext) in &self.uses {
            let at = ext.map_or(at, |l| self.loop_end[l]);
            let e = self.last.entry(v).or_insert(at);
            *e = (*e).max(at);
        }
        for (&v, &d) in &self.def {
            self.last.entry(v).or_insert(d);
        }
    }
}

/// Builds the plan of kernel `k`; `uniform_name(v)` is the C register name of a value.
pub(crate) fn plan(k: &Kernel, names: &SecondaryMap<Value, String>) -> Result<Plan, CudaError> {
    let mut live = Liveness {
        pos: 1,
        def: HashMap::new(),
        depth: HashMap::new(),
        uses: vec![],
        loop_end: vec![],
        op_pos: HashMap::new(),
        last: HashMap::new(),
    };
    live.walk(k, k.body, &mut vec![]);
    live.finish();
    let mut p = Planner {
        k,
        names,
        live,
        plan: Plan {
            repr: HashMap::new(),
            region_of: HashMap::new(),
            reuses: HashMap::new(),
            regions: vec![],
            shared_bytes: 0,
        },
    };
    p.block(k.body)?;
    p.allocate()?;
    Ok(p.plan)
}

struct Planner<'a> {
    k: &'a Kernel,
    names: &'a SecondaryMap<Value, String>,
    live: Liveness,
    plan: Plan,
}

impl Planner<'_> {
    fn last(&self, v: Value) -> usize {
        self.live.last.get(&v).copied().unwrap_or(0)
    }

    fn repr(&self, v: Value) -> Repr {
        self.plan.repr.get(&v).cloned().unwrap_or(Repr::Reg)
    }

    /// Stores `v` in a new region.
    fn store_new(&mut self, v: Value) -> Result<(), CudaError> {
        let (shape, d) = shape_dtype(self.k, v)?;
        let bytes = shape.iter().product::<usize>() * elem_size(d);
        let at = self.live.def.get(&v).copied().unwrap_or(0);
        self.plan.regions.push(Region {
            bytes,
            start: at,
            end: at,
            offset: 0,
            members: vec![],
        });
        self.join(v, v, self.plan.regions.len() - 1, &shape);
        Ok(())
    }

    /// Makes `v` a stored value in region `r` (`base` is itself).
    fn join(&mut self, v: Value, base: Value, r: usize, shape: &[usize]) {
        self.plan.region_of.insert(v, r);
        self.plan.regions[r].members.push(v);
        self.plan.repr.insert(
            v,
            Repr::Mem {
                base,
                strides: contiguous(shape),
            },
        );
    }

    /// The region a tile value is stored in or views.
    fn region_seen(&self, v: Value) -> Option<usize> {
        match self.plan.repr.get(&v) {
            Some(Repr::Mem { base, .. }) => self.plan.region_of.get(base).copied(),
            _ => None,
        }
    }

    /// Adds a view `v` of `base` (extends the region's life).
    fn view(&mut self, v: Value, base: Value, strides: Vec<i64>) {
        if let Some(&r) = self.plan.region_of.get(&base) {
            self.plan.regions[r].members.push(v);
        }
        self.plan.repr.insert(v, Repr::Mem { base, strides });
    }

    /// A widening `cast` (f16 or bf16 to f32) of a stored tile `x` is a view of it: 16-bit
    /// floats are stored as exact `float`s, so the stored elements already are the result.
    fn widening_view(
        &self,
        opcode: Opcode,
        r: Value,
        x: Option<Value>,
    ) -> Result<Option<(Value, Vec<i64>)>, CudaError> {
        let Some(x) = x else { return Ok(None) };
        if opcode != Opcode::Cast {
            return Ok(None);
        }
        let ((xs, xd), (rs, rd)) = (shape_dtype(self.k, x)?, shape_dtype(self.k, r)?);
        let widening = matches!(xd, Dtype::F16 | Dtype::Bf16) && rd == Dtype::F32 && xs == rs;
        Ok(match self.plan.repr.get(&x) {
            Some(Repr::Mem { base, strides }) if widening => Some((*base, strides.clone())),
            _ => None,
        })
    }

    /// Stores result `r` of the op at `pos`, in place of one of `candidates` (operands read
    /// only at the element being written) when that is safe, else in a new region. `others`
    /// are the op's other operands, which must not touch a reused region.
    fn store_result(
        &mut self,
        r: Value,
        pos: usize,
        candidates: &[Value],
        others: &[Value],
    ) -> Result<(), CudaError> {
        let (shape, d) = shape_dtype(self.k, r)?;
        for &x in candidates {
            let Some(Repr::Mem { base, strides }) = self.plan.repr.get(&x).cloned() else {
                continue;
            };
            let Some(&reg) = self.plan.region_of.get(&base) else {
                continue;
            };
            let (xs, xd) = shape_dtype(self.k, x)?;
            let same = xs == shape
                && strides == contiguous(&shape)
                && super::ctype(xd) == super::ctype(d)
                && self.plan.region_of.get(&base) == Some(&reg);
            let dead = self.plan.regions[reg]
                .members
                .iter()
                .all(|&m| self.last(m) <= pos);
            let shared_ok = candidates
                .iter()
                .filter(|&&y| self.region_seen(y) == Some(reg))
                .all(|&y| self.repr(y) == self.repr(x))
                && others.iter().all(|&y| self.region_seen(y) != Some(reg));
            if same && dead && shared_ok {
                self.join(r, r, reg, &shape);
                self.plan.reuses.insert(r, base);
                return Ok(());
            }
        }
        self.store_new(r)
    }

    fn block(&mut self, b: Block) -> Result<(), CudaError> {
        for &o in &self.k.dfg.blocks[b].ops.clone() {
            self.op(o)?;
        }
        Ok(())
    }

    fn op(&mut self, o: Op) -> Result<(), CudaError> {
        let k = self.k;
        let op = &k.dfg.ops[o];
        let (pos, end) = self.live.op_pos.get(&o).copied().unwrap_or((0, 0));
        let result = op.results.first().copied();
        let scalar_result = result.is_some_and(|r| k.dfg.ty(r).is_scalar());
        let operand = |i: usize| op.operands.get(i).copied();
        match op.opcode {
            Opcode::ProgramId | Opcode::NumPrograms | Opcode::Dim | Opcode::Param => {
                for &r in &op.results {
                    self.plan.repr.insert(r, Repr::Reg);
                }
            }
            Opcode::Const => {
                if let Some(r) = result {
                    let repr = if scalar_result {
                        Repr::Reg
                    } else {
                        Repr::Uniform(self.names[r].clone())
                    };
                    self.plan.repr.insert(r, repr);
                }
            }
            Opcode::Iota => {
                if let Some(r) = result {
                    let axis = match op.attr("axis") {
                        Some(Attr::Expr(e)) => e.as_int().unwrap_or(0).max(0) as usize,
                        _ => 0,
                    };
                    self.plan.repr.insert(r, Repr::Iota(axis));
                }
            }
            Opcode::Splat | Opcode::Broadcast | Opcode::Reshape | Opcode::Transpose => {
                let (Some(r), Some(x)) = (result, operand(0)) else {
                    return Ok(());
                };
                let (xs, _) = shape_dtype(k, x)?;
                let (rs, _) = shape_dtype(k, r)?;
                let view = match (self.repr(x), op.opcode) {
                    (Repr::Reg, _) => Some(Repr::Uniform(self.names[x].clone())),
                    (Repr::Uniform(e), _) => Some(Repr::Uniform(e)),
                    (Repr::Iota(a), Opcode::Transpose) => {
                        let perm = perm_of(op, xs.len());
                        perm.iter().position(|&p| p == a).map(Repr::Iota)
                    }
                    (Repr::Iota(_), _) => None,
                    (Repr::Mem { base, strides }, Opcode::Broadcast) => Some(Repr::Mem {
                        base,
                        strides: strides
                            .iter()
                            .zip(xs.iter().zip(&rs))
                            .map(|(&s, (&a, &b))| if a == 1 && b != 1 { 0 } else { s })
                            .collect(),
                    }),
                    (Repr::Mem { base, strides }, Opcode::Transpose) => Some(Repr::Mem {
                        base,
                        strides: perm_of(op, xs.len()).iter().map(|&p| strides[p]).collect(),
                    }),
                    (Repr::Mem { base, strides }, _) if is_contiguous(&xs, &strides) => {
                        Some(Repr::Mem {
                            base,
                            strides: contiguous(&rs),
                        })
                    }
                    (Repr::Mem { .. }, _) => None,
                };
                match view {
                    Some(Repr::Mem { base, strides }) => self.view(r, base, strides),
                    Some(v) => {
                        self.plan.repr.insert(r, v);
                    }
                    None => self.store_new(r)?,
                }
            }
            Opcode::Load | kir_ir::elementwise_ops!() => {
                if let Some(r) = result {
                    if scalar_result {
                        self.plan.repr.insert(r, Repr::Reg);
                    } else if let Some((base, strides)) = self.widening_view(op.opcode, r, operand(0))? {
                        self.view(r, base, strides);
                    } else {
                        // Elementwise: every operand (and a load's mask) is read at the element
                        // being written.
                        self.store_result(r, pos, &op.uses(), &[])?;
                    }
                }
            }
            Opcode::Reduce => {
                if let Some(r) = result {
                    self.store_new(r)?;
                }
            }
            Opcode::Dot => {
                if let (Some(r), [a, b, acc]) = (result, &op.operands[..]) {
                    self.store_result(r, pos, &[*acc], &[*a, *b])?;
                }
            }
            Opcode::Store
            | Opcode::AtomicAdd
            | Opcode::SemWait
            | Opcode::SemSignal
            | Opcode::Print
            | Opcode::Yield => {}
            Opcode::For => self.for_op(o, pos, end)?,
            Opcode::If => {
                for &r in &op.results {
                    if k.dfg.ty(r).is_scalar() {
                        self.plan.repr.insert(r, Repr::Reg);
                    } else {
                        self.store_new(r)?;
                    }
                }
                for &region in &op.regions {
                    self.block(region)?;
                }
            }
            Opcode::StaticIf => {
                return Err(CudaError::at(
                    op.span,
                    "`static_if` must be removed by specialization before lowering",
                ))
            }
            kir_ir::schedule_ops!() => {
                return Err(CudaError::at(
                    op.span,
                    format!("`{}` is scheduled IR, which has no CUDA-C lowering: the parity backend takes the unscheduled kernel", op.opcode.name()),
                ))
            }
        }
        Ok(())
    }

    /// A `for`: carried scalars are registers; a carried tile gets a region (its initial
    /// value's, when that dies at the loop) live over the whole loop; results share it.
    fn for_op(&mut self, o: Op, pos: usize, end: usize) -> Result<(), CudaError> {
        let k = self.k;
        let op = &k.dfg.ops[o];
        let Some(&body) = op.regions.first() else {
            return Ok(());
        };
        let args = k.dfg.blocks[body].args.clone();
        let inits: Vec<Value> = op.operands.iter().skip(3).copied().collect();
        if let Some(&iv) = args.first() {
            self.plan.repr.insert(iv, Repr::Reg);
        }
        for (i, (&a, &init)) in args.iter().skip(1).zip(&inits).enumerate() {
            if k.dfg.ty(a).is_scalar() {
                self.plan.repr.insert(a, Repr::Reg);
                continue;
            }
            let others: Vec<Value> = inits
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .map(|(_, &v)| v)
                .collect();
            self.store_result(a, pos, &[init], &others)?;
            if let Some(&r) = self.plan.region_of.get(&a) {
                let reg = &mut self.plan.regions[r];
                reg.end = reg.end.max(end);
            }
        }
        self.block(body)?;
        for (&r, &a) in op.results.iter().zip(args.iter().skip(1)) {
            if k.dfg.ty(r).is_scalar() {
                self.plan.repr.insert(r, Repr::Reg);
            } else if let Some(&reg) = self.plan.region_of.get(&a) {
                let (shape, _) = shape_dtype(k, r)?;
                self.join(r, r, reg, &shape);
                self.plan.reuses.insert(r, a);
            }
        }
        Ok(())
    }

    /// Computes every region's live range and places the regions first-fit, in order of
    /// their start, so that regions live at the same time never overlap.
    fn allocate(&mut self) -> Result<(), CudaError> {
        let regions = &mut self.plan.regions;
        for reg in regions.iter_mut() {
            for &m in &reg.members {
                let d = self.live.def.get(&m).copied().unwrap_or(0);
                let l = self.live.last.get(&m).copied().unwrap_or(d);
                reg.start = reg.start.min(d);
                reg.end = reg.end.max(l);
            }
        }
        let mut order: Vec<usize> = (0..regions.len()).collect();
        order.sort_by_key(|&i| (regions[i].start, std::cmp::Reverse(regions[i].bytes)));
        let mut placed: Vec<usize> = vec![];
        let mut total = 0;
        for i in order {
            let (s, e, bytes) = (regions[i].start, regions[i].end, regions[i].bytes);
            let mut busy: Vec<(usize, usize)> = placed
                .iter()
                .filter(|&&j| regions[j].start <= e && s <= regions[j].end)
                .map(|&j| (regions[j].offset, regions[j].offset + regions[j].bytes))
                .collect();
            busy.sort();
            let mut off = 0;
            for (a, b) in busy {
                if off + bytes <= a {
                    break;
                }
                off = off.max(b.div_ceil(16) * 16);
            }
            regions[i].offset = off;
            total = total.max(off + bytes);
            placed.push(i);
        }
        self.plan.shared_bytes = total.div_ceil(16) * 16;
        Ok(())
    }
}

/// The permutation of a `transpose` (default: reversed dims).
pub(crate) fn perm_of(op: &kir_ir::OpData, rank: usize) -> Vec<usize> {
    match op.attr("perm") {
        Some(Attr::List(l)) => l
            .iter()
            .map(|e| e.as_int().unwrap_or(0).max(0) as usize)
            .collect(),
        _ => (0..rank).rev().collect(),
    }
}
