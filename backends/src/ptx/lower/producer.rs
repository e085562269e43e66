//! Producer regions: blocks that one warp or one thread runs for the whole block.
//!
//! - A TMA ring's *producer block* (the body of the ring's `if` that starts a fill: waits, an
//!   arrival with `tx`, tensor copies, the scalar ops that address them and the tile ops of
//!   their masks; `tma.rs`) runs on the filling warp (the block's last) alone, one elected lane
//!   of it arriving and copying, so only the warp that refills a stage waits for its release;
//!   the other warps go on to the stage they read (a block-wide wait there would hold every
//!   warpgroup to the slowest one each iteration and end their ping-pong).
//! - The producer region of `warp_specialize` (`ws.rs`) runs on thread 0 alone, so it may hold
//!   only what one thread can lower: scalar ops, loops and ifs over them, waits, arrivals with
//!   `tx`, tensor copies and the index and mask tiles of those copies.
//!
//! A tensor copy reads its whole box and never evaluates its mask, so the pure tile ops whose
//! results only reach copies' masks are no obstacle: the thread never lowers them.

use super::ctx::Ctx;
use super::region::Regions;
use super::PtxError;
use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::{Operand, PtxInst, RegClass};
use kir_ir::{Kernel, Op, OpData, Opcode, Value};
use std::collections::HashSet;

/// Whether the ops of a block form a producer block (see the module doc): at least one tensor
/// copy, and nothing but waits, arrivals with `tx`, tensor copies, scalar ops without effects
/// or regions, and the tile ops of the copies' masks. A tensor copy reads its whole box and
/// never evaluates its mask (the reader zeroes the rows it excludes, `tma_rows.rs`), so a pure
/// tile op whose results only reach `mask`s of the block's tensor copies (directly or through
/// other such ops) lowers to nothing the block's threads must share — causal attention's
/// row-prefix key masks `keys < hi`.
pub fn producer_block(k: &Kernel, ops: &[Op]) -> bool {
    let mask_only = mask_only_values(k, ops);
    let mut copies = 0;
    for &o in ops {
        let od = &k.dfg.ops[o];
        let ok = match od.opcode {
            Opcode::Yield => od.operands.is_empty(),
            Opcode::MbarWait => true,
            Opcode::MbarArrive => od.attr("tx").is_some(),
            Opcode::AsyncCopy if od.attr("bar").is_some() => {
                copies += 1;
                true
            }
            _ => scalar_pure(k, od) || od.results.iter().all(|r| mask_only.contains(r)),
        };
        if !ok {
            return false;
        }
    }
    copies > 0
}

/// The results of the pure tile ops among `ops` that only reach `mask`s of tensor copies among
/// them (directly or through other such ops): a tensor copy never evaluates its mask.
pub fn mask_only_values(k: &Kernel, ops: &[Op]) -> HashSet<Value> {
    // Found from the end of the block backwards.
    let mut mask_only: HashSet<Value> = HashSet::new();
    for &o in ops.iter().rev() {
        let od = &k.dfg.ops[o];
        let pure_tile = od.regions.is_empty()
            && od.tensor.is_none()
            && !od.opcode.has_side_effects()
            && !od.results.is_empty()
            && od.results.iter().all(|&r| !k.dfg.ty(r).is_scalar());
        if pure_tile
            && od
                .results
                .iter()
                .all(|&r| reaches_masks_only(k, ops, r, &mask_only))
        {
            mask_only.extend(od.results.iter().copied());
        }
    }
    mask_only
}

/// Whether every use of `v` among `ops` is the `mask` of a tensor copy or an operand of an op
/// whose results are in `mask_only`, and `v` has at least one use there.
fn reaches_masks_only(k: &Kernel, ops: &[Op], v: Value, mask_only: &HashSet<Value>) -> bool {
    let mut used = false;
    for &o in ops {
        let od = &k.dfg.ops[o];
        let as_mask = matches!(od.attr("mask"), Some(kir_ir::Attr::Value(m)) if *m == v);
        let as_operand = od.operands.contains(&v);
        if !as_mask && !as_operand {
            continue;
        }
        used = true;
        let copy_mask = od.opcode == Opcode::AsyncCopy && od.attr("bar").is_some() && !as_operand;
        let into_mask = !od.results.is_empty() && od.results.iter().all(|r| mask_only.contains(r));
        if !(copy_mask || into_mask) {
            return false;
        }
    }
    used
}

/// An op one thread can run for the whole block: scalar results, no tensor access, no effects,
/// no regions.
pub fn scalar_pure(k: &Kernel, od: &OpData) -> bool {
    od.regions.is_empty()
        && od.tensor.is_none()
        && !od.opcode.has_side_effects()
        && od.results.iter().all(|&r| k.dfg.ty(r).is_scalar())
}

/// Lowers a producer block on the filling warp (the block's last), one lane of which
/// (`elect.sync`) arrives and copies; returns its (empty) yield.
///
/// The branch around the block is uniform in each warp (`bra.uni` on the warp's index), where
/// a branch on one thread diverged inside the warp: ptxas then kept what the loop around it
/// computes from a ring's stage index in thread registers, so each wgmma descriptor took a
/// 64-bit add on thread registers and two moves into uniform ones (attention_bwd's d128 dK/dV
/// kernel, whose ring's stage runs on through its loop over heads: 2,960 SASS instructions, 72
/// of them R2UR, 252 registers; 2,176, 5 and 241 since; ncu, call R5 of 2026-12-07,
/// docs/benchmarks.md). The other lanes of the warp wait on the empty barrier with the elected
/// one, which is the wait's only cost to them.
pub fn lower_producer_block(
    c: &mut Ctx,
    b: kir_ir::Block,
    lower: &dyn Regions,
) -> Result<Vec<Value>, PtxError> {
    let skip = c.b.label("producer_end");
    if c.asyncs.tma.in_producer {
        // Already on one thread (a warp-specialized producer).
        let r = lower.block(c, b);
        c.b.place(&skip);
        return r;
    }
    let w = super::tma::filling_warp(c);
    c.b.ins_if(w, true, PtxInst::new("bra.uni").op(&skip));
    // One lane arrives and copies; ptxas sees it elected (a lane-0 test there made it move each
    // copy's operands into uniform registers lane by lane).
    let lead = c.b.reg(RegClass::Pred);
    c.b.need(Isa::ELECT_SYNC).ins(
        PtxInst::new("elect.sync")
            .op(Operand::SinkPred(lead))
            .op(Operand::Hex(0xffff_ffff)),
    );
    c.asyncs.tma.in_producer = true;
    c.asyncs.tma.lead = Some(lead);
    let r = lower.block(c, b);
    c.asyncs.tma.in_producer = false;
    c.asyncs.tma.lead = None;
    c.b.place(&skip);
    r
}

/// Whether the producer region `b` holds only what thread 0 can run alone (module doc).
pub(super) fn producer_ok(k: &Kernel, b: kir_ir::Block) -> Result<(), String> {
    // Tile ops that only build the copies' masks (causal attention's `keys < hi`): a tensor
    // copy never evaluates them, and the warps' fallback copy evaluates them per element.
    let mask_only = mask_only_values(k, &k.dfg.blocks[b].ops);
    for &o in &k.dfg.blocks[b].ops {
        let od = &k.dfg.ops[o];
        let ok = match od.opcode {
            Opcode::Yield | Opcode::MbarWait => true,
            Opcode::MbarArrive => od.attr("tx").is_some(),
            Opcode::AsyncCopy => od.attr("bar").is_some(),
            Opcode::For | Opcode::If => od.results.iter().all(|&r| k.dfg.ty(r).is_scalar()),
            // An index tile is lazy (computed where it is used, lazy.rs); every op that could
            // use it here is checked on its own (a persistent producer's tile loop holds the
            // iota of the key masks built in its ring loop).
            Opcode::Iota => true,
            _ => {
                scalar_pure(k, od)
                    || !od.results.is_empty() && od.results.iter().all(|r| mask_only.contains(r))
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
