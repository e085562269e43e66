//! Scheduled IR (docs/ir.md, "Scheduled IR") on the PTX backend: the stage rings the
//! `pipelining` pass builds become cp.async copy groups into shared memory.
//!
//! - `smem_alloc` reserves S stage buffers in the shared-memory layout the readers need (at the
//!   buffer's first use, so tiles loaded before the ring keep their places in front of it): the
//!   layout pass places `smem_read` results as it placed dot-operand loads, so a stage is a
//!   row-padded tile (rows 16 bytes longer, conflict-free ldmatrix) or, when its reads are wgmma
//!   operands, a 1024-byte aligned 128B-swizzled core-matrix tile (`wgmma.rs`).
//! - `async_copy` is the cp.async copy of the tile into its stage (`memory::copy_tile`, with the
//!   `mask`/`other` of a `load`), `async_commit` is `cp.async.commit_group`.
//! - `async_wait pending N` is `cp.async.wait_group N`, `fence.proxy.async` when wgmma reads
//!   stages, and `bar.sync 0`, which makes the landed stages visible to every thread.
//! - `smem_read` is the stage itself, no copy (`Val::Shared`), or, for a read the layout put in
//!   registers, a read of the stage into them.
//! - `smem_release` emits nothing (its stage index need not be known); it marks that the next copy into shared memory must first
//!   synchronize the block (`Ctx::release_pending`), since another thread may still read the
//!   released stage. The pass refills a stage at the top of the iteration after its release and
//!   before the `async_wait` in program order; the wait is legal to hoist over the refill (the
//!   copies and `async_commit`s before it in its block, with pending lowered by the commits it
//!   passes: it waits for the same groups), and the hoisted wait's `bar.sync` is then the one
//!   barrier per iteration that both publishes the stage and orders the previous iteration's
//!   reads before the refill — `cp.async.wait_group S−2; bar.sync 0; refill; commit`.
//! - A loop that carries its stage index as the pass emits it (init a constant, next stage
//!   `(s + 1) mod S` folding from constants) is unrolled S times, copy h with the stage index
//!   known, so every stage address is a constant and the stage arithmetic folds away
//!   ([`fold`]). A stage index that is not known when an op is lowered is an error.
//!
//! The mbarrier ops, `dot_async`/`dot_wait`, `fence_async` and `warp_specialize`, which the
//! scheduling passes do not emit for this backend, are errors naming the op and the target.

use super::ctx::{Ctx, Val};
use super::stages::{buffer, StageIx};
pub use super::state::StageBuf;
use super::PtxError;
use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::PtxInst;
use crate::ptx::plan::ir::lit;
use crate::ptx::plan::layout::Place;
use kir_ir::edit::fold::{eval, int_scalar};
use kir_ir::{Block, Dtype, Kernel, OpData, Opcode, Value};

/// Lowers a scheduling op.
pub fn lower_sched_op(c: &mut Ctx, op: &OpData) -> Result<(), PtxError> {
    let sp = op.span;
    match op.opcode {
        // The buffer is placed where it is first used (`buffer`), so tiles loaded before the
        // ring starts keep their places in front of it.
        Opcode::SmemAlloc => {}
        Opcode::AsyncCopy => {
            if op.attr("bar").is_some() {
                let (buf, ix) = stage_ix_of(c, op)?;
                if !buf.core || !c.target.has_tma() {
                    return unsupported(
                        c,
                        op,
                        "a tensor copy into a stage that is not in wgmma's 128B-swizzled layout",
                    );
                }
                let (off, dyn_off) = buf.stage_off(c, ix);
                if c.asyncs.tma.by_warps {
                    return super::ws::copy_by_warps(c, op, buf.shape, off, dyn_off);
                }
                return super::tma::lower_copy(c, op, buf.shape, off, dyn_off);
            }
            let (buf, h) = stage_of(c, op)?;
            if c.mem.release_pending {
                // Another thread may still read a released stage: every thread passes its
                // last read before the refill starts.
                c.sync_block();
                c.mem.release_pending = false;
            }
            let off = buf.off + h as u32 * buf.stride;
            super::memory::copy_into_stage(c, op, &buf.shape, off, buf.core)?;
        }
        Opcode::AsyncCommit => {
            c.b.need(Isa::CP_ASYNC)
                .ins(PtxInst::new("cp.async.commit_group"))
        }
        Opcode::AsyncWait => {
            let n = pending(op);
            wait(c, n);
        }
        Opcode::SmemRead => {
            let (buf, ix) = stage_ix_of(c, op)?;
            let r = result(op)?;
            let place = c.plan.places.get(&r).copied().unwrap_or(Place::Scalar);
            if matches!(ix, StageIx::Reg(_)) && !(buf.core && place == Place::Shared) {
                return Err(PtxError::at(
                    sp,
                    "internal: a run-time stage read other than a wgmma operand",
                ));
            }
            let v = buf.stage(c, ix);
            let v = match place {
                Place::Shared => v,
                Place::Reg(l) if !buf.core => super::convert::convert(c, &v, l, sp)?,
                _ => {
                    return Err(PtxError::at(
                        sp,
                        "internal: a wgmma operand stage read into registers",
                    ))
                }
            };
            c.values.vals.insert(r, v);
        }
        // A release emits nothing and needs no stage address: its stage index may be a run-time
        // value (a held ring's release after its loop).
        Opcode::SmemRelease => {
            let buf = op
                .operands
                .first()
                .copied()
                .ok_or_else(|| PtxError::at(sp, "smem_release needs a buffer"))?;
            buffer(c, buf, sp)?;
            // A TMA ring's release is its empty-barrier arrival, which the IR states.
            c.mem.release_pending |= !super::tma::tma_filled(c.k, buf);
        }
        _ => return unsupported(c, op, "this scheduling op"),
    }
    Ok(())
}

fn unsupported(c: &Ctx, op: &OpData, what: &str) -> Result<(), PtxError> {
    Err(PtxError::at(
        op.span,
        format!(
            "`{}` is scheduled IR, which the PTX backend does not lower for {} yet ({what})",
            op.opcode.name(),
            c.target.name()
        ),
    ))
}

fn result(op: &OpData) -> Result<Value, PtxError> {
    op.results
        .first()
        .copied()
        .ok_or_else(|| PtxError::at(op.span, "internal: op has no result"))
}

/// The `pending` count of an `async_wait` (0 when absent).
fn pending(op: &OpData) -> usize {
    lit(op.attr("pending")).unwrap_or(0.0).max(0.0) as usize
}

/// `cp.async.wait_group n`, the async-proxy fence when wgmma reads shared tiles, and the barrier
/// that makes the landed stages visible to every thread (and orders earlier reads of released
/// stages before later copies).
pub fn wait(c: &mut Ctx, n: usize) {
    c.b.need(Isa::CP_ASYNC)
        .ins(PtxInst::new("cp.async.wait_group").op(n));
    super::memory::fence_async(c);
    c.sync_block();
    c.mem.release_pending = false;
}

/// The buffer and the stage that a scheduling op's operands 0 and 1 name: known while lowering,
/// or, inside a ring that is not unrolled ([`dynamic_ring`]), its register.
fn stage_ix_of(c: &mut Ctx, op: &OpData) -> Result<(StageBuf, StageIx), PtxError> {
    if let (Some(&b), Some(&s)) = (op.operands.first(), op.operands.get(1)) {
        // Outside a dynamic ring, a core buffer read in place may still take a run-time
        // stage (`dot_overlap`'s last block, read after its loop on the stage the loop yields).
        if !c.values.statics.contains_key(&s)
            && (c.asyncs.tma.dynamic_ring || c.plan.core.contains(&b))
        {
            let buf = buffer(c, b, op.span)?;
            if c.asyncs.tma.dynamic_ring || buf.core {
                return match c.val(s, op.span)? {
                    Val::Scalar(r) => Ok((buf, StageIx::Reg(r))),
                    _ => Err(PtxError::at(op.span, "a stage index must be a scalar")),
                };
            }
        }
    }
    stage_of(c, op).map(|(b, h)| (b, StageIx::Known(h)))
}

/// The buffer and the stage (known while lowering) that a scheduling op's operands 0 and 1 name.
fn stage_of(c: &mut Ctx, op: &OpData) -> Result<(StageBuf, usize), PtxError> {
    let sp = op.span;
    let (Some(&b), Some(s)) = (op.operands.first(), op.operands.get(1)) else {
        return Err(PtxError::at(
            sp,
            "internal: a stage op without buffer and stage",
        ));
    };
    let buf = buffer(c, b, sp)?;
    let h = c.values.statics.get(s).copied().ok_or_else(|| {
        PtxError::at(
            sp,
            format!(
                "`{}`: the PTX backend needs every stage index known at compile time on {}: a \
                 constant, or the stage index a loop carries as the pipelining pass emits it \
                 (the loop is unrolled once per stage)",
                op.opcode.name(),
                c.target.name()
            ),
        )
    })?;
    if h < 0 || h as usize >= buf.stages {
        return Err(PtxError::at(
            sp,
            format!("stage {h} of a buffer of {} stages", buf.stages),
        ));
    }
    Ok((buf, h as usize))
}

/// A loop that carries a stage index the way the pipelining pass emits it.
#[derive(Clone, Copy, Debug)]
pub struct Ring {
    /// Index of the carried value (0 = the first `iter` value).
    pub carried: usize,
    pub stages: usize,
    /// The stage of the first iteration.
    pub init: usize,
}

/// The stage ring of `for` op `op`: a carried i32 that is the stage operand of a `smem_read` or
/// `smem_release` of the body, starts at a known stage, goes from each stage h to (h + 1) mod S
/// (S the buffer's stage count) through foldable ops, and whose final value is unused.
pub fn stage_ring(c: &Ctx, op: &OpData) -> Option<Ring> {
    let k = c.k;
    let body = *op.regions.first()?;
    let bd = &k.dfg.blocks[body];
    let yielded = bd.ops.last().map(|&y| k.dfg.ops[y].operands.clone())?;
    for (i, &arg) in bd.args.iter().enumerate().skip(1) {
        let ci = i - 1;
        if int_scalar(k, arg) != Some(Dtype::I32) {
            continue;
        }
        let stages: Vec<usize> = bd
            .ops
            .iter()
            .map(|&o| &k.dfg.ops[o])
            .filter(|o| matches!(o.opcode, Opcode::SmemRead | Opcode::SmemRelease))
            .filter(|o| o.operands.get(1) == Some(&arg))
            .filter_map(|o| {
                let (n, _) = k.dfg.ty(*o.operands.first()?).stage()?;
                n.as_int().and_then(|n| usize::try_from(n).ok())
            })
            .collect();
        let Some(&s) = stages.first() else { continue };
        if s == 0 || stages.iter().any(|&x| x != s) {
            continue;
        }
        let init = op
            .operands
            .get(3 + ci)
            .and_then(|v| c.values.statics.get(v).copied())
            .and_then(|x| usize::try_from(x).ok());
        let Some(init) = init.filter(|&x| x < s) else {
            continue;
        };
        let unused = op
            .results
            .get(ci)
            .is_some_and(|&r| kir_ir::edit::use_count(&k.dfg, r) == 0);
        let Some(&next) = yielded.get(ci) else {
            continue;
        };
        let steps = (0..s).all(|h| {
            let known = |v: Value| {
                if v == arg {
                    Some(h as i64)
                } else {
                    c.values.statics.get(&v).copied()
                }
            };
            eval(k, next, &known, 0) == Some(((h + 1) % s) as i64)
        });
        if unused && steps {
            return Some(Ring {
                carried: ci,
                stages: s,
                init,
            });
        }
    }
    None
}

/// True if `b` (or a region nested in it) has an op of opcode `opc` that block barriers order
/// (not a TMA ring's copies and releases, which its mbarriers order).
pub fn contains(k: &Kernel, b: Block, opc: Opcode) -> bool {
    kir_ir::edit::contains(&k.dfg, b, &|od| od.opcode == opc && !barrier_ordered(k, od))
}

/// A copy or release of a TMA ring: ordered by the ring's mbarriers, not by block barriers.
fn barrier_ordered(k: &Kernel, od: &OpData) -> bool {
    match od.opcode {
        Opcode::AsyncCopy => od.attr("bar").is_some(),
        Opcode::SmemRelease => od
            .operands
            .first()
            .is_some_and(|&b| super::tma::tma_filled(k, b)),
        _ => false,
    }
}

/// An op an `async_wait` may be hoisted over: pure computation, copies, and `if`s of those.
fn crossable(k: &Kernel, od: &OpData) -> bool {
    match od.opcode {
        Opcode::AsyncCopy | Opcode::Yield => true,
        Opcode::If => od.regions.iter().all(|&r| {
            k.dfg.blocks[r]
                .ops
                .iter()
                .all(|&o| crossable(k, &k.dfg.ops[o]))
        }),
        o => o.is_pure() && od.regions.is_empty(),
    }
}

/// The first `async_wait pending N` of a block's ops that can be hoisted over copies and
/// `async_commit`s before it: (index to emit it before, index of the wait, the pending count
/// there = N − the commits it passes). Waiting for the same groups before they are joined by
/// younger ones is the same wait, and its barrier then precedes the copies.
pub fn hoisted_wait(k: &Kernel, ops: &[kir_ir::Op]) -> Option<(usize, usize, usize)> {
    let (mut at, mut commits) = (0, 0);
    for (i, &o) in ops.iter().enumerate() {
        let od = &k.dfg.ops[o];
        match od.opcode {
            Opcode::AsyncWait => {
                let n = pending(od);
                if commits > 0 && n >= commits {
                    return Some((at, i, n - commits));
                }
                (at, commits) = (i + 1, 0);
            }
            Opcode::AsyncCommit => commits += 1,
            _ if crossable(k, od) => {}
            _ => (at, commits) = (i + 1, 0),
        }
    }
    None
}

/// True when ring loop `op` (its stage index carried as `ring` says) need not be unrolled: a TMA
/// ring (its copies complete on mbarriers) whose every stage read is a wgmma operand (a
/// core-layout buffer read in place), so every stage address can be a run-time offset (a wgmma
/// descriptor's base, a tensor copy's destination, a barrier's address). The loop body is then
/// emitted once, with the stage index in a register.
pub fn dynamic_ring(c: &Ctx, op: &OpData) -> bool {
    let Some(&body) = op.regions.first() else {
        return false;
    };
    let mut tma = false;
    let mut ok = true;
    fn walk(c: &Ctx, b: Block, tma: &mut bool, ok: &mut bool) {
        for &o in &c.k.dfg.blocks[b].ops {
            let od = &c.k.dfg.ops[o];
            match od.opcode {
                Opcode::AsyncCopy if od.attr("bar").is_some() => *tma = true,
                Opcode::AsyncCopy | Opcode::AsyncWait | Opcode::AsyncCommit => *ok = false,
                Opcode::SmemRead => {
                    let shared = od
                        .results
                        .first()
                        .is_some_and(|r| c.plan.places.get(r) == Some(&Place::Shared));
                    let core = od.operands.first().is_some_and(|b| c.plan.core.contains(b));
                    *ok &= shared && core;
                }
                _ => {}
            }
            for &r in &od.regions {
                walk(c, r, tma, ok);
            }
        }
    }
    walk(c, body, &mut tma, &mut ok);
    tma && ok
}
