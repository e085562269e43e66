//! TMA rings on the PTX backend (targets with `has_tma` and `has_mbarrier_tx`): the mbarrier
//! ops of scheduled IR and the copies that complete on them, as the `pipelining` pass's TMA
//! rings use them in a kernel that is not warp-specialized (every thread reads the stages).
//!
//! - `mbar_alloc` reserves 8 bytes per stage (8-byte aligned) in shared memory. The filling thread
//!   (lane 0 of the last warp) initialises each barrier with its hardware arrival count, then `fence.mbarrier_init` and
//!   `bar.sync 0` publish the barriers before any use. An IR arrival with `tx` is one thread's
//!   (the filling thread), so such a barrier keeps the IR count; an IR arrival without `tx` is
//!   the whole block's, made by lane 0 of every warp after `bar.warp.sync` (not by every thread:
//!   one shared-memory atomic per warp instead of 32), so its count is the IR count times the warps.
//!   A barrier with both kinds of arrivals is an error.
//! - `mbar_arrive %m, %s tx B` is `mbarrier.arrive.expect_tx` by the filling thread;
//!   `mbar_arrive %m, %s` is `mbarrier.arrive` by lane 0 of every warp, after `wgmma.wait_group 0` when a wgmma may still read
//!   shared memory (a stage must not be released while an asynchronous read of it runs).
//! - `mbar_wait %m, %s, %p` polls `mbarrier.try_wait.parity` until the phase with parity p has
//!   completed.
//! - `async_copy … bar %m` into stage s of a core-layout buffer (wgmma's 128B-swizzled layout,
//!   wgmma.rs) is one `cp.async.bulk.tensor` per 64 columns, issued by the filling thread from the kernel's
//!   tensor map of that tensor and box (abi.rs, [`AbiArg::TensorMap`]); the box lands at
//!   stage offset + (j / 64) · rows · 128, exactly the core layout, and completes its bytes on
//!   `m[s]`. TMA writes through the async proxy and the barrier's completion publishes them.
//! - A *producer block* (the body of the ring's `if` that starts a fill) runs on the filling
//!   thread alone (`producer.rs`).
//!
//! [`AbiArg::TensorMap`]: crate::abi::AbiArg::TensorMap

use super::ctx::Ctx;
pub use super::state::MbarBuf;
use super::PtxError;
use crate::abi::TMA_BOX_COLS;
use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::{Operand, PtxInst, Reg, RegClass};
use kir_ir::{Kernel, OpData, Opcode, ParamKind, Span, Value};

/// The predicate of the thread that fills the ring: lane 0 of the block's last warp (in the
/// prologue). With two ping-ponging warpgroups the second one finishes each stage last, so its
/// thread finds the stage released when it refills it, and the first warpgroup never waits on a
/// release (thread 0 cost 441 → 388 TFLOP/s on the H200, docs/benchmarks.md).
pub(super) fn elected(c: &mut Ctx) -> Reg {
    if let Some(p) = c.asyncs.tma.elected {
        return p;
    }
    let (p, tid, last) = (
        c.b.reg(RegClass::Pred),
        c.thread.tid,
        c.plan.blk.threads - 32,
    );
    c.b.in_prologue(|b| b.ins(PtxInst::new("setp.eq.u32").op(p).op(tid).op(last)));
    c.asyncs.tma.elected = Some(p);
    p
}

/// The predicate of the filling warp, the block's last (in the prologue): uniform in each warp,
/// and computed from the warp index, which a kernel with wgmma operands broadcasts from lane 0
/// (kernel.rs), so ptxas knows it is.
pub(super) fn filling_warp(c: &mut Ctx) -> Reg {
    if let Some(p) = c.asyncs.tma.filling_warp {
        return p;
    }
    let (p, warp, last) = (
        c.b.reg(RegClass::Pred),
        c.thread.warp,
        c.plan.blk.warps.max(1) - 1,
    );
    c.b.in_prologue(|b| b.ins(PtxInst::new("setp.eq.u32").op(p).op(warp).op(last)));
    c.asyncs.tma.filling_warp = Some(p);
    p
}

/// The filling thread's predicate, unless the code already runs on it alone: in a producer
/// block run by the filling warp, the lane its `elect.sync` elected (producer.rs).
fn on_elected(c: &mut Ctx) -> Option<Reg> {
    if c.asyncs.tma.in_producer {
        c.asyncs.tma.lead
    } else {
        Some(elected(c))
    }
}

/// Declares the tensor-map param `pname` and takes its generic address (in the prologue).
pub fn map_param(c: &mut Ctx, pname: &str, param: &str, boxes: &[u32]) -> String {
    let r = c.b.reg(RegClass::B64);
    c.b.in_prologue(|b| {
        b.ins(PtxInst::new("mov.u64").op(r).op(pname));
        b.ins(PtxInst::new("cvta.param.u64").op(r).op(r));
    });
    c.asyncs
        .tma
        .maps
        .insert((param.to_string(), boxes.to_vec()), r);
    format!(".param .align 64 .b8 {pname}[128]")
}

/// Whether every IR arrival on barrier `m` carries `tx` (`Some(true)`), none does
/// (`Some(false)`), or both kinds occur (`None`).
fn arrivals_with_tx(k: &Kernel, m: Value) -> Option<bool> {
    let (mut with, mut without) = (false, false);
    for (_, od) in k.dfg.ops.iter() {
        if od.opcode == Opcode::MbarArrive && od.operands.first() == Some(&m) {
            if od.attr("tx").is_some() {
                with = true;
            } else {
                without = true;
            }
        }
    }
    match (with, without) {
        (true, true) => None,
        (w, _) => Some(w),
    }
}

/// `mbar_alloc`: reserve, initialise and publish the barriers.
pub fn lower_alloc(c: &mut Ctx, op: &OpData) -> Result<(), PtxError> {
    let sp = op.span;
    let m = *op
        .results
        .first()
        .ok_or_else(|| PtxError::at(sp, "internal: mbar_alloc without a result"))?;
    let stages =
        c.k.dfg
            .ty(m)
            .shape()
            .and_then(|s| s.first().copied())
            .ok_or_else(|| PtxError::at(sp, "mbar_alloc needs a literal stage count"))?;
    let ir_count = crate::ptx::plan::ir::lit(op.attr("arrivals")).unwrap_or(1.0) as u64;
    let with_tx = arrivals_with_tx(c.k, m).ok_or_else(|| {
        PtxError::at(
            sp,
            format!(
                "a barrier with arrivals both with and without `tx`: the PTX backend cannot \
                 count them on {}",
                c.target.name()
            ),
        )
    })?;
    let count = if with_tx {
        ir_count
    } else {
        ir_count * u64::from(c.plan.blk.warps)
    };
    if count >= 1 << 20 {
        return Err(PtxError::at(
            sp,
            format!("{count} arrivals per phase: an mbarrier counts at most 2^20 - 1"),
        ));
    }
    let off = c.alloc_shared_aligned(8 * stages as u32, 8);
    let e = elected(c);
    let smem = c.mem.smem;
    // A warp-specialized kernel's full barrier counts the producer warps' arrivals instead when
    // its tensors admit no map (ws.rs).
    let count = if with_tx && c.asyncs.ws.raw_tid.is_some() {
        let fb =
            super::ws_fallback::fallback_arrivals(c, m).map_err(|msg| PtxError::at(sp, msg))?;
        let (ok, r) = (super::ws_fallback::tma_ok(c), c.b.reg(RegClass::B32));
        c.b.ins(PtxInst::new("selp.u32").op(r).op(count).op(fb).op(ok));
        Operand::from(r)
    } else {
        Operand::from(count)
    };
    for h in 0..stages {
        let a = c.b.reg(RegClass::B32);
        c.b.ins(
            PtxInst::new("add.u32")
                .op(a)
                .op(smem)
                .op(off + 8 * h as u32),
        );
        c.b.need(Isa::MBARRIER_TX).ins(
            PtxInst::new("mbarrier.init.shared::cta.b64")
                .addr(a)
                .op(&count)
                .guard(e, false),
        );
    }
    c.b.need(Isa::MBARRIER_TX)
        .ins(PtxInst::new("fence.mbarrier_init.release.cluster"));
    c.sync_block();
    let rows_off = super::tma_rows::has_masked_fills(c.k, m)
        .then(|| c.alloc_shared_aligned(4 * stages as u32, 4));
    let cluster = c.k.dfg.ops.values().any(|od| {
        od.opcode == Opcode::MbarArrive
            && od.operands.first() == Some(&m)
            && od.attr("cluster").is_some()
    });
    c.asyncs.tma.bars.insert(
        m,
        MbarBuf {
            off,
            stages,
            rows_off,
            cluster,
        },
    );
    Ok(())
}

/// The shared address of `m[s]` for the stage operand at `op.operands[1]`.
fn bar_addr(c: &mut Ctx, m: Value, s: Value, sp: Span) -> Result<Reg, PtxError> {
    let buf = *c
        .asyncs
        .tma
        .bars
        .get(&m)
        .ok_or_else(|| PtxError::at(sp, "internal: an mbarrier used before its mbar_alloc"))?;
    let (a, smem) = (c.b.reg(RegClass::B32), c.mem.smem);
    // A stage not known while lowering (a dynamic ring's, or one a loop yields) is a register.
    if !c.values.statics.contains_key(&s) {
        let super::ctx::Val::Scalar(r) = c.val(s, sp)? else {
            return Err(PtxError::at(sp, "a stage index must be a scalar"));
        };
        c.b.ins(PtxInst::new("mad.lo.s32").op(a).op(r).op(8).op(smem));
        c.b.ins(PtxInst::new("add.u32").op(a).op(a).op(buf.off));
        return Ok(a);
    }
    let h = known_stage(c, s, buf.stages, sp)?;
    c.b.ins(
        PtxInst::new("add.u32")
            .op(a)
            .op(smem)
            .op(buf.off + 8 * h as u32),
    );
    Ok(a)
}

/// A stage index known while lowering (a constant or an unrolled ring's stage).
pub fn known_stage(c: &Ctx, s: Value, stages: usize, sp: Span) -> Result<usize, PtxError> {
    match c.values.statics.get(&s) {
        Some(&h) if h >= 0 && (h as usize) < stages => Ok(h as usize),
        Some(&h) => Err(PtxError::at(sp, format!("stage {h} of {stages}"))),
        None => Err(PtxError::at(
            sp,
            format!(
                "the PTX backend needs every mbarrier stage index known at compile time on {} \
                 (a constant, or the stage a ring's loop carries)",
                c.target.name()
            ),
        )),
    }
}

/// `mbar_arrive`.
pub fn lower_arrive(c: &mut Ctx, op: &OpData) -> Result<(), PtxError> {
    let sp = op.span;
    let (Some(&m), Some(&s)) = (op.operands.first(), op.operands.get(1)) else {
        return Err(PtxError::at(
            sp,
            "internal: mbar_arrive needs a barrier and a stage",
        ));
    };
    let a = bar_addr(c, m, s, sp)?;
    match crate::ptx::plan::ir::lit(op.attr("tx")) {
        // The warps' copies arrive themselves, once each is done (ws.rs, `copy_by_warps`);
        // thread 0 first stores the fill's valid-row count the readers zero by (a masked
        // ring's), which its warp's arrival after its own copies publishes.
        Some(_) if c.asyncs.tma.by_warps => {
            if super::tma_rows::has_masked_fills(c.k, m) {
                let p = c.b.reg(RegClass::Pred);
                c.b.ins(PtxInst::new("setp.eq.u32").op(p).op(c.thread.tid).op(0));
                super::tma_rows::store_valid_rows(c, op, m, s, Some(p))?;
            }
        }
        Some(tx) => {
            let pre = on_elected(c);
            super::tma_rows::store_valid_rows(c, op, m, s, pre)?;
            c.b.need(Isa::MBARRIER_TX).ins(
                PtxInst::new("mbarrier.arrive.expect_tx.shared::cta.b64")
                    .op(Operand::Sink)
                    .addr(a)
                    .op(tx as u64)
                    .guard_opt(pre),
            );
        }
        None if c.asyncs.wgmma_in_flight && c.asyncs.ws.raw_tid.is_some() => {
            // A held dot still reads this stage; the previous iteration's group has retired
            // (its `wait_group 1`), so the stage owed since then is released now, and this one
            // is owed until the next iteration (or the loop's end: [`pay_owed`]).
            let owed = owed_reg(c, m);
            let s_reg = match c.values.statics.get(&s) {
                Some(&h) => c.b.imm32(h),
                None => match c.val(s, sp)? {
                    super::ctx::Val::Scalar(r) => r,
                    _ => return Err(PtxError::at(sp, "a stage index must be a scalar")),
                },
            };
            arrive_owed(c, m, owed, sp)?;
            c.b.ins(PtxInst::new("mov.b32").op(owed).op(s_reg));
        }
        None => {
            if c.asyncs.wgmma_in_flight {
                // Every asynchronous read of the stage has retired before it is released.
                c.b.need(Isa::WGMMA)
                    .ins(PtxInst::new("wgmma.wait_group.sync.aligned").op(0));
                c.asyncs.wgmma_in_flight = false;
            }
            // Lane 0 arrives for its warp once every lane's reads are done.
            let l0 = c.warp_arrive_at(a);
            if c.asyncs.tma.bars.get(&m).is_some_and(|b| b.cluster) {
                super::cluster::peer_arrive(c, a, l0, sp)?;
            }
        }
    }
    Ok(())
}

/// Lane 0 of every warp arrives on `m[s]` once the warp's lanes are done (`bar.warp.sync`).
pub fn warp_arrive(c: &mut Ctx, m: Value, s: Value, sp: Span) -> Result<(), PtxError> {
    let a = bar_addr(c, m, s, sp)?;
    c.warp_arrive_at(a);
    Ok(())
}

/// The register of the stage owed to barrier `m` (set to −1 in the prologue).
fn owed_reg(c: &mut Ctx, m: Value) -> Reg {
    if let Some(&(_, r)) = c.asyncs.tma.owed.iter().find(|(v, _)| *v == m) {
        return r;
    }
    let r = c.b.reg(RegClass::B32);
    c.b.in_prologue(|b| b.ins(PtxInst::new("mov.b32").op(r).op(-1)));
    c.asyncs.tma.owed.push((m, r));
    r
}

/// Lane 0 of every warp arrives on `m[owed]` when a stage is owed (`owed` ≥ 0).
fn arrive_owed(c: &mut Ctx, m: Value, owed: Reg, sp: Span) -> Result<(), PtxError> {
    let buf = *c
        .asyncs
        .tma
        .bars
        .get(&m)
        .ok_or_else(|| PtxError::at(sp, "internal: an mbarrier used before its mbar_alloc"))?;
    let (p, a, smem) = (c.b.reg(RegClass::Pred), c.b.reg(RegClass::B32), c.mem.smem);
    let l0 = c.lane0();
    c.b.ins(PtxInst::new("setp.ge.and.s32").op(p).op(owed).op(0).op(l0));
    c.b.ins(PtxInst::new("mad.lo.s32").op(a).op(owed).op(8).op(smem));
    c.b.ins(PtxInst::new("add.u32").op(a).op(a).op(buf.off));
    c.arrive_after_warp(a, p);
    if buf.cluster {
        super::cluster::peer_arrive(c, a, p, sp)?;
    }
    Ok(())
}

/// At the end of a loop whose held dot has retired (`wgmma.wait_group 0`): the deferred
/// empty-barrier arrivals are made, and nothing is owed any more.
pub fn pay_owed(c: &mut Ctx, sp: Span) -> Result<(), PtxError> {
    for (m, owed) in c.asyncs.tma.owed.clone() {
        arrive_owed(c, m, owed, sp)?;
        c.b.ins(PtxInst::new("mov.b32").op(owed).op(-1));
    }
    Ok(())
}

/// `mbar_wait`: poll until the phase with the given parity has completed.
pub fn lower_wait(c: &mut Ctx, op: &OpData) -> Result<(), PtxError> {
    let sp = op.span;
    let (Some(&m), Some(&s), Some(&par)) =
        (op.operands.first(), op.operands.get(1), op.operands.get(2))
    else {
        return Err(PtxError::at(
            sp,
            "internal: mbar_wait needs a barrier, a stage and a parity",
        ));
    };
    let a = bar_addr(c, m, s, sp)?;
    let par = match c.values.statics.get(&par) {
        Some(&p) => Operand::Imm(p & 1),
        None => match c.val(par, sp)? {
            super::ctx::Val::Scalar(r) => Operand::Reg(r),
            _ => return Err(PtxError::at(sp, "an mbarrier parity must be a scalar")),
        },
    };
    let (p, top) = (c.b.reg(RegClass::Pred), c.b.label("mbar_wait"));
    c.b.place(&top);
    c.b.need(Isa::MBARRIER_TX).ins(
        PtxInst::new("mbarrier.try_wait.parity.shared::cta.b64")
            .op(p)
            .addr(a)
            .op(par),
    );
    c.b.ins_if(p, true, PtxInst::new("bra.uni").op(&top));
    // A reader's wait on a full barrier: rows a masked copy must not deliver are zeroed.
    if !c.asyncs.tma.in_producer {
        super::tma_rows::zero_masked_rows(c, op, m, s)?;
    }
    Ok(())
}

/// `async_copy … bar %m` into the stage of a core-layout buffer at shared offset `off` (plus
/// `dyn_off` for a run-time stage; [rows, cols]): one tensor copy per 64 columns, by the
/// filling thread.
pub fn lower_copy(
    c: &mut Ctx,
    op: &OpData,
    shape: [usize; 2],
    off: u32,
    dyn_off: Option<Reg>,
) -> Result<(), PtxError> {
    let sp = op.span;
    let t = super::memory::copy_tensor(op)?;
    let (Some(kir_ir::Attr::Value(m)), Some(&s)) = (op.attr("bar"), op.operands.get(1)) else {
        return Err(PtxError::at(
            sp,
            "internal: a tensor copy without its barrier",
        ));
    };
    let rank = match c.k.param(&t.param).map(|p| &p.kind) {
        Some(ParamKind::Tensor(_, tt)) => tt.dims.len(),
        _ => return Err(PtxError::at(sp, format!("unknown tensor `{}`", t.param))),
    };
    let [rows, cols] = shape;
    let mut boxes = vec![1u32; rank];
    boxes[rank - 2] = rows as u32;
    boxes[rank - 1] = TMA_BOX_COLS;
    let map = *c
        .asyncs
        .tma
        .maps
        .get(&(t.param.clone(), boxes))
        .ok_or_else(|| {
            PtxError::at(
                sp,
                format!("internal: no tensor map of `{}` for this box", t.param),
            )
        })?;
    let mbar = bar_addr(c, *m, s, sp)?;
    let offs = super::elem::offsets(c, t, sp)?;
    let pre = on_elected(c);
    let nblk = cols / TMA_BOX_COLS as usize;
    let shared = super::cluster::multicast(c, op, nblk, pre)?;
    let copy = super::cluster::BoxCopy {
        map,
        mbar,
        offs: &offs,
        rank,
        rows,
        off,
        dyn_off,
    };
    let smem = c.mem.smem;
    for blk in 0..nblk {
        let (dst, col) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
        let at = off + (blk * rows * 128) as u32;
        c.b.ins(PtxInst::new("add.u32").op(dst).op(smem).op(at));
        let dst = c.plus_dyn(dst, dyn_off);
        c.b.ins(
            PtxInst::new("add.s32")
                .op(col)
                .op(offs[rank - 1])
                .op(blk * TMA_BOX_COLS as usize),
        );
        let inst = copy.inst(dst, col, None);
        let inst = match &shared {
            Some(sh) => inst.guard(sh.pred, true),
            None => inst.guard_opt(pre),
        };
        c.b.need(Isa::CP_ASYNC_BULK_TENSOR).ins(inst);
    }
    if let Some(sh) = shared {
        super::cluster::issue_shared(c, &copy, nblk, &sh);
    }
    Ok(())
}

/// Whether buffer `b` is filled by tensor copies (its releases are the ring's empty-barrier
/// arrivals, so a release orders nothing by itself).
pub fn tma_filled(k: &Kernel, b: Value) -> bool {
    k.dfg.ops.values().any(|od| {
        od.opcode == Opcode::AsyncCopy
            && od.attr("bar").is_some()
            && od.operands.first() == Some(&b)
    })
}

/// Whether every tensor copy (`async_copy … bar`) of every kernel of `m` fills a buffer that the
/// kernel's plan on `target` with `warps` (as `--warps` gives them) puts in wgmma's core layout,
/// the only layout a tensor copy writes. The compile driver schedules cp.async rings instead
/// when it does not (a tile whose dots take mma.sync with the chosen warps).
pub fn tma_rings_lowerable(
    m: &kir_ir::Module,
    target: crate::target::Target,
    warps: Option<u32>,
) -> bool {
    m.kernels.values().all(|k| {
        let copies: Vec<Value> = k
            .dfg
            .ops
            .values()
            .filter(|od| od.opcode == Opcode::AsyncCopy && od.attr("bar").is_some())
            .filter_map(|od| od.operands.first().copied())
            .collect();
        if copies.is_empty() {
            return true;
        }
        let plan = crate::ptx::plan::plan(k, target, warps);
        target.has_tma() && copies.iter().all(|b| plan.core.contains(b))
    })
}
