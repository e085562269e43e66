//! Elementwise arithmetic on one register per element: float ops in f32 with f16/bf16 rounding
//! after each op (`erf` and `pow` in `special.rs`), integer wrap-around, casts and comparisons
//! with the interpreter's rules; and
//! the steps every reduction path shares (combine, identity, butterfly shuffle; `reduce.rs`,
//! `rows.rs`).

use super::ctx::round;
use super::ctx::{class_of, Ctx};
use super::PtxError;
use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::{f32_lit, Operand, PtxInst, Reg, RegClass};
use kir_ir::{CmpPred, Dtype, Expr, ExprKind, OpData, Opcode, ReduceKind};

fn ity(d: Dtype) -> &'static str {
    if d == Dtype::I64 {
        "s64"
    } else {
        "s32"
    }
}

/// One element of an elementwise op: operands of dtype `od`, result of dtype `rd`.
pub(super) fn scalar_op(
    c: &mut Ctx,
    op: &OpData,
    od: Dtype,
    rd: Dtype,
    a: &[Reg],
) -> Result<Reg, PtxError> {
    let sp = op.span;
    let r = c.reg(rd);
    let fl = od.is_float();
    let bits = if od == Dtype::I64 { "b64" } else { "b32" };
    const L2E: f32 = std::f32::consts::LOG2_E;
    const LN2: f32 = std::f32::consts::LN_2;
    match op.opcode {
        Opcode::Neg if fl => c.b.ins(PtxInst::new("neg.f32").op(r).op(a[0])),
        Opcode::Neg => c.b.ins(PtxInst::new("neg").m(ity(od)).op(r).op(a[0])),
        Opcode::Abs if fl => c.b.ins(PtxInst::new("abs.f32").op(r).op(a[0])),
        Opcode::Abs => c.b.ins(PtxInst::new("abs").m(ity(od)).op(r).op(a[0])),
        Opcode::Exp => {
            c.b.ins(PtxInst::new("mul.f32").op(r).op(a[0]).op(f32_lit(L2E)));
            c.b.ins(PtxInst::new("ex2.approx.ftz.f32").op(r).op(r));
        }
        Opcode::Exp2 => c.b.ins(PtxInst::new("ex2.approx.ftz.f32").op(r).op(a[0])),
        Opcode::Log => {
            c.b.ins(PtxInst::new("lg2.approx.ftz.f32").op(r).op(a[0]));
            c.b.ins(PtxInst::new("mul.f32").op(r).op(r).op(f32_lit(LN2)));
        }
        Opcode::Log2 => c.b.ins(PtxInst::new("lg2.approx.ftz.f32").op(r).op(a[0])),
        Opcode::Sqrt => c.b.ins(PtxInst::new("sqrt.rn.f32").op(r).op(a[0])),
        Opcode::Rsqrt => c.b.ins(PtxInst::new("rsqrt.approx.ftz.f32").op(r).op(a[0])),
        Opcode::Tanh => {
            c.b.need(Isa::TANH_APPROX)
                .ins(PtxInst::new("tanh.approx.f32").op(r).op(a[0]))
        }
        Opcode::Sigmoid | Opcode::Silu => {
            c.b.ins(PtxInst::new("mul.f32").op(r).op(a[0]).op(f32_lit(-L2E)));
            c.b.ins(PtxInst::new("ex2.approx.ftz.f32").op(r).op(r));
            c.b.ins(
                PtxInst::new("add.f32")
                    .op(r)
                    .op(r)
                    .op(Operand::F32(0x3F800000)),
            );
            if op.opcode == Opcode::Silu {
                c.b.ins(PtxInst::new("div.rn.f32").op(r).op(a[0]).op(r));
            } else {
                c.b.ins(PtxInst::new("rcp.rn.f32").op(r).op(r));
            }
        }
        Opcode::Recip => c.b.ins(PtxInst::new("rcp.rn.f32").op(r).op(a[0])),
        Opcode::Floor => c.b.ins(PtxInst::new("cvt.rmi.f32.f32").op(r).op(a[0])),
        Opcode::Erf => super::special::erf(&mut c.b, r, a[0]),
        Opcode::Pow => super::special::pow(&mut c.b, r, a[0], a[1]),
        // One rounding, as the interpreter (then to the dtype below).
        Opcode::Fma => {
            c.b.ins(PtxInst::new("fma.rn.f32").op(r).op(a[0]).op(a[1]).op(a[2]))
        }
        Opcode::Not if od == Dtype::I1 => c.b.ins(PtxInst::new("not.pred").op(r).op(a[0])),
        Opcode::Not => c.b.ins(PtxInst::new("not").m(bits).op(r).op(a[0])),
        Opcode::Add | Opcode::Sub | Opcode::Mul | Opcode::Div | Opcode::Max | Opcode::Min if fl => {
            let m = match op.opcode {
                Opcode::Add => "add.f32",
                Opcode::Sub => "sub.f32",
                Opcode::Mul => "mul.f32",
                Opcode::Div => "div.rn.f32",
                Opcode::Max => "max.NaN.f32",
                _ => "min.NaN.f32",
            };
            if matches!(op.opcode, Opcode::Max | Opcode::Min) {
                c.b.need(Isa::MINMAX_NAN);
            }
            c.b.ins(PtxInst::new(m).op(r).op(a[0]).op(a[1]));
        }
        Opcode::Div | Opcode::Rem
            if od == Dtype::I32 && super::divide::log2_divisor(c, op).is_some() =>
        {
            super::divide::lower(c, op, r, a[0]);
        }
        Opcode::Add
        | Opcode::Sub
        | Opcode::Mul
        | Opcode::Div
        | Opcode::Rem
        | Opcode::Max
        | Opcode::Min => {
            let t = if od == Dtype::U8 { "u32" } else { ity(od) };
            let m = match op.opcode {
                Opcode::Add => PtxInst::new("add").m(t),
                Opcode::Sub => PtxInst::new("sub").m(t),
                Opcode::Mul => PtxInst::new("mul.lo").m(t),
                Opcode::Div => PtxInst::new("div").m(t),
                Opcode::Rem => PtxInst::new("rem").m(t),
                Opcode::Max => PtxInst::new("max").m(t),
                _ => PtxInst::new("min").m(t),
            };
            c.b.ins(m.op(r).op(a[0]).op(a[1]));
        }
        Opcode::And | Opcode::Or | Opcode::Xor => {
            let m = match op.opcode {
                Opcode::And => "and",
                Opcode::Or => "or",
                _ => "xor",
            };
            let t = if od == Dtype::I1 { "pred" } else { bits };
            c.b.ins(PtxInst::new(m).m(t).op(r).op(a[0]).op(a[1]));
        }
        Opcode::Shl => {
            let s = cvt_shift(c, od, a[1]);
            c.b.ins(PtxInst::new("shl").m(bits).op(r).op(a[0]).op(s));
        }
        Opcode::Shr => {
            let t = match od {
                Dtype::U8 => "u32",
                Dtype::I64 => "s64",
                _ => "s32",
            };
            let s = cvt_shift(c, od, a[1]);
            c.b.ins(PtxInst::new("shr").m(t).op(r).op(a[0]).op(s));
        }
        Opcode::Cast => cast(c, od, rd, a[0], r),
        // A register move: f32 and i32 share 32-bit registers; f16/bf16 live widened in f32
        // registers, so reinterpreting one as the other is not a move and is not lowered.
        Opcode::Bitcast => match (od, rd) {
            (Dtype::F32 | Dtype::I32, Dtype::F32 | Dtype::I32) | (Dtype::U8, Dtype::U8) => {
                c.b.ins(PtxInst::new("mov.b32").op(r).op(a[0]))
            }
            (Dtype::I64, Dtype::I64) => c.b.ins(PtxInst::new("mov.b64").op(r).op(a[0])),
            (Dtype::F16, Dtype::F16) | (Dtype::Bf16, Dtype::Bf16) => {
                c.b.ins(PtxInst::new("mov.f32").op(r).op(a[0]))
            }
            _ => {
                return Err(PtxError::at(
                    sp,
                    format!("bitcast {od} → {rd} is not supported by the PTX backend"),
                ))
            }
        },
        Opcode::Select => {
            let m = match class_of(rd) {
                RegClass::F32 => "selp.f32",
                RegClass::B64 => "selp.b64",
                RegClass::Pred => {
                    // r = c ? x : y for predicates.
                    let (t1, t2) = (c.b.reg(RegClass::Pred), c.b.reg(RegClass::Pred));
                    c.b.ins(PtxInst::new("and.pred").op(t1).op(a[0]).op(a[1]));
                    c.b.ins(PtxInst::new("not.pred").op(t2).op(a[0]));
                    c.b.ins(PtxInst::new("and.pred").op(t2).op(t2).op(a[2]));
                    c.b.ins(PtxInst::new("or.pred").op(r).op(t1).op(t2));
                    return Ok(r);
                }
                _ => "selp.b32",
            };
            c.b.ins(PtxInst::new(m).op(r).op(a[1]).op(a[2]).op(a[0]));
        }
        Opcode::Cmp => {
            let Some(p) = op.cmp_pred() else {
                return Err(PtxError::at(sp, "cmp needs a predicate"));
            };
            let t = match od {
                Dtype::F32 | Dtype::F16 | Dtype::Bf16 => "f32",
                Dtype::U8 => "u32",
                Dtype::I64 => "s64",
                Dtype::I32 => "s32",
                Dtype::I1 => {
                    // Compare booleans as 0/1.
                    let (x, y) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
                    c.b.ins(PtxInst::new("selp.b32").op(x).op(1).op(0).op(a[0]));
                    c.b.ins(PtxInst::new("selp.b32").op(y).op(1).op(0).op(a[1]));
                    c.b.ins(
                        PtxInst::new("setp")
                            .m(pred_name(p, false))
                            .m("u32")
                            .op(r)
                            .op(x)
                            .op(y),
                    );
                    return Ok(r);
                }
            };
            // Float comparisons are ordered (false with NaN) except `ne`, which is unordered.
            c.b.ins(
                PtxInst::new("setp")
                    .m(pred_name(p, fl))
                    .m(t)
                    .op(r)
                    .op(a[0])
                    .op(a[1]),
            );
        }
        Opcode::Nf4 => {
            let idx = c.b.reg(RegClass::B32);
            c.b.ins(PtxInst::new("and.b32").op(idx).op(a[0]).op(15));
            // The codebook lives in constant memory (`kir_nf4`, declared once per module).
            let (off, base) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
            c.b.ins(PtxInst::new("mov.u32").op(base).op(Operand::sym("kir_nf4")));
            c.b.ins(PtxInst::new("mad.lo.s32").op(off).op(idx).op(4).op(base));
            c.b.ins(PtxInst::new("ld.const.f32").op(r).addr(off));
        }
        kir_ir::non_elementwise_ops!() => {
            return Err(PtxError::at(
                sp,
                format!("internal: `{}` is not elementwise", op.opcode.name()),
            ))
        }
    }
    if op.opcode != Opcode::Cast {
        round(c, rd, r);
    }
    Ok(r)
}

/// The `setp` comparison of `p`: float `ne` is unordered (true with a NaN), the rest ordered.
fn pred_name(p: CmpPred, float: bool) -> &'static str {
    match (p, float) {
        (CmpPred::Eq, _) => "eq",
        (CmpPred::Ne, true) => "neu",
        (CmpPred::Ne, false) => "ne",
        (CmpPred::Lt, _) => "lt",
        (CmpPred::Le, _) => "le",
        (CmpPred::Gt, _) => "gt",
        (CmpPred::Ge, _) => "ge",
    }
}

fn cvt_shift(c: &mut Ctx, d: Dtype, s: Reg) -> Reg {
    if d == Dtype::I64 {
        let r = c.b.reg(RegClass::B32);
        c.b.ins(PtxInst::new("cvt.u32.u64").op(r).op(s));
        r
    } else {
        s
    }
}

/// dst = cast(src) from `from` to `to` with the interpreter's rules.
fn cast(c: &mut Ctx, from: Dtype, to: Dtype, src: Reg, dst: Reg) {
    use Dtype::*;
    match (from.is_float(), to) {
        (_, I1) => match from {
            F32 | F16 | Bf16 => c.b.ins(
                PtxInst::new("setp.neu.f32")
                    .op(dst)
                    .op(src)
                    .op(Operand::F32(0x00000000)),
            ),
            I64 => c.b.ins(PtxInst::new("setp.ne.s64").op(dst).op(src).op(0)),
            I1 => c.b.ins(PtxInst::new("mov.pred").op(dst).op(src)),
            _ => c.b.ins(PtxInst::new("setp.ne.s32").op(dst).op(src).op(0)),
        },
        (true, F32 | F16 | Bf16) => {
            c.b.ins(PtxInst::new("mov.f32").op(dst).op(src));
            round(c, to, dst);
        }
        // Truncating and saturating; NaN → 0 as the interpreter (the hardware's s64 conversion
        // gives i64::MIN for NaN, seen on the H200).
        (true, I32 | I64) => {
            let (w, b) = if to == I64 {
                ("s64", "b64")
            } else {
                ("s32", "b32")
            };
            let nan = c.b.reg(RegClass::Pred);
            c.b.ins(PtxInst::new("cvt.rzi").m(w).m("f32").op(dst).op(src));
            c.b.ins(PtxInst::new("setp.nan.f32").op(nan).op(src).op(src));
            c.b.ins(PtxInst::new("selp").m(b).op(dst).op(0).op(dst).op(nan));
        }
        (true, U8) => {
            // Saturate to [0, 255] like the interpreter.
            c.b.ins(PtxInst::new("cvt.rzi.sat.u8.f32").op(dst).op(src));
            c.b.ins(PtxInst::new("and.b32").op(dst).op(dst).op(255));
        }
        (false, F32 | F16 | Bf16) => {
            match from {
                I64 => c.b.ins(PtxInst::new("cvt.rn.f32.s64").op(dst).op(src)),
                I1 => c.b.ins(
                    PtxInst::new("selp.f32")
                        .op(dst)
                        .op(Operand::F32(0x3F800000))
                        .op(Operand::F32(0x00000000))
                        .op(src),
                ),
                U8 => c.b.ins(PtxInst::new("cvt.rn.f32.u32").op(dst).op(src)),
                _ => c.b.ins(PtxInst::new("cvt.rn.f32.s32").op(dst).op(src)),
            }
            round(c, to, dst);
        }
        (false, I32 | U8) => {
            match from {
                I64 => c.b.ins(PtxInst::new("cvt.u32.u64").op(dst).op(src)),
                I1 => {
                    c.b.ins(PtxInst::new("selp.b32").op(dst).op(1).op(0).op(src))
                }
                _ => c.b.ins(PtxInst::new("mov.b32").op(dst).op(src)),
            }
            if to == U8 {
                c.b.ins(PtxInst::new("and.b32").op(dst).op(dst).op(255));
            }
        }
        (false, I64) => match from {
            I1 => {
                c.b.ins(PtxInst::new("selp.b64").op(dst).op(1).op(0).op(src))
            }
            U8 => c.b.ins(PtxInst::new("cvt.u64.u32").op(dst).op(src)),
            I64 => c.b.ins(PtxInst::new("mov.b64").op(dst).op(src)),
            _ => c.b.ins(PtxInst::new("cvt.s64.s32").op(dst).op(src)),
        },
    }
}

/// Integer expressions of dims (grids, offsets) as registers.
impl Ctx<'_> {
    /// Evaluates a (specialized) integer expression over dims into a b32 register.
    pub fn expr(&mut self, e: &Expr) -> Result<Reg, PtxError> {
        use kir_ir::BinOp as B;
        Ok(match &e.kind {
            ExprKind::Int(v) => self.b.imm32(*v),
            ExprKind::Float(_) => return Err(PtxError::at(e.span, "a float is not an index")),
            ExprKind::Ident(n) => *self
                .params
                .dims
                .get(n)
                .ok_or_else(|| PtxError::at(e.span, format!("unknown dim `{n}`")))?,
            ExprKind::Unary(op, a) => {
                let a = self.expr(a)?;
                let r = self.b.reg(RegClass::B32);
                match op {
                    kir_ir::UnOp::Neg => self.b.ins(PtxInst::new("neg.s32").op(r).op(a)),
                    kir_ir::UnOp::Not => {
                        let p = self.b.reg(RegClass::Pred);
                        self.b.ins(PtxInst::new("setp.eq.s32").op(p).op(a).op(0));
                        self.b.ins(PtxInst::new("selp.b32").op(r).op(1).op(0).op(p));
                    }
                }
                r
            }
            ExprKind::Binary(op, a, bb) => {
                let (x, y) = (self.expr(a)?, self.expr(bb)?);
                let r = self.b.reg(RegClass::B32);
                let cmp = |s: &str| Some(s.to_string());
                let c = match op {
                    B::Add => {
                        self.b.ins(PtxInst::new("add.s32").op(r).op(x).op(y));
                        None
                    }
                    B::Sub => {
                        self.b.ins(PtxInst::new("sub.s32").op(r).op(x).op(y));
                        None
                    }
                    B::Mul => {
                        self.b.ins(PtxInst::new("mul.lo.s32").op(r).op(x).op(y));
                        None
                    }
                    B::Div | B::Rem => {
                        // Floor division / remainder for the expression language.
                        let (q, m, p, pn) = (
                            self.b.reg(RegClass::B32),
                            self.b.reg(RegClass::B32),
                            self.b.reg(RegClass::Pred),
                            self.b.reg(RegClass::Pred),
                        );
                        self.b.ins(PtxInst::new("div.s32").op(q).op(x).op(y));
                        self.b.ins(PtxInst::new("rem.s32").op(m).op(x).op(y));
                        self.b.ins(PtxInst::new("setp.ne.s32").op(p).op(m).op(0));
                        let t = self.b.reg(RegClass::B32);
                        self.b.ins(PtxInst::new("xor.b32").op(t).op(x).op(y));
                        self.b.ins(PtxInst::new("setp.lt.s32").op(pn).op(t).op(0));
                        self.b.ins(PtxInst::new("and.pred").op(p).op(p).op(pn));
                        if *op == B::Div {
                            self.b.ins(PtxInst::new("sub.s32").op(r).op(q).op(1));
                            self.b.ins(PtxInst::new("selp.b32").op(r).op(r).op(q).op(p));
                        } else {
                            self.b.ins(PtxInst::new("add.s32").op(r).op(m).op(y));
                            self.b.ins(PtxInst::new("selp.b32").op(r).op(r).op(m).op(p));
                        }
                        None
                    }
                    B::Eq => cmp("eq"),
                    B::Ne => cmp("ne"),
                    B::Lt => cmp("lt"),
                    B::Le => cmp("le"),
                    B::Gt => cmp("gt"),
                    B::Ge => cmp("ge"),
                    B::And | B::Or => {
                        let (p1, p2) = (self.b.reg(RegClass::Pred), self.b.reg(RegClass::Pred));
                        self.b.ins(PtxInst::new("setp.ne.s32").op(p1).op(x).op(0));
                        self.b.ins(PtxInst::new("setp.ne.s32").op(p2).op(y).op(0));
                        let w = if *op == B::And { "and" } else { "or" };
                        self.b.ins(PtxInst::new(w).m("pred").op(p1).op(p1).op(p2));
                        self.b
                            .ins(PtxInst::new("selp.b32").op(r).op(1).op(0).op(p1));
                        None
                    }
                };
                if let Some(c) = c {
                    let p = self.b.reg(RegClass::Pred);
                    self.b
                        .ins(PtxInst::new("setp").m(c).m("s32").op(p).op(x).op(y));
                    self.b.ins(PtxInst::new("selp.b32").op(r).op(1).op(0).op(p));
                }
                r
            }
            ExprKind::Call(f, args) => {
                let vs: Vec<Reg> = args
                    .iter()
                    .map(|a| self.expr(a))
                    .collect::<Result<_, _>>()?;
                let r = self.b.reg(RegClass::B32);
                match f {
                    kir_ir::Func::Min => self
                        .b
                        .ins(PtxInst::new("min.s32").op(r).op(vs[0]).op(vs[1])),
                    kir_ir::Func::Max => self
                        .b
                        .ins(PtxInst::new("max.s32").op(r).op(vs[0]).op(vs[1])),
                    kir_ir::Func::Cdiv => {
                        self.b
                            .ins(PtxInst::new("add.s32").op(r).op(vs[0]).op(vs[1]));
                        self.b.ins(PtxInst::new("sub.s32").op(r).op(r).op(1));
                        self.b.ins(PtxInst::new("div.s32").op(r).op(r).op(vs[1]));
                    }
                    kir_ir::Func::Select => {
                        let p = self.b.reg(RegClass::Pred);
                        self.b
                            .ins(PtxInst::new("setp.ne.s32").op(p).op(vs[0]).op(0));
                        self.b
                            .ins(PtxInst::new("selp.b32").op(r).op(vs[1]).op(vs[2]).op(p));
                    }
                }
                r
            }
        })
    }
}

/// Folds `x` into `acc` with the combine step of reduction `kind` (`acc = acc ⊕ x`).
pub(super) fn combine(c: &mut Ctx, kind: ReduceKind, d: Dtype, acc: Reg, x: Reg) {
    let t = match d {
        Dtype::F32 | Dtype::F16 | Dtype::Bf16 => "f32",
        Dtype::I64 => "s64",
        Dtype::U8 => "u32",
        _ => "s32",
    };
    if d == Dtype::I1 {
        let w = if kind == ReduceKind::Min { "and" } else { "or" };
        c.b.ins(PtxInst::new(w).m("pred").op(acc).op(acc).op(x));
        return;
    }
    let m = match (kind, d.is_float()) {
        (ReduceKind::Sum, _) => PtxInst::new("add").m(t),
        (ReduceKind::Max, true) => PtxInst::new("max.NaN.f32"),
        (ReduceKind::Min, true) => PtxInst::new("min.NaN.f32"),
        (ReduceKind::Max, false) => PtxInst::new("max").m(t),
        (ReduceKind::Min, false) => PtxInst::new("min").m(t),
    };
    if d.is_float() && kind != ReduceKind::Sum {
        c.b.need(Isa::MINMAX_NAN);
    }
    c.b.ins(m.op(acc).op(acc).op(x));
}

/// The identity of reduction `kind` on `d` in a fresh register.
pub(super) fn identity(c: &mut Ctx, kind: ReduceKind, d: Dtype) -> Reg {
    let v = match (kind, d.is_float()) {
        (ReduceKind::Sum, _) => 0.0,
        (ReduceKind::Max, true) => f64::NEG_INFINITY,
        (ReduceKind::Min, true) => f64::INFINITY,
        (ReduceKind::Max, false) => i32::MIN as f64,
        (ReduceKind::Min, false) => i32::MAX as f64,
    };
    super::ctx::constant(c, d, v)
}

/// Folds into `acc` the `acc` of the lane `mask` away (a butterfly shuffle step of reduction
/// `kind`).
pub(super) fn shfl_combine(c: &mut Ctx, kind: ReduceKind, d: Dtype, acc: Reg, mask: usize) {
    let t = c.reg(d);
    if class_of(d) == RegClass::F32 {
        let (x, y) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
        c.b.ins(PtxInst::new("mov.b32").op(y).op(acc));
        c.b.need(Isa::SHFL_SYNC).ins(
            PtxInst::new("shfl.sync.bfly.b32")
                .op(x)
                .op(y)
                .op(mask)
                .op(31)
                .op(Operand::Hex(0xffffffff)),
        );
        c.b.ins(PtxInst::new("mov.b32").op(t).op(x));
    } else {
        c.b.need(Isa::SHFL_SYNC).ins(
            PtxInst::new("shfl.sync.bfly.b32")
                .op(t)
                .op(acc)
                .op(mask)
                .op(31)
                .op(Operand::Hex(0xffffffff)),
        );
    }
    combine(c, kind, d, acc, t);
}
