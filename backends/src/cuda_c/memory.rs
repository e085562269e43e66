//! Global memory: the kernel prologue (launch requirements, tensor dims and strides) and the
//! `load`, `store` and `atomic_add` statements with their bounds checks, masks, `other` and
//! `guard`, exactly as docs/ir.md specifies them, and the semaphores `sem_wait` and
//! `sem_signal` (thread 0 of the block waits or signals, at a block barrier).
//!
//! A tile access walks the tile's elements; element (e0, …) of a tile of rank r at offsets
//! (o0, …, oR-1) is tensor element (o0, …, oR-r-1, oR-r + e0, …). It is in bounds when every
//! index is in [0, dim). Out-of-bounds elements read `other` / are skipped under `guard`;
//! without those, `kir_fail` stops the launch (the interpreter reports an error there).

use super::compute;
use super::kernel::Emitter;
use super::plan::shape_dtype;
use super::{ctype, CudaError};
use kir_ir::{Attr, Dtype, Expr, ExprKind, Offset, OpData, Opcode, ParamKind};

impl Emitter<'_> {
    /// A dim/stride expression as C (long long arithmetic, floor division as the IR's); in a
    /// `requires`, scalar params and float literals compare as doubles.
    pub(crate) fn expr_c(&self, e: &Expr) -> Result<String, CudaError> {
        let bad = |m: String| CudaError::at(e.span, format!("kernel `{}`: {m}", self.k.name));
        Ok(match &e.kind {
            ExprKind::Int(i) => format!("{i}LL"),
            // Float literals and scalar params appear only in `requires` comparisons
            // (`scale > 0.0`, the verifier allows them nowhere else): compared as doubles.
            ExprKind::Float(x) if x.0.is_finite() => format!("{:?}", x.0),
            ExprKind::Float(_) => return Err(bad(format!("`{e}` is not a finite literal"))),
            ExprKind::Ident(n) => match (self.dims.get(n), self.scalars.get(n)) {
                (Some(c), _) => format!("(long long){c}"),
                (None, Some((c, d))) => format!("(double){}", compute::from_storage(*d, c.clone())),
                (None, None) => {
                    return Err(bad(format!(
                        "`{n}` is not a dim or scalar param of this kernel"
                    )))
                }
            },
            ExprKind::Unary(kir_ir::UnOp::Neg, a) => format!("(-{})", self.expr_c(a)?),
            ExprKind::Unary(kir_ir::UnOp::Not, a) => format!("(long long)(!{})", self.expr_c(a)?),
            ExprKind::Binary(op, a, b) => {
                let (a, b) = (self.expr_c(a)?, self.expr_c(b)?);
                match op {
                    kir_ir::BinOp::Div => format!("kir_floordiv({a}, {b})"),
                    kir_ir::BinOp::Rem => format!("kir_floormod({a}, {b})"),
                    kir_ir::BinOp::Add | kir_ir::BinOp::Sub | kir_ir::BinOp::Mul => {
                        format!("({a} {} {b})", op.symbol())
                    }
                    kir_ir::BinOp::Eq
                    | kir_ir::BinOp::Ne
                    | kir_ir::BinOp::Lt
                    | kir_ir::BinOp::Le
                    | kir_ir::BinOp::Gt
                    | kir_ir::BinOp::Ge
                    | kir_ir::BinOp::And
                    | kir_ir::BinOp::Or => format!("(long long)({a} {} {b})", op.symbol()),
                }
            }
            ExprKind::Call(f, args) => {
                let a: Vec<String> = args
                    .iter()
                    .map(|x| self.expr_c(x))
                    .collect::<Result<_, _>>()?;
                match (f, &a[..]) {
                    (kir_ir::Func::Cdiv, [x, y]) => format!("kir_cdiv({x}, {y})"),
                    (kir_ir::Func::Min, [x, y]) => format!("kir_min_ll({x}, {y})"),
                    (kir_ir::Func::Max, [x, y]) => format!("kir_max_ll({x}, {y})"),
                    (kir_ir::Func::Select, [c, x, y]) => format!("({c} ? {x} : {y})"),
                    _ => return Err(bad(format!("bad call `{e}`"))),
                }
            }
        })
    }

    /// Checks `requires`, declares the shared memory and every tensor's strides.
    pub(crate) fn prologue(&mut self) -> Result<(), CudaError> {
        let k = self.k;
        for r in &k.requires {
            let c = self.expr_c(r)?;
            let msg = format!("kernel {}: launch requirement `{r}` does not hold", k.name);
            self.line(format!(
                "if (!{c}) kir_fail(\"{}\");",
                msg.replace('"', "'")
            ));
        }
        self.line("extern __shared__ __align__(16) unsigned char kir_smem[];");
        for p in &k.params {
            let ParamKind::Tensor(_, t) = &p.kind else {
                continue;
            };
            let dims: Vec<String> = t
                .dims
                .iter()
                .map(|d| self.dim_c(d))
                .collect::<Result<_, _>>()?;
            let rank = dims.len();
            let Some(info) = self.tensors.get(&p.name) else {
                continue;
            };
            let ptr = info.ptr.clone();
            let index: Vec<String> = (0..rank)
                .map(|d| self.namer.fresh(&format!("{ptr}_i{d}")))
                .collect();
            let mut strides = Vec::with_capacity(rank);
            let mut decls = Vec::new();
            for d in 0..rank {
                let expr = match &t.strides {
                    Some(st) => self.expr_c(&st[d])?,
                    None if d + 1 == rank => "1".into(),
                    None => format!("(long long){}", dims[d + 1..].join(" * ")),
                };
                if expr == "1" || expr == "1LL" {
                    strides.push("1".into());
                } else {
                    let name = self.namer.fresh(&format!("{ptr}_stride{d}"));
                    decls.push(format!("{name} = {expr}"));
                    strides.push(name);
                }
            }
            let ty = t.elem.known().map_or("?".into(), |d| d.to_string());
            self.line(format!(
                "// {}: {ty} tensor [{}]{}",
                p.name,
                t.dims
                    .iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                if t.strides.is_some() {
                    ", declared strides"
                } else {
                    ", row-major"
                }
            ));
            if !decls.is_empty() {
                self.line(format!("const long long {};", decls.join(", ")));
            }
            if let Some(info) = self.tensors.get_mut(&p.name) {
                info.dims = dims;
                info.strides = strides;
                info.index = index;
            }
        }
        Ok(())
    }

    /// A tensor dim as C: the dim's int argument, a literal, or an expression.
    fn dim_c(&self, d: &Expr) -> Result<String, CudaError> {
        Ok(match &d.kind {
            ExprKind::Ident(n) if self.dims.contains_key(n) => self.dims[n].clone(),
            ExprKind::Int(i) => i.to_string(),
            _ => format!("({})", self.expr_c(d)?),
        })
    }

    /// Declares the tensor index of the current element and `in_bounds`; returns the address
    /// expression (an element index into the tensor's pointer).
    fn address(&mut self, op: &OpData, tile: &[usize]) -> Result<String, CudaError> {
        let tr = op
            .tensor
            .as_ref()
            .ok_or_else(|| self.err_op(op, "needs a tensor reference"))?;
        let info = self
            .tensors
            .get(&tr.param)
            .ok_or_else(|| self.err_op(op, format!("`{}` is not a tensor param", tr.param)))?;
        let rank = info.dims.len();
        let tile_rank = tile.len();
        if tr.offsets.len() != rank || tile_rank > rank {
            return Err(self.err_op(op, format!("`{}` takes {rank} offsets", tr.param)));
        }
        let coords = Self::coord_names(tile);
        let lead = rank - tile_rank;
        let mut idx = Vec::new();
        for (d, off) in tr.offsets.iter().enumerate() {
            let o = match off {
                Offset::Value(v) => format!("(long long){}", self.n(*v)),
                Offset::Expr(e) => {
                    let i = e.eval_int(&|_| None).map_err(|err| self.err_op(op, err))?;
                    format!("{i}LL")
                }
            };
            idx.push(if d >= lead {
                format!("{} = {o} + {}", info.index[d], coords[d - lead])
            } else {
                format!("{} = {o}", info.index[d])
            });
        }
        let checks: Vec<String> = (0..rank)
            .map(|d| format!("{i} >= 0 && {i} < {}", info.dims[d], i = info.index[d]))
            .collect();
        let addr: Vec<String> = (0..rank)
            .map(|d| {
                if info.strides[d] == "1" {
                    info.index[d].clone()
                } else {
                    format!("{} * {}", info.index[d], info.strides[d])
                }
            })
            .collect();
        let (ptr, n) = (info.ptr.clone(), tr.param.clone());
        self.line(format!(
            "const long long {};  // index into {n}",
            idx.join(", ")
        ));
        self.line(format!("const bool in_bounds = {};", checks.join(" && ")));
        Ok(format!("{ptr}[{}]", addr.join(" + ")))
    }

    /// Opens the loop over a tile's elements; returns where the body starts, for
    /// [`Emitter::close_elements`].
    fn open_elements(&mut self, shape: &[usize]) -> usize {
        let total: usize = shape.iter().product();
        self.line(format!(
            "for (int e = threadIdx.x; e < {total}; e += blockDim.x) {{"
        ));
        self.depth_in();
        self.out_len()
    }

    /// Closes the loop opened at `start`, declaring the element coordinates its body uses.
    fn close_elements(&mut self, shape: &[usize], start: usize) {
        let body = self.out_tail(start);
        if let Some(c) = Self::coord_decl(shape, &body) {
            self.insert_line(start, &c);
        }
        self.depth_out();
        self.line("}");
    }

    /// `load`: see the module doc.
    pub(crate) fn load(&mut self, op: &OpData) -> Result<(), CudaError> {
        let Some(&r) = op.results.first() else {
            return Ok(());
        };
        let (shape, d) = shape_dtype(self.k, r)?;
        let other = match op.attr("other") {
            Some(Attr::Expr(e)) => {
                let v = e
                    .eval(&|_| None, false)
                    .map_err(|err| self.err_op(op, err))?;
                Some(compute::literal(d, &v).map_err(|m| self.err_op(op, m))?)
            }
            _ => None,
        };
        let tensor = op
            .tensor
            .as_ref()
            .map_or(String::new(), |t| t.param.clone());
        let scalar = shape.is_empty();
        let coords = Self::coord_names(&shape);
        let mask = self.mask(op, &coords)?;
        let mut start = 0;
        if scalar {
            self.line(format!("{} {};", ctype(d), self.n(r)));
            self.line("{");
            self.depth_in();
        } else {
            self.declare_tile(r)?;
            start = self.open_elements(&shape);
        }
        let addr = self.address(op, &shape)?;
        let read = compute::from_storage(d, addr);
        let fail = format!(
            "kir_fail(\"kernel {}: load of {tensor} out of bounds (no other)\");",
            self.k.name
        );
        let value = match (&other, &mask) {
            (Some(o), Some(m)) => format!("({m} && in_bounds) ? {read} : {o}"),
            (Some(o), None) => format!("in_bounds ? {read} : {o}"),
            (None, Some(m)) => {
                self.line(format!("if ({m} && !in_bounds) {fail}"));
                format!("{m} ? {read} : {}", compute::poison(d))
            }
            (None, None) => {
                self.line(format!("if (!in_bounds) {fail}"));
                read
            }
        };
        let name = self.n(r);
        if scalar {
            self.line(format!("{name} = {value};"));
            self.depth_out();
            self.line("}");
        } else {
            self.line(format!("{name}[e] = {value};"));
            self.close_elements(&shape, start);
            self.sync();
        }
        Ok(())
    }

    /// The mask of a memory op as a C condition at `coords`, if it has one.
    fn mask(&self, op: &OpData, coords: &[String]) -> Result<Option<String>, CudaError> {
        match op.attr("mask") {
            Some(Attr::Value(m)) => {
                let same = !coords.is_empty() && !self.k.dfg.ty(*m).is_scalar();
                Ok(Some(self.read(*m, coords, same.then_some("e"))?))
            }
            _ => Ok(None),
        }
    }

    /// `store` (or `atomic_add`): tiles are written by all threads, scalars by thread 0.
    pub(crate) fn store(&mut self, op: &OpData, atomic: bool) -> Result<(), CudaError> {
        let Some(&x) = op.operands.first() else {
            return Err(self.err_op(op, "needs a value"));
        };
        let (shape, d) = shape_dtype(self.k, x)?;
        let tensor = op
            .tensor
            .as_ref()
            .map_or(String::new(), |t| t.param.clone());
        if let Some(info) = self.tensors.get(&tensor) {
            if info.dtype != d {
                return Err(self.err_op(
                    op,
                    format!("stores {d} into {} tensor `{tensor}`", info.dtype),
                ));
            }
        }
        let guard = matches!(op.attr("guard"), Some(Attr::Flag));
        let coords = Self::coord_names(&shape);
        let mask = self.mask(op, &coords)?;
        let value = self.read(x, &coords, (!shape.is_empty()).then_some("e"))?;
        let mut start = 0;
        if shape.is_empty() {
            self.line("if (threadIdx.x == 0) {  // one thread writes a scalar");
            self.depth_in();
        } else {
            start = self.open_elements(&shape);
        }
        let addr = self.address(op, &shape)?;
        let write = if atomic {
            match d {
                Dtype::F32 | Dtype::I32 => format!("atomicAdd(&{addr}, {value});"),
                Dtype::I64 => {
                    format!("atomicAdd((unsigned long long*)&{addr}, (unsigned long long){value});")
                }
                Dtype::Bf16 => format!("kir_atomic_add_16(&{addr}, {value}, true);"),
                Dtype::F16 => format!("kir_atomic_add_16(&{addr}, {value}, false);"),
                Dtype::U8 => format!("kir_atomic_add_u8(&{addr}, {value});"),
                Dtype::I1 => return Err(self.err_op(op, "does not apply to i1")),
            }
        } else {
            format!("{addr} = {};", compute::to_storage(d, value))
        };
        let what = if atomic { "atomic_add" } else { "store" };
        let oob = if guard {
            "// guard: out-of-bounds elements are skipped".to_string()
        } else {
            format!(
                "else kir_fail(\"kernel {}: {what} into {tensor} out of bounds (no guard)\");",
                self.k.name
            )
        };
        let cond = match &mask {
            Some(m) => format!("{m} && in_bounds"),
            None => "in_bounds".into(),
        };
        if guard {
            self.line(format!("if ({cond}) {write}  {oob}"));
        } else {
            match &mask {
                Some(m) => self.line(format!("if ({m}) {{ if (in_bounds) {write} {oob} }}")),
                None => self.line(format!("if (in_bounds) {write} {oob}")),
            }
        }
        if shape.is_empty() {
            self.depth_out();
            self.line("}");
        } else {
            self.close_elements(&shape, start);
        }
        self.sync();
        Ok(())
    }

    /// `sem_wait` (thread 0 polls the counter with volatile reads until it reaches the count,
    /// fences, and the block meets at a barrier) or `sem_signal` (the block meets at a barrier
    /// after its writes, then thread 0 fences and adds 1): the pattern of a grid-wide ordered
    /// reduction, with thread 0 standing for the block.
    pub(crate) fn semaphore(&mut self, op: &OpData) -> Result<(), CudaError> {
        let tensor = op
            .tensor
            .as_ref()
            .map_or(String::new(), |t| t.param.clone());
        let what = op.opcode.name();
        let wait = op.opcode == Opcode::SemWait;
        let want = match (wait, op.operands.first()) {
            (true, Some(&x)) => Some(self.read(x, &[], None)?),
            (true, None) => return Err(self.err_op(op, "needs the count it waits for")),
            (false, _) => None,
        };
        if !wait {
            self.sync();
        }
        self.line(format!(
            "if (threadIdx.x == 0) {{  // thread 0 {}",
            if wait { "waits" } else { "signals" }
        ));
        self.depth_in();
        let addr = self.address(op, &[])?;
        let fail = format!(
            "kir_fail(\"kernel {}: {what} on {tensor} out of bounds\");",
            self.k.name
        );
        match want {
            Some(w) => {
                self.line(format!("if (!in_bounds) {fail}"));
                self.line(format!(
                    "else {{ while (*(volatile int*)&{addr} < {w}) {{}} __threadfence(); }}"
                ));
            }
            None => {
                let body = format!("{{ __threadfence(); atomicAdd(&{addr}, 1); }}");
                if matches!(op.attr("guard"), Some(Attr::Flag)) {
                    self.line(format!(
                        "if (in_bounds) {body}  // guard: out of bounds is skipped"
                    ));
                } else {
                    self.line(format!("if (in_bounds) {body} else {fail}"));
                }
            }
        }
        self.depth_out();
        self.line("}");
        if wait {
            self.sync();
        }
        Ok(())
    }
}
