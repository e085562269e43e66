//! f32 tile `atomic_add`s that cover a contiguous region of their tensor, added by the TMA unit
//! (sm_90 and later): attention_bwd's dqᵀ with `DETERMINISTIC=0`, one [HEAD_DIM, BLOCK_M] block
//! of its `[B, Hq, Nq, HEAD_DIM, BLOCK_M]` accumulator per key block and query step.
//!
//! Per-element `red.global.add.f32` (mma_store.rs) sends one 4-byte atomic per element to the
//! L2, and the L2's atomic rate bounded that kernel (docs/benchmarks.md). Here the block's
//! threads write the tile to a shared region in the tensor's own (row-major) order, fence the
//! async proxy and meet at a barrier; then one thread issues
//! `cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32` over the whole region (one
//! bulk reduction, which the TMA unit performs in the L2 line by line) and commits it. That
//! thread waits until the region has been read (`cp.async.bulk.wait_group.read 0`) only before
//! the barrier that precedes the region's next writes, and once more before the kernel returns
//! (`finish`), so the read overlaps the rest of the step instead of stalling the issuing
//! warp, and with it its warpgroup's next wgmma, right after the issue.
//!
//! The tensor's rows may be C, C + 4 or C + 8 elements long (the pad is never written by the
//! tile and never read by attention_bwd). With rows of exactly C·4 bytes (256 at BLOCK_M = 64)
//! the 8 rows that one 8-byte store of the mma layout writes fall in the same 8 banks, an 8-way
//! conflict (ncu: 24 % of the atomic dK/dV kernel's shared wavefronts were excess). An 8-byte
//! store is served by half-warps: lanes 0–15 write rows g = 0..3 (8 columns each), so each row
//! must start 8 banks after the one before for the half-warp to take one wavefront. Rows of
//! C + 8 do that; rows of C + 4 start 4 banks apart and overlap by 4, two wavefronts more per
//! store than the least (10 % of the d128 kernel's wavefronts in ncu, call V3), but a region 4
//! columns shorter. So the region holds rows of C + 8 where the block splits it between
//! warpgroups ([`Split::Groups`]: attention_bwd's d128 kernel, +2–19 % on an H100, call V4),
//! and of C + 4 where the block writes it whole (its d64 kernel, whose three blocks per SM
//! did not survive 1 KB more shared memory: −6 % with C + 8, V4); a launch whose rows are
//! longer than the region's takes the per-element path. attention_bwd's accumulator declares
//! rows of BLOCK_M + 4 at head dim 64 and BLOCK_M + 8 above. The region stays one dense range
//! of the tensor, added by one request. One request per unpadded global row instead (128 of
//! 256 bytes per step) ran the atomic mode at 217 TFLOP/s against 396 (d128 S = 16k,
//! docs/benchmarks.md).
//!
//! In a block of G ≥ 2 warpgroups (the `RowMma` layout stacks warps along rows, so warpgroup w
//! holds rows [w·R/G, (w+1)·R/G), a contiguous part of the region), each warpgroup writes and
//! adds its own part: its first thread waits for its previous reduction's read, a named barrier
//! over the warpgroup's 128 threads (ids above the ping-pong's, [`Split`]) stands for the
//! block barriers, and that thread issues the part's reduction. The warpgroups then need not
//! meet at all for the reduction: the block-wide form's two barriers a step held every
//! warpgroup until the slowest had staged its rows.
//!
//! In a warp-specialized kernel with one consumer, the producer's second warp issues the parts
//! instead (writer.rs): each warpgroup waits on an mbarrier until the writer has read its part,
//! stages its rows and posts a message, with no named barrier and no issue of its own.
//!
//! Taken when the target has TMA, the tile is an unmasked f32 `RowMma` [R, C] tile (C even)
//! whose offsets in the tensor's innermost dims are literal 0, and the innermost stride is 1.
//! At run time the tensor's two innermost dims must be R and C, C + 4 or C + 8 (at most the
//! region's row), with dense rows, so
//! the tile's rows are one region of R rows of the tensor (a multiple of 16 bytes), 16-byte
//! aligned, with its leading offsets inside the tensor; a launch that breaks a rule takes the
//! per-element path (mma_store.rs) instead, chosen by a uniform branch.

use super::ctx::{Ctx, TensorInfo};
use super::state::{Region, SemWait, Split};
use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::{PtxInst, Reg, RegClass};
use crate::ptx::plan::layout::{self, Layout};
use crate::ptx::plan::roles;
use kir_ir::{Dtype, Offset, OpData, Opcode};

/// Elements of padding a tensor's rows may have past the tile's C columns (see the module doc):
/// the region's rows are C + `PAD[1]` when warpgroups split it, else C + `PAD[0]`.
pub const PAD: [usize; 2] = [4, 8];

/// A warpgroup's named barrier: ids `first` and `first + 1` under a predicate (true on
/// warpgroup 0), or the id in a register.
#[derive(Clone, Copy)]
enum GroupBar {
    Two(Reg, u32),
    Reg(Reg),
}

/// How a tile of `rows` rows of `cols` f32 each (region rows of C + `PAD[1]` when split) splits
/// between the block's warpgroups: per
/// warpgroup when there are at least two and a named barrier id is free for each between the
/// ping-pong's (ids 1 ..= 2k − 1, wgmma.rs) and the warp-specialized consumers' (C consumers
/// take `roles::CONSUMER_BARRIER` down to `CONSUMER_BARRIER` − C + 1, consumers.rs), else by
/// the block.
fn split_of(c: &Ctx, rows: usize, cols: usize) -> Split {
    let warps = c.plan.blk.warps;
    let groups = warps / 4;
    // The consumers' barriers (one, 15, in a block without warp specialization too).
    let consumers = roles::ws_op(c.k).map_or(1, |(_, a)| a.consumers.max(1));
    let first_bar = 1 + c
        .plan
        .pingpong
        .values()
        .map(|t| 2 * t.count as u32 - 1)
        .max()
        .unwrap_or(0);
    if warps % 4 != 0
        || groups < 2
        || rows % groups as usize != 0
        || first_bar + groups > roles::CONSUMER_BARRIER + 1 - consumers
    {
        return Split::Block;
    }
    Split::Groups {
        groups,
        part_bytes: (rows / groups as usize * (cols + PAD[1]) * 4) as u32,
        first_bar,
    }
}

/// Lowers `op` (an `atomic_add` of `regs`, a `layout` tile of `shape`, at `offs` of `info`) as a
/// bulk reduction when it qualifies (see the module doc), with `fallback` emitted on the
/// run-time path where a rule fails; returns false, having emitted nothing, when it does not
/// qualify statically. With `wait` (a `sem_wait` right before the add), each issuing thread
/// spins on the counter just before its issue, so the other threads stage their rows meanwhile.
#[allow(clippy::too_many_arguments)]
pub(super) fn bulk_add(
    c: &mut Ctx,
    op: &OpData,
    info: &TensorInfo,
    offs: &[Reg],
    layout: Layout,
    shape: &[usize],
    regs: &[Reg],
    wait: Option<SemWait>,
    fallback: &mut dyn FnMut(&mut Ctx),
) -> bool {
    let rank = offs.len();
    let qualifies = c.target.has_tma()
        && op.opcode == Opcode::AtomicAdd
        && op.attr("mask").is_none()
        && info.dtype == Dtype::F32
        && info.contiguous_last
        && layout == Layout::RowMma
        && shape.len() == 2
        && shape[1] % 2 == 0
        && rank >= 2
        && regs.len() == layout::slots(layout, shape, c.plan.blk)
        && covers_trailing(c, op, shape);
    if !qualifies {
        return false;
    }
    let (rows, cols) = (shape[0], shape[1]);
    // One region for the kernel's bulk reductions (they run one after another, each waiting
    // until its region is read before the barrier that ends the next one's writes), split
    // alike by every one of them, with rows of C + PAD[0] or C + PAD[1] elements (see the
    // module doc): the region holds the longest rows a launch may have.
    // With a writer warp (writer.rs) the parts are the consumer's warpgroups, which meet the
    // writer on mbarriers instead of named barriers.
    let writer = c.mem.writer.filter(|w| rows % w.parts as usize == 0);
    let split = match writer {
        Some(w) if w.parts >= 2 => Split::Groups {
            groups: w.parts,
            part_bytes: (rows / w.parts as usize * (cols + PAD[1]) * 4) as u32,
            first_bar: 0,
        },
        Some(_) => Split::Block,
        None => split_of(c, rows, cols),
    };
    let padded = match split {
        Split::Block => cols + PAD[0],
        Split::Groups { .. } => cols + PAD[1],
    };
    let bytes = (rows * padded * 4) as u32;
    let off = match c.mem.bulk_region {
        Some(r) if r.split != split => return false,
        Some(r) if r.bytes >= bytes => r.off,
        _ => {
            let off = c.alloc_shared_aligned(bytes, 128);
            c.mem.bulk_region = Some(Region { off, bytes, split });
            off
        }
    };
    // The run-time rules: the innermost dims R and C, C + 4 or C + 8 (at most the region's
    // rows), dense rows, leading offsets inside the tensor, the base 16-byte aligned. Uniform
    // across the block (scalars of the program).
    let gaddr = c.b.reg(RegClass::B64);
    c.b.ins(PtxInst::new("mov.b64").op(gaddr).op(info.ptr));
    let row = info.dims[rank - 1];
    let ok = c.b.reg(RegClass::Pred);
    c.b.ins(PtxInst::new("setp.eq.u32").op(ok).op(row).op(cols));
    for pad in PAD.into_iter().filter(|&p| cols + p <= padded) {
        let p = c.b.reg(RegClass::Pred);
        c.b.ins(PtxInst::new("setp.eq.u32").op(p).op(row).op(cols + pad));
        c.b.ins(PtxInst::new("or.pred").op(ok).op(ok).op(p));
    }
    for (have, want) in [
        (info.strides[rank - 2], row),
        (info.dims[rank - 2], c.b.imm32(rows as i64)),
    ] {
        let p = c.b.reg(RegClass::Pred);
        c.b.ins(PtxInst::new("setp.eq.u32").op(p).op(have).op(want));
        c.b.ins(PtxInst::new("and.pred").op(ok).op(ok).op(p));
    }
    for d in 0..rank - 2 {
        let (lin, w, p) = (
            c.b.reg(RegClass::B32),
            c.b.reg(RegClass::B64),
            c.b.reg(RegClass::Pred),
        );
        c.b.ins(
            PtxInst::new("mul.lo.s32")
                .op(lin)
                .op(offs[d])
                .op(info.strides[d]),
        );
        c.b.ins(PtxInst::new("mul.wide.s32").op(w).op(lin).op(4));
        c.b.ins(PtxInst::new("add.s64").op(gaddr).op(gaddr).op(w));
        c.b.ins(
            PtxInst::new("setp.lt.u32")
                .op(p)
                .op(offs[d])
                .op(info.dims[d]),
        );
        c.b.ins(PtxInst::new("and.pred").op(ok).op(ok).op(p));
    }
    c.and_aligned(ok, gaddr, 16);
    if writer.is_some() {
        // The producer's warps copy element by element when a tensor map is invalid, and the
        // writer then never runs.
        let maps = super::ws_fallback::tma_ok(c);
        c.b.ins(PtxInst::new("and.pred").op(ok).op(ok).op(maps));
    }
    let (slow, done) = (c.b.label("bulk_add_slow"), c.b.label("bulk_add_done"));
    c.b.ins_if(ok, true, PtxInst::new("bra.uni").op(&slow));
    // The tile into the region in the tensor's order (rows of `pitch` bytes): this thread's
    // slots sit at constant offsets from one address per slot row, its column pairs as one
    // 8-byte store.
    let (rowbase, colbase) = (c.rowbase(shape), c.thread.colbase);
    let pitch = c.b.reg(RegClass::B32);
    c.b.ins(PtxInst::new("shl.b32").op(pitch).op(row).op(2));
    let (lin, col4) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
    c.b.ins(PtxInst::new("shl.b32").op(col4).op(colbase).op(2));
    c.b.ins(
        PtxInst::new("mad.lo.s32")
            .op(lin)
            .op(rowbase)
            .op(pitch)
            .op(col4),
    );
    let base = c.shared_at(off, lin);
    let mut row_bases: Vec<(usize, Reg)> = Vec::new();
    let (group_bar, first, claimed) = match writer {
        // The writer has read this warpgroup's part.
        Some(w) => (None, None, Some(super::writer::claim(c, w))),
        None => {
            let group_bar = group_bar(c, split);
            // Earlier readers of the region (or of this warpgroup's part) are done: the
            // issuing thread waits for its previous bulk reduction's read (none pending on the
            // first: the wait returns at once), and the barrier tells the others.
            let first = wait_read(c, split);
            sync_part(c, group_bar);
            (group_bar, Some(first), None)
        }
    };
    for (s, pair) in regs.chunks(2).enumerate() {
        let (ro, co) = layout::rowmma_slot(shape, 2 * s);
        let at = match row_bases.iter().find(|(r, _)| *r == ro) {
            Some(&(_, a)) => a,
            None => {
                let a = c.b.reg(RegClass::B32);
                let ro_reg = c.b.imm32(ro as i64);
                c.b.ins(
                    PtxInst::new("mad.lo.s32")
                        .op(a)
                        .op(ro_reg)
                        .op(pitch)
                        .op(base),
                );
                row_bases.push((ro, a));
                a
            }
        };
        c.b.ins(
            PtxInst::new("st.shared.v2.f32")
                .addr_off(at, co * 4)
                .vec([pair[0], pair[1]]),
        );
    }
    c.b.need(Isa::FENCE_PROXY_ASYNC)
        .ins(PtxInst::new("fence.proxy.async.shared::cta"));
    if let (Some(w), Some(g)) = (writer, claimed) {
        let (part, size) = part_of(c, off, pitch, rows, split, Some(g), gaddr);
        // The `sem_signal` right after the add is the writer's to give (semaphore.rs skips it
        // on this path).
        let signal = match c.mem.next_op.map(|n| &c.k.dfg.ops[n]) {
            Some(nd) if nd.opcode == Opcode::SemSignal => super::semaphore::counter(c, nd).ok(),
            _ => None,
        };
        if signal.is_some() {
            c.mem.taken_signal = Some(ok);
        }
        let ord = super::writer::Ordered { wait, signal };
        super::writer::send(c, w, g, gaddr, part, size, &ord);
        c.b.ins(PtxInst::new("bra.uni").op(&done));
        c.b.place(&slow);
        fallback(c);
        c.b.place(&done);
        return true;
    }
    let first = first.unwrap_or_else(|| part_leader(c, split));
    sync_part(c, group_bar);
    // One thread adds the region (or its warpgroup's part: rows / groups rows from
    // wg · rows / groups on, in shared memory and in the tensor alike); it waits for the read
    // before the next writes (above) or before the kernel returns (`finish`).
    let (region, size) = part_of(
        c,
        off,
        pitch,
        rows,
        split,
        group_bar.map(|(wg, _)| wg),
        gaddr,
    );
    c.b.need(Isa::CP_REDUCE_ASYNC_BULK);
    let reduce = PtxInst::new("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32")
        .addr(gaddr)
        .addr(region)
        .op(size);
    match wait {
        // An ordered add (`sem_wait` before it): the issuing thread alone waits for the
        // counter, then orders the async proxy's add after what it acquired.
        Some(w) => {
            let skip = c.b.label("bulk_add_issued");
            c.b.ins_if(first, true, PtxInst::new("bra").op(&skip));
            super::semaphore::spin(c, w);
            c.b.need(Isa::FENCE_PROXY_ASYNC)
                .ins(PtxInst::new("fence.proxy.async.global"));
            c.b.ins(reduce);
            c.b.ins(PtxInst::new("cp.async.bulk.commit_group"));
            c.b.place(&skip);
        }
        None => {
            c.b.ins_if(first, false, reduce);
            c.b.ins_if(first, false, PtxInst::new("cp.async.bulk.commit_group"));
        }
    }
    c.b.ins(PtxInst::new("bra.uni").op(&done));
    c.b.place(&slow);
    fallback(c);
    c.b.place(&done);
    true
}

/// The shared address and bytes of the part that warpgroup `wg` adds (the whole region at shared
/// offset `off` when `wg` is `None`): `rows / groups` rows of `pitch` bytes, from `wg` parts on
/// in shared memory; `gaddr` is moved to the part in the tensor alike.
fn part_of(
    c: &mut Ctx,
    off: u32,
    pitch: Reg,
    rows: usize,
    split: Split,
    wg: Option<Reg>,
    gaddr: Reg,
) -> (Reg, Reg) {
    let zero = c.b.imm32(0);
    let mut region = c.shared_at(off, zero);
    let size = c.b.reg(RegClass::B32);
    let part_rows = match split {
        Split::Block => rows,
        Split::Groups { groups, .. } => rows / groups as usize,
    };
    c.b.ins(
        PtxInst::new("mul.lo.s32")
            .op(size)
            .op(pitch)
            .op(part_rows as u32),
    );
    if let Some(wg) = wg {
        let (skip, skip64, part) = (
            c.b.reg(RegClass::B32),
            c.b.reg(RegClass::B64),
            c.b.reg(RegClass::B32),
        );
        c.b.ins(PtxInst::new("mul.lo.s32").op(skip).op(wg).op(size));
        c.b.ins(PtxInst::new("add.u32").op(part).op(region).op(skip));
        c.b.ins(PtxInst::new("cvt.u64.u32").op(skip64).op(skip));
        c.b.ins(PtxInst::new("add.s64").op(gaddr).op(gaddr).op(skip64));
        region = part;
    }
    (region, size)
}

/// The warpgroup's index, and its barrier: with two warpgroups a literal id under a predicate
/// each (so that ptxas counts the barriers the kernel uses), else an id in a register; `None`
/// for `Split::Block`.
fn group_bar(c: &mut Ctx, split: Split) -> Option<(Reg, GroupBar)> {
    match split {
        Split::Block => None,
        Split::Groups {
            groups, first_bar, ..
        } => {
            let wg = c.b.reg(RegClass::B32);
            c.b.ins(PtxInst::new("shr.u32").op(wg).op(c.thread.warp).op(2));
            let id = if groups == 2 {
                let p = c.b.reg(RegClass::Pred);
                c.b.ins(PtxInst::new("setp.eq.u32").op(p).op(wg).op(0));
                GroupBar::Two(p, first_bar)
            } else {
                let id = c.b.reg(RegClass::B32);
                c.b.ins(PtxInst::new("add.u32").op(id).op(wg).op(first_bar));
                GroupBar::Reg(id)
            };
            Some((wg, id))
        }
    }
}

/// The barrier of a part: the block's, or the warpgroup's over its 128 threads.
fn sync_part(c: &mut Ctx, group_bar: Option<(Reg, GroupBar)>) {
    match group_bar {
        None => c.sync_block(),
        Some((_, GroupBar::Reg(id))) => c.b.ins(PtxInst::new("bar.sync").op(id).op(128)),
        Some((_, GroupBar::Two(p, id))) => {
            c.b.ins(PtxInst::new("bar.sync").op(id).op(128).guard(p, false));
            c.b.ins(PtxInst::new("bar.sync").op(id + 1).op(128).guard(p, true));
        }
    }
}

/// The predicate of the part's first thread: thread 0, or each warpgroup's first thread.
fn part_leader(c: &mut Ctx, split: Split) -> Reg {
    let first = c.b.reg(RegClass::Pred);
    let lane = match split {
        Split::Block => c.thread.tid,
        Split::Groups { .. } => {
            let l = c.b.reg(RegClass::B32);
            c.b.ins(PtxInst::new("and.b32").op(l).op(c.thread.tid).op(127));
            l
        }
    };
    c.b.ins(PtxInst::new("setp.eq.u32").op(first).op(lane).op(0));
    first
}

/// Before the kernel returns: the thread that issued bulk reductions waits until their shared
/// region has been read, since the block's shared memory is released when it exits. Emits
/// nothing in a kernel without one.
pub(super) fn finish(c: &mut Ctx) {
    if let Some(r) = c.mem.bulk_region {
        wait_read(c, r.split);
    }
}

/// The issuing thread (thread 0, or each warpgroup's first thread) waits until its bulk
/// reductions have read their shared region; returns the predicate that selects that thread.
fn wait_read(c: &mut Ctx, split: Split) -> Reg {
    let first = part_leader(c, split);
    c.b.ins_if(
        first,
        false,
        PtxInst::new("cp.async.bulk.wait_group.read").op(0),
    );
    first
}

/// The tile of `shape` starts at offset 0 of the tensor's innermost dims: the op's offsets there
/// are literal 0 (whether those dims are the tile's is checked at run time).
fn covers_trailing(c: &Ctx, op: &OpData, shape: &[usize]) -> bool {
    let Some(t) = &op.tensor else { return false };
    let (n, r) = (t.offsets.len(), shape.len());
    n >= r
        && t.offsets[n - r..].iter().all(|o| match o {
            Offset::Expr(e) => e.as_int() == Some(0),
            Offset::Value(v) => c.values.statics.get(v).copied() == Some(0),
        })
}
