//! Reads of the row vectors that a TMA ring carries beside its tiles (`bulk_copy.rs` copies
//! them): `smem_read` of such a stage is the stage in place (`Val::Shared`, whose stage may be a
//! run-time value, so a ring with row vectors still need not be unrolled: `sched::dynamic_ring`);
//! a `reshape` to one row is a view of it; a `broadcast` of it into a `RowMma` tile reads the
//! columns its thread holds from the stage where the broadcast stands (right after the stage's
//! wait, at the top of attention_bwd's loop body), one `ld.shared.v2.b32` per column pair
//! (2q + 8j, 2q + 8j + 1): no global load's latency stands between the score dot and the
//! vector's first use, since the vector landed with the stage's tiles. Reading at each use
//! instead (no register holding the vector across the dots) ran 4–8 % slower (call T2 of
//! 2026-12-07, docs/benchmarks.md): each read sat between a dot's wait and the math after it.

use super::ctx::{Ctx, Val};
use super::PtxError;
use crate::ptx::emit::{PtxInst, Reg, RegClass};
use crate::ptx::plan::layout::{rowmma_slot, rows_cols, Layout};
use kir_ir::Span;

/// The broadcast of `src` (a one-row `Val::Shared` of 32-bit elements: a ring stage) into a
/// `RowMma` tile of `shape`, read from the stage here (module doc); `None` when `src` is not
/// such a row.
pub(super) fn broadcast(
    c: &mut Ctx,
    src: &Val,
    shape: &[usize],
    sp: Span,
) -> Result<Option<Val>, PtxError> {
    let Val::Shared {
        off,
        dyn_off,
        shape: [1, n],
        dtype,
        col_stride: 1,
        ..
    } = *src
    else {
        return Ok(None);
    };
    let (m, ncols) = rows_cols(shape);
    if shape.len() != 2 || m <= 1 || ncols != n || n % 8 != 0 || dtype.size_bytes() != 4 {
        return Ok(None);
    }
    let shape = shape.to_vec();
    let coords = c.coords(Layout::RowMma, &shape);
    // The thread's distinct columns (slot column offset, column register), in slot order.
    let mut cols: Vec<(usize, Reg)> = Vec::new();
    for (s, sc) in coords.iter().enumerate() {
        let key = rowmma_slot(&shape, s).1;
        if !cols.iter().any(|(kk, _)| *kk == key) {
            cols.push((key, sc.idx[1]));
        }
    }
    let at = |c: &mut Ctx, col: Reg| {
        let rel = c.b.reg(RegClass::B32);
        c.b.ins(PtxInst::new("mul.lo.s32").op(rel).op(col).op(4));
        let a = c.shared_at(off, rel);
        c.plus_dyn(a, dyn_off)
    };
    let pairs = cols
        .iter()
        .enumerate()
        .all(|(i, &(kk, _))| kk == 8 * (i / 2) + i % 2);
    let regs: Vec<Reg> = cols.iter().map(|_| c.reg(dtype)).collect();
    if pairs {
        let a = at(c, cols[0].1);
        for (j, pair) in regs.chunks(2).enumerate() {
            c.b.ins(
                PtxInst::new("ld.shared.v2.b32")
                    .vec([pair[0], pair[1]])
                    .addr_off(a, 32 * j),
            );
        }
    } else {
        for (&(_, col), &r) in cols.iter().zip(&regs) {
            let a = at(c, col);
            c.b.ins(PtxInst::new("ld.shared.b32").op(r).addr(a));
        }
    }
    let slots = (0..coords.len())
        .map(|s| {
            let key = rowmma_slot(&shape, s).1;
            cols.iter().position(|(kk, _)| *kk == key).map(|i| regs[i])
        })
        .collect::<Option<Vec<Reg>>>()
        .ok_or_else(|| PtxError::at(sp, "internal: a slot without its column"))?;
    Ok(Some(Val::Tile {
        layout: Layout::RowMma,
        shape,
        dtype,
        regs: slots,
    }))
}
