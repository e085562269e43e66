//! The `Blocked` layout's memory fast paths: `cp.async` tile copies into shared memory
//! (zero-filled edges, chunk-uniform masks), the alignment check that guards them, and 16-byte
//! vector loads and stores of blocked register tiles (the register fast paths: `rows.rs`).

use super::convert::slot_live;
use super::ctx::{Ctx, TensorInfo};
use super::elem::{and_pred, element, gty, load_elem, store_bits};
use super::PtxError;
use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::{Operand, PtxInst, Reg, RegClass};
use crate::ptx::plan::layout::Layout;
use kir_ir::{Dtype, Span};

/// A uniform predicate: 16-byte vectors of `vec` elements along the last dim are aligned
/// (base pointer 16-byte aligned, every outer stride and the last offset multiples of `vec`).
pub(super) fn vector_alignment_ok(c: &mut Ctx, info: &TensorInfo, offs: &[Reg], vec: usize) -> Reg {
    let ok = c.b.reg(RegClass::Pred);
    let t = c.b.reg(RegClass::B64);
    c.b.ins(PtxInst::new("and.b64").op(t).op(info.ptr).op(15));
    c.b.ins(PtxInst::new("setp.eq.u64").op(ok).op(t).op(0));
    let rank = offs.len();
    let mut checks: Vec<Reg> = info.strides[..rank.saturating_sub(1)].to_vec();
    checks.push(offs[rank - 1]);
    for r in checks {
        let (m, p) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::Pred));
        c.b.ins(PtxInst::new("and.b32").op(m).op(r).op(vec - 1));
        c.b.ins(PtxInst::new("setp.eq.u32").op(p).op(m).op(0));
        c.b.ins(PtxInst::new("and.pred").op(ok).op(ok).op(p));
    }
    ok
}

/// Copies a [rows, cols] tile to shared memory with 16-byte `cp.async` per thread and chunk;
/// chunks past the tensor's edge copy fewer bytes and the rest is zero-filled.
#[allow(clippy::too_many_arguments)]
pub(super) fn cp_async_tile(
    c: &mut Ctx,
    info: &TensorInfo,
    offs: &[Reg],
    rows: usize,
    cols: usize,
    off: u32,
    rs: usize,
    eb: usize,
    mask: Option<kir_ir::Value>,
    shape: &[usize],
    sp: Span,
) -> Result<(), PtxError> {
    c.b.need(Isa::CP_ASYNC);
    let vec = 16 / eb;
    let rank = offs.len();
    let esize = info.dtype.size_bytes();
    let (cpr, total) = (cols / vec, rows * (cols / vec));
    let threads = c.plan.blk.threads as usize;
    let (base, lead_ok) = super::cp_rows::tile_origin(c, info, offs);
    let (dim_r, dim_c) = (info.dims[rank - 2], info.dims[rank - 1]);
    let (off_r, off_c, stride_r) = (offs[rank - 2], offs[rank - 1], info.strides[rank - 2]);
    for it in 0..total.div_ceil(threads) {
        let chunk = c.b.reg(RegClass::B32);
        c.b.ins(
            PtxInst::new("add.s32")
                .op(chunk)
                .op(c.thread.tid)
                .op(it * threads),
        );
        let (row, colv) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
        c.b.ins(
            PtxInst::new("div.u32")
                .op(row)
                .op(chunk)
                .op(cpr)
                .strength_reduced(),
        );
        c.b.ins(
            PtxInst::new("rem.u32")
                .op(colv)
                .op(chunk)
                .op(cpr)
                .strength_reduced(),
        );
        let (gr, gc) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
        c.b.ins(PtxInst::new("add.s32").op(gr).op(off_r).op(row));
        c.b.ins(PtxInst::new("mad.lo.s32").op(gc).op(colv).op(vec).op(off_c));
        // Valid elements in this chunk: clamp(dim_c − gc, 0, vec), 0 if the row is outside.
        let (n, p) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::Pred));
        c.b.ins(PtxInst::new("sub.s32").op(n).op(dim_c).op(gc));
        c.b.ins(PtxInst::new("max.s32").op(n).op(n).op(0));
        c.b.ins(PtxInst::new("min.s32").op(n).op(n).op(vec));
        c.b.ins(PtxInst::new("setp.lt.u32").op(p).op(gr).op(dim_r));
        c.b.ins(PtxInst::new("and.pred").op(p).op(p).op(lead_ok));
        let row_ok = p;
        c.b.ins(PtxInst::new("selp.b32").op(n).op(n).op(0).op(p));
        c.b.ins(PtxInst::new("mul.lo.s32").op(n).op(n).op(esize));
        // Global address (the tile origin when nothing is read, so it stays valid).
        let ga = c.b.reg(RegClass::B64);
        let lin = c.b.reg(RegClass::B32);
        c.b.ins(PtxInst::new("mul.lo.s32").op(lin).op(row).op(stride_r));
        c.b.ins(PtxInst::new("mad.lo.s32").op(lin).op(colv).op(vec).op(lin));
        let w = c.b.reg(RegClass::B64);
        c.b.ins(PtxInst::new("mul.wide.s32").op(w).op(lin).op(esize));
        c.b.ins(PtxInst::new("add.s64").op(ga).op(base).op(w));
        let pn = c.b.reg(RegClass::Pred);
        c.b.ins(PtxInst::new("setp.eq.u32").op(pn).op(n).op(0));
        c.b.ins(PtxInst::new("selp.b64").op(ga).op(info.ptr).op(ga).op(pn));
        let sa = c.smem_addr(off, &[row, colv], rs, vec, eb);
        // A mask (one predicate per element, Blocked layout = this chunk's 8 slots): a chunk
        // fully on copies, fully off zero-fills, mixed goes element by element below.
        let mixed = match mask {
            None => None,
            Some(m) if super::lazy::lazy_uniform_along(c, m, shape.len() - 1, 0) => {
                // Constant along the row: the chunk's first element decides the whole chunk.
                let m0 = super::values::slot_value(c, m, Layout::Blocked, shape, it * vec, sp)?;
                c.b.ins(PtxInst::new("selp.b32").op(n).op(n).op(0).op(m0));
                None
            }
            Some(m) => {
                let mut ms = Vec::with_capacity(vec);
                for k in 0..vec {
                    ms.push(super::values::slot_value(
                        c,
                        m,
                        Layout::Blocked,
                        shape,
                        it * vec + k,
                        sp,
                    )?);
                }
                let (all, any) = (c.b.reg(RegClass::Pred), c.b.reg(RegClass::Pred));
                c.b.ins(PtxInst::new("mov.pred").op(all).op(ms[0]));
                c.b.ins(PtxInst::new("mov.pred").op(any).op(ms[0]));
                for &p in &ms[1..] {
                    c.b.ins(PtxInst::new("and.pred").op(all).op(all).op(p));
                    c.b.ins(PtxInst::new("or.pred").op(any).op(any).op(p));
                }
                c.b.ins(PtxInst::new("selp.b32").op(n).op(n).op(0).op(all));
                let mx = c.b.reg(RegClass::Pred);
                c.b.ins(PtxInst::new("not.pred").op(mx).op(all));
                c.b.ins(PtxInst::new("and.pred").op(mx).op(mx).op(any));
                Some((mx, ms))
            }
        };
        let inside = (it + 1) * threads > total;
        let pv = c.b.reg(RegClass::Pred);
        if inside {
            c.b.ins(PtxInst::new("setp.lt.u32").op(pv).op(chunk).op(total));
        } else {
            c.b.ins(PtxInst::new("setp.eq.u32").op(pv).op(0).op(0));
        }
        c.b.ins_if(
            pv,
            false,
            PtxInst::new("cp.async.cg.shared.global")
                .addr(sa)
                .addr(ga)
                .op(16)
                .op(n),
        );
        if let Some((mx, ms)) = mixed {
            // Element by element: in-bounds and mask on → load, else 0.
            let skip = c.b.label("cpmix");
            let go = c.b.reg(RegClass::Pred);
            c.b.ins(PtxInst::new("and.pred").op(go).op(mx).op(pv));
            c.b.ins_if(go, true, PtxInst::new("bra").op(&skip));
            for (k, &mk) in ms.iter().enumerate() {
                let (h, col, p) = (
                    c.b.reg(RegClass::B16),
                    c.b.reg(RegClass::B32),
                    c.b.reg(RegClass::Pred),
                );
                c.b.ins(PtxInst::new("mov.b16").op(h).op(0));
                c.b.ins(PtxInst::new("add.s32").op(col).op(gc).op(k));
                c.b.ins(PtxInst::new("setp.lt.u32").op(p).op(col).op(dim_c));
                c.b.ins(PtxInst::new("and.pred").op(p).op(p).op(mk));
                c.b.ins(PtxInst::new("and.pred").op(p).op(p).op(row_ok));
                c.b.ins_if(
                    p,
                    false,
                    PtxInst::new("ld.global.b16").op(h).addr_off(ga, k * esize),
                );
                c.b.ins(PtxInst::new("st.shared.b16").addr_off(sa, k * eb).op(h));
            }
            c.b.place(&skip);
        }
    }

    Ok(())
}

/// What [`blocked_vec_access`] does.
#[derive(Clone, Copy)]
pub(super) enum Access {
    /// Load, filling out-of-bounds elements with the value.
    Load(f64),
    Store,
}

/// True if a `Blocked` tile of `shape` and dtype `d` can move in 16-byte vectors: its chunks stay
/// within a row (last dim a multiple of VEC) and the tensor's last dim is contiguous.
pub(super) fn vec_ok(info: &TensorInfo, shape: &[usize], d: Dtype) -> bool {
    info.contiguous_last
        && shape
            .last()
            .is_some_and(|&n| n % crate::ptx::plan::VEC == 0)
        && matches!(d, Dtype::Bf16 | Dtype::F16 | Dtype::F32)
}

/// Loads or stores a `Blocked` tile chunk by chunk: a chunk fully inside the tensor (and
/// aligned, checked once per op) moves as 16-byte vectors, any other chunk element by element
/// from the chunk's own address (its elements are consecutive in one row).
#[allow(clippy::too_many_arguments)]
pub(super) fn blocked_vec_access(
    c: &mut Ctx,
    info: &TensorInfo,
    offs: &[Reg],
    shape: &[usize],
    d: Dtype,
    access: Access,
    values: Option<&[Reg]>,
    _mask: Option<&[Reg]>,
) -> Result<Vec<Reg>, PtxError> {
    let v = crate::ptx::plan::VEC;
    let coords = c.coords(Layout::Blocked, shape);
    let aligned = vector_alignment_ok(c, info, offs, v);
    let rank = offs.len();
    let dim_c = info.dims[rank - 1];
    let esize = info.dtype.size_bytes();
    let mut out: Vec<Reg> = Vec::with_capacity(coords.len());
    for (g, chunk) in coords.chunks(v).enumerate() {
        let regs: Vec<Reg> = match access {
            Access::Load(other) => (0..v).map(|_| super::ctx::constant(c, d, other)).collect(),
            Access::Store => values
                .map(|vs| vs[g * v..g * v + v].to_vec())
                .unwrap_or_default(),
        };
        if !slot_live(c, Layout::Blocked, shape, g * v) {
            // No thread holds this chunk.
            if matches!(access, Access::Load(_)) {
                out.extend(regs);
            }
            continue;
        }
        let first = &chunk[0];
        let (addr0, inb0) = element(c, info, offs, &first.idx);
        // The chunk holds elements and starts inside the tensor; full if its last one does too.
        let ok = and_pred(c, inb0, first.valid);
        let (col0, last_col, full) = (
            c.b.reg(RegClass::B32),
            c.b.reg(RegClass::B32),
            c.b.reg(RegClass::Pred),
        );
        c.b.ins(
            PtxInst::new("add.s32")
                .op(col0)
                .op(offs[rank - 1])
                .op(first.idx[first.idx.len() - 1]),
        );
        c.b.ins(PtxInst::new("add.s32").op(last_col).op(col0).op(v - 1));
        c.b.ins(PtxInst::new("setp.lt.u32").op(full).op(last_col).op(dim_c));
        c.b.ins(PtxInst::new("and.pred").op(full).op(full).op(ok));
        c.b.ins(PtxInst::new("and.pred").op(full).op(full).op(aligned));
        // 16-bit elements travel as four packed words on both paths and are converted once.
        let half = matches!(d, Dtype::F16 | Dtype::Bf16);
        let t16 = if d == Dtype::F16 { "f16" } else { "bf16" };
        let words: Vec<Reg> = match half {
            true => (0..4).map(|_| c.b.reg(RegClass::B32)).collect(),
            false => vec![],
        };
        if half && matches!(access, Access::Store) {
            for (k, &word) in words.iter().enumerate() {
                let (lo, hi) = (regs[2 * k], regs[2 * k + 1]);
                c.b.need(Isa::CVT_TO_BF16_OR_PACKED).ins(
                    PtxInst::new("cvt.rn")
                        .m(t16)
                        .suffix("x2")
                        .m("f32")
                        .op(word)
                        .op(hi)
                        .op(lo),
                );
            }
        }
        let (vec_l, done) = (c.b.label("vec"), c.b.label("vecdone"));
        c.b.ins_if(full, false, PtxInst::new("bra").op(&vec_l));
        // Element by element, each in bounds only if its column is.
        let halves: Vec<Reg> = match half {
            true => (0..v).map(|_| c.b.reg(RegClass::B16)).collect(),
            false => vec![],
        };
        if half {
            for (k, h) in halves.chunks(2).enumerate() {
                match access {
                    Access::Load(other) => {
                        let bits = match d {
                            Dtype::F16 => half::f16::from_f64(other).to_bits(),
                            _ => half::bf16::from_f64(other).to_bits(),
                        };
                        c.b.ins(PtxInst::new("mov.b16").op(h[0]).op(bits));
                        c.b.ins(PtxInst::new("mov.b16").op(h[1]).op(bits));
                    }
                    Access::Store => {
                        c.b.ins(PtxInst::new("mov.b32").vec([h[0], h[1]]).op(words[k]))
                    }
                }
            }
        }
        for k in 0..v {
            let (addr, p) = if k == 0 {
                (addr0, ok)
            } else {
                let (a, col, p) = (
                    c.b.reg(RegClass::B64),
                    c.b.reg(RegClass::B32),
                    c.b.reg(RegClass::Pred),
                );
                c.b.ins(PtxInst::new("add.s64").op(a).op(addr0).op(k * esize));
                c.b.ins(PtxInst::new("add.s32").op(col).op(col0).op(k));
                c.b.ins(PtxInst::new("setp.lt.u32").op(p).op(col).op(dim_c));
                c.b.ins(PtxInst::new("and.pred").op(p).op(p).op(ok));
                (a, p)
            };
            match (access, half) {
                (Access::Load(_), true) => c.b.ins_if(
                    p,
                    false,
                    PtxInst::new("ld.global.b16").op(halves[k]).addr(addr),
                ),
                (Access::Load(_), false) => load_elem(c, d, regs[k], addr, p),
                (Access::Store, true) => c.b.ins_if(
                    p,
                    false,
                    PtxInst::new("st.global.b16").addr(addr).op(halves[k]),
                ),
                (Access::Store, false) => {
                    let bits = store_bits(c, d, regs[k]);
                    c.b.ins_if(
                        p,
                        false,
                        PtxInst::new("st.global").m(gty(d)).addr(addr).op(bits),
                    );
                }
            }
        }
        if half && matches!(access, Access::Load(_)) {
            for (k, h) in halves.chunks(2).enumerate() {
                c.b.ins(PtxInst::new("mov.b32").op(words[k]).vec([h[0], h[1]]));
            }
        }
        c.b.ins(PtxInst::new("bra").op(&done));
        c.b.place(&vec_l);
        let ws = |w: &[Reg]| Operand::vec(&w[..4]);
        match (access, half) {
            (Access::Load(_), false) => {
                for h in 0..2 {
                    let r = ws(&regs[h * 4..h * 4 + 4]);
                    c.b.ins(
                        PtxInst::new("ld.global.v4.f32")
                            .op(r)
                            .addr_off(addr0, h * 16),
                    );
                }
            }
            (Access::Load(_), true) => {
                c.b.ins(PtxInst::new("ld.global.v4.b32").op(ws(&words)).addr(addr0))
            }
            (Access::Store, false) => {
                for h in 0..2 {
                    let r = ws(&regs[h * 4..h * 4 + 4]);
                    c.b.ins(
                        PtxInst::new("st.global.v4.f32")
                            .addr_off(addr0, h * 16)
                            .op(r),
                    );
                }
            }
            (Access::Store, true) => {
                c.b.ins(PtxInst::new("st.global.v4.b32").addr(addr0).op(ws(&words)))
            }
        }
        c.b.place(&done);
        if half && matches!(access, Access::Load(_)) {
            // Unpacked and converted where the tile is first read (deferred.rs).
            for (k, &word) in words.iter().enumerate() {
                let (lo, hi) = (c.b.reg(RegClass::B16), c.b.reg(RegClass::B16));
                super::deferred::emit(c, PtxInst::new("mov.b32").vec([lo, hi]).op(word));
                c.b.need(Isa::cvt_to_f32(d));
                super::deferred::emit(c, PtxInst::new("cvt.f32").m(t16).op(regs[2 * k]).op(lo));
                super::deferred::emit(c, PtxInst::new("cvt.f32").m(t16).op(regs[2 * k + 1]).op(hi));
            }
        }
        if matches!(access, Access::Load(_)) {
            out.extend(regs);
        }
    }
    Ok(out)
}
