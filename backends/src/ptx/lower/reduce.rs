//! `reduce`: the row reduction of an mma-accumulator (`RowMma`) tile in registers with two quad
//! shuffles (FlashAttention-2's softmax statistics), the `Blocked` row reduction of
//! `rows::reduce_blocked_rows` (warp shuffles and one exchange), and the generic path through
//! the scratch region, where each output element folds its line in ascending order. The
//! combine / identity / butterfly-shuffle steps they share are in `arith.rs`.

use super::arith::{combine, shfl_combine};
use super::convert::{convert, read_scratch, spill};
use super::ctx::round;
use super::ctx::{class_of, Ctx, Val};
use super::values::regs_in;
use super::PtxError;
use crate::ptx::emit::{PtxInst, Reg, RegClass};
use crate::ptx::plan::layout::{self, Layout};
use kir_ir::{Dtype, OpData};

/// The registers of the result of `reduce` op `op` along `axis`, a tile of `shape` in `l`.
pub(super) fn reduce(
    c: &mut Ctx,
    op: &OpData,
    axis: usize,
    l: Layout,
    shape: &[usize],
    d: Dtype,
) -> Result<Vec<Reg>, PtxError> {
    let sp = op.span;
    let kind = op
        .reduce_kind()
        .ok_or_else(|| PtxError::at(sp, "reduce needs a kind"))?;
    let a = *op
        .operands
        .first()
        .ok_or_else(|| PtxError::at(sp, "reduce needs an operand"))?;
    let ss = c.k.dfg.ty(a).shape().unwrap_or_default();
    // Fast path: a row reduction of a RowMma tile stays in registers (quad shuffles).
    if l == Layout::RowMma && axis == 1 && ss.len() == 2 && d != Dtype::I1 && d != Dtype::I64 {
        let src = regs_in(c, a, Layout::RowMma, &ss, sp)?;
        let nfs = ss[1] / 8;
        let rows = layout::slots(Layout::RowMma, shape, c.plan.blk);
        let mut out = Vec::new();
        for rs in 0..rows {
            let (mf, h) = (rs / 2, rs % 2);
            let acc = c.reg(d);
            let mut first = true;
            for nf in 0..nfs {
                for cc in 0..2 {
                    let r = src[(mf * nfs + nf) * 4 + h * 2 + cc];
                    if first {
                        let m = if class_of(d) == RegClass::F32 {
                            "mov.f32"
                        } else {
                            "mov.b32"
                        };
                        c.b.ins(PtxInst::new(m).op(acc).op(r));
                        first = false;
                    } else {
                        combine(c, kind, d, acc, r);
                    }
                }
            }
            // A row sum its loop keeps as quad partials is reduced where the loop ends
            // (plan/lazy_sum.rs, `quad_sum` below).
            if !op
                .results
                .first()
                .is_some_and(|r| c.plan.lazy.partial.contains(r))
            {
                for lane_mask in [1, 2] {
                    shfl_combine(c, kind, d, acc, lane_mask);
                }
            }
            round(c, d, acc);
            out.push(acc);
        }
        return Ok(out);
    }
    if let Some(out) = super::rows::reduce_blocked_rows(c, kind, op, axis, l, shape, &ss, d, sp)? {
        return Ok(out);
    }
    // Generic: spill, then each output element folds its line in ascending order.
    let src = c.val(a, sp)?;
    let src = match src {
        Val::Tile { .. } => src,
        other => convert(c, &other, Layout::Blocked, sp)?,
    };
    let Val::Tile {
        layout: sl,
        regs: sr,
        ..
    } = src
    else {
        return Err(PtxError::at(sp, "internal: reduce source"));
    };
    spill(c, sl, &ss, d, &sr);
    let coords = c.coords(l, shape);
    let stride: usize = ss[axis + 1..].iter().product();
    let mut out = Vec::new();
    for sc in &coords {
        let start = c.linear(&sc.idx, &ss);
        let acc = read_scratch(c, d, start, sc.valid);
        if ss[axis] > 1 {
            let (k, p) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::Pred));
            let (top, end) = (c.b.label("red"), c.b.label("endred"));
            let lin = c.b.reg(RegClass::B32);
            c.b.ins(PtxInst::new("mov.b32").op(k).op(1));
            c.b.ins(PtxInst::new("mov.b32").op(lin).op(start));
            c.b.place(&top);
            c.b.ins(PtxInst::new("setp.ge.s32").op(p).op(k).op(ss[axis]));
            c.b.ins_if(p, false, PtxInst::new("bra.uni").op(&end));
            c.b.ins(PtxInst::new("add.s32").op(lin).op(lin).op(stride));
            let x = read_scratch(c, d, lin, sc.valid);
            combine(c, kind, d, acc, x);
            c.b.ins(PtxInst::new("add.s32").op(k).op(k).op(1));
            c.b.ins(PtxInst::new("bra.uni").op(&top));
            c.b.place(&end);
        }
        round(c, d, acc);
        out.push(acc);
    }
    Ok(out)
}

/// Reduces the f32 registers `regs` of a row vector held as quad partials over the quad's four
/// lanes (two butterfly shuffles each): the end of the loop that carried them (plan/lazy_sum.rs).
pub(super) fn quad_sum(c: &mut Ctx, regs: &[Reg]) {
    for &r in regs {
        for lane_mask in [1, 2] {
            shfl_combine(c, kir_ir::ReduceKind::Sum, Dtype::F32, r, lane_mask);
        }
    }
}
