//! Staged stores: a 16-bit `RowMma` tile that a warp-specialized consumer stores to global
//! memory goes out through shared memory and the TMA unit's bulk copies (sm_90 and later), so
//! the consumer's warps spend the epilogue on shared-memory writes and go back to their
//! mainloop while the copies drain, instead of waiting on the load/store unit's queue.
//!
//! Measured before this path (call H2, docs/gpu-results/2026-12-05-h1-h2-gemm-epilogue.txt):
//! the default GEMM's 16-byte `st.global`s, predicated off at run time with every other
//! instruction kept, took 1.1–4.8 % of its time (2.4 % at 16384×14336×4096).
//!
//! Each warp stages its own rows (the layout stacks the warps along rows, `R / W` rows each),
//! 32 columns at a time, in two buffers of `R / W` rows of 80 bytes (64 bytes of data and 16
//! of padding, so a warp's 32-bit writes of eight rows at once hit 32 different banks). Per
//! chunk of 32 columns, every lane of the warp:
//! 1. waits until the copies that read the buffer it is about to write are done: for the first
//!    chunk every copy the lane issued before has completed (`cp.async.bulk.wait_group 0`: a
//!    store in a loop that writes an element twice keeps its program order, as each row is
//!    copied by the same lane every time), for the others the chunk before last has been read
//!    (`wait_group.read 1`), then `bar.warp.sync`;
//! 2. writes its column pairs (`cvt.rn.{bf16,f16}x2.f32`, one `st.shared.b32` each), then
//!    `fence.proxy.async.shared::cta` and `bar.warp.sync`;
//! 3. lane L below `R / W` copies the chunk's row L to its place in the tensor
//!    (`cp.async.bulk.global.shared::cta.bulk_group`: 64 bytes, fewer for the tensor's last
//!    columns, none for rows past its end), and every lane commits its group.
//!
//! No block or named barrier is needed: a warp only reads and writes its own buffers. Every
//! thread waits for its copies to complete (`cp.async.bulk.wait_group 0`) before the kernel's
//! `ret` (kernel.rs), so the shared memory outlives them.
//!
//! Taken when (statically) the target has TMA, the store runs in a warp-specialized consumer
//! (whose block holds an SM alone: the buffers cost no occupancy), the tile is an unmasked
//! `[R, C]` tile with C a multiple of 32 and at most 32 rows per warp, the store is the only
//! access of the kernel to its tensor (the copies are not ordered with other accesses), and the
//! buffers fit in the target's shared memory with 4 KB to spare. At run time the tensor's base
//! address, its row stride, its innermost dim and the tile's first column must keep every row
//! 16-byte aligned (in elements: multiples of 8); a launch that breaks a rule, or whose tile
//! starts outside the tensor's leading dims, takes the register path (mma_store.rs) instead,
//! chosen by a uniform branch.

use super::ctx::{Ctx, TensorInfo};
use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::{PtxInst, Reg, RegClass};
use crate::ptx::plan::layout::{self, Layout};
use kir_ir::{Dtype, OpData, Opcode};
use std::collections::HashSet;

/// Columns staged and copied at a time.
const CHUNK: usize = 32;
/// Bytes per staged row: the chunk's 64 bytes and 16 of padding.
const PITCH: usize = CHUNK * 2 + 16;
/// Shared memory left free beside the buffers (for regions lowered after the store).
const SPARE: u64 = 4096;

/// Lowers `op` (a store of `regs`, a `layout` tile of `shape`, at `offs` of `info`) as a staged
/// store when it qualifies (see the module doc), with `fallback` (the register path) emitted on
/// the run-time path where a rule fails; returns false, having emitted nothing, when it does
/// not qualify statically.
#[allow(clippy::too_many_arguments)]
pub(super) fn staged_store(
    c: &mut Ctx,
    op: &OpData,
    info: &TensorInfo,
    offs: &[Reg],
    layout: Layout,
    shape: &[usize],
    regs: &[Reg],
    owner: Option<Reg>,
    fallback: &mut dyn FnMut(&mut Ctx),
) -> bool {
    let rank = offs.len();
    let (m, n) = layout::rows_cols(shape);
    let warps = c.plan.blk.warps as usize;
    let qualifies = c.target.has_tma()
        && c.thread.block_bar.is_some()
        && op.opcode == Opcode::Store
        && owner.is_none()
        && layout == Layout::RowMma
        && shape.len() == 2
        && rank >= 2
        && matches!(info.dtype, Dtype::F16 | Dtype::Bf16)
        && info.contiguous_last
        && op.attr("mask").is_none()
        && n % CHUNK == 0
        && m % (16 * warps) == 0
        && m / warps <= 32
        && regs.len() == layout::slots(layout, shape, c.plan.blk)
        && only_access(c, op);
    if !qualifies {
        return false;
    }
    let rw = m / warps;
    let per_warp = 2 * rw * PITCH;
    let bytes = (warps * per_warp) as u32;
    let off = match c.mem.stage_region {
        Some((off, size)) if size >= bytes => off,
        _ => {
            let top = u64::from(c.mem.smem_top.div_ceil(128) * 128);
            if top + u64::from(bytes) + SPARE > c.target.smem_per_block() {
                return false;
            }
            let off = c.alloc_shared_aligned(bytes, 128);
            c.mem.stage_region = Some((off, bytes));
            off
        }
    };
    let (rd, cd) = (rank - 2, rank - 1);
    // The leading dims' part of the address and their bounds, the tile's first row and column.
    let base = c.b.reg(RegClass::B64);
    c.b.ins(PtxInst::new("mov.b64").op(base).op(info.ptr));
    let ok = c.b.reg(RegClass::Pred);
    c.b.ins(PtxInst::new("setp.ge.s32").op(ok).op(offs[cd]).op(0));
    for d in 0..rd {
        add_scaled(c, base, offs[d], info.strides[d]);
        let p = c.b.reg(RegClass::Pred);
        c.b.ins(
            PtxInst::new("setp.lt.u32")
                .op(p)
                .op(offs[d])
                .op(info.dims[d]),
        );
        c.b.ins(PtxInst::new("and.pred").op(ok).op(ok).op(p));
    }
    // 16-byte rows: (base | 2·row stride | 2·columns | 2·first column) mod 16 = 0.
    let (bits, t, al) = (
        c.b.reg(RegClass::B32),
        c.b.reg(RegClass::B32),
        c.b.reg(RegClass::Pred),
    );
    c.b.ins(PtxInst::new("cvt.u32.u64").op(bits).op(base));
    for x in [info.strides[rd], info.dims[cd], offs[cd]] {
        c.b.ins(PtxInst::new("shl.b32").op(t).op(x).op(1));
        c.b.ins(PtxInst::new("or.b32").op(bits).op(bits).op(t));
    }
    c.b.ins(PtxInst::new("and.b32").op(bits).op(bits).op(15));
    c.b.ins(PtxInst::new("setp.eq.u32").op(al).op(bits).op(0));
    c.b.ins(PtxInst::new("and.pred").op(ok).op(ok).op(al));
    let (slow, done) = (c.b.label("st_staged_slow"), c.b.label("st_staged_done"));
    c.b.ins_if(ok, true, PtxInst::new("bra.uni").op(&slow));
    // This warp's buffers; this lane's first write (row g, columns 2q, 2q + 1 of buffer 0)
    // and the row it copies (its lane index, when below R / W).
    let (warp, g, colbase) = (c.thread.warp, c.thread.g, c.thread.colbase);
    let wrel = c.b.reg(RegClass::B32);
    c.b.ins(PtxInst::new("mul.lo.s32").op(wrel).op(warp).op(per_warp));
    let wbase = c.shared_at(off, wrel);
    let (lane, waddr, src) = (
        c.b.reg(RegClass::B32),
        c.b.reg(RegClass::B32),
        c.b.reg(RegClass::B32),
    );
    c.b.ins(PtxInst::new("and.b32").op(lane).op(c.thread.tid).op(31));
    c.b.ins(
        PtxInst::new("mad.lo.s32")
            .op(waddr)
            .op(g)
            .op(PITCH)
            .op(wbase),
    );
    c.b.ins(
        PtxInst::new("mad.lo.s32")
            .op(waddr)
            .op(colbase)
            .op(2)
            .op(waddr),
    );
    c.b.ins(
        PtxInst::new("mad.lo.s32")
            .op(src)
            .op(lane)
            .op(PITCH)
            .op(wbase),
    );
    // The copied row: offs[rd] + warp·(R / W) + lane, inside the tensor, its address at the
    // tile's first column.
    let (row, rp, lp) = (
        c.b.reg(RegClass::B32),
        c.b.reg(RegClass::Pred),
        c.b.reg(RegClass::Pred),
    );
    c.b.ins(PtxInst::new("mad.lo.s32").op(row).op(warp).op(rw).op(lane));
    c.b.ins(PtxInst::new("add.s32").op(row).op(row).op(offs[rd]));
    c.b.ins(PtxInst::new("setp.lt.u32").op(rp).op(row).op(info.dims[rd]));
    c.b.ins(PtxInst::new("setp.lt.u32").op(lp).op(lane).op(rw));
    c.b.ins(PtxInst::new("and.pred").op(rp).op(rp).op(lp));
    let dst = c.b.reg(RegClass::B64);
    c.b.ins(PtxInst::new("mov.b64").op(dst).op(base));
    add_scaled(c, dst, row, info.strides[rd]);
    let col = c.b.reg(RegClass::B64);
    c.b.ins(PtxInst::new("mul.wide.s32").op(col).op(offs[cd]).op(2));
    c.b.ins(PtxInst::new("add.s64").op(dst).op(dst).op(col));
    // Columns left from the tile's first one.
    let left = c.b.reg(RegClass::B32);
    c.b.ins(
        PtxInst::new("sub.s32")
            .op(left)
            .op(info.dims[cd])
            .op(offs[cd]),
    );
    let t16 = if info.dtype == Dtype::F16 {
        "f16"
    } else {
        "bf16"
    };
    let nfs = n / 8;
    c.b.need(Isa::CP_ASYNC_BULK);
    for j in 0..n / CHUNK {
        let buf = (j % 2) * rw * PITCH;
        let wait = if j == 0 {
            PtxInst::new("cp.async.bulk.wait_group").op(0)
        } else {
            PtxInst::new("cp.async.bulk.wait_group.read").op(1)
        };
        c.b.ins(wait);
        c.b.ins(PtxInst::new("bar.warp.sync").op(-1));
        for mf in 0..rw / 16 {
            for h in 0..2 {
                for f in 0..CHUNK / 8 {
                    let s = mf * nfs * 4 + (j * CHUNK / 8 + f) * 4 + 2 * h;
                    let w = super::elem::pack_half2(c, t16, regs[s], regs[s + 1]);
                    let at = buf + (mf * 16 + 8 * h) * PITCH + 16 * f;
                    c.b.ins(PtxInst::new("st.shared.b32").addr_off(waddr, at).op(w));
                }
            }
        }
        c.b.need(Isa::FENCE_PROXY_ASYNC)
            .ins(PtxInst::new("fence.proxy.async.shared::cta"));
        c.b.ins(PtxInst::new("bar.warp.sync").op(-1));
        // min(max(left − 32j, 0), 32) columns, as bytes.
        let (size, p) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::Pred));
        c.b.ins(PtxInst::new("sub.s32").op(size).op(left).op(j * CHUNK));
        c.b.ins(PtxInst::new("min.s32").op(size).op(size).op(CHUNK));
        c.b.ins(PtxInst::new("setp.gt.s32").op(p).op(size).op(0));
        c.b.ins(PtxInst::new("and.pred").op(p).op(p).op(rp));
        c.b.ins(PtxInst::new("shl.b32").op(size).op(size).op(1));
        let (from, to) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B64));
        c.b.ins(PtxInst::new("add.s32").op(from).op(src).op(buf));
        c.b.ins(PtxInst::new("add.s64").op(to).op(dst).op(2 * j * CHUNK));
        c.b.ins_if(
            p,
            false,
            PtxInst::new("cp.async.bulk.global.shared::cta.bulk_group")
                .addr(to)
                .addr(from)
                .op(size),
        );
        c.b.ins(PtxInst::new("cp.async.bulk.commit_group"));
    }
    c.b.ins(PtxInst::new("bra.uni").op(&done));
    c.b.place(&slow);
    fallback(c);
    c.b.place(&done);
    true
}

/// The store `op` is the only op of the kernel that reads or writes its tensor.
fn only_access(c: &Ctx, op: &OpData) -> bool {
    let Some(t) = &op.tensor else { return false };
    let mut ops = HashSet::new();
    kir_ir::edit::ops_in(&c.k.dfg, c.k.body, &mut ops);
    ops.iter()
        .filter(|&&o| {
            c.k.dfg.ops[o]
                .tensor
                .as_ref()
                .is_some_and(|u| u.param == t.param)
        })
        .count()
        == 1
}

/// `addr += idx · stride · 2` (64-bit; 16-bit elements).
fn add_scaled(c: &mut Ctx, addr: Reg, idx: Reg, stride: Reg) {
    let (lin, w) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B64));
    c.b.ins(PtxInst::new("mul.lo.s32").op(lin).op(idx).op(stride));
    c.b.ins(PtxInst::new("mul.wide.s32").op(w).op(lin).op(2));
    c.b.ins(PtxInst::new("add.s64").op(addr).op(addr).op(w));
}
