//! Emits one kernel: the signature in ABI order, the prologue (requirements, tensor strides),
//! and one commented C statement per IR op, with structured loops for `for` and `if`.
//!
//! [`Emitter::op`] holds the exhaustive `match` over [`Opcode`]; memory ops are in
//! `memory.rs`, per-element expressions in `compute.rs`.

use super::compute;
use super::names::{op_text, value_c_names, Names};
use super::plan::{self, contiguous, perm_of, shape_dtype, Plan, Repr};
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
enum Dest {
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
    out: String,
    depth: usize,
    /// Destinations of the `yield` of each enclosing region, innermost last.
    dests: Vec<(Vec<Dest>, bool)>,
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
            .map(|d| if shape[d] == 1 { "0".into() } else { format!("e{d}") })
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
            .filter(|&d| shape[d] != 1 && mentions(uses, &format!("e{d}")))
            .map(|d| {
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

    fn block(&mut self, b: Block) -> Result<(), CudaError> {
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
                    self.err_op(op, format!("`{name}` is not a dim of this kernel's tensors"))
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
                        shape.iter().map(|n| n.to_string()).collect::<Vec<_>>().join("x")
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
            Opcode::Neg
            | Opcode::Abs
            | Opcode::Exp
            | Opcode::Exp2
            | Opcode::Log
            | Opcode::Log2
            | Opcode::Sqrt
            | Opcode::Rsqrt
            | Opcode::Tanh
            | Opcode::Sigmoid
            | Opcode::Silu
            | Opcode::Recip
            | Opcode::Floor
            | Opcode::Not
            | Opcode::Add
            | Opcode::Sub
            | Opcode::Mul
            | Opcode::Div
            | Opcode::Rem
            | Opcode::Max
            | Opcode::Min
            | Opcode::And
            | Opcode::Or
            | Opcode::Xor
            | Opcode::Shl
            | Opcode::Shr
            | Opcode::Cast
            | Opcode::Select
            | Opcode::Cmp
            | Opcode::Nf4 => self.elementwise(op)?,
            Opcode::Reduce => self.reduce(op)?,
            Opcode::Dot => self.dot(op)?,
            Opcode::For => self.for_op(op)?,
            Opcode::If => self.if_op(op)?,
            Opcode::StaticIf => {
                return Err(self.err_op(op, "must be removed by specialization before lowering"))
            }
            Opcode::Yield => self.yield_op(op)?,
        }
        Ok(())
    }

    /// splat / broadcast / reshape / transpose: a comment for a view or a uniform tile, a copy
    /// statement when the plan stores the result.
    fn shape_op(&mut self, op: &OpData) -> Result<(), CudaError> {
        let (Some(&r), Some(&x)) = (op.results.first(), op.operands.first()) else {
            return Ok(());
        };
        let (rs, _) = shape_dtype(self.k, r)?;
        let (xs, _) = shape_dtype(self.k, x)?;
        match self.repr(r) {
            Repr::Uniform(e) => self.line(format!("//   not stored: every element is {e}")),
            Repr::Iota(a) => {
                let c = &Self::coord_names(&rs)[a.min(rs.len().saturating_sub(1))];
                self.line(format!("//   not stored: each element is its coordinate {c}"));
            }
            Repr::Mem { base, .. } if base != r => {
                let coords = Self::coord_names(&rs);
                let at = self.read(r, &coords, None)?;
                self.line(format!(
                    "//   a view, not stored: element ({}) is {at}",
                    coords.join(", ")
                ));
            }
            Repr::Mem { .. } | Repr::Reg => {
                // Stored: read the operand at the coordinates this element comes from.
                let opcode = op.opcode;
                let perm = perm_of(op, xs.len());
                self.tile_statement(r, &|e: &Self, c: &[String]| {
                    let src: Vec<String> = match opcode {
                        Opcode::Transpose => {
                            let mut s = vec![String::new(); xs.len()];
                            for (i, &p) in perm.iter().enumerate() {
                                s[p] = c[i].clone();
                            }
                            s
                        }
                        Opcode::Reshape => {
                            let st = contiguous(&xs);
                            (0..xs.len())
                                .map(|d| format!("(e / {} % {})", st[d], xs[d]))
                                .collect()
                        }
                        _ => c
                            .iter()
                            .zip(&xs)
                            .map(|(c, &n)| if n == 1 { "0".into() } else { c.clone() })
                            .collect(),
                    };
                    e.read(x, &src, None)
                })?;
            }
        }
        Ok(())
    }

    /// Elementwise ops (unary, binary, cast, select, cmp, nf4) on scalars or tiles.
    fn elementwise(&mut self, op: &OpData) -> Result<(), CudaError> {
        let Some(&r) = op.results.first() else {
            return Ok(());
        };
        let (_, rd) = shape_dtype(self.k, r)?;
        let xd = match op.operands.first() {
            Some(&x) => shape_dtype(self.k, x)?.1,
            None => return Err(self.err_op(op, "needs an operand")),
        };
        let operands = op.operands.clone();
        let opcode = op.opcode;
        let pred = match &op.lead {
            Some(Attr::Name(n, _)) => n.clone(),
            _ => String::new(),
        };
        let yd = operands
            .get(1)
            .map(|&y| shape_dtype(self.k, y).map(|t| t.1))
            .transpose()?;
        let f = move |e: &Self, c: &[String]| -> Result<String, CudaError> {
            let lin = (c.len() == 1 || !c.is_empty()).then_some("e");
            let mut a = Vec::new();
            for &v in &operands {
                let same = shape_dtype(e.k, v)?.0 == shape_dtype(e.k, r)?.0;
                a.push(e.read(v, c, if same { lin } else { None })?);
            }
            let res = match opcode {
                Opcode::Cast => Ok(compute::cast(xd, rd, &a[0])),
                Opcode::Select => Ok(format!("({} ? {} : {})", a[0], a[1], a[2])),
                Opcode::Cmp => compute::cmp(&pred, &a[0], &a[1]),
                Opcode::Nf4 => Ok(format!("kir_nf4({})", a[0])),
                _ if a.len() == 1 => compute::unary(opcode, xd, &a[0]),
                _ => compute::binary(opcode, yd.unwrap_or(xd), &a[0], &a[1]),
            };
            res.map_err(|m| CudaError::plain(format!("kernel `{}`: {m}", e.k.name)))
        };
        if self.k.dfg.ty(r).is_scalar() {
            let expr = f(self, &[])?;
            self.line(format!("const {} {} = {expr};", ctype(rd), self.n(r)));
            Ok(())
        } else {
            self.tile_statement(r, &f)
        }
    }

    /// `reduce KIND %x axis A`: one thread per output element, ascending along the axis.
    fn reduce(&mut self, op: &OpData) -> Result<(), CudaError> {
        let (Some(&r), Some(&x)) = (op.results.first(), op.operands.first()) else {
            return Ok(());
        };
        let (xs, d) = shape_dtype(self.k, x)?;
        let (rs, _) = shape_dtype(self.k, r)?;
        let axis = match op.attr("axis") {
            Some(Attr::Expr(e)) => e.as_int().unwrap_or(0),
            _ => 0,
        } as usize;
        let kind = match &op.lead {
            Some(Attr::Name(n, _)) => n.clone(),
            _ => String::new(),
        };
        let n = *xs
            .get(axis)
            .ok_or_else(|| self.err_op(op, format!("axis {axis} is out of range")))?;
        if n == 0 && kind != "sum" {
            return Err(self.err_op(op, format!("{kind} of an empty axis")));
        }
        let coords = Self::coord_names(&rs);
        let mut at_j = coords.clone();
        at_j[axis] = "j".into();
        let mut at_0 = coords.clone();
        at_0[axis] = "0".into();
        let xj = self.read(x, &at_j, None)?;
        let x0 = self.read(x, &at_0, None)?;
        let (init, step) = match (kind.as_str(), d) {
            ("sum", Dtype::I1) => return Err(self.err_op(op, "sum does not apply to i1")),
            ("sum", _) if d.is_float() => ("0.0f".to_string(), format!("__fadd_rn(partial, {xj})")),
            ("sum", _) => (
                compute::literal(d, &kir_ir::EvalVal::Int(0)).unwrap_or_default(),
                format!("kir_add(partial, {xj})"),
            ),
            ("max", Dtype::I1) => (x0, format!("(partial || {xj})")),
            ("min", Dtype::I1) => (x0, format!("(partial && {xj})")),
            ("max", _) if d.is_float() => (x0, format!("kir_fmax(partial, {xj})")),
            ("min", _) if d.is_float() => (x0, format!("kir_fmin(partial, {xj})")),
            ("max", _) => (x0, format!("kir_max(partial, {xj})")),
            ("min", _) => (x0, format!("kir_min(partial, {xj})")),
            (k, _) => return Err(self.err_op(op, format!("unknown reduction `{k}`"))),
        };
        let first = if kind == "sum" { 0 } else { 1 };
        self.declare_tile(r)?;
        let total: usize = rs.iter().product();
        let name = self.n(r);
        self.line(format!(
            "for (int e = threadIdx.x; e < {total}; e += blockDim.x) {{  // one thread per result element"
        ));
        self.depth += 1;
        if let Some(c) = Self::coord_decl(&rs, &format!("{init} {step}")) {
            self.line(c);
        }
        self.line(format!("{} partial = {init};", ctype(d)));
        self.line(format!(
            "for (int j = {first}; j < {n}; ++j) partial = {step};  // ascending, as the interpreter"
        ));
        self.line(format!("{name}[e] = {};", compute::round_to(d, "partial".into())));
        self.depth -= 1;
        self.line("}");
        self.sync();
        Ok(())
    }

    /// `dot %a, %b, %acc`: one thread per output element, k ascending, separate f32 multiply
    /// and add (as the interpreter).
    fn dot(&mut self, op: &OpData) -> Result<(), CudaError> {
        let (Some(&r), [a, b, acc]) = (op.results.first(), &op.operands[..]) else {
            return Err(self.err_op(op, "needs three operands"));
        };
        let (as_, _) = shape_dtype(self.k, *a)?;
        let (rs, _) = shape_dtype(self.k, r)?;
        let (&[m, kdim], &[_, n]) = (&as_[..], &rs[..]) else {
            return Err(self.err_op(op, "needs rank-2 operands"));
        };
        let rc = ["e0".to_string(), "e1".to_string()];
        let av = self.read(*a, &["e0".into(), "kk".into()], None)?;
        let bv = self.read(*b, &["kk".into(), "e1".into()], None)?;
        let cv = self.read(*acc, &rc, Some("e"))?;
        self.declare_tile(r)?;
        let name = self.n(r);
        self.line(format!(
            "for (int e = threadIdx.x; e < {}; e += blockDim.x) {{  // one thread per (row e0, column e1)",
            m * n
        ));
        self.depth += 1;
        let used = format!("{av} {bv} {cv}");
        if let Some(c) = Self::coord_decl(&[m, n], &used) {
            self.line(c);
        }
        self.line(format!("float dot_sum = {cv};"));
        self.line(format!(
            "for (int kk = 0; kk < {kdim}; ++kk) dot_sum = __fadd_rn(dot_sum, __fmul_rn({av}, {bv}));"
        ));
        self.line(format!("{name}[e] = dot_sum;"));
        self.depth -= 1;
        self.line("}");
        self.sync();
        Ok(())
    }

    /// Copies tile `src` into the stored tile behind pointer `dst` (skipped when `src` already
    /// is that tile), or assigns a scalar.
    fn copy_into(&mut self, dest: &Dest, src: Value) -> Result<(), CudaError> {
        match dest {
            Dest::Var(name) => {
                let v = self.read(src, &[], None)?;
                if &v != name {
                    self.line(format!("{name} = {v};"));
                }
            }
            Dest::Tile(ptr, holder) => {
                let (shape, _) = shape_dtype(self.k, src)?;
                let same_region = match self.repr(src) {
                    Repr::Mem { base, strides } => {
                        plan::is_contiguous(&shape, &strides)
                            && self.plan.region_of.get(&base) == self.plan.region_of.get(holder)
                    }
                    _ => false,
                };
                if same_region {
                    self.line(format!(
                        "// {} is already in {ptr}'s shared memory: nothing to copy",
                        self.irn(src)
                    ));
                    return Ok(());
                }
                let coords = Self::coord_names(&shape);
                let v = self.read(src, &coords, Some("e"))?;
                let total: usize = shape.iter().product();
                self.line(format!(
                    "for (int e = threadIdx.x; e < {total}; e += blockDim.x) {{"
                ));
                self.depth += 1;
                if let Some(c) = Self::coord_decl(&shape, &v) {
                    self.line(c);
                }
                self.line(format!("{ptr}[e] = {v};"));
                self.depth -= 1;
                self.line("}");
            }
        }
        Ok(())
    }

    /// `for`: carried scalars are variables, carried tiles pointers declared before the loop;
    /// the induction variable runs in 64 bits so that `iv + step` cannot overflow.
    fn for_op(&mut self, op: &OpData) -> Result<(), CudaError> {
        let k = self.k;
        let (Some(&body), [lo, hi, step, inits @ ..]) = (op.regions.first(), &op.operands[..])
        else {
            return Err(self.err_op(op, "needs bounds and a body"));
        };
        let args = k.dfg.blocks[body].args.clone();
        let mut dests = Vec::new();
        let mut copied = false;
        for (&a, &init) in args.iter().skip(1).zip(inits) {
            let (_, d) = shape_dtype(k, a)?;
            if k.dfg.ty(a).is_scalar() {
                let v = self.read(init, &[], None)?;
                self.line(format!("{} {} = {v};  // carried", ctype(d), self.n(a)));
                dests.push(Dest::Var(self.n(a)));
            } else {
                self.declare_tile(a)?;
                let dest = Dest::Tile(self.n(a), a);
                let before = self.out.len();
                self.copy_into(&dest, init)?;
                copied |= self.out[before..].contains("for (");
                dests.push(dest);
            }
        }
        if copied {
            self.sync();
        }
        let iv = args.first().map(|&v| self.n(v)).unwrap_or_default();
        let it = self.namer.fresh(&format!("{iv}_it"));
        let (lo, hi, step) = (self.n(*lo), self.n(*hi), self.n(*step));
        self.line(format!(
            "if ({step} <= 0) kir_fail(\"kernel {}: for loop step must be positive\");",
            k.name
        ));
        self.line(format!(
            "for (long long {it} = {lo}; {it} < {hi}; {it} += {step}) {{"
        ));
        self.depth += 1;
        self.line(format!("const int {iv} = (int){it};"));
        self.dests.push((dests, true));
        self.block(body)?;
        self.dests.pop();
        self.depth -= 1;
        self.line("}");
        for (&r, &a) in op.results.iter().zip(args.iter().skip(1)) {
            let (_, d) = shape_dtype(k, r)?;
            if !self.used(r) {
                self.line(format!("// ({} is not used)", self.irn(r)));
            } else if k.dfg.ty(r).is_scalar() {
                self.line(format!("const {} {} = {};", ctype(d), self.n(r), self.n(a)));
            } else {
                self.line(format!("{}* {} = {};", ctype(d), self.n(r), self.n(a)));
            }
        }
        Ok(())
    }

    /// `if`: results are declared before it and assigned by each branch's `yield`.
    fn if_op(&mut self, op: &OpData) -> Result<(), CudaError> {
        let k = self.k;
        let Some(&c) = op.operands.first() else {
            return Err(self.err_op(op, "needs a condition"));
        };
        let mut dests = Vec::new();
        for &r in &op.results {
            let (_, d) = shape_dtype(k, r)?;
            if k.dfg.ty(r).is_scalar() {
                self.line(format!("{} {};", ctype(d), self.n(r)));
                dests.push(Dest::Var(self.n(r)));
            } else {
                self.declare_tile(r)?;
                dests.push(Dest::Tile(self.n(r), r));
            }
        }
        let cond = self.n(c);
        self.line(format!("if ({cond}) {{"));
        for (i, &region) in op.regions.iter().enumerate() {
            if i == 1 {
                self.line("} else {");
            }
            self.depth += 1;
            self.dests.push((dests.clone(), false));
            self.block(region)?;
            self.dests.pop();
            self.depth -= 1;
        }
        self.line("}");
        Ok(())
    }

    /// `yield`: copies the values into the enclosing op's carried values or results.
    fn yield_op(&mut self, op: &OpData) -> Result<(), CudaError> {
        let Some((dests, is_loop)) = self.dests.last().cloned() else {
            return Ok(());
        };
        if op.operands.is_empty() {
            return Ok(());
        }
        self.line(format!(
            "// {} (next values of the {})",
            op_text(self.k, &self.ir, op),
            if is_loop { "loop" } else { "if" }
        ));
        // A value yielded into another position's carried variable must be read before that
        // variable is overwritten: stage scalars through temporaries, and refuse tile rotations.
        let carried: Vec<Option<&Dest>> = op
            .operands
            .iter()
            .map(|&v| {
                dests.iter().find(|d| match d {
                    Dest::Var(n) => *n == self.n(v),
                    Dest::Tile(_, h) => {
                        matches!(self.repr(v), Repr::Mem { base, .. }
                            if self.plan.region_of.get(&base) == self.plan.region_of.get(h))
                    }
                })
            })
            .collect();
        let crossed: Vec<bool> = carried
            .iter()
            .enumerate()
            .map(|(i, d)| d.is_some_and(|d| !std::ptr::eq(d, &dests[i])))
            .collect();
        if let Some(i) = crossed.iter().position(|&c| c) {
            if matches!(dests[i], Dest::Tile(..)) {
                return Err(self.err_op(
                    op,
                    "yields a carried tile into another carried tile's position; the CUDA-C \
                     backend does not rotate tiles (copy the tile first)",
                ));
            }
            let mut temps = Vec::new();
            for (&v, dest) in op.operands.iter().zip(&dests) {
                if let Dest::Var(_) = dest {
                    let (_, d) = shape_dtype(self.k, v)?;
                    let t = self.namer.fresh(&format!("{}_next", self.n(v)));
                    self.line(format!("const {} {t} = {};", ctype(d), self.n(v)));
                    temps.push(Some(t));
                } else {
                    temps.push(None);
                }
            }
            for ((&v, dest), t) in op.operands.iter().zip(&dests).zip(temps) {
                match (dest, t) {
                    (Dest::Var(n), Some(t)) => self.line(format!("{n} = {t};")),
                    _ => self.copy_into(dest, v)?,
                }
            }
        } else {
            for (&v, dest) in op.operands.iter().zip(&dests) {
                self.copy_into(dest, v)?;
            }
        }
        if dests.iter().any(|d| matches!(d, Dest::Tile(..))) {
            self.sync();
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
