//! The strength-reduced `cp.async` tile copy: when the block's threads cover whole rows of
//! 16-byte chunks (threads a multiple of the chunks per row), every chunk a thread copies sits in
//! the same column, `threads / chunks-per-row` rows below the previous one. The column, its byte
//! count at the right edge, the global and shared addresses are then computed once per copy and
//! each chunk costs a row check, its mask and two address increments — instead of a division,
//! a remainder and a full address computation per chunk. Loops that prefetch K/V or GEMM
//! operand tiles every iteration spend most of their integer work here.

use super::builder::{Reg, RegClass};
use super::ctx::{Ctx, TensorInfo};
use super::isa::Isa;
use super::PtxError;
use kir_ir::Span;

/// The global address of a tile's origin (element `offs`) and a predicate that the leading
/// offsets (all but the last two) are inside the tensor; the last two are checked per chunk.
pub(super) fn tile_origin(c: &mut Ctx, info: &TensorInfo, offs: &[Reg]) -> (Reg, Reg) {
    let rank = offs.len();
    let esize = info.dtype.size_bytes();
    let base = c.b.reg(RegClass::B64);
    let lead_ok = c.b.reg(RegClass::Pred);
    c.b.ins(format!("mov.b64 {base}, {}", info.ptr));
    c.b.ins(format!("setp.eq.u32 {lead_ok}, 0, 0"));
    for d in 0..rank {
        let lin = c.b.reg(RegClass::B32);
        c.b.ins(format!(
            "mul.lo.s32 {lin}, {}, {}",
            offs[d], info.strides[d]
        ));
        let w = c.b.reg(RegClass::B64);
        c.b.ins(format!("mul.wide.s32 {w}, {lin}, {esize}"));
        c.b.ins(format!("add.s64 {base}, {base}, {w}"));
        if d + 2 < rank {
            let p = c.b.reg(RegClass::Pred);
            c.b.ins(format!("setp.lt.u32 {p}, {}, {}", offs[d], info.dims[d]));
            c.b.ins(format!("and.pred {lead_ok}, {lead_ok}, {p}"));
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
    let threads = c.blk.threads as usize;
    let cpr = cols / vec;
    let mask_ok = match mask {
        None => true,
        Some(m) => c.lazy.contains_key(&m) && super::lazy::lazy_uniform_along(c, m, 1, 0),
    };
    if rank < 2 || cpr == 0 || threads % cpr != 0 || !mask_ok {
        return Ok(false);
    }
    // The core-matrix layout needs each thread's rows to keep their place within a group of 8.
    if core && ((threads / cpr) % 8 != 0 || rows % 8 != 0 || cols % 64 != 0 || eb != 2) {
        return Ok(false);
    }
    c.b.need(Isa::CP_ASYNC);
    let rstep = threads / cpr;
    let total = rows * cpr;
    let (base, lead_ok) = tile_origin(c, info, offs);
    let (dim_r, dim_c) = (info.dims[rank - 2], info.dims[rank - 1]);
    let (off_r, off_c, stride_r) = (offs[rank - 2], offs[rank - 1], info.strides[rank - 2]);
    // This thread's first row and its column of chunks.
    let (row0, colv) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
    if cpr.is_power_of_two() {
        c.b.ins(format!(
            "shr.u32 {row0}, {}, {}",
            c.tid,
            cpr.trailing_zeros()
        ));
        c.b.ins(format!("and.b32 {colv}, {}, {}", c.tid, cpr - 1));
    } else {
        c.b.ins(format!("div.u32 {row0}, {}, {cpr}", c.tid));
        c.b.ins(format!("rem.u32 {colv}, {}, {cpr}", c.tid));
    }
    // Bytes of the chunk inside the tensor's columns: clamp(dim_c − gc, 0, vec)·esize.
    let (gc, ncol) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
    c.b.ins(format!("mad.lo.s32 {gc}, {colv}, {vec}, {off_c}"));
    c.b.ins(format!("sub.s32 {ncol}, {dim_c}, {gc}"));
    c.b.ins(format!("max.s32 {ncol}, {ncol}, 0"));
    c.b.ins(format!("min.s32 {ncol}, {ncol}, {vec}"));
    c.b.ins(format!("mul.lo.s32 {ncol}, {ncol}, {esize}"));
    c.b.ins(format!("selp.b32 {ncol}, {ncol}, 0, {lead_ok}"));
    // Global address of the first chunk, and the byte step between this thread's chunks.
    let (ga0, lin, w) = (
        c.b.reg(RegClass::B64),
        c.b.reg(RegClass::B32),
        c.b.reg(RegClass::B64),
    );
    c.b.ins(format!("mul.lo.s32 {lin}, {row0}, {stride_r}"));
    c.b.ins(format!("mad.lo.s32 {lin}, {colv}, {vec}, {lin}"));
    c.b.ins(format!("mul.wide.s32 {w}, {lin}, {esize}"));
    c.b.ins(format!("add.s64 {ga0}, {base}, {w}"));
    let (sl, gstep) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B64));
    c.b.ins(format!("mul.lo.s32 {sl}, {stride_r}, {rstep}"));
    c.b.ins(format!("mul.wide.s32 {gstep}, {sl}, {esize}"));
    let sa0 = if core {
        let j0 = c.b.reg(RegClass::B32);
        c.b.ins(format!("mul.lo.s32 {j0}, {colv}, {vec}"));
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
        c.b.ins(format!("sub.s32 {e}, {dim_r}, {rows}"));
        c.b.ins(format!("setp.le.s32 {p}, {off_r}, {e}"));
        c.b.ins(format!("sub.s32 {e}, {dim_c}, {cols}"));
        c.b.ins(format!("setp.le.s32 {q}, {off_c}, {e}"));
        c.b.ins(format!("and.pred {p}, {p}, {q}"));
        c.b.ins(format!("setp.ge.s32 {q}, {off_r}, 0"));
        c.b.ins(format!("and.pred {p}, {p}, {q}"));
        c.b.ins(format!("setp.ge.s32 {q}, {off_c}, 0"));
        c.b.ins(format!("and.pred {p}, {p}, {q}"));
        c.b.ins(format!("and.pred {p}, {p}, {lead_ok}"));
        if let Some(m) = mask {
            let (last, zero) = (c.b.imm32(rows as i64 - 1), c.b.imm32(0));
            let mv = super::lazy::coord_value(c, m, &[last, zero], sp)?;
            c.b.ins(format!("and.pred {p}, {p}, {mv}"));
        }
        c.b.ins_if(p, true, format!("bra.uni {checked}"));
        let ga = c.b.reg(RegClass::B64);
        c.b.ins(format!("mov.b64 {ga}, {ga0}"));
        for it in 0..total.div_ceil(threads) {
            if it > 0 {
                c.b.ins(format!("add.s64 {ga}, {ga}, {gstep}"));
            }
            let dst = chunk_dst(it);
            let ins = format!("cp.async.cg.shared.global [{sa0}+{dst}], [{ga}], 16");
            if (it + 1) * threads > total {
                let (lr, pv) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::Pred));
                c.b.ins(format!("add.s32 {lr}, {row0}, {}", it * rstep));
                c.b.ins(format!("setp.lt.u32 {pv}, {lr}, {rows}"));
                c.b.ins_if(pv, false, ins);
            } else {
                c.b.ins(ins);
            }
        }
        c.b.ins(format!("bra.uni {inside}"));
    }
    c.b.place(&checked);
    let ga = c.b.reg(RegClass::B64);
    c.b.ins(format!("mov.b64 {ga}, {ga0}"));
    for it in 0..total.div_ceil(threads) {
        if it > 0 {
            c.b.ins(format!("add.s64 {ga}, {ga}, {gstep}"));
        }
        // Tile-local and tensor row of this chunk.
        let (lr, gr) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
        c.b.ins(format!("add.s32 {lr}, {row0}, {}", it * rstep));
        c.b.ins(format!("add.s32 {gr}, {lr}, {off_r}"));
        let (p, n) = (c.b.reg(RegClass::Pred), c.b.reg(RegClass::B32));
        c.b.ins(format!("setp.lt.u32 {p}, {gr}, {dim_r}"));
        if let Some(m) = mask {
            let lc = c.b.reg(RegClass::B32);
            c.b.ins(format!("mul.lo.s32 {lc}, {colv}, {vec}"));
            let mv = super::lazy::coord_value(c, m, &[lr, lc], sp)?;
            c.b.ins(format!("and.pred {p}, {p}, {mv}"));
        }
        c.b.ins(format!("selp.b32 {n}, {ncol}, 0, {p}"));
        // Nothing read: point at the tensor's origin so the address stays valid.
        let (src, pz) = (c.b.reg(RegClass::B64), c.b.reg(RegClass::Pred));
        c.b.ins(format!("setp.eq.u32 {pz}, {n}, 0"));
        c.b.ins(format!("selp.b64 {src}, {}, {ga}, {pz}", info.ptr));
        let dst = chunk_dst(it);
        let ins = format!("cp.async.cg.shared.global [{sa0}+{dst}], [{src}], 16, {n}");
        if (it + 1) * threads > total {
            let pv = c.b.reg(RegClass::Pred);
            c.b.ins(format!("setp.lt.u32 {pv}, {lr}, {rows}"));
            c.b.ins_if(pv, false, ins);
        } else {
            c.b.ins(ins);
        }
    }
    c.b.place(&inside);
    Ok(true)
}
