//! Reading lowered values: [`Ctx::val`], the registers of a value in the layout a use needs
//! ([`regs_in`]), and lazy index and mask tiles recomputed at their uses (per slot or per
//! run-time coordinate, `lazy.rs` decides which ops are lazy). Elementwise ops are here too
//! (their operands and their scalar op per slot): a lazy tile is materialized by re-running its
//! elementwise chain, which reads its operands as any use does.

use super::arith::scalar_op;
use super::convert::convert;
use super::ctx::{dtype, place, shape};
use super::ctx::{Ctx, Val};
use super::lazy::is_lazy_tile;
use super::PtxError;
use crate::ptx::emit::{PtxInst, Reg, RegClass};
use crate::ptx::plan::layout::{Layout, Place};
use kir_ir::{Attr, Dtype, OpData, Opcode, Span, Value};

impl Ctx<'_> {
    /// The lowered form of `v`.
    pub fn val(&mut self, v: Value, span: Span) -> Result<Val, PtxError> {
        if let Some(&o) = self.values.lazy.get(&v) {
            return materialize(self, o);
        }
        if let Some(cv) = self.values.compact.get(&v).cloned() {
            return super::row_compact::expand(self, &cv, span);
        }
        if let Some(x) = self.values.vals.get(&v) {
            return Ok(x.clone());
        }
        match self.values.statics.get(&v) {
            // A known scalar lives in a register set in the prologue, one per value (so it
            // dominates every use, wherever it is first used).
            Some(&x) => {
                let pred = self.k.dfg.ty(v).dtype() == Some(Dtype::I1);
                let x = if pred {
                    (x != 0) as i64
                } else {
                    x as i32 as i64
                };
                if let Some(&r) = self.values.imms.get(&(pred, x)) {
                    return Ok(Val::Scalar(r));
                }
                let r = self.b.in_prologue(|b| {
                    if pred {
                        let p = b.reg(RegClass::Pred);
                        b.ins(PtxInst::new("setp.ne.u32").op(p).op(x).op(0));
                        p
                    } else {
                        b.imm32(x)
                    }
                });
                self.values.imms.insert((pred, x), r);
                Ok(Val::Scalar(r))
            }
            None => Err(PtxError::at(
                span,
                format!("internal: value {v} was not lowered"),
            )),
        }
    }
}

/// Computes a lazy value at the current point.
pub fn materialize(c: &mut Ctx, o: kir_ir::Op) -> Result<Val, PtxError> {
    let k = c.k;
    let op = &k.dfg.ops[o];
    match op.opcode {
        Opcode::Iota => iota_val(c, op),
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

/// The element of lazy tile `v` at tile coordinates `idx` (registers, possibly computed at run
/// time), by re-running its elementwise chain for that element.
pub fn coord_value(c: &mut Ctx, v: Value, idx: &[Reg], sp: Span) -> Result<Reg, PtxError> {
    let Some(&o) = c.values.lazy.get(&v) else {
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

/// The registers of `v` in `layout` with the result's `shape` (scalars replicate; tiles in
/// another layout or in shared memory are converted).
pub fn regs_in(
    c: &mut Ctx,
    v: Value,
    layout: Layout,
    shape: &[usize],
    span: Span,
) -> Result<Vec<Reg>, PtxError> {
    let n = crate::ptx::plan::layout::slots(layout, shape, c.plan.blk);
    // A lazy index/mask tile is computed directly in the layout asked for: no conversion.
    if c.values.lazy.contains_key(&v) && c.k.dfg.ty(v).shape().as_deref() == Some(shape) {
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
            let t = convert(c, &other, layout, span)?;
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

/// The operands of an elementwise op, read in its result's place: one register per slot of the
/// result for each operand (one register each for a scalar op).
pub(super) struct Elementwise {
    /// The result's layout (`None` for a scalar op).
    pub layout: Option<Layout>,
    /// The result's shape (empty for a scalar op).
    pub shape: Vec<usize>,
    /// The registers of each operand, one per slot of the result.
    pub ins: Vec<Vec<Reg>>,
    /// The slots of the result.
    n: usize,
    /// The operands' dtype (the first operand's) and the result's.
    od: Dtype,
    rd: Dtype,
}

/// Reads the operands of elementwise op `op` in its result's place.
pub(super) fn elementwise_operands(c: &mut Ctx, op: &OpData) -> Result<Elementwise, PtxError> {
    let sp = op.span;
    let v = res_of(op.results.first().copied(), sp)?;
    let rd = dtype(c, v);
    let od = op.operands.first().map(|&a| dtype(c, a)).unwrap_or(rd);
    let (layout, s, n) = match place(c, v) {
        Place::Scalar => (None, vec![], 1),
        Place::Reg(l) => {
            let s = shape(c, v);
            let n = crate::ptx::plan::layout::slots(l, &s, c.plan.blk);
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
    Ok(Elementwise {
        layout,
        shape: s,
        ins,
        n,
        od,
        rd,
    })
}

impl Elementwise {
    /// The result of `op` on these operands: its scalar op once per slot.
    pub(super) fn apply(self, c: &mut Ctx, op: &OpData) -> Result<Val, PtxError> {
        let mut out = Vec::with_capacity(self.n);
        for i in 0..self.n {
            let args: Vec<Reg> = self.ins.iter().map(|r| r[i]).collect();
            out.push(scalar_op(c, op, self.od, self.rd, &args)?);
        }
        Ok(match self.layout {
            None => Val::Scalar(out[0]),
            Some(l) => Val::Tile {
                layout: l,
                shape: self.shape,
                dtype: self.rd,
                regs: out,
            },
        })
    }
}

/// The result of elementwise op `op`: its operands in its result's place, its scalar op once
/// per slot.
pub(super) fn elementwise_val(c: &mut Ctx, op: &OpData) -> Result<Val, PtxError> {
    elementwise_operands(c, op)?.apply(c, op)
}

/// The result of `op`, or an internal error if it has none.
pub(super) fn res_of(r: Option<Value>, sp: Span) -> Result<Value, PtxError> {
    r.ok_or_else(|| PtxError::at(sp, "internal: op has no result"))
}

/// The register layout the plan gives result `v` (an error for a value not in registers).
pub(super) fn result_layout(c: &Ctx, v: Value, sp: Span) -> Result<Layout, PtxError> {
    match c.plan.places.get(&v) {
        Some(Place::Reg(l)) => Ok(*l),
        _ => Err(PtxError::at(sp, "internal: expected a register tile")),
    }
}

/// An iota tile in its assigned layout.
pub fn iota_val(c: &mut Ctx, op: &OpData) -> Result<Val, PtxError> {
    let sp = op.span;
    let v = *op
        .results
        .first()
        .ok_or_else(|| PtxError::at(sp, "missing result"))?;
    let d = c.k.dfg.ty(v).dtype().unwrap_or(Dtype::I32);
    let shape = c.k.dfg.ty(v).shape().unwrap_or_default();
    let l = result_layout(c, v, sp)?;
    let axis = match op.attr("axis") {
        Some(Attr::Expr(e)) => e.as_int().unwrap_or(0) as usize,
        _ => 0,
    };
    let coords = c.coords(l, &shape);
    let regs = coords
        .iter()
        .map(|sc| {
            let i = sc.idx.get(axis).copied().unwrap_or(sc.idx[0]);
            if d == Dtype::I64 {
                let r = c.b.reg(RegClass::B64);
                c.b.ins(PtxInst::new("cvt.u64.u32").op(r).op(i));
                r
            } else {
                i
            }
        })
        .collect();
    Ok(Val::Tile {
        layout: l,
        shape,
        dtype: d,
        regs,
    })
}
