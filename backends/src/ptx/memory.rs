//! Global memory (load, store, atomic_add with predication for bounds, masks and `guard`) and
//! the loading of dot operands straight into shared memory.
//!
//! GPU code never touches memory out of bounds: an element outside the tensor reads `other`
//! (or 0 when the op has no `other`) and is skipped by stores. The interpreter reports such
//! unguarded accesses as errors; on the GPU they are suppressed, never undefined.

use super::builder::{Reg, RegClass};
use super::ctx::{smem_bytes, Ctx, SlotCoord, TensorInfo, Val};
use super::layout::{Layout, Place};
use super::lower::{lit, regs_in, round};
use super::PtxError;
use kir_ir::{Attr, Dtype, ExprKind, Offset, OpData, Opcode, Span, TensorRef};

/// The PTX type used to move one element of `d` to or from global memory.
fn gty(d: Dtype) -> &'static str {
    match d {
        Dtype::F32 => "f32",
        Dtype::F16 | Dtype::Bf16 => "b16",
        Dtype::I32 => "s32",
        Dtype::I64 => "s64",
        Dtype::U8 | Dtype::I1 => "u8",
    }
}

/// Offsets as b32 registers.
fn offsets(c: &mut Ctx, t: &TensorRef, sp: Span) -> Result<Vec<Reg>, PtxError> {
    let mut out = Vec::new();
    for o in &t.offsets {
        out.push(match o {
            Offset::Value(v) => match c.val(*v, sp)? {
                Val::Scalar(r) if r.class == RegClass::B64 => {
                    let n = c.b.reg(RegClass::B32);
                    c.b.ins(format!("cvt.u32.u64 {n}, {r}"));
                    n
                }
                Val::Scalar(r) => r,
                _ => return Err(PtxError::at(sp, "a tensor offset must be a scalar")),
            },
            Offset::Expr(e) => match &e.kind {
                ExprKind::Int(i) => c.b.imm32(*i),
                _ => c.expr(e)?,
            },
        });
    }
    Ok(out)
}

/// For one element: the address and the in-bounds predicate. `coord` indexes the trailing dims.
fn element(c: &mut Ctx, info: &TensorInfo, offs: &[Reg], coord: &[Reg]) -> (Reg, Reg) {
    let rank = offs.len();
    let lead = rank - coord.len();
    let esize = info.dtype.size_bytes();
    let inb = c.b.reg(RegClass::Pred);
    let addr = c.b.reg(RegClass::B64);
    c.b.ins(format!("mov.b64 {addr}, {}", info.ptr));
    let mut first = true;
    for d in 0..rank {
        let idx = if d >= lead {
            let i = c.b.reg(RegClass::B32);
            c.b.ins(format!("add.s32 {i}, {}, {}", offs[d], coord[d - lead]));
            i
        } else {
            offs[d]
        };
        let p = c.b.reg(RegClass::Pred);
        c.b.ins(format!("setp.lt.u32 {p}, {idx}, {}", info.dims[d]));
        if first {
            c.b.ins(format!("mov.pred {inb}, {p}"));
            first = false;
        } else {
            c.b.ins(format!("and.pred {inb}, {inb}, {p}"));
        }
        let lin = c.b.reg(RegClass::B32);
        c.b.ins(format!("mul.lo.s32 {lin}, {idx}, {}", info.strides[d]));
        let w = c.b.reg(RegClass::B64);
        c.b.ins(format!("mul.wide.s32 {w}, {lin}, {esize}"));
        c.b.ins(format!("add.s64 {addr}, {addr}, {w}"));
    }
    if first {
        c.b.ins(format!("setp.eq.u32 {inb}, 0, 0"));
    }
    (addr, inb)
}

/// Loads one element of `dtype` at `addr` into `dst` when `p`, converting to the register form.
fn load_elem(c: &mut Ctx, d: Dtype, dst: Reg, addr: Reg, p: Reg) {
    match d {
        Dtype::F16 | Dtype::Bf16 => {
            let h = c.b.reg(RegClass::B16);
            c.b.ins_if(p, false, format!("ld.global.b16 {h}, [{addr}]"));
            let t = if d == Dtype::F16 { "f16" } else { "bf16" };
            c.b.ins_if(p, false, format!("cvt.f32.{t} {dst}, {h}"));
        }
        Dtype::I1 => {
            let t = c.b.reg(RegClass::B32);
            c.b.ins(format!("mov.b32 {t}, 0"));
            c.b.ins_if(p, false, format!("ld.global.u8 {t}, [{addr}]"));
            let q = c.b.reg(RegClass::Pred);
            c.b.ins(format!("setp.ne.u32 {q}, {t}, 0"));
            c.b.ins_if(p, false, format!("mov.pred {dst}, {q}"));
        }
        Dtype::F32 | Dtype::I32 | Dtype::I64 | Dtype::U8 => {
            c.b.ins_if(p, false, format!("ld.global.{} {dst}, [{addr}]", gty(d)));
        }
    }
}

/// A register holding the bits to store for `src` of dtype `d`.
fn store_bits(c: &mut Ctx, d: Dtype, src: Reg) -> Reg {
    match d {
        Dtype::F16 | Dtype::Bf16 => {
            let h = c.b.reg(RegClass::B16);
            let t = if d == Dtype::F16 { "f16" } else { "bf16" };
            c.b.ins(format!("cvt.rn.{t}.f32 {h}, {src}"));
            h
        }
        Dtype::I1 => {
            let t = c.b.reg(RegClass::B32);
            c.b.ins(format!("selp.b32 {t}, 1, 0, {src}"));
            t
        }
        Dtype::F32 | Dtype::I32 | Dtype::I64 | Dtype::U8 => src,
    }
}

fn mask_regs(
    c: &mut Ctx,
    op: &OpData,
    layout: Option<Layout>,
    shape: &[usize],
) -> Result<Option<Vec<Reg>>, PtxError> {
    match op.attr("mask") {
        Some(Attr::Value(m)) => Ok(Some(match layout {
            Some(l) => regs_in(c, *m, l, shape, op.span)?,
            None => match c.val(*m, op.span)? {
                Val::Scalar(r) => vec![r],
                _ => return Err(PtxError::at(op.span, "a scalar access needs a scalar mask")),
            },
        })),
        _ => Ok(None),
    }
}

fn and_pred(c: &mut Ctx, a: Reg, b: Option<Reg>) -> Reg {
    match b {
        None => a,
        Some(b) => {
            let p = c.b.reg(RegClass::Pred);
            c.b.ins(format!("and.pred {p}, {a}, {b}"));
            p
        }
    }
}

/// Lowers load, store and atomic_add.
pub fn lower_memory_op(c: &mut Ctx, op: &OpData) -> Result<(), PtxError> {
    let sp = op.span;
    let t = op
        .tensor
        .as_ref()
        .ok_or_else(|| PtxError::at(sp, "memory op without a tensor"))?;
    let info = c
        .tensors
        .get(&t.param)
        .cloned()
        .ok_or_else(|| PtxError::at(sp, format!("unknown tensor `{}`", t.param)))?;
    let offs = offsets(c, t, sp)?;
    match op.opcode {
        Opcode::Load => {
            let v = *op
                .results
                .first()
                .ok_or_else(|| PtxError::at(sp, "load without a result"))?;
            let d = info.dtype;
            let other = lit(op.attr("other")).unwrap_or(0.0);
            let shape = c.k.dfg.ty(v).shape().unwrap_or_default();
            match c.places.get(&v).copied().unwrap_or(Place::Scalar) {
                Place::Scalar => {
                    let r = super::lower::constant(c, d, other);
                    let (addr, inb) = element(c, &info, &offs, &[]);
                    let m = mask_regs(c, op, None, &shape)?.map(|m| m[0]);
                    let p = and_pred(c, inb, m);
                    load_elem(c, d, r, addr, p);
                    c.vals.insert(v, Val::Scalar(r));
                }
                Place::Reg(l) => {
                    let coords = c.coords(l, &shape);
                    let masks = mask_regs(c, op, Some(l), &shape)?;
                    let mut regs = Vec::with_capacity(coords.len());
                    for (i, sc) in coords.iter().enumerate() {
                        let r = super::lower::constant(c, d, other);
                        let (addr, inb) = element(c, &info, &offs, &sc.idx);
                        let p = and_pred(c, inb, masks.as_ref().map(|m| m[i]));
                        let p = and_pred(c, p, sc.valid);
                        load_elem(c, d, r, addr, p);
                        regs.push(r);
                    }
                    c.vals.insert(
                        v,
                        Val::Tile {
                            layout: l,
                            shape,
                            dtype: d,
                            regs,
                        },
                    );
                }
                Place::Shared => {
                    let val = load_shared(c, op, &info, &offs, &shape, other)?;
                    c.vals.insert(v, val);
                }
            }
        }
        Opcode::Store | Opcode::AtomicAdd => {
            let src = *op
                .operands
                .first()
                .ok_or_else(|| PtxError::at(sp, "store needs a value"))?;
            let d = info.dtype;
            let (regs, coords, owner, shape): (Vec<Reg>, Vec<SlotCoord>, Option<Reg>, Vec<usize>) =
                match c.val(src, sp)? {
                    Val::Scalar(r) => (
                        vec![r],
                        vec![SlotCoord {
                            idx: vec![],
                            valid: None,
                        }],
                        None,
                        vec![],
                    ),
                    Val::Tile {
                        layout,
                        shape,
                        regs,
                        ..
                    } => {
                        let coords = c.coords(layout, &shape);
                        let owner = (layout == Layout::RowMma
                            && super::layout::rows_cols(&shape).1 == 1)
                            .then_some(c.quad_leader);
                        (regs, coords, owner, shape)
                    }
                    other @ Val::Shared { .. } => {
                        let t = super::tile::convert(c, &other, Layout::Blocked, sp)?;
                        let Val::Tile { regs, shape, .. } = t else {
                            return Err(PtxError::at(sp, "internal: conversion"));
                        };
                        (regs, c.coords(Layout::Blocked, &shape), None, shape)
                    }
                };
            let layout = match c.val(src, sp)? {
                Val::Tile { layout, .. } => Some(layout),
                Val::Scalar(_) => None,
                Val::Shared { .. } => Some(Layout::Blocked),
            };
            let masks = mask_regs(c, op, layout, &shape)?;
            for (i, sc) in coords.iter().enumerate() {
                let (addr, inb) = element(c, &info, &offs, &sc.idx);
                let mut p = and_pred(c, inb, masks.as_ref().map(|m| m[i]));
                p = and_pred(c, p, sc.valid);
                p = and_pred(c, p, owner);
                let bits = store_bits(c, d, regs[i]);
                if op.opcode == Opcode::Store {
                    c.b.ins_if(p, false, format!("st.global.{} [{addr}], {bits}", gty(d)));
                } else {
                    if i == 0 && coords.len() == 1 && shape.is_empty() {
                        // A scalar atomic from every thread would add once per thread.
                        let first = c.b.reg(RegClass::Pred);
                        c.b.ins(format!("setp.eq.u32 {first}, {}, 0", c.tid));
                        p = and_pred(c, p, Some(first));
                    }
                    let red = match d {
                        Dtype::F32 => "red.global.add.f32".to_string(),
                        Dtype::F16 => "red.global.add.noftz.f16".to_string(),
                        Dtype::Bf16 if c.target != crate::target::Target::Sm80 => {
                            "red.global.add.noftz.bf16".to_string()
                        }
                        Dtype::I32 => "red.global.add.s32".to_string(),
                        Dtype::I64 => "red.global.add.u64".to_string(),
                        Dtype::Bf16 | Dtype::U8 | Dtype::I1 => {
                            return Err(PtxError::at(
                                sp,
                                format!(
                                    "atomic_add on {d} is not supported by the PTX backend on {}",
                                    c.target.name()
                                ),
                            ))
                        }
                    };
                    c.b.ins_if(p, false, format!("{red} [{addr}], {bits}"));
                }
            }
        }
        _ => return Err(PtxError::at(sp, "internal: not a memory op")),
    }
    Ok(())
}

/// Loads a rank-2 tile into its own shared-memory region (rows padded by 16 bytes so mma
/// fragment reads are conflict-free), synchronizing the block before and after.
fn load_shared(
    c: &mut Ctx,
    op: &OpData,
    info: &TensorInfo,
    offs: &[Reg],
    shape: &[usize],
    other: f64,
) -> Result<Val, PtxError> {
    let sp = op.span;
    let d = info.dtype;
    let eb = smem_bytes(d);
    let (rows, cols) = (shape[0], shape[1]);
    let rs = cols + 16 / eb;
    let off = c.alloc_shared((rows * rs * eb) as u32);
    let coords = c.coords(Layout::Blocked, shape);
    let masks = mask_regs(c, op, Some(Layout::Blocked), shape)?;
    c.b.ins("bar.sync 0");
    for (i, sc) in coords.iter().enumerate() {
        let r = super::lower::constant(c, d, other);
        let (addr, inb) = element(c, info, offs, &sc.idx);
        let p = and_pred(c, inb, masks.as_ref().map(|m| m[i]));
        load_elem(c, d, r, addr, p);
        let sa = c.smem_addr(off, &sc.idx, rs, 1, eb);
        let st = |s: &str| format!("st.shared.{s} [{sa}], ");
        match d {
            Dtype::F16 | Dtype::Bf16 => {
                let h = c.b.reg(RegClass::B16);
                let t = if d == Dtype::F16 { "f16" } else { "bf16" };
                c.b.ins(format!("cvt.rn.{t}.f32 {h}, {r}"));
                c.b.ins_if_opt(sc.valid, format!("{}{h}", st("b16")));
            }
            Dtype::F32 | Dtype::I32 | Dtype::U8 => {
                c.b.ins_if_opt(sc.valid, format!("{}{r}", st("b32")))
            }
            Dtype::I64 | Dtype::I1 => {
                return Err(PtxError::at(
                    sp,
                    format!("a {d} tile cannot be a dot operand"),
                ))
            }
        }
    }
    c.b.ins("bar.sync 0");
    let _ = round;
    Ok(Val::Shared {
        off,
        shape: [rows, cols],
        dtype: d,
        row_stride: rs,
        col_stride: 1,
    })
}
