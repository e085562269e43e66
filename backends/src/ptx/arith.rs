//! Elementwise arithmetic on one register per element: float ops in f32 with f16/bf16 rounding
//! after each op, integer wrap-around, casts and comparisons with the interpreter's rules.

use super::builder::{f32_lit, Reg, RegClass};
use super::ctx::{class_of, Ctx};
use super::isa::Isa;
use super::lower::round;
use super::PtxError;
use kir_ir::{CmpPred, Dtype, Expr, ExprKind, OpData, Opcode};

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
        Opcode::Neg if fl => c.b.ins(format!("neg.f32 {r}, {}", a[0])),
        Opcode::Neg => c.b.ins(format!("neg.{} {r}, {}", ity(od), a[0])),
        Opcode::Abs if fl => c.b.ins(format!("abs.f32 {r}, {}", a[0])),
        Opcode::Abs => c.b.ins(format!("abs.{} {r}, {}", ity(od), a[0])),
        Opcode::Exp => {
            c.b.ins(format!("mul.f32 {r}, {}, {}", a[0], f32_lit(L2E)));
            c.b.ins(format!("ex2.approx.ftz.f32 {r}, {r}"));
        }
        Opcode::Exp2 => c.b.ins(format!("ex2.approx.ftz.f32 {r}, {}", a[0])),
        Opcode::Log => {
            c.b.ins(format!("lg2.approx.ftz.f32 {r}, {}", a[0]));
            c.b.ins(format!("mul.f32 {r}, {r}, {}", f32_lit(LN2)));
        }
        Opcode::Log2 => c.b.ins(format!("lg2.approx.ftz.f32 {r}, {}", a[0])),
        Opcode::Sqrt => c.b.ins(format!("sqrt.rn.f32 {r}, {}", a[0])),
        Opcode::Rsqrt => c.b.ins(format!("rsqrt.approx.ftz.f32 {r}, {}", a[0])),
        Opcode::Tanh => {
            c.b.need(Isa::TANH_APPROX)
                .ins(format!("tanh.approx.f32 {r}, {}", a[0]))
        }
        Opcode::Sigmoid | Opcode::Silu => {
            c.b.ins(format!("mul.f32 {r}, {}, {}", a[0], f32_lit(-L2E)));
            c.b.ins(format!("ex2.approx.ftz.f32 {r}, {r}"));
            c.b.ins(format!("add.f32 {r}, {r}, 0f3F800000"));
            if op.opcode == Opcode::Silu {
                c.b.ins(format!("div.rn.f32 {r}, {}, {r}", a[0]));
            } else {
                c.b.ins(format!("rcp.rn.f32 {r}, {r}"));
            }
        }
        Opcode::Recip => c.b.ins(format!("rcp.rn.f32 {r}, {}", a[0])),
        Opcode::Floor => c.b.ins(format!("cvt.rmi.f32.f32 {r}, {}", a[0])),
        Opcode::Not if od == Dtype::I1 => c.b.ins(format!("not.pred {r}, {}", a[0])),
        Opcode::Not => c.b.ins(format!("not.{bits} {r}, {}", a[0])),
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
            c.b.ins(format!("{m} {r}, {}, {}", a[0], a[1]));
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
                Opcode::Add => format!("add.{t}"),
                Opcode::Sub => format!("sub.{t}"),
                Opcode::Mul => format!("mul.lo.{t}"),
                Opcode::Div => format!("div.{t}"),
                Opcode::Rem => format!("rem.{t}"),
                Opcode::Max => format!("max.{t}"),
                _ => format!("min.{t}"),
            };
            c.b.ins(format!("{m} {r}, {}, {}", a[0], a[1]));
        }
        Opcode::And | Opcode::Or | Opcode::Xor => {
            let m = match op.opcode {
                Opcode::And => "and",
                Opcode::Or => "or",
                _ => "xor",
            };
            let t = if od == Dtype::I1 { "pred" } else { bits };
            c.b.ins(format!("{m}.{t} {r}, {}, {}", a[0], a[1]));
        }
        Opcode::Shl => {
            let s = cvt_shift(c, od, a[1]);
            c.b.ins(format!("shl.{bits} {r}, {}, {s}", a[0]));
        }
        Opcode::Shr => {
            let t = match od {
                Dtype::U8 => "u32",
                Dtype::I64 => "s64",
                _ => "s32",
            };
            let s = cvt_shift(c, od, a[1]);
            c.b.ins(format!("shr.{t} {r}, {}, {s}", a[0]));
        }
        Opcode::Cast => cast(c, od, rd, a[0], r),
        // A register move: f32 and i32 share 32-bit registers; f16/bf16 live widened in f32
        // registers, so reinterpreting one as the other is not a move and is not lowered.
        Opcode::Bitcast => match (od, rd) {
            (Dtype::F32 | Dtype::I32, Dtype::F32 | Dtype::I32) | (Dtype::U8, Dtype::U8) => {
                c.b.ins(format!("mov.b32 {r}, {}", a[0]))
            }
            (Dtype::I64, Dtype::I64) => c.b.ins(format!("mov.b64 {r}, {}", a[0])),
            (Dtype::F16, Dtype::F16) | (Dtype::Bf16, Dtype::Bf16) => {
                c.b.ins(format!("mov.f32 {r}, {}", a[0]))
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
                    c.b.ins(format!("and.pred {t1}, {}, {}", a[0], a[1]));
                    c.b.ins(format!("not.pred {t2}, {}", a[0]));
                    c.b.ins(format!("and.pred {t2}, {t2}, {}", a[2]));
                    c.b.ins(format!("or.pred {r}, {t1}, {t2}"));
                    return Ok(r);
                }
                _ => "selp.b32",
            };
            c.b.ins(format!("{m} {r}, {}, {}, {}", a[1], a[2], a[0]));
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
                    c.b.ins(format!("selp.b32 {x}, 1, 0, {}", a[0]));
                    c.b.ins(format!("selp.b32 {y}, 1, 0, {}", a[1]));
                    c.b.ins(format!("setp.{}.u32 {r}, {x}, {y}", pred_name(p, false)));
                    return Ok(r);
                }
            };
            // Float comparisons are ordered (false with NaN) except `ne`, which is unordered.
            c.b.ins(format!(
                "setp.{}.{t} {r}, {}, {}",
                pred_name(p, fl),
                a[0],
                a[1]
            ));
        }
        Opcode::Nf4 => {
            let idx = c.b.reg(RegClass::B32);
            c.b.ins(format!("and.b32 {idx}, {}, 15", a[0]));
            // The codebook lives in constant memory (`kir_nf4`, declared once per module).
            let (off, base) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
            c.b.ins(format!("mov.u32 {base}, kir_nf4"));
            c.b.ins(format!("mad.lo.s32 {off}, {idx}, 4, {base}"));
            c.b.ins(format!("ld.const.f32 {r}, [{off}]"));
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
        c.b.ins(format!("cvt.u32.u64 {r}, {s}"));
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
            F32 | F16 | Bf16 => c.b.ins(format!("setp.neu.f32 {dst}, {src}, 0f00000000")),
            I64 => c.b.ins(format!("setp.ne.s64 {dst}, {src}, 0")),
            I1 => c.b.ins(format!("mov.pred {dst}, {src}")),
            _ => c.b.ins(format!("setp.ne.s32 {dst}, {src}, 0")),
        },
        (true, F32 | F16 | Bf16) => {
            c.b.ins(format!("mov.f32 {dst}, {src}"));
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
            c.b.ins(format!("cvt.rzi.{w}.f32 {dst}, {src}"));
            c.b.ins(format!("setp.nan.f32 {nan}, {src}, {src}"));
            c.b.ins(format!("selp.{b} {dst}, 0, {dst}, {nan}"));
        }
        (true, U8) => {
            // Saturate to [0, 255] like the interpreter.
            c.b.ins(format!("cvt.rzi.sat.u8.f32 {dst}, {src}"));
            c.b.ins(format!("and.b32 {dst}, {dst}, 255"));
        }
        (false, F32 | F16 | Bf16) => {
            match from {
                I64 => c.b.ins(format!("cvt.rn.f32.s64 {dst}, {src}")),
                I1 => {
                    c.b.ins(format!("selp.f32 {dst}, 0f3F800000, 0f00000000, {src}"))
                }
                U8 => c.b.ins(format!("cvt.rn.f32.u32 {dst}, {src}")),
                _ => c.b.ins(format!("cvt.rn.f32.s32 {dst}, {src}")),
            }
            round(c, to, dst);
        }
        (false, I32 | U8) => {
            match from {
                I64 => c.b.ins(format!("cvt.u32.u64 {dst}, {src}")),
                I1 => c.b.ins(format!("selp.b32 {dst}, 1, 0, {src}")),
                _ => c.b.ins(format!("mov.b32 {dst}, {src}")),
            }
            if to == U8 {
                c.b.ins(format!("and.b32 {dst}, {dst}, 255"));
            }
        }
        (false, I64) => match from {
            I1 => c.b.ins(format!("selp.b64 {dst}, 1, 0, {src}")),
            U8 => c.b.ins(format!("cvt.u64.u32 {dst}, {src}")),
            I64 => c.b.ins(format!("mov.b64 {dst}, {src}")),
            _ => c.b.ins(format!("cvt.s64.s32 {dst}, {src}")),
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
                .dims
                .get(n)
                .ok_or_else(|| PtxError::at(e.span, format!("unknown dim `{n}`")))?,
            ExprKind::Unary(op, a) => {
                let a = self.expr(a)?;
                let r = self.b.reg(RegClass::B32);
                match op {
                    kir_ir::UnOp::Neg => self.b.ins(format!("neg.s32 {r}, {a}")),
                    kir_ir::UnOp::Not => {
                        let p = self.b.reg(RegClass::Pred);
                        self.b.ins(format!("setp.eq.s32 {p}, {a}, 0"));
                        self.b.ins(format!("selp.b32 {r}, 1, 0, {p}"));
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
                        self.b.ins(format!("add.s32 {r}, {x}, {y}"));
                        None
                    }
                    B::Sub => {
                        self.b.ins(format!("sub.s32 {r}, {x}, {y}"));
                        None
                    }
                    B::Mul => {
                        self.b.ins(format!("mul.lo.s32 {r}, {x}, {y}"));
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
                        self.b.ins(format!("div.s32 {q}, {x}, {y}"));
                        self.b.ins(format!("rem.s32 {m}, {x}, {y}"));
                        self.b.ins(format!("setp.ne.s32 {p}, {m}, 0"));
                        let t = self.b.reg(RegClass::B32);
                        self.b.ins(format!("xor.b32 {t}, {x}, {y}"));
                        self.b.ins(format!("setp.lt.s32 {pn}, {t}, 0"));
                        self.b.ins(format!("and.pred {p}, {p}, {pn}"));
                        if *op == B::Div {
                            self.b.ins(format!("sub.s32 {r}, {q}, 1"));
                            self.b.ins(format!("selp.b32 {r}, {r}, {q}, {p}"));
                        } else {
                            self.b.ins(format!("add.s32 {r}, {m}, {y}"));
                            self.b.ins(format!("selp.b32 {r}, {r}, {m}, {p}"));
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
                        self.b.ins(format!("setp.ne.s32 {p1}, {x}, 0"));
                        self.b.ins(format!("setp.ne.s32 {p2}, {y}, 0"));
                        let w = if *op == B::And { "and" } else { "or" };
                        self.b.ins(format!("{w}.pred {p1}, {p1}, {p2}"));
                        self.b.ins(format!("selp.b32 {r}, 1, 0, {p1}"));
                        None
                    }
                };
                if let Some(c) = c {
                    let p = self.b.reg(RegClass::Pred);
                    self.b.ins(format!("setp.{c}.s32 {p}, {x}, {y}"));
                    self.b.ins(format!("selp.b32 {r}, 1, 0, {p}"));
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
                    kir_ir::Func::Min => self.b.ins(format!("min.s32 {r}, {}, {}", vs[0], vs[1])),
                    kir_ir::Func::Max => self.b.ins(format!("max.s32 {r}, {}, {}", vs[0], vs[1])),
                    kir_ir::Func::Cdiv => {
                        self.b.ins(format!("add.s32 {r}, {}, {}", vs[0], vs[1]));
                        self.b.ins(format!("sub.s32 {r}, {r}, 1"));
                        self.b.ins(format!("div.s32 {r}, {r}, {}", vs[1]));
                    }
                    kir_ir::Func::Select => {
                        let p = self.b.reg(RegClass::Pred);
                        self.b.ins(format!("setp.ne.s32 {p}, {}, 0", vs[0]));
                        self.b
                            .ins(format!("selp.b32 {r}, {}, {}, {p}", vs[1], vs[2]));
                    }
                }
                r
            }
        })
    }
}
