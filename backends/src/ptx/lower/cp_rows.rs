//! The strength-reduced `cp.async` tile copy: when the block's threads cover whole rows of
//! 16-byte chunks (threads a multiple of the chunks per row), every chunk a thread copies sits in
//! the same column, `threads / chunks-per-row` rows below the previous one. The column, its byte
//! count at the right edge, the global and shared addresses are then computed once per copy and
//! each chunk costs a row check, its mask and two address increments — instead of a division,
//! a remainder and a full address computation per chunk. Loops that prefetch K/V or GEMM
//! operand tiles every iteration spend most of their integer work here.

use super::ctx::{Ctx, TensorInfo};
use super::PtxError;
use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::{PtxInst, Reg, RegClass};
use kir_ir::Span;

/// The global address of a tile's origin (element `offs`) and a predicate that the leading
/// offsets (all but the last two) are inside the tensor; the last two are checked per chunk.
pub(super) fn tile_origin(c: &mut Ctx, info: &TensorInfo, offs: &[Reg]) -> (Reg, Reg) {
    let rank = offs.len();
    let esize = info.dtype.size_bytes();
    let base = c.b.reg(RegClass::B64);
    let lead_ok = c.b.reg(RegClass::Pred);
    c.b.ins(PtxInst::new("mov.b64").op(base).op(info.ptr));
    c.b.ins(PtxInst::new("setp.eq.u32").op(lead_ok).op(0).op(0));
    for d in 0..rank {
        let lin = c.b.reg(RegClass::B32);
        c.b.ins(
            PtxInst::new("mul.lo.s32")
                .op(lin)
                .op(offs[d])
                .op(info.strides[d]),
        );
        let w = c.b.reg(RegClass::B64);
        c.b.ins(PtxInst::new("mul.wide.s32").op(w).op(lin).op(esize));
        c.b.ins(PtxInst::new("add.s64").op(base).op(base).op(w));
        if d + 2 < rank {
            let p = c.b.reg(RegClass::Pred);
            c.b.ins(
                PtxInst::new("setp.lt.u32")
                    .op(p)
                    .op(offs[d])
                    .op(info.dims[d]),
            );
            c.b.ins(PtxInst::new("and.pred").op(lead_ok).op(lead_ok).op(p));
        }
    }
    (base, lead_ok)
}

/// Copies a [rows, cols] tile into shared memory at `off` (row stride `rs` elements of `eb`
/// bytes) with one 16-byte `cp.async` per chunk, zero-filling what lies past the tensor's edges
/// or under `mask`. Returns `false` (emitting nothing) unless the threads cover whole rows of
/// chunks and the mask, if any, is lazy and constant along each row; the caller then uses the
/// general path.
#[allow(clippy::too_many_arguments)]
pub(super) fn cp_async_rows(
    c: &mut Ctx,
    info: &TensorInfo,
    offs: &[Reg],
    rows: usize,
    cols: usize,
    off: u32,
    rs: usize,
    eb: usize,
    mask: Option<kir_ir::Value>,
    core: bool,
    sp: Span,
) -> Result<bool, PtxError> {
    let vec = 16 / eb;
    let rank = offs.len();
    let esize = info.dtype.size_bytes();
    let threads = c.plan.blk.threads as usize;
    let row_chunks = cols / vec;
    // The core-matrix layout needs each thread's rows to keep their place within a group of 8:
    // the copy may then go by groups of whole 64-column blocks (`core_copy_chunks`).
    let cpr = match core {
        true if rows % 8 != 0 || eb != 2 => return Ok(false),
        true => match crate::ptx::plan::wgmma::core_copy_chunks(cols, threads) {
            Some(w) => w,
            None => return Ok(false),
        },
        false => row_chunks,
    };
    let mask_ok = match mask {
        None => true,
        Some(m) => c.values.lazy.contains_key(&m) && super::lazy::lazy_uniform_along(c, m, 1, 0),
    };
    if rank < 2 || cpr == 0 || threads % cpr != 0 || !mask_ok {
        return Ok(false);
    }
    // Column groups copied one after another, each `cpr` chunks wide: its first column, and the
    // shared bytes from group 0 (whole 64-column blocks of the core layout).
    let groups = row_chunks / cpr;
    let group_col = |g: usize| g * cpr * vec;
    let group_smem = |g: usize| (group_col(g) / 64 * rows * 128) as u32;
    c.b.need(Isa::CP_ASYNC);
    let rstep = threads / cpr;
    let total = rows * cpr;
    let (base, lead_ok) = tile_origin(c, info, offs);
    let (dim_r, dim_c) = (info.dims[rank - 2], info.dims[rank - 1]);
    let (off_r, off_c, stride_r) = (offs[rank - 2], offs[rank - 1], info.strides[rank - 2]);
    // This thread's first row and its column of chunks.
    let (row0, colv) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
    if cpr.is_power_of_two() {
        c.b.ins(
            PtxInst::new("shr.u32")
                .op(row0)
                .op(c.thread.tid)
                .op(cpr.trailing_zeros()),
        );
        c.b.ins(
            PtxInst::new("and.b32")
                .op(colv)
                .op(c.thread.tid)
                .op(cpr - 1),
        );
    } else {
        c.b.ins(
            PtxInst::new("div.u32")
                .op(row0)
                .op(c.thread.tid)
                .op(cpr)
                .strength_reduced(),
        );
        c.b.ins(
            PtxInst::new("rem.u32")
                .op(colv)
                .op(c.thread.tid)
                .op(cpr)
                .strength_reduced(),
        );
    }
    // Bytes of the chunk inside the tensor's columns: clamp(dim_c − gc, 0, vec)·esize.
    let (gc, ncol) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
    c.b.ins(PtxInst::new("mad.lo.s32").op(gc).op(colv).op(vec).op(off_c));
    c.b.ins(PtxInst::new("sub.s32").op(ncol).op(dim_c).op(gc));
    c.b.ins(PtxInst::new("max.s32").op(ncol).op(ncol).op(0));
    c.b.ins(PtxInst::new("min.s32").op(ncol).op(ncol).op(vec));
    c.b.ins(PtxInst::new("mul.lo.s32").op(ncol).op(ncol).op(esize));
    c.b.ins(PtxInst::new("selp.b32").op(ncol).op(ncol).op(0).op(lead_ok));
    // Global address of the first chunk, and the byte step between this thread's chunks.
    let (ga0, lin, w) = (
        c.b.reg(RegClass::B64),
        c.b.reg(RegClass::B32),
        c.b.reg(RegClass::B64),
    );
    c.b.ins(PtxInst::new("mul.lo.s32").op(lin).op(row0).op(stride_r));
    c.b.ins(PtxInst::new("mad.lo.s32").op(lin).op(colv).op(vec).op(lin));
    c.b.ins(PtxInst::new("mul.wide.s32").op(w).op(lin).op(esize));
    c.b.ins(PtxInst::new("add.s64").op(ga0).op(base).op(w));
    let (sl, gstep) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B64));
    c.b.ins(PtxInst::new("mul.lo.s32").op(sl).op(stride_r).op(rstep));
    c.b.ins(PtxInst::new("mul.wide.s32").op(gstep).op(sl).op(esize));
    let sa0 = if core {
        let j0 = c.b.reg(RegClass::B32);
        c.b.ins(PtxInst::new("mul.lo.s32").op(j0).op(colv).op(vec));
        super::wgmma::core_addr(c, off, row0, j0, rows, eb)
    } else {
        c.smem_addr(off, &[row0, colv], rs, vec, eb)
    };
    // Shared byte offset of a thread's chunk on pass `it`: rstep rows further per pass, rows of
    // 128 bytes in the core layout (rstep % 8 = 0 keeps the swizzle), else rs elements.
    let chunk_dst = |it: usize| -> u32 {
        if core {
            (it * rstep * 128) as u32
        } else {
            (it * rstep * rs * eb) as u32
        }
    };
    // A tile wholly inside the tensor (and unmasked, or under a mask true on a prefix of its rows
    // that reaches its last row) needs no per-chunk checks: every chunk is 16 bytes at the next
    // address. Only the last pass over the rows, when the threads do not divide them, checks
    // that the thread's row exists in the tile.
    let (inside, checked) = (c.b.label("cp_inside"), c.b.label("cp_checked"));
    let prefix = mask.is_some_and(|m| super::lazy::lazy_row_prefix(c, m));
    if mask.is_none() || prefix {
        let (p, q, e) = (
            c.b.reg(RegClass::Pred),
            c.b.reg(RegClass::Pred),
            c.b.reg(RegClass::B32),
        );
        // off_r ≤ dim_r − rows (no overflow: dims are non-negative i32), likewise for columns.
        c.b.ins(PtxInst::new("sub.s32").op(e).op(dim_r).op(rows));
        c.b.ins(PtxInst::new("setp.le.s32").op(p).op(off_r).op(e));
        c.b.ins(PtxInst::new("sub.s32").op(e).op(dim_c).op(cols));
        c.b.ins(PtxInst::new("setp.le.s32").op(q).op(off_c).op(e));
        c.b.ins(PtxInst::new("and.pred").op(p).op(p).op(q));
        c.b.ins(PtxInst::new("setp.ge.s32").op(q).op(off_r).op(0));
        c.b.ins(PtxInst::new("and.pred").op(p).op(p).op(q));
        c.b.ins(PtxInst::new("setp.ge.s32").op(q).op(off_c).op(0));
        c.b.ins(PtxInst::new("and.pred").op(p).op(p).op(q));
        c.b.ins(PtxInst::new("and.pred").op(p).op(p).op(lead_ok));
        if let Some(m) = mask {
            let (last, zero) = (c.b.imm32(rows as i64 - 1), c.b.imm32(0));
            let mv = super::values::coord_value(c, m, &[last, zero], sp)?;
            c.b.ins(PtxInst::new("and.pred").op(p).op(p).op(mv));
        }
        c.b.ins_if(p, true, PtxInst::new("bra.uni").op(&checked));
        for g in 0..groups {
            let ga = c.b.reg(RegClass::B64);
            if g == 0 {
                c.b.ins(PtxInst::new("mov.b64").op(ga).op(ga0));
            } else {
                let bytes = (group_col(g) * esize) as i64;
                c.b.ins(PtxInst::new("add.s64").op(ga).op(ga0).op(bytes));
            }
            for it in 0..total.div_ceil(threads) {
                if it > 0 {
                    c.b.ins(PtxInst::new("add.s64").op(ga).op(ga).op(gstep));
                }
                let dst = chunk_dst(it) + group_smem(g);
                let ins = PtxInst::new("cp.async.cg.shared.global")
                    .addr_off(sa0, dst)
                    .addr(ga)
                    .op(16);
                if (it + 1) * threads > total {
                    let (lr, pv) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::Pred));
                    c.b.ins(PtxInst::new("add.s32").op(lr).op(row0).op(it * rstep));
                    c.b.ins(PtxInst::new("setp.lt.u32").op(pv).op(lr).op(rows));
                    c.b.ins_if(pv, false, ins);
                } else {
                    c.b.ins(ins);
                }
            }
        }
        c.b.ins(PtxInst::new("bra.uni").op(&inside));
    }
    c.b.place(&checked);
    for g in 0..groups {
        let ga = c.b.reg(RegClass::B64);
        let ncol = if g == 0 {
            c.b.ins(PtxInst::new("mov.b64").op(ga).op(ga0));
            ncol
        } else {
            let bytes = (group_col(g) * esize) as i64;
            c.b.ins(PtxInst::new("add.s64").op(ga).op(ga0).op(bytes));
            // This group's chunk: clamp(dim_c − gc − group_col, 0, vec)·esize.
            let n = c.b.reg(RegClass::B32);
            c.b.ins(PtxInst::new("sub.s32").op(n).op(dim_c).op(gc));
            c.b.ins(PtxInst::new("sub.s32").op(n).op(n).op(group_col(g)));
            c.b.ins(PtxInst::new("max.s32").op(n).op(n).op(0));
            c.b.ins(PtxInst::new("min.s32").op(n).op(n).op(vec));
            c.b.ins(PtxInst::new("mul.lo.s32").op(n).op(n).op(esize));
            c.b.ins(PtxInst::new("selp.b32").op(n).op(n).op(0).op(lead_ok));
            n
        };
        for it in 0..total.div_ceil(threads) {
            if it > 0 {
                c.b.ins(PtxInst::new("add.s64").op(ga).op(ga).op(gstep));
            }
            // Tile-local and tensor row of this chunk.
            let (lr, gr) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
            c.b.ins(PtxInst::new("add.s32").op(lr).op(row0).op(it * rstep));
            c.b.ins(PtxInst::new("add.s32").op(gr).op(lr).op(off_r));
            let (p, n) = (c.b.reg(RegClass::Pred), c.b.reg(RegClass::B32));
            c.b.ins(PtxInst::new("setp.lt.u32").op(p).op(gr).op(dim_r));
            if let Some(m) = mask {
                let lc = c.b.reg(RegClass::B32);
                c.b.ins(PtxInst::new("mul.lo.s32").op(lc).op(colv).op(vec));
                if g > 0 {
                    c.b.ins(PtxInst::new("add.s32").op(lc).op(lc).op(group_col(g)));
                }
                let mv = super::values::coord_value(c, m, &[lr, lc], sp)?;
                c.b.ins(PtxInst::new("and.pred").op(p).op(p).op(mv));
            }
            c.b.ins(PtxInst::new("selp.b32").op(n).op(ncol).op(0).op(p));
            // Nothing read: point at the tensor's origin so the address stays valid.
            let (src, pz) = (c.b.reg(RegClass::B64), c.b.reg(RegClass::Pred));
            c.b.ins(PtxInst::new("setp.eq.u32").op(pz).op(n).op(0));
            c.b.ins(PtxInst::new("selp.b64").op(src).op(info.ptr).op(ga).op(pz));
            let dst = chunk_dst(it) + group_smem(g);
            let ins = PtxInst::new("cp.async.cg.shared.global")
                .addr_off(sa0, dst)
                .addr(src)
                .op(16)
                .op(n);
            if (it + 1) * threads > total {
                let pv = c.b.reg(RegClass::Pred);
                c.b.ins(PtxInst::new("setp.lt.u32").op(pv).op(lr).op(rows));
                c.b.ins_if(pv, false, ins);
            } else {
                c.b.ins(ins);
            }
        }
    }
    c.b.place(&inside);
    Ok(true)
}
