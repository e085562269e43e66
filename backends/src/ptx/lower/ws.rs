//! Warp specialization on the PTX backend (targets with `has_setmaxnreg`, `has_tma` and
//! `has_mbarrier_tx`): the `warp_specialize` op of scheduled IR (docs/ir.md), with one consumer
//! partition or several (consumers.rs holds what several change).
//!
//! - The block has `producer_warps + consumers · consumer_warps` warps; the producer warps come
//!   first. Every layout, warp grid and wgmma decision is made for one consumer's warps
//!   (`plan::plan`), and the consumer's code sees a thread index counted from its first warp
//!   (`Ctx::tid`; the launch's own is `WsState::raw_tid`), so it is the code a block of
//!   `consumer_warps` warps would run.
//! - The kernel declares `.maxnreg` = ⌊65536 / threads / 8⌋ · 8, the register count at entry
//!   that `setmaxnreg` needs to take effect; the verifier has checked that the budgets fit.
//! - The ops before `warp_specialize` run on every thread, except those with tile results (a
//!   tile load, say): only the consumer uses tiles, so they are lowered at the start of the
//!   consumer partition instead ([`WsState::deferred`]).
//! - Producer: `setmaxnreg.dec` to its budget, then thread 0 alone runs the region (waits on the
//!   empty barriers, `expect_tx` arrivals and tensor copies; tma.rs) while the other producer
//!   threads leave; the region may hold only scalar ops, loops and ifs over them, and those.
//!   When a copied tensor admits no tensor map (its address, a stride or its innermost dim;
//!   [`tma_ok`], ws_fallback.rs, the rule the launcher applies before passing zeros instead), every producer
//!   thread runs the region instead: each copy goes element by element (loads and shared
//!   stores: the tensor broke the 16-byte rules) into the stage's swizzled layout, is fenced
//!   for the async proxy by each thread, then one arrival per warp on the
//!   full barrier, whose count the kernel picks at run time (`ws_fallback::fallback_arrivals`).
//! - Consumer: `setmaxnreg.inc` to its budget, then the region with every block-wide barrier a
//!   named barrier over the consumer's threads (`Ctx::sync_block`; 15, or 15 − i for consumer
//!   i of several), its stage indices in registers (the ring is not unrolled, so every stage
//!   read must be a wgmma operand: sched.rs, `dynamic_ring`), and its empty-barrier arrivals
//!   one per warp (tma.rs). With one consumer its index (the region's argument) is the static
//!   0; with several it is a register and each consumer's shared allocations are its own
//!   (consumers.rs).
//!
//! [`WsState::deferred`]: super::state::WsState::deferred

use super::ctx::{Ctx, Val};
use super::producer::producer_ok;
use super::region::Regions;
use super::ws_fallback::tma_ok;
use super::PtxError;
use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::{Operand, PtxInst, Reg, RegClass};
use crate::ptx::plan::roles::{ws_op, WsAttrs, CONSUMER_BARRIER};
use kir_ir::{OpData, Opcode};

/// Sets up the thread index of a warp-specialized kernel (in the prologue: `tid` becomes the
/// consumer's, counted from its first warp; with several consumers, from its own consumer's:
/// consumers.rs) and the ops deferred to the consumer partition (tile ops before
/// `warp_specialize`, except index tiles, which are lazy everywhere).
pub fn setup(c: &mut Ctx, a: &WsAttrs) {
    let (raw, tid) = (c.b.reg(RegClass::B32), c.thread.tid);
    let skip = a.producer_warps * 32;
    c.b.in_prologue(|b| {
        b.ins(
            PtxInst::new("mov.u32")
                .op(raw)
                .op(Operand::Special("%tid.x")),
        );
    });
    if a.consumers > 1 {
        super::consumers::setup(c, a, raw);
    } else {
        c.b.in_prologue(|b| b.ins(PtxInst::new("sub.u32").op(tid).op(raw).op(skip)));
    }
    c.asyncs.ws.raw_tid = Some(raw);
    let k = c.k;
    for &o in &k.dfg.blocks[k.body].ops {
        let od = &k.dfg.ops[o];
        if od.opcode == Opcode::WarpSpecialize {
            break;
        }
        let tile = od
            .results
            .iter()
            .any(|&r| !k.dfg.ty(r).is_scalar() && !k.dfg.ty(r).is_resource());
        if tile && od.opcode == Opcode::Iota && super::lazy::lazy_ok(c, od) {
            // An index tile is computed where it is used: the producer's fallback copy
            // evaluates causal attention's key masks from one per element.
            c.values.lazy.insert(od.results[0], o);
        } else if tile {
            c.asyncs.ws.deferred.insert(o);
            c.asyncs.ws.order.push(o);
        }
    }
}

/// `async_copy … bar %m` run by the producer's warps when the tensor maps are zeros: the tile
/// into its stage of wgmma's layout element by element (memory.rs: the tensor broke the 16-byte
/// rules, so no vector copy applies), then each thread fences its shared-memory stores for the
/// async proxy (wgmma reads the stage), and lane 0 of each warp arrives on `m[s]`.
pub fn copy_by_warps(
    c: &mut Ctx,
    op: &OpData,
    shape: [usize; 2],
    off: u32,
    dyn_off: Option<Reg>,
) -> Result<(), PtxError> {
    let sp = op.span;
    let (Some(kir_ir::Attr::Value(m)), Some(&s)) = (op.attr("bar"), op.operands.get(1)) else {
        return Err(PtxError::at(
            sp,
            "internal: a tensor copy without its barrier",
        ));
    };
    let saved = c.mem.smem;
    if let Some(d) = dyn_off {
        let base = c.b.reg(RegClass::B32);
        c.b.ins(PtxInst::new("add.u32").op(base).op(saved).op(d));
        c.mem.smem = base;
    }
    let r = super::memory::copy_into_stage(c, op, &shape, off, true);
    c.mem.smem = saved;
    r?;
    c.b.need(Isa::FENCE_PROXY_ASYNC)
        .ins(PtxInst::new("fence.proxy.async.shared::cta"));
    super::tma::warp_arrive(c, *m, s, sp)
}

/// Lowers `warp_specialize` (module doc).
pub fn lower_ws(c: &mut Ctx, op: &OpData, lower: &dyn Regions) -> Result<(), PtxError> {
    let sp = op.span;
    let t = c.target;
    if !(t.has_setmaxnreg() && t.has_tma() && t.has_mbarrier_tx()) {
        return Err(PtxError::at(
            sp,
            format!(
                "`warp_specialize` needs setmaxnreg, TMA and mbarrier transaction counts, which {} \
                 lacks",
                t.name()
            ),
        ));
    }
    let (ws, a) = ws_op(c.k).ok_or_else(|| {
        PtxError::at(
            sp,
            "the PTX backend lowers `warp_specialize` only at the top level of a kernel, with \
             literal warp counts and budgets",
        )
    })?;
    let (Some(&prod), Some(&cons)) = (op.regions.first(), op.regions.get(1)) else {
        return Err(PtxError::at(
            sp,
            "internal: warp_specialize needs two regions",
        ));
    };
    if a.consumers > 1 {
        super::consumers::check(c, &a, ws, cons, sp)?;
    }
    producer_ok(c.k, prod).map_err(|m| PtxError::at(sp, m))?;
    super::cluster::cluster_start(c, &a, sp)?;
    let raw =
        c.asyncs.ws.raw_tid.ok_or_else(|| {
            PtxError::at(sp, "internal: warp_specialize without its thread setup")
        })?;
    // The consumer's bulk reductions issued by the producer's second warp (writer.rs).
    if super::writer::wanted(c, cons, a.consumers, a.producer_warps, a.consumer_warps) {
        super::writer::setup(c, a.consumer_warps / 4);
    }
    let (is_prod, not_first) = (c.b.reg(RegClass::Pred), c.b.reg(RegClass::Pred));
    let (consumer, exit) = (c.b.label("ws_consumer"), c.b.label("ws_exit"));
    let writer = c.mem.writer.map(|_| c.b.label("ws_writer"));
    let others = writer.as_ref().unwrap_or(&exit);
    c.b.ins(
        PtxInst::new("setp.lt.u32")
            .op(is_prod)
            .op(raw)
            .op(a.producer_warps * 32),
    );
    c.b.ins_if(is_prod, true, PtxInst::new("bra.uni").op(&consumer));
    // Producer: give registers back, then thread 0 alone issues the tensor copies, or, when
    // the launcher could not encode the maps, every producer thread copies.
    c.b.need(Isa::SETMAXNREG)
        .ins(PtxInst::new("setmaxnreg.dec.sync.aligned.u32").op(a.producer_regs));
    let ok = tma_ok(c);
    let by_warps = c.b.label("ws_by_warps");
    c.b.ins_if(ok, true, PtxInst::new("bra.uni").op(&by_warps));
    c.b.ins(PtxInst::new("setp.ne.u32").op(not_first).op(raw).op(0));
    c.b.ins_if(not_first, false, PtxInst::new("bra").op(others));
    let (was_prod, was_dyn) = (c.asyncs.tma.in_producer, c.asyncs.tma.dynamic_ring);
    c.asyncs.tma.in_producer = true;
    c.asyncs.tma.dynamic_ring = true;
    let r = lower.block(c, prod);
    c.asyncs.tma.in_producer = was_prod;
    r?;
    c.b.ins(PtxInst::new("bra").op(&exit));
    c.b.place(&by_warps);
    let (tid, blk) = (c.thread.tid, c.plan.blk);
    c.thread.tid = raw;
    c.plan.blk = crate::ptx::plan::Block {
        threads: a.producer_warps * 32,
        warps: a.producer_warps,
    };
    c.asyncs.tma.in_producer = true;
    c.asyncs.tma.by_warps = true;
    let r = lower.block(c, prod);
    c.asyncs.tma.in_producer = was_prod;
    c.asyncs.tma.by_warps = false;
    (c.thread.tid, c.plan.blk) = (tid, blk);
    r?;
    c.b.ins(PtxInst::new("bra").op(&exit));
    // Consumer.
    c.b.place(&consumer);
    c.b.need(Isa::SETMAXNREG)
        .ins(PtxInst::new("setmaxnreg.inc.sync.aligned.u32").op(a.consumer_regs));
    let index = c.k.dfg.blocks[cons].args.first().copied();
    let was_bar = c.thread.block_bar.clone();
    let entered = if a.consumers > 1 {
        Some(super::consumers::enter(c, &a, raw, index))
    } else {
        if let Some(wg) = index {
            let zero = c.b.imm32(0);
            c.values.vals.insert(wg, Val::Scalar(zero));
            c.values.statics.insert(wg, 0);
        }
        c.thread.block_bar = Some((Operand::Imm(CONSUMER_BARRIER.into()), a.consumer_warps * 32));
        None
    };
    let r = (|| {
        for o in c.asyncs.ws.order.clone() {
            let k = c.k;
            let od = &k.dfg.ops[o];
            match od.results.first() {
                Some(&r) if super::lazy::lazy_ok(c, od) => {
                    c.values.lazy.insert(r, o);
                }
                _ => lower.op(c, od)?,
            }
        }
        lower.block(c, cons)?;
        if let Some(w) = c.mem.writer {
            super::writer::close(c, w);
        }
        Ok(())
    })();
    c.thread.block_bar = was_bar;
    c.asyncs.tma.dynamic_ring = was_dyn;
    if let Some(e) = entered {
        super::consumers::leave(c, e);
    }
    r?;
    if let (Some(w), Some(writer)) = (c.mem.writer, &writer) {
        c.b.ins(PtxInst::new("bra").op(&exit));
        c.b.place(writer);
        super::writer::run(c, w, raw, &exit);
    }
    c.b.place(&exit);
    if c.asyncs.ws.cluster.is_some() {
        // No CTA leaves while its peer may still arrive on its barriers or copy into it.
        super::cluster::cluster_barrier(c);
    }
    Ok(())
}
