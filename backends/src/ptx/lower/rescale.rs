//! Skipping exact no-op rescales. `acc · broadcast(alpha)` on an mma-accumulator tile (the online
//! softmax's correction of its running output, FlashAttention's `acc *= exp2(m_old − m_new)`)
//! is the identity whenever every row factor of the warp is exactly 1.0 — the running maximum
//! did not move — which, for long sequences, is almost every key block. The warp votes on it and
//! branches around the multiplies; the result is bit-identical (x · 1.0 = x for every f32,
//! including ±0, ±inf and NaN, up to NaN payloads).

use super::ctx::{Ctx, Val};
use super::values::regs_in;
use super::PtxError;
use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::{Operand, PtxInst, Reg, RegClass};
use crate::ptx::plan::layout::Layout;
use kir_ir::{Dtype, OpData, Opcode, Value, ValueDef};

/// The [M, 1] (or [M]) source of `v` when `v = broadcast(src)`.
fn broadcast_source(c: &Ctx, v: Value) -> Option<Value> {
    let ValueDef::Result(o, _) = c.k.dfg.values.get(v)?.def else {
        return None;
    };
    let od = &c.k.dfg.ops[o];
    let src = *od.operands.first()?;
    let s = c.k.dfg.ty(src).shape()?;
    let column = matches!(s.as_slice(), [_] | [_, 1]);
    (od.opcode == Opcode::Broadcast && column).then_some(src)
}

/// Lowers `mul x, broadcast(alpha)` (either order) of an f32 `RowMma` tile in place on `x`'s
/// registers, behind a warp vote that skips it when every row factor is 1.0. `None` (emitting
/// nothing) unless the pattern matches and `x` is a loop-carried block argument (it owns its
/// registers) with no other use, so overwriting it is safe.
pub(super) fn skip_unit_rescale(
    c: &mut Ctx,
    op: &OpData,
    shape: &[usize],
    ins: &[Vec<Reg>],
) -> Result<Option<Val>, PtxError> {
    let (Some(&r), [a, b]) = (op.results.first(), op.operands.as_slice()) else {
        return Ok(None);
    };
    let rowmma = matches!(
        c.plan.places.get(&r),
        Some(crate::ptx::plan::layout::Place::Reg(Layout::RowMma))
    );
    if op.opcode != Opcode::Mul
        || c.k.dfg.ty(r).dtype() != Some(Dtype::F32)
        || !rowmma
        || shape.len() != 2
        || shape[1] < 16
    {
        return Ok(None);
    }
    let (x_idx, src) = match (broadcast_source(c, *b), broadcast_source(c, *a)) {
        (Some(s), _) => (0, s),
        (None, Some(s)) => (1, s),
        (None, None) => return Ok(None),
    };
    let x = op.operands[x_idx];
    let x_is_tile = matches!(
        c.values.vals.get(&x),
        Some(Val::Tile {
            layout: Layout::RowMma,
            ..
        })
    );
    // A loop-carried value owns its registers (no other value aliases them).
    let carried = matches!(
        c.k.dfg.values.get(x).map(|d| d.def),
        Some(ValueDef::Arg(..))
    );
    let why_not = if !x_is_tile {
        Some("the scaled tile is not in the accumulator layout")
    } else if !carried {
        Some("the scaled tile is not carried by a loop, so it does not own its registers")
    } else if c.values.lazy.contains_key(&x) {
        Some("the scaled tile is recomputed at each use")
    } else if kir_ir::edit::use_count(&c.k.dfg, x) != 1 {
        Some("the scaled tile has another use")
    } else {
        None
    };
    super::notes::note_rescale(c, op, why_not);
    if why_not.is_some() {
        return Ok(None);
    }
    let src_shape = c.k.dfg.ty(src).shape().unwrap_or_default();
    let rows = regs_in(c, src, Layout::RowMma, &src_shape, op.span)?;
    let (all, skip) = (c.b.reg(RegClass::Pred), c.b.label("unit_scale"));
    c.b.ins(
        PtxInst::new("setp.eq.f32")
            .op(all)
            .op(rows[0])
            .op(Operand::F32(0x3F800000)),
    );
    for &row in &rows[1..] {
        let p = c.b.reg(RegClass::Pred);
        c.b.ins(
            PtxInst::new("setp.eq.f32")
                .op(p)
                .op(row)
                .op(Operand::F32(0x3F800000)),
        );
        c.b.ins(PtxInst::new("and.pred").op(all).op(all).op(p));
    }
    c.b.need(Isa::VOTE_SYNC).ins(
        PtxInst::new("vote.sync.all.pred")
            .op(all)
            .op(all)
            .op(Operand::Hex(0xffffffff)),
    );
    c.b.ins_if(all, false, PtxInst::new("bra.uni").op(&skip));
    let (xs, fs) = (&ins[x_idx], &ins[1 - x_idx]);
    for (&xr, &f) in xs.iter().zip(fs) {
        c.b.ins(PtxInst::new("mul.f32").op(xr).op(xr).op(f));
    }
    c.b.place(&skip);
    Ok(Some(Val::Tile {
        layout: Layout::RowMma,
        shape: shape.to_vec(),
        dtype: Dtype::F32,
        regs: xs.clone(),
    }))
}
