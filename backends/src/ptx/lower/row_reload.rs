//! Row vectors broadcast into accumulator tiles, loaded where they are used.
//!
//! A `[1, N]` tile broadcast along the rows of an `[M, N]` tile in the mma accumulator layout
//! (`RowMma`) needs, in each thread, the values of the N / 4 columns that thread holds. The
//! vector itself is loaded in the `Blocked` layout (spread over the block's threads), so the
//! general conversion goes through shared memory: a store, a block barrier, a load per slot and
//! another barrier before the buffer is reused. attention_bwd's key-major dK/dV kernel does
//! that twice per query block (lse and delta, whose queries are the accumulator's columns), four
//! block barriers per step (call Y12, docs/benchmarks.md).
//!
//! When the broadcast's operand is a chain of `reshape`s and elementwise ops with scalar
//! operands over a `load` of an `in` tensor (read-only for the whole launch, so reading it again
//! later sees the same values) with no `mask`, each thread instead loads the columns it holds
//! straight from global memory (the load's own bounds and `other`, by `elem::element`), applies
//! the chain to each, and deals them to its slots: no shared memory and no barrier. The vector is
//! small and every warp reads the same bytes, so the loads hit in L1.

use super::arith::scalar_op;
use super::ctx::{constant, dtype, Ctx, Val};
use super::elem::{element, load_elem, offsets};
use super::PtxError;
use crate::ptx::emit::Reg;
use crate::ptx::plan::layout::{rowmma_slot, rows_cols, Layout};
use kir_ir::{Access, OpData, Opcode, ParamKind, Span, Value, ValueDef};

/// The registers of `broadcast(src)` as an `[M, N]` tile of `shape` in `RowMma`, loaded per
/// column as the module doc says; `None` when `src` is not such a chain.
pub(super) fn reload(
    c: &mut Ctx,
    src: Value,
    shape: &[usize],
    sp: Span,
) -> Result<Option<Vec<Reg>>, PtxError> {
    let (m, n) = rows_cols(shape);
    let src_shape = c.k.dfg.ty(src).shape().unwrap_or_default();
    if shape.len() != 2 || m <= 1 || n % 8 != 0 || rows_cols(&src_shape) != (1, n) {
        return Ok(None);
    }
    let Some((load, chain)) = chain_of(c, src) else {
        return Ok(None);
    };
    let k = c.k;
    let lop = &k.dfg.ops[load];
    let Some(t) = lop.tensor.as_ref() else {
        return Ok(None);
    };
    let Some(info) = c.params.tensors.get(&t.param).cloned() else {
        return Ok(None);
    };
    let d = info.dtype;
    let other = crate::ptx::plan::ir::lit(lop.attr("other")).unwrap_or(0.0);
    let load_rank = k
        .dfg
        .ty(lop.results[0])
        .shape()
        .map(|s| s.len())
        .unwrap_or(0);
    let offs = offsets(c, t, sp)?;
    let coords = c.coords(Layout::RowMma, shape);
    // One load per distinct column offset of the thread's slots.
    let mut by_col: Vec<(usize, Reg)> = Vec::new();
    let mut regs = Vec::with_capacity(coords.len());
    for (s, sc) in coords.iter().enumerate() {
        let key = rowmma_slot(shape, s).1;
        if let Some(&(_, r)) = by_col.iter().find(|(kk, _)| *kk == key) {
            regs.push(r);
            continue;
        }
        let col = sc.idx[1];
        let coord = if load_rank == 2 {
            vec![c.b.imm32(0), col]
        } else {
            vec![col]
        };
        let (addr, inb) = element(c, &info, &offs, &coord);
        let mut r = constant(c, d, other);
        load_elem(c, d, r, addr, inb);
        for &o in &chain {
            r = apply(c, &k.dfg.ops[o], r, sp)?;
        }
        by_col.push((key, r));
        regs.push(r);
    }
    Ok(Some(regs))
}

/// The `load` at the root of `v`'s chain and the chain's ops from the load's user up to `v`'s
/// definition, when every link is a `reshape` or an elementwise op whose other operands are
/// scalars, and the load reads an `in` tensor with no `mask`.
fn chain_of(c: &Ctx, v: Value) -> Option<(kir_ir::Op, Vec<kir_ir::Op>)> {
    let k = c.k;
    let mut chain = Vec::new();
    let mut cur = v;
    for _ in 0..8 {
        let ValueDef::Result(o, _) = k.dfg.values[cur].def else {
            return None;
        };
        let od = &k.dfg.ops[o];
        match od.opcode {
            Opcode::Load => {
                let t = od.tensor.as_ref()?;
                let read_only = k
                    .param(&t.param)
                    .is_some_and(|p| matches!(p.kind, ParamKind::Tensor(Access::In, _)));
                if !read_only || od.attr("mask").is_some() {
                    return None;
                }
                chain.reverse();
                return Some((o, chain));
            }
            Opcode::Reshape => {}
            kir_ir::elementwise_ops!() => {
                let tiles = od
                    .operands
                    .iter()
                    .filter(|&&a| !k.dfg.ty(a).is_scalar())
                    .count();
                if tiles != 1 || od.results.len() != 1 {
                    return None;
                }
            }
            _ => return None,
        }
        chain.push(o);
        cur = *od.operands.iter().find(|&&a| !k.dfg.ty(a).is_scalar())?;
    }
    None
}

/// One link of the chain on the element in `x`.
fn apply(c: &mut Ctx, od: &OpData, x: Reg, sp: Span) -> Result<Reg, PtxError> {
    if od.opcode == Opcode::Reshape {
        return Ok(x);
    }
    let mut args = Vec::with_capacity(od.operands.len());
    for &a in &od.operands {
        if c.k.dfg.ty(a).is_scalar() {
            match c.val(a, sp)? {
                Val::Scalar(r) => args.push(r),
                _ => return Err(PtxError::at(sp, "internal: a scalar operand")),
            }
        } else {
            args.push(x);
        }
    }
    let operand = od
        .operands
        .first()
        .map(|&a| dtype(c, a))
        .unwrap_or(kir_ir::Dtype::F32);
    let result = dtype(c, od.results[0]);
    scalar_op(c, od, operand, result, &args)
}
