//! Row-prefix masks on TMA rings (`kir_ir::masks`): a tensor copy reads its whole box, so when
//! the ring's copies are masked `keys < hi` (mask_split's key range on attention's K and V), the
//! rows at or past `hi − n0` of the stage that iteration n0 reads are set to +0 in shared memory
//! right after the wait for the stage, as the masked load defines them — before any read, and
//! without ever using those rows' values (the KV-cache contract: they may hold NaN).
//!
//! Only an edge block has such rows (`hi − n0 < rows`, a uniform test): every thread stores
//! zeros over those rows in wgmma's swizzled layout (16 bytes per store), then
//! `fence.proxy.async` (generic writes, async-proxy reads by wgmma) and a block barrier.

use super::builder::RegClass;
use super::ctx::{Ctx, Val};
use super::isa::Isa;
use super::sched::StageIx;
use super::PtxError;
use kir_ir::{Attr, Kernel, Op, OpData, Opcode, Value};

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

/// The induction variable of the loop whose body holds op `o` directly.
fn loop_iv(k: &Kernel, o: Op) -> Option<Value> {
    k.dfg.ops.values().find_map(|od| {
        let body = *od.regions.first()?;
        (od.opcode == Opcode::For && k.dfg.blocks[body].ops.contains(&o))
            .then(|| k.dfg.blocks[body].args.first().copied())
            .flatten()
    })
}

/// After `mbar_wait %m, %s, …` (`wait`): zero the masked rows of every stage `s` that a
/// row-prefix-masked copy fills on `m` (module doc). Nothing for a barrier without such copies.
pub fn zero_masked_rows(c: &mut Ctx, wait: &OpData, m: Value, s: Value) -> Result<(), PtxError> {
    let k = c.k;
    let sp = wait.span;
    let fills = masked_fills(k, m);
    if fills.is_empty() {
        return Ok(());
    }
    let o = k
        .dfg
        .ops
        .iter()
        .find(|(_, od)| std::ptr::eq(*od, wait))
        .map(|(o, _)| o)
        .ok_or_else(|| PtxError::at(sp, "internal: a wait that is not the kernel's"))?;
    let iv = loop_iv(k, o).ok_or_else(|| {
        PtxError::at(
            sp,
            "a masked tensor copy whose stage is waited for outside its loop",
        )
    })?;
    let Val::Scalar(n0) = c.val(iv, sp)? else {
        return Err(PtxError::at(
            sp,
            "internal: a loop index that is not a scalar",
        ));
    };
    let skip = c.b.label("rows_full");
    let mut first = true;
    let (tid, threads) = (c.tid, c.blk.threads);
    for (buf, hi) in fills {
        let Val::Scalar(hi) = c.val(hi, sp)? else {
            return Err(PtxError::at(sp, "a key bound that is not a scalar"));
        };
        let sb = super::sched::buffer(c, buf, sp)?;
        if !sb.core {
            return Err(PtxError::at(
                sp,
                "internal: a tensor copy into a stage outside wgmma's layout",
            ));
        }
        let [rows, cols] = sb.shape;
        let (valid, p) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::Pred));
        c.b.ins(format!("sub.s32 {valid}, {hi}, {n0}"));
        if first {
            // Every buffer of the barrier is filled for the same keys: one test for all.
            c.b.ins(format!("setp.ge.s32 {p}, {valid}, {rows}"));
            c.b.ins_if(p, false, format!("bra.uni {skip}"));
            first = false;
        }
        c.b.ins(format!("max.s32 {valid}, {valid}, 0"));
        let ix = match c.statics.get(&s) {
            Some(&h) => StageIx::Known(h as usize),
            None => match c.val(s, sp)? {
                Val::Scalar(r) => StageIx::Reg(r),
                _ => return Err(PtxError::at(sp, "a stage index must be a scalar")),
            },
        };
        let (off, dyn_off) = sb.stage_off(c, ix);
        let saved = c.smem;
        if let Some(d) = dyn_off {
            let base = c.b.reg(RegClass::B32);
            c.b.ins(format!("add.u32 {base}, {saved}, {d}"));
            c.smem = base;
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
        c.b.ins(format!("mov.b32 {e}, {tid}"));
        c.b.place(&top);
        c.b.ins(format!("setp.ge.u32 {q}, {e}, {chunks}"));
        c.b.ins_if(q, false, format!("bra.uni {end}"));
        c.b.ins(format!("div.u32 {r}, {e}, {}", cols / 8));
        c.b.ins(format!("setp.lt.s32 {q}, {r}, {valid}"));
        c.b.ins_if(q, false, format!("bra {next}"));
        c.b.ins(format!("rem.u32 {j}, {e}, {}", cols / 8));
        c.b.ins(format!("shl.b32 {j}, {j}, 3"));
        let a = super::wgmma::core_addr(c, off, r, j, rows, 2);
        c.b.ins(format!("st.shared.v4.b32 [{a}], {{0, 0, 0, 0}}"));
        c.b.place(&next);
        c.b.ins(format!("add.u32 {e}, {e}, {threads}"));
        c.b.ins(format!("bra {top}"));
        c.b.place(&end);
        c.smem = saved;
    }
    c.b.need(Isa::FENCE_PROXY_ASYNC)
        .ins("fence.proxy.async.shared::cta");
    c.sync_block();
    c.b.place(&skip);
    Ok(())
}
