//! Several consumer partitions of one `warp_specialize` on the PTX backend (ws.rs lowers the op;
//! this file holds what changes from one consumer to C). Every layout, warp grid and wgmma
//! decision is still made for one consumer's warps (`plan::plan`), so the consumer region is
//! lowered once, as one consumer's code, and the consumers differ only in registers:
//!
//! - **Thread index.** Consumer i's threads are the launch's threads P + i·T to P + (i + 1)·T − 1
//!   (P the producer's threads, T = consumer_warps · 32). `Ctx::tid` is (`%tid.x` − P) mod T,
//!   set in the prologue, so every coordinate derived from it there (warp, lane, row bases) is
//!   the consumer's own; the region's argument %i is (`%tid.x` − P) div T, a register.
//! - **Barriers.** Consumer i's block-wide barrier (`Ctx::sync_block`) is the named barrier
//!   15 − i over its T threads, the id in a register (`bar.sync` takes one); ids 1.. stay free
//!   for the ping-pong of wgmma.rs. The ops before the region run on every thread, and the one
//!   thread that initialises the mbarriers there is consumer 0's filling thread (the thread it
//!   is with one consumer), named from `%tid.x`; inside the region each consumer's filling
//!   thread is its own.
//! - **Shared memory.** What is allocated before the region (rings, mbarriers, the
//!   valid-row words) has one copy that every consumer reads. What the region allocates
//!   (staged operands, `regs_to_core` tiles, reduction partials, the bulk-reduction region, the
//!   scratch region) is consumer i's arena, at `kir_smem + i × stride` plus its offset
//!   ([`Arena`], `Ctx::smem_base`); the stride is the arena's size rounded up to its largest
//!   alignment, known when the kernel is finished (`Operand::ArenaStride`), and the kernel's
//!   shared bytes are the shared part plus C strides ([`arena_bytes`]). A stage of a
//!   row-prefix-masked ring (causal attention) is zeroed past its valid rows by each consumer
//!   after its wait (tma_rows.rs): the consumers store the same zeros over the same rows, so
//!   every reader sees zeros there whichever store lands first, but those stores race with
//!   each other (a race of equal values that a race checker may report).
//! - **Mbarrier counts.** The pass counts one arrival per consumer on the empty ring
//!   (`mbar_alloc arrivals C`) and one on each ping-pong order barrier (`arrivals 1`, which one
//!   consumer at a time makes); the backend makes an arrival without `tx` once per warp (lane
//!   0, tma.rs), so the hardware counts are C × consumer_warps and consumer_warps: each
//!   consumer's warps arrive once per phase.
//! - **Registers.** `setmaxnreg.inc` gives every consumer the one budget; the verifier has
//!   checked that the producer's budget and C consumers' fit the registers the block starts
//!   with.
//!
//! Not lowered, each an error naming it ([`check`]): more than 15 consumers, a consumer of two
//! warpgroups that ping-pong (its named barriers 1.. would be every consumer's), clusters, ops
//! with effects before the region (every consumer would run them), and rings or mbarriers
//! allocated inside the region (they would be each consumer's, out of the producer's reach).

use super::ctx::{Ctx, MemState, Val};
pub use super::state::Arena;
use super::PtxError;
use crate::ptx::emit::{Operand, PtxInst, Reg, RegClass};
use crate::ptx::plan::roles::WsAttrs;
use kir_ir::{Block, Kernel, Op, Opcode, Span, Value};

/// The highest named barrier id (`roles::CONSUMER_BARRIER`); consumer i takes
/// `TOP_BARRIER − i` (ws.rs's one consumer takes it alone).
pub const TOP_BARRIER: u32 = crate::ptx::plan::roles::CONSUMER_BARRIER;

/// Sets up the prologue of a kernel with several consumers: `Ctx::tid` becomes
/// (`raw` − P) mod T, and the thread that fills rings before the region is the launch's
/// thread P + T − 32 (consumer 0's last warp, lane 0).
pub fn setup(c: &mut Ctx, a: &WsAttrs, raw: Reg) {
    let (skip, t) = (a.producer_warps * 32, a.consumer_warps * 32);
    let (tid, rel, e) = (
        c.thread.tid,
        c.b.reg(RegClass::B32),
        c.b.reg(RegClass::Pred),
    );
    c.b.in_prologue(|b| {
        b.ins(PtxInst::new("sub.u32").op(rel).op(raw).op(skip));
        b.ins(
            PtxInst::new("rem.u32")
                .op(tid)
                .op(rel)
                .op(t)
                .strength_reduced(),
        );
        b.ins(PtxInst::new("setp.eq.u32").op(e).op(raw).op(skip + t - 32));
    });
    c.asyncs.tma.elected = Some(e);
}

/// An error unless the backend lowers the consumers of the `warp_specialize` op `ws` (consumer
/// region `cons`, at span `sp`) of attributes `a` (module doc, last paragraph).
pub fn check(c: &Ctx, a: &WsAttrs, ws: Op, cons: Block, sp: Span) -> Result<(), PtxError> {
    let n = a.consumers;
    let refuse = |why: String| {
        Err(PtxError::at(
            sp,
            format!(
                "the PTX backend does not lower this `warp_specialize` with {n} consumers: {why}"
            ),
        ))
    };
    if n > TOP_BARRIER {
        return refuse(format!(
            "each consumer takes its own named barrier ({TOP_BARRIER} − its index, ids 1.. \
             are ping-pong's), so at most {TOP_BARRIER} consumers"
        ));
    }
    if !c.plan.pingpong.is_empty() {
        return refuse(format!(
            "each consumer of {} warps has two warpgroups that take ping-pong turns, whose named \
             barriers (ids 1..) the consumers would share",
            a.consumer_warps
        ));
    }
    if a.cluster > 1 {
        return refuse("a cluster's shared copies and releases are one consumer's".into());
    }
    let k = c.k;
    for &o in &k.dfg.blocks[k.body].ops {
        if o == ws {
            break;
        }
        if let Some(name) = effect(k, o) {
            return refuse(format!(
                "`{name}` before the partitions would run once per consumer"
            ));
        }
    }
    if let Some(name) = allocation(k, cons) {
        return refuse(format!(
            "`{name}` inside the consumer partition would give each consumer its own, which \
             the producer cannot fill"
        ));
    }
    Ok(())
}

/// The name of an op with effects in `o` or its regions (allocations of rings and barriers
/// aside), if any.
fn effect(k: &Kernel, o: Op) -> Option<&'static str> {
    let od = &k.dfg.ops[o];
    let allocates = matches!(od.opcode, Opcode::SmemAlloc | Opcode::MbarAlloc);
    if od.opcode.has_side_effects() && !allocates && od.opcode != Opcode::Yield {
        return Some(od.opcode.name());
    }
    od.regions
        .iter()
        .flat_map(|&r| k.dfg.blocks[r].ops.iter())
        .find_map(|&x| effect(k, x))
}

/// The name of a ring or mbarrier allocation in block `b` or below, if any.
fn allocation(k: &Kernel, b: Block) -> Option<&'static str> {
    k.dfg.blocks[b].ops.iter().find_map(|&o| {
        let od = &k.dfg.ops[o];
        match od.opcode {
            Opcode::SmemAlloc | Opcode::MbarAlloc => Some(od.opcode.name()),
            _ => od.regions.iter().find_map(|&r| allocation(k, r)),
        }
    })
}

/// What [`enter`] changed that [`leave`] restores.
pub struct Entered {
    /// The filling thread's predicate before the region (consumer 0's).
    elected: Option<Reg>,
}

/// At the start of the consumer region (before its deferred ops): the consumer's index
/// %i = (`raw` − P) div T bound to the region's argument `index`, its named barrier
/// `TOP_BARRIER` − %i, and its arena, which starts at the allocation top.
pub fn enter(c: &mut Ctx, a: &WsAttrs, raw: Reg, index: Option<Value>) -> Entered {
    let (skip, t) = (a.producer_warps * 32, a.consumer_warps * 32);
    let (rel, i, bar, base) = (
        c.b.reg(RegClass::B32),
        c.b.reg(RegClass::B32),
        c.b.reg(RegClass::B32),
        c.b.reg(RegClass::B32),
    );
    c.b.ins(PtxInst::new("sub.u32").op(rel).op(raw).op(skip));
    c.b.ins(
        PtxInst::new("div.u32")
            .op(i)
            .op(rel)
            .op(t)
            .strength_reduced(),
    );
    c.b.ins(PtxInst::new("mov.u32").op(bar).op(TOP_BARRIER));
    c.b.ins(PtxInst::new("sub.u32").op(bar).op(bar).op(i));
    c.b.ins(
        PtxInst::new("mad.lo.s32")
            .op(base)
            .op(i)
            .op(Operand::ArenaStride)
            .op(c.mem.smem),
    );
    if let Some(v) = index {
        c.values.vals.insert(v, Val::Scalar(i));
    }
    c.thread.block_bar = Some((Operand::Reg(bar), t));
    c.mem.arena = Some(Arena {
        start: c.mem.smem_top,
        copies: a.consumers,
        align: 16,
        base: Some(base),
    });
    // Inside the region a filling thread is the consumer's own (made on first use).
    Entered {
        elected: c.asyncs.tma.elected.take(),
    }
}

/// After the consumer region: offsets are the shared part's again, and the filling thread is
/// consumer 0's.
pub fn leave(c: &mut Ctx, e: Entered) {
    if let Some(a) = c.mem.arena.as_mut() {
        a.base = None;
    }
    c.asyncs.tma.elected = e.elected;
}

/// The kernel's shared bytes and its arena stride, for a kernel whose allocations (the scratch
/// region included) end at `end`: `end` and 0 without an arena; else the shared part plus one
/// stride per consumer, the stride being the arena's bytes rounded up to its alignment.
pub fn arena_bytes(mem: &MemState, end: u32) -> (u32, u32) {
    match mem.arena {
        None => (end, 0),
        Some(a) => {
            let stride = end.saturating_sub(a.start).div_ceil(a.align) * a.align;
            (a.start + a.copies * stride, stride)
        }
    }
}
