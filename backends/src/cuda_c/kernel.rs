//! Emits one kernel: the signature in ABI order, the prologue (requirements, tensor strides),
//! and one commented C statement per IR op, with structured loops for `for` and `if`.
//!
//! [`Emitter::op`] holds the exhaustive `match` over [`Opcode`]; memory ops are in
//! `memory.rs`, compute statements in `tiles.rs`, `for`/`if`/`yield` in `control.rs` and
//! per-element expressions in `compute.rs`.

use super::compute;
use super::names::{op_text, value_c_names, Names};
use super::plan::{self, contiguous, shape_dtype, Plan, Repr};
use super::{ctype, CudaError};
use crate::abi::{AbiArg, KernelAbi};
use cranelift_entity::SecondaryMap;
use kir_ir::{Attr, Block, Dtype, Kernel, Op, OpData, Opcode, Value};
use std::collections::HashMap;

/// A tensor param as the kernel body sees it.
pub(crate) struct TensorInfo {
    /// The pointer argument.
    pub ptr: String,
    pub dtype: Dtype,
    /// C expressions (long long) of the dims and element strides.
    pub dims: Vec<String>,
    pub strides: Vec<String>,
    /// Names of the per-element tensor index variables, one per dim.
    pub index: Vec<String>,
}

/// Where a region's `yield` puts its values.
#[derive(Clone)]
pub(crate) enum Dest {
    /// A scalar variable.
    Var(String),
    /// A tile: the pointer variable of the loop's carried tile or the `if`'s result.
    Tile(String, Value),
}

/// The state of emitting one kernel.
pub(crate) struct Emitter<'a> {
    pub k: &'a Kernel,
    pub ir: SecondaryMap<Value, String>,
    pub names: SecondaryMap<Value, String>,
    pub plan: Plan,
    pub tensors: HashMap<String, TensorInfo>,
    pub scalars: HashMap<String, (String, Dtype)>,
    pub dims: HashMap<String, String>,
    pub namer: Names,
    pub(crate) out: String,
    pub(crate) depth: usize,
    /// Destinations of the `yield` of each enclosing region, innermost last.
    pub(crate) dests: Vec<(Vec<Dest>, bool)>,
}

/// Lowers kernel `k` to a `__global__` function named `symbol`; returns its text and the
/// dynamic shared memory it needs.
pub(crate) fn emit_kernel(
    k: &Kernel,
    abi: &KernelAbi,
    symbol: &str,
) -> Result<(String, usize), CudaError> {
    let mut namer = Names::new();
    // Params first: their names are the kernel's interface.
    let mut tensors = HashMap::new();
    let mut scalars = HashMap::new();
    let mut dims = HashMap::new();
    let mut sig = Vec::new();
    for a in &abi.args {
        match a {
            AbiArg::Tensor { param, dtype } => {
                let ptr = namer.fresh(param);
                sig.push(format!("{}* {ptr}", super::storage_ctype(*dtype)));
                tensors.insert(
                    param.clone(),
                    TensorInfo {
                        ptr,
                        dtype: *dtype,
                        dims: vec![],
                        strides: vec![],
                        index: vec![],
                    },
                );
            }
            AbiArg::Scalar { param, dtype } => {
                let suffix = if matches!(dtype, Dtype::F16 | Dtype::Bf16) {
                    "bits"
                } else {
                    "arg"
                };
                let name = namer.fresh(&format!("{param}_{suffix}"));
                let t = match dtype {
                    Dtype::F32 => "float",
                    Dtype::F16 | Dtype::Bf16 => "unsigned short",
                    Dtype::I32 => "int",
                    Dtype::I64 => "long long",
                    Dtype::U8 | Dtype::I1 => "unsigned char",
                };
                sig.push(format!("{t} {name}"));
                scalars.insert(param.clone(), (name, *dtype));
            }
            AbiArg::Dim { name } => {
                let c = namer.fresh(name);
                sig.push(format!("int {c}"));
                dims.insert(name.clone(), c);
            }
            AbiArg::TensorMap { param, .. } => {
                return Err(CudaError::at(
                    k.span,
                    format!("a tensor copy (TMA) of `{param}`: the CUDA-C backend takes no scheduled IR"),
                ));
            }
        }
    }
    let ir = kir_ir::text::printer::value_names(k);
    let names = value_c_names(k, &mut namer);
    let plan = plan::plan(k, &names)?;
    let mut e = Emitter {
        k,
        ir,
        names,
        plan,
        tensors,
        scalars,
        dims,
        namer,
        out: String::new(),
        depth: 1,
        dests: vec![],
    };
    for d in &k.doc {
        e.out += &format!("//{}{d}\n", if d.is_empty() { "" } else { " " });
    }
    e.out += &format!(
        "// Kernel `{}`: one block of {} threads per program instance; {} bytes of dynamic\n\
         // shared memory.\n",
        k.name,
        super::THREADS,
        e.plan.shared_bytes
    );
    e.out += &format!(
        "extern \"C\" __global__ void __launch_bounds__({}) {symbol}(\n    {}) {{\n",
        super::THREADS,
        sig.join(",\n    ")
    );
    e.prologue()?;
    e.block(k.body)?;
    e.out += "}\n";
    Ok((e.out, e.plan.shared_bytes))
}

impl Emitter<'_> {
    /// Appends one line at the current indentation.
    pub(crate) fn line(&mut self, s: impl AsRef<str>) {
        for l in s.as_ref().lines() {
            self.out += &"  ".repeat(self.depth);
            self.out += l;
            self.out.push('\n');
        }
    }

    /// Indents the following lines one level more.
    pub(crate) fn depth_in(&mut self) {
        self.depth += 1;
    }

    /// Ends one level of indentation.
    pub(crate) fn depth_out(&mut self) {
        self.depth -= 1;
    }

    /// Bytes emitted so far (a position for [`Emitter::insert_line`]).
    pub(crate) fn out_len(&self) -> usize {
        self.out.len()
    }

    /// The code emitted since `start`.
    pub(crate) fn out_tail(&self, start: usize) -> String {
        self.out[start..].to_string()
    }

    /// Inserts one line at byte position `at` (a line start), at the current indentation.
    pub(crate) fn insert_line(&mut self, at: usize, s: &str) {
        let l = format!("{}{s}\n", "  ".repeat(self.depth));
        self.out.insert_str(at, &l);
    }

    /// The barrier that separates statements exchanging data through memory.
    pub(crate) fn sync(&mut self) {
        self.line("__syncthreads();");
    }

    /// The C name of a value.
    pub(crate) fn n(&self, v: Value) -> String {
        self.names[v].clone()
    }

    /// True if some op reads `v`.
    pub(crate) fn used(&self, v: Value) -> bool {
        self.k.dfg.ops.values().any(|o| o.uses().contains(&v))
    }

    /// The IR name of a value (`%acc`).
    pub(crate) fn irn(&self, v: Value) -> String {
        format!("%{}", self.ir[v])
    }

    pub(crate) fn repr(&self, v: Value) -> Repr {
        self.plan.repr.get(&v).cloned().unwrap_or(Repr::Reg)
    }

    /// Coordinate names of the elements of a tile of `shape`: `e` for rank 1, else `e0`,
    /// `e1`…, and the literal `0` along size-1 dims.
    pub(crate) fn coord_names(shape: &[usize]) -> Vec<String> {
        if shape.len() == 1 {
            return vec!["e".into()];
        }
        (0..shape.len())
            .map(|d| {
                if shape[d] == 1 {
                    "0".into()
                } else {
                    format!("e{d}")
                }
            })
            .collect()
    }

    /// The declaration of the coordinates of element `e` of a tile of `shape` that the code
    /// `uses` (none for rank 1, where the coordinate is `e` itself).
    pub(crate) fn coord_decl(shape: &[usize], uses: &str) -> Option<String> {
        if shape.len() < 2 {
            return None;
        }
        let st = contiguous(shape);
        let parts: Vec<String> = (0..shape.len())
            .filter(|&d| mentions(uses, &format!("e{d}")))
            .map(|d| {
                // A size-1 dim is coordinate 0 (an operand of another shape may still index
                // with it: a dot's [1, K] row `a[e0 * K + kk]`).
                if shape[d] == 1 {
                    return format!("e{d} = 0");
                }
                let div = if st[d] == 1 {
                    "e".to_string()
                } else {
                    format!("e / {}", st[d])
                };
                if d == 0 {
                    format!("e{d} = {div}")
                } else {
                    format!("e{d} = {div} % {}", shape[d])
                }
            })
            .collect();
        (!parts.is_empty()).then(|| format!("const int {};", parts.join(", ")))
    }

    /// The element of `v` at coordinates `coords` (C int expressions). `linear` is the loop's
    /// element index when the loop walks a tile of exactly `v`'s shape in row-major order.
    pub(crate) fn read(
        &self,
        v: Value,
        coords: &[String],
        linear: Option<&str>,
    ) -> Result<String, CudaError> {
        Ok(match self.repr(v) {
            Repr::Reg => self.n(v),
            Repr::Uniform(x) => x,
            Repr::Iota(a) => {
                let (_, d) = shape_dtype(self.k, v)?;
                let c = coords.get(a).cloned().unwrap_or_else(|| "0".into());
                compute::from_index(d, &c).map_err(|m| self.err_v(v, m))?
            }
            Repr::Mem { base, strides } => {
                let (shape, _) = shape_dtype(self.k, v)?;
                let p = self.n(base);
                match linear {
                    Some(l) if plan::is_contiguous(&shape, &strides) => format!("{p}[{l}]"),
                    _ => {
                        let terms: Vec<String> = coords
                            .iter()
                            .zip(&strides)
                            .filter(|(c, &s)| s != 0 && c.as_str() != "0")
                            .map(|(c, &s)| {
                                if s == 1 {
                                    c.clone()
                                } else {
                                    format!("{c} * {s}")
                                }
                            })
                            .collect();
                        if terms.is_empty() {
                            format!("{p}[0]")
                        } else {
                            format!("{p}[{}]", terms.join(" + "))
                        }
                    }
                }
            }
        })
    }

    fn err_v(&self, v: Value, m: impl Into<String>) -> CudaError {
        CudaError::at(self.k.dfg.values[v].span, m)
    }

    pub(crate) fn err_op(&self, op: &OpData, m: impl std::fmt::Display) -> CudaError {
        CudaError::at(
            op.span,
            format!("kernel `{}`: `{}`: {m}", self.k.name, op.opcode.name()),
        )
    }

    /// Declares the pointer of a stored result `r` (a new region, or the region of the dead
    /// value it replaces).
    pub(crate) fn declare_tile(&mut self, r: Value) -> Result<(), CudaError> {
        let (shape, d) = shape_dtype(self.k, r)?;
        let t = ctype(d);
        let name = self.n(r);
        let dims: Vec<String> = shape.iter().map(|n| n.to_string()).collect();
        let what = format!("{} {d}", dims.join("x"));
        if let Some(&old) = self.plan.reuses.get(&r) {
            let o = self.n(old);
            self.line(format!(
                "{t}* {name} = {o};  // {what}, in the shared memory of {}",
                self.irn(old)
            ));
        } else {
            let reg = self.plan.region_of.get(&r).copied().unwrap_or(0);
            let off = self.plan.regions.get(reg).map_or(0, |g| g.offset);
            self.line(format!(
                "{t}* {name} = ({t}*)(kir_smem + {off});  // {what} in shared memory"
            ));
        }
        Ok(())
    }

    /// A statement that computes every element of the stored tile `r` from `f(coords, linear)`.
    #[allow(clippy::type_complexity)]
    pub(crate) fn tile_statement(
        &mut self,
        r: Value,
        f: &dyn Fn(&Self, &[String]) -> Result<String, CudaError>,
    ) -> Result<(), CudaError> {
        let (shape, _) = shape_dtype(self.k, r)?;
        self.declare_tile(r)?;
        let coords = Self::coord_names(&shape);
        let total: usize = shape.iter().product();
        let expr = f(self, &coords)?;
        let name = self.n(r);
        self.line(format!(
            "for (int e = threadIdx.x; e < {total}; e += blockDim.x) {{"
        ));
        self.depth += 1;
        if let Some(c) = Self::coord_decl(&shape, &expr) {
            self.line(c);
        }
        self.line(format!("{name}[e] = {expr};"));
        self.depth -= 1;
        self.line("}");
        self.sync();
        Ok(())
    }

    pub(crate) fn block(&mut self, b: Block) -> Result<(), CudaError> {
        for &o in &self.k.dfg.blocks[b].ops.clone() {
            self.op(o)?;
        }
        Ok(())
    }

    /// Emits one op.
    fn op(&mut self, o: Op) -> Result<(), CudaError> {
        let k = self.k;
        let op = &k.dfg.ops[o];
        if !op.doc.is_empty() {
            self.out.push('\n');
            for d in &op.doc {
                self.line(format!("//{}{d}", if d.is_empty() { "" } else { " " }));
            }
        }
        let text = op_text(k, &self.ir, op);
        if op.opcode != Opcode::Yield {
            self.line(format!("// {text}"));
        }
        let r = op.results.first().copied();
        let scalar = r.is_some_and(|r| k.dfg.ty(r).is_scalar());
        match op.opcode {
            Opcode::ProgramId | Opcode::NumPrograms => {
                let axis = match &op.lead {
                    Some(Attr::Expr(e)) => e.as_int().unwrap_or(-1),
                    _ => -1,
                };
                let c = ["x", "y", "z"]
                    .get(axis as usize)
                    .ok_or_else(|| self.err_op(op, "the grid axis must be 0, 1 or 2"))?;
                let what = if op.opcode == Opcode::ProgramId {
                    "blockIdx"
                } else {
                    "gridDim"
                };
                if let Some(r) = r {
                    self.line(format!("const int {} = (int){what}.{c};", self.n(r)));
                }
            }
            Opcode::Dim => {
                let name = match &op.lead {
                    Some(Attr::Name(n, _)) => n.clone(),
                    _ => String::new(),
                };
                let c = self.dims.get(&name).cloned().ok_or_else(|| {
                    self.err_op(
                        op,
                        format!("`{name}` is not a dim of this kernel's tensors"),
                    )
                })?;
                if let Some(r) = r {
                    self.line(format!("const int {} = {c};", self.n(r)));
                }
            }
            Opcode::Param => {
                let name = match &op.lead {
                    Some(Attr::Name(n, _)) => n.clone(),
                    _ => String::new(),
                };
                let (c, d) = self.scalars.get(&name).cloned().ok_or_else(|| {
                    self.err_op(op, format!("`{name}` is not a scalar param of this kernel"))
                })?;
                let val = match d {
                    Dtype::I1 => format!("({c} != 0)"),
                    _ => compute::from_storage(d, c),
                };
                if let Some(r) = r {
                    self.line(format!("const {} {} = {val};", ctype(d), self.n(r)));
                }
            }
            Opcode::Const => {
                let Some(r) = r else { return Ok(()) };
                let (shape, d) = shape_dtype(k, r)?;
                let v = match &op.lead {
                    Some(Attr::Expr(e)) => e
                        .eval(&|_| None, false)
                        .map_err(|err| self.err_op(op, err))?,
                    _ => return Err(self.err_op(op, "needs a literal")),
                };
                let lit = compute::literal(d, &v).map_err(|m| self.err_op(op, m))?;
                let note = if scalar {
                    String::new()
                } else {
                    format!(
                        "  // every element of the {} tile (not stored)",
                        shape
                            .iter()
                            .map(|n| n.to_string())
                            .collect::<Vec<_>>()
                            .join("x")
                    )
                };
                self.line(format!("const {} {} = {lit};{note}", ctype(d), self.n(r)));
            }
            Opcode::Iota => {
                if let (Some(r), Repr::Iota(a)) = (r, r.map_or(Repr::Reg, |r| self.repr(r))) {
                    let (shape, _) = shape_dtype(k, r)?;
                    let names = Self::coord_names(&shape);
                    let c = &names[a.min(shape.len() - 1)];
                    self.line(format!(
                        "//   not stored: element ({}) of {} is its coordinate {c}",
                        names.join(", "),
                        self.n(r)
                    ));
                }
            }
            Opcode::Splat | Opcode::Broadcast | Opcode::Reshape | Opcode::Transpose => {
                self.shape_op(op)?
            }
            Opcode::Load => self.load(op)?,
            Opcode::Store => self.store(op, false)?,
            Opcode::AtomicAdd => self.store(op, true)?,
            Opcode::SemWait | Opcode::SemSignal => self.semaphore(op)?,
            kir_ir::elementwise_ops!() => self.elementwise(op)?,
            Opcode::Reduce => self.reduce(op)?,
            Opcode::Dot => self.dot(op)?,
            Opcode::Print => self.print(op)?,
            Opcode::For => self.for_op(op)?,
            Opcode::If => self.if_op(op)?,
            Opcode::StaticIf => {
                return Err(self.err_op(op, "must be removed by specialization before lowering"))
            }
            kir_ir::schedule_ops!() => {
                return Err(self.err_op(op, "scheduled IR has no CUDA-C lowering: the parity backend takes the unscheduled kernel"))
            }
            Opcode::Yield => self.yield_op(op)?,
        }
        Ok(())
    }
}

/// True if `code` contains `word` as a whole identifier.
pub(crate) fn mentions(code: &str, word: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    code.match_indices(word).any(|(i, _)| {
        let before = code[..i].chars().next_back();
        let after = code[i + word.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}
