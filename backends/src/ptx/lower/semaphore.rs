//! `sem_wait` and `sem_signal`: counters in global memory that order one element's adds across
//! programs (attention_bwd's ordered dq, docs/ops.md), the pattern of FlashAttention-3's
//! deterministic backward.
//!
//! **Signal.** The IR's `sem_signal` adds 1 once the program's earlier writes are complete:
//! every thread waits for its bulk reductions to complete (`cp.async.bulk.wait_group 0`; only
//! their issuing threads have any), the block meets at its barrier, so every thread's earlier
//! writes precede what thread 0 does next, and thread 0 adds 1 with `red.release.gpu`, the
//! counter's value exactly what the IR says (the interpreter and the CUDA-C backend count the
//! same).
//!
//! A signal may come later than the IR places it (a wait for it then lasts longer, nothing
//! else changes), and in a kernel with `atomic_add`s it does (in one without, whose writes
//! are plain stores, it is given where the IR places it): right after the add, the add has not completed, and waiting for
//! it would hold the warpgroup's next dot. So `sem_signal` only records the counter and that a
//! signal is owed (two registers, uniform across the block); the signal is given before the
//! program's next `sem_wait` or `sem_signal` (in attention_bwd's loop, at the next query
//! block's add, a whole step later, when the add has long completed: giving it after that
//! step's first dot instead held each warpgroup there, 341 TFLOP/s against 481 for the
//! unordered adds, docs/benchmarks.md), after a loop that holds one, and before the kernel
//! returns.
//!
//! With a writer warp (writer.rs) an ordered add's wait and signal are the writer's: it spins
//! before its issue and signals once the add completes; the `sem_signal` after such an add is
//! lowered here only for the add's per-element path.
//!
//! **Wait.** When the next op is an `atomic_add` lowered as a bulk reduction, only its issuing
//! threads (thread 0, or each warpgroup's first thread) spin (right before their
//! issue, after the other threads staged the rows) and then fence the async proxy
//! (`fence.proxy.async.global`), so the wait overlaps the staging; on the per-element path of
//! that add, and before any other op, every thread spins by itself (`ld.acquire.gpu` in a
//! loop), so no barrier is needed after it.
//!
//! A GPU starts a grid's programs in order (axis 0 fastest), so a program that waits only for
//! earlier programs (the IR's rule) waits for programs that run or have run. The interpreter
//! runs programs in that order and reports a wait that would never end.

use super::ctx::{Ctx, Val};
use super::elem::{element, offsets};
use super::state::{SemWait, Signal};
use super::PtxError;
use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::{PtxInst, Reg, RegClass};
use kir_ir::{Block, Dtype, OpData, Opcode};

/// The counter's address and in-bounds predicate.
pub(super) fn counter(c: &mut Ctx, op: &OpData) -> Result<(Reg, Reg), PtxError> {
    let sp = op.span;
    let (t, info) = c.tensor_of(op)?;
    if info.dtype != Dtype::I32 {
        return Err(PtxError::at(
            sp,
            format!(
                "`{}` counts in i32, `{}` holds {}",
                op.opcode.name(),
                t.param,
                info.dtype
            ),
        ));
    }
    let offs = offsets(c, t, sp)?;
    Ok(element(c, &info, &offs, &[]))
}

/// Lowers `sem_wait`: records the wait for the next op to spin on (see the module doc).
pub(super) fn lower_wait(c: &mut Ctx, op: &OpData) -> Result<(), PtxError> {
    flush(c);
    // A program never waits while it owes a signal (it might be the one waited for).
    give(c);
    let &n = op
        .operands
        .first()
        .ok_or_else(|| PtxError::at(op.span, "`sem_wait` needs a count"))?;
    let Val::Scalar(n) = c.val(n, op.span)? else {
        return Err(PtxError::at(op.span, "`sem_wait` counts with a scalar"));
    };
    let (addr, inb) = counter(c, op)?;
    c.mem.sem_wait = Some(SemWait { addr, inb, want: n });
    Ok(())
}

/// Before op `op`: a pending wait that `op` does not take over (only an `atomic_add` does) is
/// spun on by every thread.
pub(super) fn before(c: &mut Ctx, op: &OpData) {
    if op.opcode != Opcode::AtomicAdd {
        flush(c);
    }
}

/// Spins every thread on the pending wait, if any.
pub(super) fn flush(c: &mut Ctx) {
    if let Some(w) = c.mem.sem_wait.take() {
        spin(c, w);
    }
}

/// Takes the pending wait for an `atomic_add` that spins on it itself.
pub(super) fn take(c: &mut Ctx) -> Option<SemWait> {
    c.mem.sem_wait.take()
}

/// Whether block `b`, or a block nested in it, holds a `sem_signal`.
fn signals_in(c: &Ctx, b: Block) -> bool {
    kir_ir::edit::contains(&c.k.dfg, b, &|od| od.opcode == Opcode::SemSignal)
}

/// At the kernel's start: in a kernel with a `sem_signal`, the registers of the deferred
/// signal, none owed.
pub(super) fn start(c: &mut Ctx) {
    if !signals_in(c, c.k.body) {
        return;
    }
    let (addr, owed) = (c.b.reg(RegClass::B64), c.b.reg(RegClass::Pred));
    c.b.ins(PtxInst::new("mov.b64").op(addr).op(0));
    c.b.ins(PtxInst::new("mov.pred").op(owed).op(0));
    c.mem.signal = Some(Signal { addr, owed });
}

/// After op `op`: a loop that holds a `sem_signal` gives the signal its last iteration owes.
pub(super) fn after_op(c: &mut Ctx, op: &OpData) {
    if op.opcode == Opcode::For && op.regions.iter().any(|&r| signals_in(c, r)) {
        give(c);
    }
}

/// Gives the signal owed, if any (a uniform branch around it): every thread waits for its
/// bulk reductions, the block meets, and thread 0 adds 1 with release semantics.
pub(super) fn give(c: &mut Ctx) {
    let Some(Signal { addr, owed }) = c.mem.signal else {
        return;
    };
    let skip = c.b.label("signal_given");
    c.b.ins_if(owed, true, PtxInst::new("bra.uni").op(&skip));
    if c.target.has_tma() && c.k.dfg.ops.values().any(|o| o.opcode == Opcode::AtomicAdd) {
        c.b.ins(PtxInst::new("cp.async.bulk.wait_group").op(0));
    }
    c.sync_block();
    let lead = c.b.reg(RegClass::Pred);
    c.b.ins(PtxInst::new("setp.eq.u32").op(lead).op(c.thread.tid).op(0));
    let one = c.b.imm32(1);
    c.b.need(Isa::ACQUIRE_RELEASE).ins_if(
        lead,
        false,
        PtxInst::new("red.release.gpu.global.add.s32")
            .addr(addr)
            .op(one),
    );
    c.b.ins(PtxInst::new("mov.pred").op(owed).op(0));
    c.b.place(&skip);
}

/// Lowers `sem_signal`: gives any signal still owed, then owes this one (see the module doc).
/// A counter outside its tensor is never touched (`guard` only spares the interpreter's error;
/// GPU code never accesses memory out of bounds, docs/backends.md).
pub(super) fn lower_signal(c: &mut Ctx, op: &OpData) -> Result<(), PtxError> {
    // Given by the writer warp after the add before it completes, on that add's writer path
    // (writer.rs); lowered here for its other path.
    let by_writer = c.mem.taken_signal.take().map(|fast| {
        let l = c.b.label("signal_by_writer");
        c.b.ins_if(fast, false, PtxInst::new("bra.uni").op(&l));
        l
    });
    let r = owe(c, op);
    if let Some(l) = by_writer {
        c.b.place(&l);
    }
    r
}

/// `sem_signal` without the writer: gives any signal still owed, then owes this one.
fn owe(c: &mut Ctx, op: &OpData) -> Result<(), PtxError> {
    flush(c);
    give(c);
    let (addr, inb) = counter(c, op)?;
    let Some(sig) = c.mem.signal else {
        return Err(PtxError::at(
            op.span,
            "internal: a `sem_signal` the kernel's scan missed",
        ));
    };
    c.b.ins(PtxInst::new("mov.b64").op(sig.addr).op(addr));
    c.b.ins(PtxInst::new("mov.pred").op(sig.owed).op(inb));
    // Without asynchronous adds to wait for, nothing is gained by deferring: the writes before
    // the signal are plain stores, complete at the block's barrier, so it is given now.
    if !c.k.dfg.ops.values().any(|o| o.opcode == Opcode::AtomicAdd) {
        give(c);
    }
    Ok(())
}

/// Spins until the counter of `w` reaches its count (`ld.acquire.gpu`, so this thread's later
/// accesses are ordered after the writes the counted signals released); a counter outside its
/// tensor is not waited for.
pub(super) fn spin(c: &mut Ctx, w: SemWait) {
    let (top, past) = (c.b.label("sem_spin"), c.b.label("sem_reached"));
    c.b.ins_if(w.inb, true, PtxInst::new("bra").op(&past));
    c.b.place(&top);
    let (have, low) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::Pred));
    c.b.need(Isa::ACQUIRE_RELEASE).ins(
        PtxInst::new("ld.acquire.gpu.global.s32")
            .op(have)
            .addr(w.addr),
    );
    c.b.ins(PtxInst::new("setp.lt.s32").op(low).op(have).op(w.want));
    c.b.ins_if(low, false, PtxInst::new("bra").op(&top));
    c.b.place(&past);
}
