//! The writer warp of a warp-specialized kernel's bulk reductions: FlashAttention-3's dQ writer.
//!
//! Without it (bulk_reduce.rs) each warpgroup's first thread issues its part's bulk reduction,
//! waits for the previous one's read before the part is written again, and, for an ordered add
//! (`sem_wait` before it, `sem_signal` after: attention_bwd's `ORDERED=1`), spins on the counter
//! right before the issue; the warpgroup's next wgmma waits with it (docs/ops.md, "The ordered
//! mode"). In a kernel with one consumer partition and a producer warpgroup of at least two
//! warps, the producer's second warp (its lane 0) does all of that instead, as a loop over
//! messages:
//!
//! - **Consumer.** Every thread of warpgroup g waits until the writer has read g's part of the
//!   region (`empty[g]`, a fresh barrier passes at once), writes its rows, fences them for the
//!   async proxy; the warpgroup's first thread writes g's mailbox (the part's global and shared
//!   addresses, its bytes, flags, and the ordered add's counters); lane 0 of each warp arrives on
//!   `full[g]` (4 arrivals a phase). The warpgroup goes on at once: nothing of the add stays on
//!   its path.
//! - **Writer.** For each warpgroup in turn it waits on `full[g]`; on part 0 it reads the flags:
//!   `EXIT` ends the loop, `WAIT` spins on the counter (`ld.acquire.gpu`) and fences the async
//!   proxy; it issues the part's `cp.reduce.async.bulk`. Then it waits until every part has been
//!   read and arrives on each `empty[g]`; with `SIGNAL` it waits until the adds have completed
//!   (`cp.async.bulk.wait_group 0`) and adds 1 to the counter with `red.release.gpu`. So the
//!   IR's `sem_signal` is given right after the add completes, by the thread that issued it.
//! - **End.** After the consumer region each warpgroup sends `EXIT` the same way; the writer
//!   waits for its adds to complete and leaves.
//!
//! The consumers take this path when the bulk reduction's run-time rules hold and the tensor
//! maps are valid (else the producer's warps copy element by element, ws.rs, and the writer
//! never runs): the per-element path with its own spin and deferred signal (semaphore.rs)
//! stays as the fallback. The IR is unchanged: which thread issues an add is the backend's.

use super::ctx::Ctx;
use super::state::{SemWait, Writer};
use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::{Label, Operand, PtxInst, Reg, RegClass};
use kir_ir::{Block, Opcode};

/// A mailbox's bytes: global address (u64, +0), shared address (u32, +8), bytes (u32, +12),
/// flags (u32, +16), the wait's count (u32, +20), the wait's counter (u64, +24), the signal's
/// counter (u64, +32).
const MAIL: u32 = 48;
/// Flags: the consumers are done; spin on the wait's counter first; signal once complete.
const EXIT: u32 = 1;
const WAIT: u32 = 2;
const SIGNAL: u32 = 4;

/// Whether the consumer region `cons` of a kernel with `consumers` consumers of
/// `consumer_warps` warps beside `producer_warps` takes a writer warp: one consumer, a spare
/// producer warp, TMA, an `atomic_add` in the region, and every `sem_signal` of the kernel right
/// after an `atomic_add` (the writer gives those; a signal elsewhere would not wait for the
/// writer's adds).
pub(super) fn wanted(
    c: &Ctx,
    cons: Block,
    consumers: u32,
    producer_warps: u32,
    consumer_warps: u32,
) -> bool {
    consumers == 1
        && producer_warps >= 2
        && consumer_warps.is_multiple_of(4)
        && c.target.has_tma()
        && kir_ir::edit::contains(&c.k.dfg, cons, &|od| od.opcode == Opcode::AtomicAdd)
        && c.k.dfg.blocks.values().all(|b| {
            b.ops.iter().enumerate().all(|(i, &o)| {
                c.k.dfg.ops[o].opcode != Opcode::SemSignal
                    || i > 0 && c.k.dfg.ops[b.ops[i - 1]].opcode == Opcode::AtomicAdd
            })
        })
}

/// Allocates the barriers and mailboxes of a writer for the consumer's `parts` warpgroups and
/// initialises the barriers (before the partitions branch: every thread meets after it), and
/// the consumer's phase register (0).
pub(super) fn setup(c: &mut Ctx, parts: u32) {
    let bars = c.alloc_shared_aligned(16 * parts, 8);
    let mail = c.alloc_shared_aligned(MAIL * parts, 16);
    let e = c.b.reg(RegClass::Pred);
    c.b.ins(PtxInst::new("setp.eq.u32").op(e).op(c.thread.tid).op(0));
    let smem = c.mem.smem;
    for g in 0..2 * parts {
        let a = c.b.reg(RegClass::B32);
        c.b.ins(PtxInst::new("add.u32").op(a).op(smem).op(bars + 8 * g));
        // full[g] counts the warpgroup's 4 warps, empty[g] the writer.
        let count = if g < parts { 4 } else { 1 };
        c.b.need(Isa::MBARRIER_TX).ins(
            PtxInst::new("mbarrier.init.shared::cta.b64")
                .addr(a)
                .op(count)
                .guard(e, false),
        );
    }
    c.b.need(Isa::MBARRIER_TX)
        .ins(PtxInst::new("fence.mbarrier_init.release.cluster"));
    c.sync_block();
    let phase = c.b.reg(RegClass::B32);
    c.b.in_prologue(|b| b.ins(PtxInst::new("mov.b32").op(phase).op(0)));
    c.mem.writer = Some(Writer {
        bars,
        mail,
        parts,
        phase,
    });
}

/// The shared address of barrier `i` (`full[g]` is g, `empty[g]` is parts + g) for the
/// warpgroup in register `g`, or of mailbox g.
fn at(c: &mut Ctx, base: u32, stride: u32, g: Reg) -> Reg {
    let a = c.b.reg(RegClass::B32);
    let smem = c.mem.smem;
    c.b.ins(PtxInst::new("mad.lo.s32").op(a).op(g).op(stride).op(smem));
    c.b.ins(PtxInst::new("add.u32").op(a).op(a).op(base));
    a
}

/// Polls barrier `bar` until the phase of parity `par` has completed.
fn wait(c: &mut Ctx, bar: Reg, par: impl Into<Operand>) {
    let (p, top) = (c.b.reg(RegClass::Pred), c.b.label("writer_wait"));
    let par = par.into();
    c.b.place(&top);
    c.b.need(Isa::MBARRIER_TX).ins(
        PtxInst::new("mbarrier.try_wait.parity.shared::cta.b64")
            .op(p)
            .addr(bar)
            .op(&par),
    );
    c.b.ins_if(p, true, PtxInst::new("bra.uni").op(&top));
}

/// The consumer's warpgroup index (its warp / 4).
fn group(c: &mut Ctx) -> Reg {
    let g = c.b.reg(RegClass::B32);
    c.b.ins(PtxInst::new("shr.u32").op(g).op(c.thread.warp).op(2));
    g
}

/// Consumer, before writing its rows: waits until the writer has read the warpgroup's part
/// (the phase before the one this message fills; a fresh barrier passes parity 1 at once).
/// Returns the warpgroup index.
pub(super) fn claim(c: &mut Ctx, w: Writer) -> Reg {
    let g = group(c);
    let empty = at(c, w.bars + 8 * w.parts, 8, g);
    let par = c.b.reg(RegClass::B32);
    c.b.ins(PtxInst::new("xor.b32").op(par).op(w.phase).op(1));
    wait(c, empty, par);
    g
}

/// What a consumer's message carries besides the part: the ordered add's wait and signal
/// counters (each with its in-bounds predicate), if any.
pub(super) struct Ordered {
    pub wait: Option<SemWait>,
    pub signal: Option<(Reg, Reg)>,
}

/// Consumer, after writing and fencing its rows: the warpgroup's first thread writes its
/// mailbox (`gaddr`, the part's shared address `region` and `size` bytes, `flags` and the
/// counters), then lane 0 of each warp arrives on `full[g]`, and the phase flips.
pub(super) fn send(
    c: &mut Ctx,
    w: Writer,
    g: Reg,
    gaddr: Reg,
    region: Reg,
    size: Reg,
    ord: &Ordered,
) {
    let (lead, lane) = (c.b.reg(RegClass::Pred), c.b.reg(RegClass::B32));
    c.b.ins(PtxInst::new("and.b32").op(lane).op(c.thread.tid).op(127));
    c.b.ins(PtxInst::new("setp.eq.u32").op(lead).op(lane).op(0));
    let mail = at(c, w.mail, MAIL, g);
    let flags = c.b.reg(RegClass::B32);
    c.b.ins(PtxInst::new("mov.b32").op(flags).op(0));
    if let Some(s) = ord.wait {
        c.b.ins_if(
            s.inb,
            false,
            PtxInst::new("or.b32").op(flags).op(flags).op(WAIT),
        );
        store(c, lead, mail, 20, "u32", s.want);
        store(c, lead, mail, 24, "u64", s.addr);
    }
    if let Some((addr, inb)) = ord.signal {
        c.b.ins_if(
            inb,
            false,
            PtxInst::new("or.b32").op(flags).op(flags).op(SIGNAL),
        );
        store(c, lead, mail, 32, "u64", addr);
    }
    store(c, lead, mail, 0, "u64", gaddr);
    store(c, lead, mail, 8, "u32", region);
    store(c, lead, mail, 12, "u32", size);
    store(c, lead, mail, 16, "u32", flags);
    arrive_full(c, w, g);
}

/// `st.shared.TY [mail + off], v` on the leader.
fn store(c: &mut Ctx, lead: Reg, mail: Reg, off: u32, ty: &str, v: Reg) {
    c.b.ins_if(
        lead,
        false,
        PtxInst::new(format!("st.shared.{ty}"))
            .addr_off(mail, off)
            .op(v),
    );
}

/// Lane 0 of each warp arrives on `full[g]` once its lanes are done; the phase flips.
fn arrive_full(c: &mut Ctx, w: Writer, g: Reg) {
    let full = at(c, w.bars, 8, g);
    c.warp_arrive_at(full);
    c.b.ins(PtxInst::new("xor.b32").op(w.phase).op(w.phase).op(1));
}

/// Consumer, after its region: each warpgroup sends `EXIT` (once the writer has read its last
/// part).
pub(super) fn close(c: &mut Ctx, w: Writer) {
    let g = claim(c, w);
    let (lead, lane) = (c.b.reg(RegClass::Pred), c.b.reg(RegClass::B32));
    c.b.ins(PtxInst::new("and.b32").op(lane).op(c.thread.tid).op(127));
    c.b.ins(PtxInst::new("setp.eq.u32").op(lead).op(lane).op(0));
    let mail = at(c, w.mail, MAIL, g);
    let exit = c.b.imm32(EXIT as i64);
    store(c, lead, mail, 16, "u32", exit);
    arrive_full(c, w, g);
}

/// The writer's loop (lane 0 of the producer's second warp, `raw` its `%tid.x`; the other
/// threads branch to `out`), then a branch to `out`.
pub(super) fn run(c: &mut Ctx, w: Writer, raw: Reg, out: &Label) {
    let not = c.b.reg(RegClass::Pred);
    c.b.ins(PtxInst::new("setp.ne.u32").op(not).op(raw).op(32));
    c.b.ins_if(not, false, PtxInst::new("bra").op(out));
    let (phase, flags) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
    c.b.ins(PtxInst::new("mov.b32").op(phase).op(0));
    let (top, done) = (c.b.label("writer_top"), c.b.label("writer_done"));
    c.b.place(&top);
    let smem = c.mem.smem;
    for g in 0..w.parts {
        let full = c.b.reg(RegClass::B32);
        c.b.ins(PtxInst::new("add.u32").op(full).op(smem).op(w.bars + 8 * g));
        wait(c, full, phase);
        let mail = c.b.reg(RegClass::B32);
        c.b.ins(
            PtxInst::new("add.u32")
                .op(mail)
                .op(smem)
                .op(w.mail + MAIL * g),
        );
        if g == 0 {
            c.b.ins(PtxInst::new("ld.shared.u32").op(flags).addr_off(mail, 16));
            let (p, bits) = (c.b.reg(RegClass::Pred), c.b.reg(RegClass::B32));
            c.b.ins(PtxInst::new("and.b32").op(bits).op(flags).op(EXIT));
            c.b.ins(PtxInst::new("setp.ne.u32").op(p).op(bits).op(0));
            c.b.ins_if(p, false, PtxInst::new("bra").op(&done));
            let (addr, want, inb) = (
                c.b.reg(RegClass::B64),
                c.b.reg(RegClass::B32),
                c.b.reg(RegClass::Pred),
            );
            c.b.ins(PtxInst::new("and.b32").op(bits).op(flags).op(WAIT));
            c.b.ins(PtxInst::new("setp.ne.u32").op(inb).op(bits).op(0));
            let skip = c.b.label("writer_no_wait");
            c.b.ins_if(inb, true, PtxInst::new("bra").op(&skip));
            c.b.ins(PtxInst::new("ld.shared.u32").op(want).addr_off(mail, 20));
            c.b.ins(PtxInst::new("ld.shared.u64").op(addr).addr_off(mail, 24));
            super::semaphore::spin(c, SemWait { addr, inb, want });
            c.b.need(Isa::FENCE_PROXY_ASYNC)
                .ins(PtxInst::new("fence.proxy.async.global"));
            c.b.place(&skip);
        }
        let (gaddr, region, size) = (
            c.b.reg(RegClass::B64),
            c.b.reg(RegClass::B32),
            c.b.reg(RegClass::B32),
        );
        c.b.ins(PtxInst::new("ld.shared.u64").op(gaddr).addr_off(mail, 0));
        c.b.ins(PtxInst::new("ld.shared.u32").op(region).addr_off(mail, 8));
        c.b.ins(PtxInst::new("ld.shared.u32").op(size).addr_off(mail, 12));
        c.b.need(Isa::CP_REDUCE_ASYNC_BULK).ins(
            PtxInst::new("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32")
                .addr(gaddr)
                .addr(region)
                .op(size),
        );
        c.b.ins(PtxInst::new("cp.async.bulk.commit_group"));
    }
    c.b.ins(PtxInst::new("cp.async.bulk.wait_group.read").op(0));
    for g in 0..w.parts {
        let empty = c.b.reg(RegClass::B32);
        c.b.ins(
            PtxInst::new("add.u32")
                .op(empty)
                .op(smem)
                .op(w.bars + 8 * (w.parts + g)),
        );
        c.b.need(Isa::MBARRIER_TX).ins(
            PtxInst::new("mbarrier.arrive.shared::cta.b64")
                .op(Operand::Sink)
                .addr(empty),
        );
    }
    let (p, bits) = (c.b.reg(RegClass::Pred), c.b.reg(RegClass::B32));
    c.b.ins(PtxInst::new("and.b32").op(bits).op(flags).op(SIGNAL));
    c.b.ins(PtxInst::new("setp.ne.u32").op(p).op(bits).op(0));
    let unsignalled = c.b.label("writer_no_signal");
    c.b.ins_if(p, true, PtxInst::new("bra").op(&unsignalled));
    let (mail, addr, one) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B64), c.b.imm32(1));
    c.b.ins(PtxInst::new("add.u32").op(mail).op(smem).op(w.mail));
    c.b.ins(PtxInst::new("ld.shared.u64").op(addr).addr_off(mail, 32));
    c.b.ins(PtxInst::new("cp.async.bulk.wait_group").op(0));
    c.b.need(Isa::ACQUIRE_RELEASE).ins(
        PtxInst::new("red.release.gpu.global.add.s32")
            .addr(addr)
            .op(one),
    );
    c.b.place(&unsignalled);
    c.b.ins(PtxInst::new("xor.b32").op(phase).op(phase).op(1));
    c.b.ins(PtxInst::new("bra").op(&top));
    c.b.place(&done);
    c.b.ins(PtxInst::new("cp.async.bulk.wait_group").op(0));
    c.b.ins(PtxInst::new("bra").op(out));
}
