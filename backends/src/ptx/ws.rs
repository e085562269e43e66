//! Warp specialization on the PTX backend (targets with `has_setmaxnreg`, `has_tma` and
//! `has_mbarrier_tx`): the `warp_specialize` op of scheduled IR (docs/ir.md) with one consumer
//! partition.
//!
//! - The block has `producer_warps + consumer_warps` warps; the producer warps come first. Every
//!   layout, warp grid and wgmma decision is made for the consumer's warps alone
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
//! - Consumer: `setmaxnreg.inc` to its budget, then the region with every block-wide barrier a
//!   named barrier over the consumer's threads (`Ctx::sync_block`), its stage indices in
//!   registers (the ring is not unrolled, so every stage read must be a wgmma operand: sched.rs,
//!   `dynamic_ring`), and its empty-barrier arrivals one per warp (tma.rs).

use super::builder::{Reg, RegClass};
use super::ctx::{Ctx, Val};
use super::isa::Isa;
use super::layout::Block;
use super::PtxError;
use kir_ir::{Kernel, Op, OpData, Opcode};
use std::collections::HashSet;

/// The named barrier of the consumer partition (ids 1.. are ping-pong's, pingpong.rs).
pub const CONSUMER_BARRIER: u32 = 15;

/// The attributes of a `warp_specialize` op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WsAttrs {
    pub producer_warps: u32,
    pub producer_regs: u32,
    pub consumers: u32,
    pub consumer_warps: u32,
    pub consumer_regs: u32,
}

impl WsAttrs {
    /// Threads of the launch: the producer's and every consumer's.
    pub fn threads(&self) -> u32 {
        (self.producer_warps + self.consumers * self.consumer_warps) * 32
    }

    /// The block one consumer's code is planned for.
    pub fn consumer_block(&self) -> Block {
        Block {
            threads: self.consumer_warps * 32,
            warps: self.consumer_warps,
        }
    }

    /// The register count at entry: the register file shared evenly, in multiples of 8.
    pub fn entry_regs(&self) -> u32 {
        (65536 / self.threads() / 8 * 8).min(255 / 8 * 8)
    }
}

/// What the lowering keeps for a warp-specialized kernel.
#[derive(Clone, Debug, Default)]
pub struct WsState {
    /// `%tid.x` (the consumer's `Ctx::tid` counts from its first warp).
    pub raw_tid: Option<Reg>,
    /// Ops before `warp_specialize` lowered in the consumer partition instead of in place.
    pub deferred: HashSet<Op>,
    /// The deferred ops in program order.
    order: Vec<Op>,
}

fn int_attr(op: &OpData, name: &str) -> Option<u32> {
    super::lower::lit(op.attr(name)).map(|x| x as u32)
}

/// The top-level `warp_specialize` op of `k` and its attributes, if it has one.
pub fn ws_op(k: &Kernel) -> Option<(Op, WsAttrs)> {
    let o = *k.dfg.blocks[k.body]
        .ops
        .iter()
        .find(|&&o| k.dfg.ops[o].opcode == Opcode::WarpSpecialize)?;
    let od = &k.dfg.ops[o];
    Some((
        o,
        WsAttrs {
            producer_warps: int_attr(od, "producer_warps")?,
            producer_regs: int_attr(od, "producer_regs")?,
            consumers: int_attr(od, "consumers")?,
            consumer_warps: int_attr(od, "consumer_warps")?,
            consumer_regs: int_attr(od, "consumer_regs")?,
        },
    ))
}

/// Sets up the thread index of a warp-specialized kernel (in the prologue: `tid` becomes the
/// consumer's, counted from its first warp) and the ops deferred to the consumer partition.
pub fn setup(c: &mut Ctx, a: &WsAttrs) {
    let (raw, tid) = (c.b.reg(RegClass::B32), c.tid);
    let skip = a.producer_warps * 32;
    c.b.in_prologue(|b| {
        b.ins(format!("mov.u32 {raw}, %tid.x"));
        b.ins(format!("sub.u32 {tid}, {raw}, {skip}"));
    });
    c.ws.raw_tid = Some(raw);
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
        if tile {
            c.ws.deferred.insert(o);
            c.ws.order.push(o);
        }
    }
}

/// Whether the producer region `b` holds only what thread 0 can run alone (module doc).
fn producer_ok(k: &Kernel, b: kir_ir::Block) -> Result<(), String> {
    for &o in &k.dfg.blocks[b].ops {
        let od = &k.dfg.ops[o];
        let ok = match od.opcode {
            Opcode::Yield | Opcode::MbarWait => true,
            Opcode::MbarArrive => od.attr("tx").is_some(),
            Opcode::AsyncCopy => od.attr("bar").is_some(),
            Opcode::For | Opcode::If => od.results.iter().all(|&r| k.dfg.ty(r).is_scalar()),
            _ => {
                od.regions.is_empty()
                    && od.tensor.is_none()
                    && !od.opcode.has_side_effects()
                    && od.results.iter().all(|&r| k.dfg.ty(r).is_scalar())
            }
        };
        if !ok {
            return Err(format!(
                "the producer partition runs on one thread, which cannot lower `{}`",
                od.opcode.name()
            ));
        }
        for &r in &od.regions {
            producer_ok(k, r)?;
        }
    }
    Ok(())
}

/// Lowers `warp_specialize` (module doc).
pub fn lower_ws(c: &mut Ctx, op: &OpData) -> Result<(), PtxError> {
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
    let (_, a) = ws_op(c.k).ok_or_else(|| {
        PtxError::at(
            sp,
            "the PTX backend lowers `warp_specialize` only at the top level of a kernel, with \
             literal warp counts and budgets",
        )
    })?;
    if a.consumers != 1 {
        return Err(PtxError::at(
            sp,
            format!(
                "the PTX backend lowers `warp_specialize` with one consumer partition; this one \
                 has {} (consumers that split the grid would each need their own shared tiles)",
                a.consumers
            ),
        ));
    }
    let (Some(&prod), Some(&cons)) = (op.regions.first(), op.regions.get(1)) else {
        return Err(PtxError::at(sp, "internal: warp_specialize needs two regions"));
    };
    producer_ok(c.k, prod).map_err(|m| PtxError::at(sp, m))?;
    let raw = c
        .ws
        .raw_tid
        .ok_or_else(|| PtxError::at(sp, "internal: warp_specialize without its thread setup"))?;
    let (is_prod, not_first) = (c.b.reg(RegClass::Pred), c.b.reg(RegClass::Pred));
    let (consumer, exit) = (c.b.label("ws_consumer"), c.b.label("ws_exit"));
    c.b.ins(format!(
        "setp.lt.u32 {is_prod}, {raw}, {}",
        a.producer_warps * 32
    ));
    c.b.ins_if(is_prod, true, format!("bra.uni {consumer}"));
    // Producer: give registers back, then thread 0 alone.
    c.b.need(Isa::SETMAXNREG)
        .ins(format!("setmaxnreg.dec.sync.aligned.u32 {}", a.producer_regs));
    c.b.ins(format!("setp.ne.u32 {not_first}, {raw}, 0"));
    c.b.ins_if(not_first, false, format!("bra {exit}"));
    let (was_prod, was_dyn) = (c.tma.in_producer, c.tma.dynamic_ring);
    c.tma.in_producer = true;
    c.tma.dynamic_ring = true;
    let r = super::lower::block(c, prod);
    c.tma.in_producer = was_prod;
    r?;
    c.b.ins(format!("bra {exit}"));
    // Consumer.
    c.b.place(&consumer);
    c.b.need(Isa::SETMAXNREG)
        .ins(format!("setmaxnreg.inc.sync.aligned.u32 {}", a.consumer_regs));
    if let Some(&wg) = c.k.dfg.blocks[cons].args.first() {
        let zero = c.b.imm32(0);
        c.vals.insert(wg, Val::Scalar(zero));
        c.statics.insert(wg, 0);
    }
    let was_bar = c
        .block_bar
        .replace((CONSUMER_BARRIER, a.consumer_warps * 32));
    let r = (|| {
        for o in c.ws.order.clone() {
            let k = c.k;
            let od = &k.dfg.ops[o];
            match od.results.first() {
                Some(&r) if super::lazy::lazy_ok(c, od) => {
                    c.lazy.insert(r, o);
                }
                _ => super::lower::lower_op(c, od)?,
            }
        }
        super::lower::block(c, cons)
    })();
    c.block_bar = was_bar;
    c.tma.dynamic_ring = was_dyn;
    r?;
    c.b.place(&exit);
    Ok(())
}
