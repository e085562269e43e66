//! Row-prefix masks on TMA rings (`kir_ir::masks`): a tensor copy reads its whole box, so when
//! the ring's copies are masked `keys < hi` (mask_split's key range on attention's K and V), the
//! rows of a stage at or past `hi − index` (the copy's first key) are set to +0 in shared memory
//! right after the wait for the stage, as the masked load defines them — before any read, and
//! without ever using those rows' values (the KV-cache contract: they may hold NaN).
//!
//! The filling thread stores that count per stage (one word next to the barriers) before its
//! `expect_tx` arrival; a reader loads the count of the fill it waited for. So the zeroing does
//! not depend on where the wait sits: in the fill's own iteration, or before the loop
//! (`dot_overlap` waits for block 0 there).
//!
//! Only an edge block has such rows (count < rows, a uniform test): every thread stores
//! zeros over those rows in wgmma's swizzled layout (16 bytes per store), then
//! `fence.proxy.async` (generic writes, async-proxy reads by wgmma) and a block barrier.

use super::ctx::{Ctx, Val};
use super::stages::StageIx;
use super::PtxError;
use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::{PtxInst, Reg, RegClass};
use kir_ir::{Attr, Kernel, OpData, Opcode, Value};

/// The masked copies completing on barrier `m`: (buffer, bound) per buffer, once each.
fn masked_fills(k: &Kernel, m: Value) -> Vec<(Value, Value)> {
    let mut out: Vec<(Value, Value)> = Vec::new();
    for od in k.dfg.ops.values() {
        if od.opcode != Opcode::AsyncCopy
            || !matches!(od.attr("bar"), Some(Attr::Value(b)) if *b == m)
        {
            continue;
        }
        let (Some(&buf), Some(Attr::Value(mask))) = (od.operands.first(), od.attr("mask")) else {
            continue;
        };
        if let Some((_, hi)) = kir_ir::masks::row_prefix(k, *mask) {
            if !out.iter().any(|(b, _)| *b == buf) {
                out.push((buf, hi));
            }
        }
    }
    out
}

/// Whether a row-prefix-masked tensor copy completes on barrier `m`.
pub fn has_masked_fills(k: &Kernel, m: Value) -> bool {
    !masked_fills(k, m).is_empty()
}

/// The shared address of stage `s`'s valid-row word of barrier `m`.
fn rows_addr(c: &mut Ctx, m: Value, s: Value, sp: kir_ir::Span) -> Result<Option<Reg>, PtxError> {
    let Some(buf) = c.asyncs.tma.bars.get(&m).copied() else {
        return Err(PtxError::at(
            sp,
            "internal: an mbarrier used before its mbar_alloc",
        ));
    };
    let Some(off) = buf.rows_off else {
        return Ok(None);
    };
    let (a, smem) = (c.b.reg(RegClass::B32), c.mem.smem);
    match c.values.statics.get(&s) {
        Some(&h) => c.b.ins(
            PtxInst::new("add.u32")
                .op(a)
                .op(smem)
                .op(off + 4 * h as u32),
        ),
        None => {
            let Val::Scalar(r) = c.val(s, sp)? else {
                return Err(PtxError::at(sp, "a stage index must be a scalar"));
            };
            c.b.ins(PtxInst::new("mad.lo.s32").op(a).op(r).op(4).op(smem));
            c.b.ins(PtxInst::new("add.u32").op(a).op(a).op(off));
        }
    }
    Ok(Some(a))
}

/// Before the filling thread's `expect_tx` arrival `arrive` on `m[s]` (guarded by
/// `pre` when given): store how many leading rows the stage's fill delivers — `hi − index` of the block's
/// row-prefix-masked copies into stage `s` (every buffer of a barrier is filled for the same
/// keys), or the whole stage for an unmasked fill. The arrival's release orders the store
/// before every waiter's acquire, so the reader learns the count of the fill it waited for,
/// wherever it waits (in the fill's own iteration, or before the loop as `dot_overlap` waits for
/// block 0).
pub fn store_valid_rows(
    c: &mut Ctx,
    arrive: &OpData,
    m: Value,
    s: Value,
    pre: Option<Reg>,
) -> Result<(), PtxError> {
    let sp = arrive.span;
    let k = c.k;
    let Some(a) = rows_addr(c, m, s, sp)? else {
        return Ok(());
    };
    let block = k
        .dfg
        .blocks
        .values()
        .find(|b| b.ops.iter().any(|&o| std::ptr::eq(&k.dfg.ops[o], arrive)))
        .ok_or_else(|| PtxError::at(sp, "internal: an arrival outside every block"))?;
    let masked = block.ops.iter().find_map(|&o| {
        let od = &k.dfg.ops[o];
        let on_m = matches!(od.attr("bar"), Some(Attr::Value(b)) if *b == m);
        if od.opcode != Opcode::AsyncCopy || !on_m || od.operands.get(1) != Some(&s) {
            return None;
        }
        match od.attr("mask") {
            Some(Attr::Value(mask)) => kir_ir::masks::row_prefix(k, *mask),
            _ => None,
        }
    });
    let valid = c.b.reg(RegClass::B32);
    match masked {
        Some((index, hi)) => {
            let (Val::Scalar(index), Val::Scalar(hi)) = (c.val(index, sp)?, c.val(hi, sp)?) else {
                return Err(PtxError::at(sp, "a key bound that is not a scalar"));
            };
            c.b.ins(PtxInst::new("sub.s32").op(valid).op(hi).op(index));
        }
        None => c.b.ins(PtxInst::new("mov.b32").op(valid).op(i32::MAX)),
    }
    c.b.ins(
        PtxInst::new("st.shared.u32")
            .addr(a)
            .op(valid)
            .guard_opt(pre),
    );
    Ok(())
}

/// After `mbar_wait %m, %s, …` (`wait`): zero the masked rows of every stage `s` that a
/// row-prefix-masked copy fills on `m` (module doc), as many as the fill's stored count leaves
/// out. Nothing for a barrier without such copies.
pub fn zero_masked_rows(c: &mut Ctx, wait: &OpData, m: Value, s: Value) -> Result<(), PtxError> {
    let k = c.k;
    let sp = wait.span;
    let fills = masked_fills(k, m);
    let Some(at) = rows_addr(c, m, s, sp)? else {
        return Ok(());
    };
    let n_valid = c.b.reg(RegClass::B32);
    c.b.ins(PtxInst::new("ld.shared.u32").op(n_valid).addr(at));
    let skip = c.b.label("rows_full");
    let mut first = true;
    let (tid, threads) = (c.thread.tid, c.plan.blk.threads);
    for (buf, _) in fills {
        let sb = super::stages::buffer(c, buf, sp)?;
        if !sb.core {
            return Err(PtxError::at(
                sp,
                "internal: a tensor copy into a stage outside wgmma's layout",
            ));
        }
        let [rows, cols] = sb.shape;
        let (valid, p) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::Pred));
        c.b.ins(PtxInst::new("mov.b32").op(valid).op(n_valid));
        if first {
            // Every buffer of the barrier is filled for the same keys: one test for all.
            c.b.ins(PtxInst::new("setp.ge.s32").op(p).op(valid).op(rows));
            c.b.ins_if(p, false, PtxInst::new("bra.uni").op(&skip));
            first = false;
        }
        c.b.ins(PtxInst::new("max.s32").op(valid).op(valid).op(0));
        let ix = match c.values.statics.get(&s) {
            Some(&h) => StageIx::Known(h as usize),
            None => match c.val(s, sp)? {
                Val::Scalar(r) => StageIx::Reg(r),
                _ => return Err(PtxError::at(sp, "a stage index must be a scalar")),
            },
        };
        let (off, dyn_off) = sb.stage_off(c, ix);
        let saved = c.mem.smem;
        if let Some(d) = dyn_off {
            let base = c.b.reg(RegClass::B32);
            c.b.ins(PtxInst::new("add.u32").op(base).op(saved).op(d));
            c.mem.smem = base;
        }
        // One 16-byte chunk (8 elements of a row) per thread and step.
        let chunks = rows * cols / 8;
        let (e, r, j, q) = (
            c.b.reg(RegClass::B32),
            c.b.reg(RegClass::B32),
            c.b.reg(RegClass::B32),
            c.b.reg(RegClass::Pred),
        );
        let (top, end, next) = (
            c.b.label("zrow"),
            c.b.label("zrow_end"),
            c.b.label("zrow_next"),
        );
        c.b.ins(PtxInst::new("mov.b32").op(e).op(tid));
        c.b.place(&top);
        c.b.ins(PtxInst::new("setp.ge.u32").op(q).op(e).op(chunks));
        c.b.ins_if(q, false, PtxInst::new("bra.uni").op(&end));
        c.b.ins(
            PtxInst::new("div.u32")
                .op(r)
                .op(e)
                .op(cols / 8)
                .strength_reduced(),
        );
        c.b.ins(PtxInst::new("setp.lt.s32").op(q).op(r).op(valid));
        c.b.ins_if(q, false, PtxInst::new("bra").op(&next));
        c.b.ins(
            PtxInst::new("rem.u32")
                .op(j)
                .op(e)
                .op(cols / 8)
                .strength_reduced(),
        );
        c.b.ins(PtxInst::new("shl.b32").op(j).op(j).op(3));
        let a = super::wgmma::core_addr(c, off, r, j, rows, 2);
        c.b.ins(PtxInst::new("st.shared.v4.b32").addr(a).vec([0, 0, 0, 0]));
        c.b.place(&next);
        c.b.ins(PtxInst::new("add.u32").op(e).op(e).op(threads));
        c.b.ins(PtxInst::new("bra").op(&top));
        c.b.place(&end);
        c.mem.smem = saved;
    }
    c.b.need(Isa::FENCE_PROXY_ASYNC)
        .ins(PtxInst::new("fence.proxy.async.shared::cta"));
    c.sync_block();
    c.b.place(&skip);
    Ok(())
}
