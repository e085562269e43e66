//! Tile statements of the compute ops: shape ops that must be stored, elementwise ops (unary,
//! binary, cast, select, cmp, fma, nf4), `reduce` and `dot`. Each result element is computed by one
//! thread; reductions and dot products run in ascending index order, as the interpreter.

use super::compute;
use super::kernel::Emitter;
use super::plan::{contiguous, perm_of, shape_dtype, Repr};
use super::{ctype, CudaError};
use kir_ir::{Attr, Dtype, OpData, Opcode, ReduceKind};

impl Emitter<'_> {
    /// splat / broadcast / reshape / transpose: a comment for a view or a uniform tile, a copy
    /// statement when the plan stores the result.
    pub(crate) fn shape_op(&mut self, op: &OpData) -> Result<(), CudaError> {
        let (Some(&r), Some(&x)) = (op.results.first(), op.operands.first()) else {
            return Ok(());
        };
        let (rs, _) = shape_dtype(self.k, r)?;
        let (xs, _) = shape_dtype(self.k, x)?;
        match self.repr(r) {
            Repr::Uniform(e) => self.line(format!("//   not stored: every element is {e}")),
            Repr::Iota(a) => {
                let c = &Self::coord_names(&rs)[a.min(rs.len().saturating_sub(1))];
                self.line(format!(
                    "//   not stored: each element is its coordinate {c}"
                ));
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

    /// Elementwise ops (unary, binary, cast, select, cmp, fma, nf4) on scalars or tiles.
    pub(crate) fn elementwise(&mut self, op: &OpData) -> Result<(), CudaError> {
        let Some(&r) = op.results.first() else {
            return Ok(());
        };
        // A widening cast the plan made a view of its operand (plan.rs, `widening_view`).
        if let Repr::Mem { base, .. } = self.repr(r) {
            if base != r && op.opcode == Opcode::Cast {
                let (rs, _) = shape_dtype(self.k, r)?;
                let coords = Self::coord_names(&rs);
                let at = self.read(r, &coords, None)?;
                self.line(format!(
                    "//   a view, not stored (16-bit floats are stored as float): element ({}) is {at}",
                    coords.join(", ")
                ));
                return Ok(());
            }
        }
        let (_, rd) = shape_dtype(self.k, r)?;
        let xd = match op.operands.first() {
            Some(&x) => shape_dtype(self.k, x)?.1,
            None => return Err(self.err_op(op, "needs an operand")),
        };
        let operands = op.operands.clone();
        let opcode = op.opcode;
        let pred = op.cmp_pred();
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
                Opcode::Bitcast => compute::bitcast(xd, rd, &a[0]),
                Opcode::Select => Ok(format!("({} ? {} : {})", a[0], a[1], a[2])),
                Opcode::Cmp => compute::cmp(pred, &a[0], &a[1]),
                Opcode::Nf4 => Ok(format!("kir_nf4({})", a[0])),
                // One rounding, as the interpreter's `fma` (then to the dtype).
                Opcode::Fma => Ok(compute::round_to(
                    rd,
                    format!("__fmaf_rn({}, {}, {})", a[0], a[1], a[2]),
                )),
                kir_ir::unary_ops!() | kir_ir::binary_ops!() => {
                    match (opcode.unary(), opcode.binary()) {
                        (Some(u), _) => compute::unary(u, xd, &a[0]),
                        (None, Some(b)) => compute::binary(b, yd.unwrap_or(xd), &a[0], &a[1]),
                        (None, None) => Err(format!("`{}` is not elementwise", opcode.name())),
                    }
                }
                kir_ir::non_elementwise_ops!() => {
                    Err(format!("internal: `{}` is not elementwise", opcode.name()))
                }
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
    pub(crate) fn reduce(&mut self, op: &OpData) -> Result<(), CudaError> {
        let (Some(&r), Some(&x)) = (op.results.first(), op.operands.first()) else {
            return Ok(());
        };
        let (xs, d) = shape_dtype(self.k, x)?;
        let (rs, _) = shape_dtype(self.k, r)?;
        let axis = match op.attr("axis") {
            Some(Attr::Expr(e)) => e.as_int().unwrap_or(0),
            _ => 0,
        } as usize;
        let kind = op
            .reduce_kind()
            .ok_or_else(|| self.err_op(op, "reduce needs a kind (sum, max or min)"))?;
        let n = *xs
            .get(axis)
            .ok_or_else(|| self.err_op(op, format!("axis {axis} is out of range")))?;
        if n == 0 && kind != ReduceKind::Sum {
            return Err(self.err_op(op, format!("{kind} of an empty axis")));
        }
        let coords = Self::coord_names(&rs);
        let mut at_j = coords.clone();
        at_j[axis] = "j".into();
        let mut at_0 = coords.clone();
        at_0[axis] = "0".into();
        let xj = self.read(x, &at_j, None)?;
        let x0 = self.read(x, &at_0, None)?;
        let (init, step) = match (kind, d) {
            (ReduceKind::Sum, Dtype::I1) => return Err(self.err_op(op, "sum does not apply to i1")),
            (ReduceKind::Sum, _) if d.is_float() => {
                ("0.0f".to_string(), format!("__fadd_rn(partial, {xj})"))
            }
            (ReduceKind::Sum, _) => (
                compute::literal(d, &kir_ir::EvalVal::Int(0)).unwrap_or_default(),
                format!("kir_add(partial, {xj})"),
            ),
            (ReduceKind::Max, Dtype::I1) => (x0, format!("(partial || {xj})")),
            (ReduceKind::Min, Dtype::I1) => (x0, format!("(partial && {xj})")),
            (ReduceKind::Max, _) if d.is_float() => (x0, format!("kir_fmax(partial, {xj})")),
            (ReduceKind::Min, _) if d.is_float() => (x0, format!("kir_fmin(partial, {xj})")),
            (ReduceKind::Max, _) => (x0, format!("kir_max(partial, {xj})")),
            (ReduceKind::Min, _) => (x0, format!("kir_min(partial, {xj})")),
        };
        let first = if kind == ReduceKind::Sum { 0 } else { 1 };
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
        self.line(format!(
            "{name}[e] = {};",
            compute::round_to(d, "partial".into())
        ));
        self.depth -= 1;
        self.line("}");
        self.sync();
        Ok(())
    }

    /// `dot %a, %b, %acc`: one thread per output element, k ascending, separate f32 multiply
    /// and add (as the interpreter).
    pub(crate) fn dot(&mut self, op: &OpData) -> Result<(), CudaError> {
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
}
