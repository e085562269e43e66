//! The op dispatcher (one exhaustive match over opcodes), structured control flow, and
//! elementwise arithmetic. Floats live in f32 registers; f16/bf16 results are rounded to
//! nearest even after every op, as the interpreter does.

use super::builder::{f32_lit, Reg, RegClass};
use super::ctx::{class_of, Ctx, Val};
use super::layout::{Layout, Place};
use super::PtxError;
use kir_ir::{Attr, Block, Dtype, ExprKind, OpData, Opcode, Span, Value};

/// Lowers the kernel body.
pub fn lower_body(c: &mut Ctx) -> Result<(), PtxError> {
    let body = c.k.body;
    block(c, body).map(|_| ())
}

/// Lowers the ops of a block; returns the operands of its final `yield`.
pub fn block(c: &mut Ctx, b: Block) -> Result<Vec<Value>, PtxError> {
    let ops = c.k.dfg.blocks[b].ops.clone();
    let mut yielded = Vec::new();
    for o in ops {
        let k = c.k;
        let op = &k.dfg.ops[o];
        if op.opcode == Opcode::Yield {
            yielded = op.operands.clone();
            continue;
        }
        if lazy_ok(c, op) {
            if let Some(&r) = op.results.first() {
                c.lazy.insert(r, o);
                continue;
            }
        }
        lower_op(c, op)?;
    }
    Ok(yielded)
}

/// True for cheap integer/mask tile ops (iota, index arithmetic, comparisons of indices)
/// whose operands are scalars or lazy: they are recomputed where used.
fn lazy_ok(c: &Ctx, op: &OpData) -> bool {
    let Some(&r) = op.results.first() else {
        return false;
    };
    if !matches!(place(c, r), Place::Reg(_)) {
        return false;
    }
    let int_result = matches!(dtype(c, r), Dtype::I32 | Dtype::I1);
    match op.opcode {
        Opcode::Iota => int_result,
        Opcode::Splat => {
            int_result
                && op
                    .operands
                    .first()
                    .is_some_and(|a| c.k.dfg.ty(*a).is_scalar())
        }
        Opcode::Add
        | Opcode::Sub
        | Opcode::Mul
        | Opcode::Min
        | Opcode::Max
        | Opcode::And
        | Opcode::Or
        | Opcode::Xor
        | Opcode::Not
        | Opcode::Cmp => {
            int_result
                && op.operands.iter().all(|a| {
                    c.lazy.contains_key(a)
                        || (c.k.dfg.ty(*a).is_scalar()
                            && matches!(dtype(c, *a), Dtype::I32 | Dtype::I1))
                })
        }
        _ => false,
    }
}

/// The register of slot `s` of value `v` in `layout` (a tile of `shape`): a lazy value is
/// recomputed for that slot alone (its chain is elementwise), others are taken from their
/// registers (converted if needed).
pub fn slot_value(
    c: &mut Ctx,
    v: Value,
    layout: Layout,
    shape: &[usize],
    s: usize,
    sp: Span,
) -> Result<Reg, PtxError> {
    if is_lazy_tile(c, v, layout, shape) {
        let sc = c.slot_coord(layout, shape, s);
        return coord_value(c, v, &sc.idx, sp);
    }
    Ok(regs_in(c, v, layout, shape, sp)?[s])
}

/// True if `v` is a lazy tile of `shape` placed in `layout`.
pub fn is_lazy_tile(c: &Ctx, v: Value, layout: Layout, shape: &[usize]) -> bool {
    c.lazy.contains_key(&v)
        && place(c, v) == Place::Reg(layout)
        && shape == &c.k.dfg.ty(v).shape().unwrap_or_default()[..]
}

/// The element of lazy tile `v` at tile coordinates `idx` (registers, possibly computed at run
/// time), by re-running its elementwise chain for that element.
pub fn coord_value(c: &mut Ctx, v: Value, idx: &[Reg], sp: Span) -> Result<Reg, PtxError> {
    let Some(&o) = c.lazy.get(&v) else {
        return Err(PtxError::at(sp, "internal: not a lazy value"));
    };
    let k = c.k;
    let op = &k.dfg.ops[o];
    if op.opcode == Opcode::Iota {
        let axis = match op.attr("axis") {
            Some(Attr::Expr(e)) => e.as_int().unwrap_or(0) as usize,
            _ => 0,
        };
        return Ok(idx.get(axis).copied().unwrap_or(idx[0]));
    }
    if op.opcode == Opcode::Splat {
        let a = *op
            .operands
            .first()
            .ok_or_else(|| PtxError::at(sp, "splat needs an operand"))?;
        return match c.val(a, sp)? {
            Val::Scalar(r) => Ok(r),
            _ => Err(PtxError::at(sp, "internal: splat of a tile")),
        };
    }
    let od = op
        .operands
        .first()
        .map(|&a| dtype(c, a))
        .unwrap_or(Dtype::I32);
    let rd = dtype(c, v);
    let mut args = Vec::new();
    for &a in &op.operands {
        args.push(if c.k.dfg.ty(a).is_scalar() {
            match c.val(a, sp)? {
                Val::Scalar(r) => r,
                _ => return Err(PtxError::at(sp, "internal: scalar operand")),
            }
        } else {
            coord_value(c, a, idx, sp)?
        });
    }
    scalar_op(c, op, od, rd, &args)
}

/// True if lazy value `v` is constant along dim `axis` (its chain never reads an iota along that
/// axis), so one element per row of a chunk decides all of them.
pub fn lazy_uniform_along(c: &Ctx, v: Value, axis: usize, depth: usize) -> bool {
    let Some(&o) = c.lazy.get(&v) else {
        return false;
    };
    let op = &c.k.dfg.ops[o];
    if depth > 32 {
        return false;
    }
    match op.opcode {
        Opcode::Iota => {
            let a = match op.attr("axis") {
                Some(Attr::Expr(e)) => e.as_int().unwrap_or(0) as usize,
                _ => 0,
            };
            a != axis
        }
        _ => op
            .operands
            .iter()
            .all(|&a| c.k.dfg.ty(a).is_scalar() || lazy_uniform_along(c, a, axis, depth + 1)),
    }
}

/// Computes a lazy value at the current point.
pub fn materialize(c: &mut Ctx, o: kir_ir::Op) -> Result<Val, PtxError> {
    let k = c.k;
    let op = &k.dfg.ops[o];
    match op.opcode {
        Opcode::Iota => super::tile::iota_val(c, op),
        Opcode::Splat => {
            let r = op
                .results
                .first()
                .copied()
                .ok_or_else(|| PtxError::at(op.span, "splat without a result"))?;
            let (l, shape) = match place(c, r) {
                Place::Reg(l) => (l, c.k.dfg.ty(r).shape().unwrap_or_default()),
                _ => return Err(PtxError::at(op.span, "internal: lazy splat placement")),
            };
            let regs = regs_in(c, r, l, &shape, op.span)?;
            Ok(Val::Tile {
                layout: l,
                shape,
                dtype: dtype(c, r),
                regs,
            })
        }
        _ => elementwise_val(c, op),
    }
}

fn place(c: &Ctx, v: Value) -> Place {
    c.places.get(&v).copied().unwrap_or(Place::Scalar)
}

fn dtype(c: &Ctx, v: Value) -> Dtype {
    c.k.dfg.ty(v).dtype().unwrap_or(Dtype::F32)
}

fn shape(c: &Ctx, v: Value) -> Vec<usize> {
    c.k.dfg.ty(v).shape().unwrap_or_default()
}

/// The literal value of an `Attr::Expr`.
pub fn lit(a: Option<&Attr>) -> Option<f64> {
    match a {
        Some(Attr::Expr(e)) => match &e.kind {
            ExprKind::Int(i) => Some(*i as f64),
            ExprKind::Float(x) => Some(x.0),
            _ => None,
        },
        _ => None,
    }
}

/// Rounds an f32 register holding a value meant as `d` (f16/bf16) to that dtype, in place;
/// wraps u8 to 8 bits.
pub fn round(c: &mut Ctx, d: Dtype, r: Reg) {
    match d {
        Dtype::F16 | Dtype::Bf16 => {
            let t = if d == Dtype::F16 { "f16" } else { "bf16" };
            let h = c.b.reg(RegClass::B16);
            c.b.ins(format!("cvt.rn.{t}.f32 {h}, {r}"));
            c.b.ins(format!("cvt.f32.{t} {r}, {h}"));
        }
        Dtype::U8 => c.b.ins(format!("and.b32 {r}, {r}, 255")),
        Dtype::F32 | Dtype::I32 | Dtype::I64 | Dtype::I1 => {}
    }
}

/// A register holding constant `v` as dtype `d` (rounded).
pub fn constant(c: &mut Ctx, d: Dtype, v: f64) -> Reg {
    let r = c.reg(d);
    match d {
        Dtype::F32 | Dtype::F16 | Dtype::Bf16 => {
            let x = match d {
                Dtype::F16 => half::f16::from_f32(v as f32).to_f32(),
                Dtype::Bf16 => half::bf16::from_f32(v as f32).to_f32(),
                _ => v as f32,
            };
            c.b.ins(format!("mov.b32 {r}, {}", f32_lit(x)));
        }
        Dtype::I32 => c.b.ins(format!("mov.b32 {r}, {}", v as i64 as i32)),
        Dtype::U8 => c.b.ins(format!("mov.b32 {r}, {}", (v as i64) & 255)),
        Dtype::I64 => c.b.ins(format!("mov.b64 {r}, {}", v as i64)),
        Dtype::I1 => {
            c.b.ins(format!("setp.ne.u32 {r}, {}, 0", (v != 0.0) as u32))
        }
    }
    r
}

/// The registers of `v` in `layout` with the result's `shape` (scalars replicate; tiles in
/// another layout or in shared memory are converted).
pub fn regs_in(
    c: &mut Ctx,
    v: Value,
    layout: Layout,
    shape: &[usize],
    span: Span,
) -> Result<Vec<Reg>, PtxError> {
    let n = super::layout::slots(layout, shape, c.blk);
    // A lazy index/mask tile is computed directly in the layout asked for: no conversion.
    if c.lazy.contains_key(&v) && c.k.dfg.ty(v).shape().as_deref() == Some(shape) {
        let coords = c.coords(layout, shape);
        return coords
            .iter()
            .map(|sc| coord_value(c, v, &sc.idx, span))
            .collect();
    }
    match c.val(v, span)? {
        Val::Scalar(r) => Ok(vec![r; n]),
        Val::Tile {
            layout: l,
            shape: s,
            regs,
            ..
        } if l == layout && s == shape => Ok(regs),
        other => {
            let t = super::tile::convert(c, &other, layout, span)?;
            match t {
                Val::Tile { regs, .. } => Ok(regs),
                _ => Err(PtxError::at(
                    span,
                    "internal: conversion did not give registers",
                )),
            }
        }
    }
}

fn def(c: &mut Ctx, v: Value, val: Val) {
    c.vals.insert(v, val);
}

/// Lowers one op.
pub fn lower_op(c: &mut Ctx, op: &OpData) -> Result<(), PtxError> {
    let sp = op.span;
    let res = op.results.first().copied();
    match op.opcode {
        Opcode::ProgramId | Opcode::NumPrograms => {
            let axis =
                ["x", "y", "z"][lit(op.lead.as_ref()).unwrap_or(0.0).clamp(0.0, 2.0) as usize];
            let sreg = if op.opcode == Opcode::ProgramId {
                "ctaid"
            } else {
                "nctaid"
            };
            let r = c.b.reg(RegClass::B32);
            c.b.ins(format!("mov.u32 {r}, %{sreg}.{axis}"));
            def(c, res_of(res, sp)?, Val::Scalar(r));
        }
        Opcode::Dim => {
            let Some(Attr::Name(n, _)) = &op.lead else {
                return Err(PtxError::at(sp, "dim needs a name"));
            };
            let r = *c
                .dims
                .get(n)
                .ok_or_else(|| PtxError::at(sp, format!("unknown dim `{n}`")))?;
            def(c, res_of(res, sp)?, Val::Scalar(r));
        }
        Opcode::Param => {
            let Some(Attr::Name(n, _)) = &op.lead else {
                return Err(PtxError::at(sp, "param needs a name"));
            };
            let r = *c
                .scalars
                .get(n)
                .ok_or_else(|| PtxError::at(sp, format!("unknown scalar param `{n}`")))?;
            def(c, res_of(res, sp)?, Val::Scalar(r));
        }
        Opcode::Const => {
            let v = res_of(res, sp)?;
            let d = dtype(c, v);
            let x =
                lit(op.lead.as_ref()).ok_or_else(|| PtxError::at(sp, "const needs a literal"))?;
            let r = constant(c, d, x);
            match place(c, v) {
                Place::Scalar => def(c, v, Val::Scalar(r)),
                Place::Reg(l) => {
                    let s = shape(c, v);
                    let n = super::layout::slots(l, &s, c.blk);
                    def(
                        c,
                        v,
                        Val::Tile {
                            layout: l,
                            shape: s,
                            dtype: d,
                            regs: vec![r; n],
                        },
                    );
                }
                Place::Shared => {
                    return Err(PtxError::at(
                        sp,
                        "internal: a constant placed in shared memory",
                    ))
                }
            }
        }
        Opcode::Iota
        | Opcode::Splat
        | Opcode::Broadcast
        | Opcode::Reshape
        | Opcode::Transpose
        | Opcode::Reduce => super::tile::lower_shape_op(c, op)?,
        Opcode::Load | Opcode::Store | Opcode::AtomicAdd => super::memory::lower_memory_op(c, op)?,
        Opcode::Dot => super::dot::lower_dot(c, op)?,
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
        | Opcode::Bitcast
        | Opcode::Select
        | Opcode::Cmp
        | Opcode::Nf4 => elementwise(c, op)?,
        Opcode::For => lower_for(c, op)?,
        Opcode::If => lower_if(c, op)?,
        Opcode::StaticIf => {
            return Err(PtxError::at(
                sp,
                "`static_if` must be removed by specialization before PTX lowering",
            ))
        }
        Opcode::Yield => {}
    }
    Ok(())
}

fn res_of(r: Option<Value>, sp: Span) -> Result<Value, PtxError> {
    r.ok_or_else(|| PtxError::at(sp, "internal: op has no result"))
}

fn elementwise(c: &mut Ctx, op: &OpData) -> Result<(), PtxError> {
    let v = res_of(op.results.first().copied(), op.span)?;
    let val = elementwise_val(c, op)?;
    def(c, v, val);
    Ok(())
}

fn elementwise_val(c: &mut Ctx, op: &OpData) -> Result<Val, PtxError> {
    let sp = op.span;
    let v = res_of(op.results.first().copied(), sp)?;
    let rd = dtype(c, v);
    let od = op.operands.first().map(|&a| dtype(c, a)).unwrap_or(rd);
    let (layout, s, n) = match place(c, v) {
        Place::Scalar => (None, vec![], 1),
        Place::Reg(l) => {
            let s = shape(c, v);
            let n = super::layout::slots(l, &s, c.blk);
            (Some(l), s, n)
        }
        Place::Shared => {
            return Err(PtxError::at(
                sp,
                "internal: elementwise result in shared memory",
            ))
        }
    };
    let mut ins: Vec<Vec<Reg>> = Vec::new();
    for &a in &op.operands {
        ins.push(match layout {
            None => match c.val(a, sp)? {
                Val::Scalar(r) => vec![r],
                _ => return Err(PtxError::at(sp, "internal: tile operand of a scalar op")),
            },
            Some(l) => regs_in(c, a, l, &s, sp)?,
        });
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let args: Vec<Reg> = ins.iter().map(|r| r[i]).collect();
        out.push(scalar_op(c, op, od, rd, &args)?);
    }
    Ok(match layout {
        None => Val::Scalar(out[0]),
        Some(l) => Val::Tile {
            layout: l,
            shape: s,
            dtype: rd,
            regs: out,
        },
    })
}

fn ity(d: Dtype) -> &'static str {
    if d == Dtype::I64 {
        "s64"
    } else {
        "s32"
    }
}

/// One element of an elementwise op: operands of dtype `od`, result of dtype `rd`.
fn scalar_op(c: &mut Ctx, op: &OpData, od: Dtype, rd: Dtype, a: &[Reg]) -> Result<Reg, PtxError> {
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
        Opcode::Tanh => c.b.ins(format!("tanh.approx.f32 {r}, {}", a[0])),
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
            let Some(Attr::Name(p, _)) = &op.lead else {
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
        _ => {
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

fn pred_name(p: &str, float: bool) -> &'static str {
    match (p, float) {
        ("eq", _) => "eq",
        ("ne", true) => "neu",
        ("ne", false) => "ne",
        ("lt", _) => "lt",
        ("le", _) => "le",
        ("gt", _) => "gt",
        _ => "ge",
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
        (true, I32) => c.b.ins(format!("cvt.rzi.s32.f32 {dst}, {src}")),
        (true, I64) => c.b.ins(format!("cvt.rzi.s64.f32 {dst}, {src}")),
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

/// Copies `src` into fresh registers (so loop-carried registers are distinct from their inits).
fn fresh_copy(c: &mut Ctx, v: &Val) -> Val {
    match v {
        Val::Scalar(r) => Val::Scalar(copy_reg(c, *r)),
        Val::Tile {
            layout,
            shape,
            dtype,
            regs,
        } => {
            let regs = regs.iter().map(|&r| copy_reg(c, r)).collect();
            Val::Tile {
                layout: *layout,
                shape: shape.clone(),
                dtype: *dtype,
                regs,
            }
        }
        Val::Shared { .. } => v.clone(),
    }
}

fn copy_reg(c: &mut Ctx, r: Reg) -> Reg {
    let n = c.b.reg(r.class);
    mov(c, n, r);
    n
}

fn mov(c: &mut Ctx, dst: Reg, src: Reg) {
    let t = match dst.class {
        RegClass::Pred => "pred",
        RegClass::B16 => "b16",
        RegClass::B32 => "b32",
        RegClass::B64 => "b64",
        RegClass::F32 => "f32",
    };
    c.b.ins(format!("mov.{t} {dst}, {src}"));
}

/// Moves the registers of `src` (a value of `v`'s place) into the registers of `dst`.
fn assign(c: &mut Ctx, dst: &Val, src: Value, sp: Span) -> Result<(), PtxError> {
    match dst {
        Val::Scalar(d) => match c.val(src, sp)? {
            Val::Scalar(s) => {
                mov(c, *d, s);
                Ok(())
            }
            _ => Err(PtxError::at(sp, "internal: tile yielded for a scalar")),
        },
        Val::Tile {
            layout,
            shape,
            regs,
            ..
        } => {
            let srcs = regs_in(c, src, *layout, shape, sp)?;
            for (d, s) in regs.clone().into_iter().zip(srcs) {
                if d != s {
                    mov(c, d, s);
                }
            }
            Ok(())
        }
        Val::Shared { .. } => Err(PtxError::at(
            sp,
            "a shared-memory tile cannot be loop-carried or yielded from `if`",
        )),
    }
}

fn lower_for(c: &mut Ctx, op: &OpData) -> Result<(), PtxError> {
    let sp = op.span;
    let body = *op
        .regions
        .first()
        .ok_or_else(|| PtxError::at(sp, "for needs a body"))?;
    let args = c.k.dfg.blocks[body].args.clone();
    let (lo, hi, step) = match (op.operands.first(), op.operands.get(1), op.operands.get(2)) {
        (Some(&a), Some(&b), Some(&s)) => (scalar(c, a, sp)?, scalar(c, b, sp)?, scalar(c, s, sp)?),
        _ => return Err(PtxError::at(sp, "for needs lo, hi, step")),
    };
    let iv = c.b.reg(RegClass::B32);
    c.b.ins(format!("mov.b32 {iv}, {lo}"));
    // Carried values get their own registers, initialised from the inits.
    let mut carried = Vec::new();
    for (i, &init) in op.operands.iter().skip(3).enumerate() {
        let cur = c.val(init, sp)?;
        let arg = args
            .get(i + 1)
            .copied()
            .ok_or_else(|| PtxError::at(sp, "for: missing block arg"))?;
        let want = match c.places.get(&arg).copied().unwrap_or(Place::Scalar) {
            Place::Reg(l) => {
                let s = shape(c, arg);
                let regs = regs_in(c, init, l, &s, sp)?;
                Val::Tile {
                    layout: l,
                    shape: s,
                    dtype: dtype(c, arg),
                    regs,
                }
            }
            _ => cur,
        };
        let v = fresh_copy(c, &want);
        c.vals.insert(arg, v.clone());
        carried.push(v);
    }
    if let Some(&a0) = args.first() {
        c.vals.insert(a0, Val::Scalar(iv));
        let pre = if c.pipeline {
            prefetchable(c, body, a0)
        } else {
            vec![]
        };
        if !pre.is_empty() {
            return lower_for_pipelined(c, op, body, a0, iv, hi, step, carried, pre);
        }
    }
    let (top, end) = (c.b.label("for"), c.b.label("endfor"));
    let p = c.b.reg(RegClass::Pred);
    c.b.place(&top);
    c.b.ins(format!("setp.ge.s32 {p}, {iv}, {hi}"));
    c.b.ins_if(p, false, format!("bra.uni {end}"));
    let yielded = block(c, body)?;
    for (dst, &src) in carried.iter().zip(&yielded) {
        assign(c, dst, src, sp)?;
    }
    c.b.ins(format!("add.s32 {iv}, {iv}, {step}"));
    c.b.ins(format!("bra.uni {top}"));
    c.b.place(&end);
    for (&r, v) in op.results.iter().zip(carried) {
        c.vals.insert(r, v);
    }
    Ok(())
}

/// Loads at the top level of a loop body that read a tile for dot operands (placed in shared
/// memory) at offsets known before the iteration starts (the induction variable or values from
/// outside the loop) with no mask or an index mask: their next tile can be fetched while the
/// current iteration computes. Returns (op, result, two buffer offsets).
fn prefetchable(c: &mut Ctx, body: Block, iv: Value) -> Vec<(kir_ir::Op, Value, [u32; 2])> {
    let k = c.k;
    let ops = k.dfg.blocks[body].ops.clone();
    // The body's index/mask chains are known up front (block() registers the same ones).
    for &o in &ops {
        let op = &k.dfg.ops[o];
        if lazy_ok(c, op) {
            if let Some(&r) = op.results.first() {
                c.lazy.insert(r, o);
            }
        }
    }
    let mut out = Vec::new();
    for &o in &ops {
        let op = &k.dfg.ops[o];
        let Some(&r) = op.results.first() else {
            continue;
        };
        if op.opcode != Opcode::Load || place(c, r) != Place::Shared {
            continue;
        }
        let Some(t) = &op.tensor else { continue };
        let offsets_ok = t.offsets.iter().all(|off| match off {
            kir_ir::Offset::Value(v) => *v == iv || c.vals.contains_key(v),
            kir_ir::Offset::Expr(_) => true,
        });
        let mask_ok = match op.attr("mask") {
            None => true,
            Some(Attr::Value(m)) => c.lazy.contains_key(m),
            Some(_) => false,
        };
        let (Some(d), Some(s)) = (k.dfg.ty(r).dtype(), k.dfg.ty(r).shape()) else {
            continue;
        };
        if offsets_ok && mask_ok && s.len() == 2 {
            let bytes = super::memory::shared_tile_bytes(&s, d);
            let bufs = [c.alloc_shared(bytes), c.alloc_shared(bytes)];
            out.push((o, r, bufs));
        }
    }
    out
}

/// A loop whose dot-operand tiles are prefetched one iteration ahead into double buffers
/// (cp.async groups): the body is emitted twice, once reading buffer 0 while buffer 1 fills and
/// once the other way round, so every shared offset stays a constant.
#[allow(clippy::too_many_arguments)]
fn lower_for_pipelined(
    c: &mut Ctx,
    op: &OpData,
    body: Block,
    iv_val: Value,
    iv: Reg,
    hi: Reg,
    step: Reg,
    carried: Vec<Val>,
    pre: Vec<(kir_ir::Op, Value, [u32; 2])>,
) -> Result<(), PtxError> {
    let sp = op.span;
    let k = c.k;
    let fetch = |c: &mut Ctx, at: Reg, buf: usize| -> Result<(), PtxError> {
        for (o, _, offs) in &pre {
            super::memory::prefetch_load(c, &k.dfg.ops[*o], iv_val, at, offs[buf])?;
        }
        Ok(())
    };
    // Prologue: the first iteration's tiles into buffer 0.
    let (p, skip0) = (c.b.reg(RegClass::Pred), c.b.label("pf_skip"));
    c.b.ins("bar.sync 0");
    c.b.ins(format!("setp.ge.s32 {p}, {iv}, {hi}"));
    c.b.ins_if(p, false, format!("bra.uni {skip0}"));
    fetch(c, iv, 0)?;
    c.b.place(&skip0);
    c.b.ins("cp.async.commit_group");
    let (top, end) = (c.b.label("pfor"), c.b.label("endpfor"));
    c.b.place(&top);
    for half in 0..2 {
        let done = c.b.reg(RegClass::Pred);
        c.b.ins(format!("setp.ge.s32 {done}, {iv}, {hi}"));
        c.b.ins_if(done, false, format!("bra.uni {end}"));
        // Fetch the next iteration's tiles into the other buffer while this one computes.
        let (next, pn, skip) = (
            c.b.reg(RegClass::B32),
            c.b.reg(RegClass::Pred),
            c.b.label("pf_skip"),
        );
        c.b.ins(format!("add.s32 {next}, {iv}, {step}"));
        c.b.ins(format!("setp.ge.s32 {pn}, {next}, {hi}"));
        c.b.ins_if(pn, false, format!("bra.uni {skip}"));
        fetch(c, next, 1 - half)?;
        c.b.place(&skip);
        c.b.ins("cp.async.commit_group");
        c.b.ins("cp.async.wait_group 1");
        c.b.ins("bar.sync 0");
        for (_, r, offs) in &pre {
            c.prefetched.insert(*r, offs[half]);
        }
        let yielded = block(c, body)?;
        // Everyone is done reading this buffer before the next iteration refills it.
        c.b.ins("bar.sync 0");
        for (dst, &src) in carried.iter().zip(&yielded) {
            assign(c, dst, src, sp)?;
        }
        c.b.ins(format!("add.s32 {iv}, {iv}, {step}"));
    }
    c.b.ins(format!("bra.uni {top}"));
    c.b.place(&end);
    c.b.ins("cp.async.wait_group 0");
    for (_, r, _) in &pre {
        c.prefetched.remove(r);
    }
    for (&r, v) in op.results.iter().zip(carried) {
        c.vals.insert(r, v);
    }
    Ok(())
}

fn scalar(c: &mut Ctx, v: Value, sp: Span) -> Result<Reg, PtxError> {
    match c.val(v, sp)? {
        Val::Scalar(r) => Ok(r),
        _ => Err(PtxError::at(sp, "expected a scalar")),
    }
}

fn lower_if(c: &mut Ctx, op: &OpData) -> Result<(), PtxError> {
    let sp = op.span;
    let cond = scalar(
        c,
        *op.operands
            .first()
            .ok_or_else(|| PtxError::at(sp, "if needs a condition"))?,
        sp,
    )?;
    // Results get registers in their assigned places.
    let mut outs = Vec::new();
    for &r in &op.results {
        let d = dtype(c, r);
        let v = match place(c, r) {
            Place::Reg(l) => {
                let s = shape(c, r);
                let n = super::layout::slots(l, &s, c.blk);
                let regs = (0..n).map(|_| c.reg(d)).collect();
                Val::Tile {
                    layout: l,
                    shape: s,
                    dtype: d,
                    regs,
                }
            }
            _ => Val::Scalar(c.reg(d)),
        };
        outs.push(v);
    }
    let (els, end) = (c.b.label("else"), c.b.label("endif"));
    c.b.ins_if(cond, true, format!("bra.uni {els}"));
    for (i, &r) in op.regions.iter().enumerate() {
        let y = block(c, r)?;
        for (dst, &src) in outs.iter().zip(&y) {
            assign(c, dst, src, sp)?;
        }
        if i == 0 {
            c.b.ins(format!("bra.uni {end}"));
            c.b.place(&els);
        }
    }
    if op.regions.len() < 2 {
        c.b.place(&els);
    }
    c.b.place(&end);
    for (&r, v) in op.results.iter().zip(outs) {
        c.vals.insert(r, v);
    }
    Ok(())
}
