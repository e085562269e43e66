//! 16-byte vector memory paths: `cp.async` tile copies into shared memory (zero-filled edges,
//! chunk-uniform masks), the alignment check that guards them, and vectorized loads and stores of
//! blocked register tiles.

use super::builder::{Reg, RegClass};
use super::ctx::{Ctx, TensorInfo};
use super::layout::Layout;
use super::memory::{and_pred, element, gty, load_elem, store_bits};
use super::PtxError;
use kir_ir::{Dtype, Span};

/// A uniform predicate: 16-byte vectors of `vec` elements along the last dim are aligned
/// (base pointer 16-byte aligned, every outer stride and the last offset multiples of `vec`).
pub(super) fn vector_alignment_ok(c: &mut Ctx, info: &TensorInfo, offs: &[Reg], vec: usize) -> Reg {
    let ok = c.b.reg(RegClass::Pred);
    let t = c.b.reg(RegClass::B64);
    c.b.ins(format!("and.b64 {t}, {}, 15", info.ptr));
    c.b.ins(format!("setp.eq.u64 {ok}, {t}, 0"));
    let rank = offs.len();
    let mut checks: Vec<Reg> = info.strides[..rank.saturating_sub(1)].to_vec();
    checks.push(offs[rank - 1]);
    for r in checks {
        let (m, p) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::Pred));
        c.b.ins(format!("and.b32 {m}, {r}, {}", vec - 1));
        c.b.ins(format!("setp.eq.u32 {p}, {m}, 0"));
        c.b.ins(format!("and.pred {ok}, {ok}, {p}"));
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
    c.b.require((7, 0));
    let vec = 16 / eb;
    let rank = offs.len();
    let esize = info.dtype.size_bytes();
    let (cpr, total) = (cols / vec, rows * (cols / vec));
    let threads = c.blk.threads as usize;
    // Base address of the tile origin and whether the leading offsets are in bounds.
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
    let (dim_r, dim_c) = (info.dims[rank - 2], info.dims[rank - 1]);
    let (off_r, off_c, stride_r) = (offs[rank - 2], offs[rank - 1], info.strides[rank - 2]);
    for it in 0..total.div_ceil(threads) {
        let chunk = c.b.reg(RegClass::B32);
        c.b.ins(format!("add.s32 {chunk}, {}, {}", c.tid, it * threads));
        let (row, colv) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
        c.b.ins(format!("div.u32 {row}, {chunk}, {cpr}"));
        c.b.ins(format!("rem.u32 {colv}, {chunk}, {cpr}"));
        let (gr, gc) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
        c.b.ins(format!("add.s32 {gr}, {off_r}, {row}"));
        c.b.ins(format!("mad.lo.s32 {gc}, {colv}, {vec}, {off_c}"));
        // Valid elements in this chunk: clamp(dim_c − gc, 0, vec), 0 if the row is outside.
        let (n, p) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::Pred));
        c.b.ins(format!("sub.s32 {n}, {dim_c}, {gc}"));
        c.b.ins(format!("max.s32 {n}, {n}, 0"));
        c.b.ins(format!("min.s32 {n}, {n}, {vec}"));
        c.b.ins(format!("setp.lt.u32 {p}, {gr}, {dim_r}"));
        c.b.ins(format!("and.pred {p}, {p}, {lead_ok}"));
        let row_ok = p;
        c.b.ins(format!("selp.b32 {n}, {n}, 0, {p}"));
        c.b.ins(format!("mul.lo.s32 {n}, {n}, {esize}"));
        // Global address (the tile origin when nothing is read, so it stays valid).
        let ga = c.b.reg(RegClass::B64);
        let lin = c.b.reg(RegClass::B32);
        c.b.ins(format!("mul.lo.s32 {lin}, {row}, {stride_r}"));
        c.b.ins(format!("mad.lo.s32 {lin}, {colv}, {vec}, {lin}"));
        let w = c.b.reg(RegClass::B64);
        c.b.ins(format!("mul.wide.s32 {w}, {lin}, {esize}"));
        c.b.ins(format!("add.s64 {ga}, {base}, {w}"));
        let pn = c.b.reg(RegClass::Pred);
        c.b.ins(format!("setp.eq.u32 {pn}, {n}, 0"));
        c.b.ins(format!("selp.b64 {ga}, {}, {ga}, {pn}", info.ptr));
        let sa = c.smem_addr(off, &[row, colv], rs, vec, eb);
        // A mask (one predicate per element, Blocked layout = this chunk's 8 slots): a chunk
        // fully on copies, fully off zero-fills, mixed goes element by element below.
        let mixed = match mask {
            None => None,
            Some(m) if super::lower::lazy_uniform_along(c, m, shape.len() - 1, 0) => {
                // Constant along the row: the chunk's first element decides the whole chunk.
                let m0 = super::lower::slot_value(c, m, Layout::Blocked, shape, it * vec, sp)?;
                c.b.ins(format!("selp.b32 {n}, {n}, 0, {m0}"));
                None
            }
            Some(m) => {
                let mut ms = Vec::with_capacity(vec);
                for k in 0..vec {
                    ms.push(super::lower::slot_value(
                        c,
                        m,
                        Layout::Blocked,
                        shape,
                        it * vec + k,
                        sp,
                    )?);
                }
                let (all, any) = (c.b.reg(RegClass::Pred), c.b.reg(RegClass::Pred));
                c.b.ins(format!("mov.pred {all}, {}", ms[0]));
                c.b.ins(format!("mov.pred {any}, {}", ms[0]));
                for &p in &ms[1..] {
                    c.b.ins(format!("and.pred {all}, {all}, {p}"));
                    c.b.ins(format!("or.pred {any}, {any}, {p}"));
                }
                c.b.ins(format!("selp.b32 {n}, {n}, 0, {all}"));
                let mx = c.b.reg(RegClass::Pred);
                c.b.ins(format!("not.pred {mx}, {all}"));
                c.b.ins(format!("and.pred {mx}, {mx}, {any}"));
                Some((mx, ms))
            }
        };
        let inside = (it + 1) * threads > total;
        let pv = c.b.reg(RegClass::Pred);
        if inside {
            c.b.ins(format!("setp.lt.u32 {pv}, {chunk}, {total}"));
        } else {
            c.b.ins(format!("setp.eq.u32 {pv}, 0, 0"));
        }
        c.b.ins_if(
            pv,
            false,
            format!("cp.async.cg.shared.global [{sa}], [{ga}], 16, {n}"),
        );
        if let Some((mx, ms)) = mixed {
            // Element by element: in-bounds and mask on → load, else 0.
            let skip = c.b.label("cpmix");
            let go = c.b.reg(RegClass::Pred);
            c.b.ins(format!("and.pred {go}, {mx}, {pv}"));
            c.b.ins_if(go, true, format!("bra {skip}"));
            for (k, &mk) in ms.iter().enumerate() {
                let (h, col, p) = (
                    c.b.reg(RegClass::B16),
                    c.b.reg(RegClass::B32),
                    c.b.reg(RegClass::Pred),
                );
                c.b.ins(format!("mov.b16 {h}, 0"));
                c.b.ins(format!("add.s32 {col}, {gc}, {k}"));
                c.b.ins(format!("setp.lt.u32 {p}, {col}, {dim_c}"));
                c.b.ins(format!("and.pred {p}, {p}, {mk}"));
                c.b.ins(format!("and.pred {p}, {p}, {row_ok}"));
                c.b.ins_if(p, false, format!("ld.global.b16 {h}, [{ga}+{}]", k * esize));
                c.b.ins(format!("st.shared.b16 [{sa}+{}], {h}", k * eb));
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
        && shape.last().is_some_and(|&n| n % super::layout::VEC == 0)
        && matches!(d, Dtype::Bf16 | Dtype::F16 | Dtype::F32)
}

/// Loads or stores a `Blocked` tile chunk by chunk: a chunk fully inside the tensor (and
/// aligned, checked once per op) moves as 16-byte vectors, any other chunk element by element.
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
    let v = super::layout::VEC;
    let coords = c.coords(Layout::Blocked, shape);
    let aligned = vector_alignment_ok(c, info, offs, v);
    let rank = offs.len();
    let dim_c = info.dims[rank - 1];
    let mut out: Vec<Reg> = Vec::with_capacity(coords.len());
    for (g, chunk) in coords.chunks(v).enumerate() {
        let first = &chunk[0];
        let (addr0, inb0) = element(c, info, offs, &first.idx);
        // Full: the first element is in bounds and so is the last one of the chunk.
        let full = c.b.reg(RegClass::Pred);
        let last_col = c.b.reg(RegClass::B32);
        let col0 = first.idx[first.idx.len() - 1];
        c.b.ins(format!("add.s32 {last_col}, {}, {col0}", offs[rank - 1]));
        c.b.ins(format!("add.s32 {last_col}, {last_col}, {}", v - 1));
        c.b.ins(format!("setp.lt.u32 {full}, {last_col}, {dim_c}"));
        c.b.ins(format!("and.pred {full}, {full}, {inb0}"));
        c.b.ins(format!("and.pred {full}, {full}, {aligned}"));
        if let Some(valid) = first.valid {
            c.b.ins(format!("and.pred {full}, {full}, {valid}"));
        }
        let regs: Vec<Reg> = match access {
            Access::Load(other) => (0..v)
                .map(|_| super::lower::constant(c, d, other))
                .collect(),
            Access::Store => values
                .map(|vs| vs[g * v..g * v + v].to_vec())
                .unwrap_or_default(),
        };
        let (vec_l, done) = (c.b.label("vec"), c.b.label("vecdone"));
        c.b.ins_if(full, false, format!("bra {vec_l}"));
        for (k, sc) in chunk.iter().enumerate() {
            let (addr, inb) = element(c, info, offs, &sc.idx);
            let p = and_pred(c, inb, sc.valid);
            match access {
                Access::Load(_) => load_elem(c, d, regs[k], addr, p),
                Access::Store => {
                    let bits = store_bits(c, d, regs[k]);
                    c.b.ins_if(p, false, format!("st.global.{} [{addr}], {bits}", gty(d)));
                }
            }
        }
        c.b.ins(format!("bra {done}"));
        c.b.place(&vec_l);
        match (access, d) {
            (Access::Load(_), Dtype::F32) => {
                for h in 0..2 {
                    let r = &regs[h * 4..h * 4 + 4];
                    c.b.ins(format!(
                        "ld.global.v4.f32 {{{}, {}, {}, {}}}, [{addr0}+{}]",
                        r[0],
                        r[1],
                        r[2],
                        r[3],
                        h * 16
                    ));
                }
            }
            (Access::Load(_), _) => {
                let w: Vec<Reg> = (0..4).map(|_| c.b.reg(RegClass::B32)).collect();
                c.b.ins(format!(
                    "ld.global.v4.b32 {{{}, {}, {}, {}}}, [{addr0}]",
                    w[0], w[1], w[2], w[3]
                ));
                for (k, &word) in w.iter().enumerate() {
                    let (lo, hi) = (c.b.reg(RegClass::B16), c.b.reg(RegClass::B16));
                    c.b.ins(format!("mov.b32 {{{lo}, {hi}}}, {word}"));
                    let t = if d == Dtype::F16 { "f16" } else { "bf16" };
                    c.b.ins(format!("cvt.f32.{t} {}, {lo}", regs[2 * k]));
                    c.b.ins(format!("cvt.f32.{t} {}, {hi}", regs[2 * k + 1]));
                }
            }
            (Access::Store, Dtype::F32) => {
                for h in 0..2 {
                    let r = &regs[h * 4..h * 4 + 4];
                    c.b.ins(format!(
                        "st.global.v4.f32 [{addr0}+{}], {{{}, {}, {}, {}}}",
                        h * 16,
                        r[0],
                        r[1],
                        r[2],
                        r[3]
                    ));
                }
            }
            (Access::Store, _) => {
                let t = if d == Dtype::F16 { "f16" } else { "bf16" };
                let w: Vec<Reg> = (0..4).map(|_| c.b.reg(RegClass::B32)).collect();
                for (k, &word) in w.iter().enumerate() {
                    c.b.ins(format!(
                        "cvt.rn.{t}x2.f32 {word}, {}, {}",
                        regs[2 * k + 1],
                        regs[2 * k]
                    ));
                }
                c.b.ins(format!(
                    "st.global.v4.b32 [{addr0}], {{{}, {}, {}, {}}}",
                    w[0], w[1], w[2], w[3]
                ));
            }
        }
        c.b.place(&done);
        if matches!(access, Access::Load(_)) {
            out.extend(regs);
        }
    }
    Ok(out)
}
