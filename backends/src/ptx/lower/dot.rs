//! `dot`: mma.sync m16n8k16 (bf16/f16 in, f32 accumulate) when the shapes allow, with the A
//! operand taken straight from accumulator-layout registers (FlashAttention-2's P·V) or from
//! shared memory and B from shared memory; otherwise an FMA loop per output element over
//! shared-memory operands.

use super::ctx::{smem_bytes, Ctx, Val};
use super::values::regs_in;
use super::PtxError;
use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::{Operand, PtxInst, Reg, RegClass};
use crate::ptx::plan::layout::{self, Layout, Place};
use kir_ir::{Dtype, OpData, Opcode, Span, Value, ValueDef};

/// Puts a tile in shared memory (a fresh region), converting from registers if needed.
pub(super) fn to_shared(c: &mut Ctx, v: &Val, sp: Span) -> Result<Val, PtxError> {
    match v {
        Val::Shared { .. } => Ok(v.clone()),
        Val::Scalar(_) => Err(PtxError::at(sp, "a dot operand must be a tile")),
        Val::Tile {
            layout,
            shape,
            dtype,
            regs,
        } => {
            let [rows, cols] = match shape[..] {
                [r, c2] => [r, c2],
                _ => return Err(PtxError::at(sp, "a dot operand must be rank 2")),
            };
            let eb = smem_bytes(*dtype);
            let rs = cols + 16 / eb;
            let off = c.alloc_shared((rows * rs * eb) as u32);
            let tile = Val::Shared {
                off,
                dyn_off: None,
                shape: [rows, cols],
                dtype: *dtype,
                row_stride: rs,
                col_stride: 1,
            };
            let fragments = matches!(layout, Layout::RowMma | Layout::Grid)
                && cols > 1
                && matches!(dtype, Dtype::F16 | Dtype::Bf16)
                && regs.len() % 2 == 0;
            if fragments {
                // Accumulator fragments: one base address per thread, then a packed pair of
                // adjacent columns per store at a constant offset from it.
                let (rowbase, colbase, sub) = if *layout == Layout::Grid {
                    let (r, c2, wn) = c.grid_bases(shape);
                    (r, c2, vec![rows, cols / wn])
                } else {
                    (c.rowbase(shape), c.thread.colbase, shape.to_vec())
                };
                let base = c.smem_addr(off, &[rowbase, colbase], rs, 1, eb);
                let t = if *dtype == Dtype::F16 { "f16" } else { "bf16" };
                c.sync_block();
                for s in (0..regs.len()).step_by(2) {
                    let (ro, co) = layout::rowmma_slot(&sub, s);
                    let w = super::elem::pack_half2(c, t, regs[s], regs[s + 1]);
                    c.b.ins(
                        PtxInst::new("st.shared.b32")
                            .addr_off(base, (ro * rs + co) * eb)
                            .op(w),
                    );
                }
                c.sync_block();
                return Ok(tile);
            }
            let coords = c.coords(*layout, shape);
            let owner = *layout == Layout::RowMma && cols == 1;
            c.sync_block();
            for (sc, &r) in coords.iter().zip(regs) {
                let a = c.smem_addr(off, &sc.idx, rs, 1, eb);
                let valid = sc.valid.or(owner.then_some(c.thread.quad_leader));
                match dtype {
                    Dtype::F16 | Dtype::Bf16 => {
                        let h = c.b.reg(RegClass::B16);
                        let t = if *dtype == Dtype::F16 { "f16" } else { "bf16" };
                        c.b.need(Isa::cvt_from_f32(*dtype))
                            .ins(PtxInst::new("cvt.rn").m(t).m("f32").op(h).op(r));
                        c.b.ins_if_opt(valid, PtxInst::new("st.shared.b16").addr(a).op(h));
                    }
                    Dtype::F32 => {
                        c.b.ins_if_opt(valid, PtxInst::new("st.shared.f32").addr(a).op(r))
                    }
                    other => {
                        return Err(PtxError::at(
                            sp,
                            format!("a dot operand of dtype {other} is not supported"),
                        ))
                    }
                }
            }
            c.sync_block();
            Ok(tile)
        }
    }
}

/// A b32 register holding two 16-bit elements (lo at (i, j), hi at the next k) of a shared tile.
fn smem_pair(c: &mut Ctx, v: &Val, i: Reg, j: Reg, along_rows: bool) -> Reg {
    let Val::Shared {
        off,
        dyn_off,
        row_stride,
        col_stride,
        ..
    } = *v
    else {
        return c.b.imm32(0);
    };
    let a = c.smem_addr(off, &[i, j], row_stride, col_stride, 2);
    let a = c.plus_dyn(a, dyn_off);
    let r = c.b.reg(RegClass::B32);
    let step = if along_rows { row_stride } else { col_stride };
    if step == 1 {
        c.b.ins(PtxInst::new("ld.shared.b32").op(r).addr(a));
    } else {
        let (lo, hi) = (c.b.reg(RegClass::B16), c.b.reg(RegClass::B16));
        c.b.ins(PtxInst::new("ld.shared.b16").op(lo).addr(a));
        c.b.ins(PtxInst::new("ld.shared.b16").op(hi).addr_off(a, step * 2));
        c.b.ins(PtxInst::new("mov.b32").op(r).vec([lo, hi]));
    }
    r
}

/// Lowers `dot a, b, acc`.
pub fn lower_dot(c: &mut Ctx, op: &OpData) -> Result<(), PtxError> {
    let sp = op.span;
    let (Some(&a), Some(&b), Some(&acc), Some(&v)) = (
        op.operands.first(),
        op.operands.get(1),
        op.operands.get(2),
        op.results.first(),
    ) else {
        return Err(PtxError::at(sp, "dot needs a, b, acc and a result"));
    };
    let (ta, tb, tv) = (
        c.k.dfg.ty(a).clone(),
        c.k.dfg.ty(b).clone(),
        c.k.dfg.ty(v).clone(),
    );
    let shape = tv.shape().unwrap_or_default();
    let (sa, ab_dtype) = (
        ta.shape().unwrap_or_default(),
        ta.dtype().unwrap_or(Dtype::F32),
    );
    let kdim = sa.get(1).copied().unwrap_or(0);
    let place = c
        .plan
        .places
        .get(&v)
        .copied()
        .unwrap_or(Place::Reg(Layout::Blocked));
    let use_mma = matches!(place, Place::Reg(Layout::RowMma | Layout::Grid))
        && layout::dot_uses_mma(&ta, &tb, &tv, c.plan.blk.warps);
    let l = match place {
        Place::Reg(l) => l,
        _ => {
            return Err(PtxError::at(
                sp,
                "internal: dot result must be in registers",
            ))
        }
    };
    let acc_regs = regs_in(c, acc, l, &shape, sp)?;
    let wgmma = crate::ptx::plan::wgmma::wgmma_dot(c.k, op, c.plan.blk, c.target)
        .filter(|_| use_mma && l == Layout::RowMma);
    let bv = c.val(b, sp)?;
    // A register B of a wgmma (a cast from f32) is stored into the core layout by the dot,
    // rounded from its f32 source; every other B is read from shared memory.
    let bs = match wgmma {
        Some(w) if w.b_in_regs => cast_source(c, b).unwrap_or(bv),
        _ => to_shared(c, &bv, sp)?,
    };
    let av = c.val(a, sp)?;
    let mut partner = None;
    let out = if let Some(w) = wgmma {
        // A register operand packs straight from the f32 source of its cast, as mma.sync does.
        let a_src = match w.a {
            None => cast_source(c, a).unwrap_or(av),
            Some(_) => av,
        };
        let asynchronous = op.opcode == kir_ir::Opcode::DotAsync;
        let hold = !asynchronous && super::wgmma::held(c, op, &w, &acc_regs);
        // An SS dot that another can follow at once (`wgmma_pair.rs`).
        partner = match w.a {
            Some(_) if !asynchronous && !hold => {
                super::wgmma_pair::partner(c, v, (!w.zero_init).then_some(acc))
            }
            _ => None,
        };
        let issue = super::wgmma::Issue {
            turn: c.plan.pingpong.get(&v).copied(),
            hold,
            asynchronous,
            paired: partner.is_some(),
        };
        super::wgmma::lower(
            c, w, issue, &a_src, &bs, acc, &acc_regs, &shape, kdim, ab_dtype, sp,
        )?
    } else if op.opcode == kir_ir::Opcode::DotAsync {
        return Err(PtxError::at(
            sp,
            format!(
                "`dot_async` lowers to wgmma only, which this dot cannot use on {} (bf16/f16 operands from core-layout tiles, a result of 16 · warps rows, K a multiple of 64)",
                c.target
            ),
        ));
    } else if use_mma {
        // The register A operand (P·V) needs the output's row split to match the operand's.
        let a_in_regs = l == Layout::RowMma
            && matches!(&av, Val::Tile { layout: Layout::RowMma, shape: s, .. } if layout::rows_cols(s).0 == shape[0]);
        let a_src = if a_in_regs {
            cast_source(c, a).unwrap_or(av)
        } else {
            to_shared(c, &av, sp)?
        };
        mma(c, &a_src, &bs, &acc_regs, &shape, kdim, ab_dtype, l)
    } else {
        let a_src = to_shared(c, &av, sp)?;
        fma(c, &a_src, &bs, &acc_regs, l, &shape, kdim)
    };
    super::notes::note_dot(c, op, wgmma.is_some(), use_mma, l);
    c.values.vals.insert(
        v,
        Val::Tile {
            layout: l,
            shape,
            dtype: Dtype::F32,
            regs: out,
        },
    );
    // The paired dot, issued now; the block walk skips it where it stands.
    if let Some(o) = partner {
        c.values.hoisted.insert(o);
        let k = c.k;
        lower_dot(c, &k.dfg.ops[o])?;
    }
    Ok(())
}

/// Lowers `dot_wait %d pending N`: `wgmma.wait_group N` (wgmma groups retire in issue order,
/// so at most N later groups of this warpgroup stay in flight and `%d`'s has finished); the
/// result is `%d`'s registers, which nothing wrote since the `dot_async` issued into them.
pub fn lower_dot_wait(c: &mut Ctx, op: &OpData) -> Result<(), PtxError> {
    let sp = op.span;
    let (Some(&d), Some(&r)) = (op.operands.first(), op.results.first()) else {
        return Err(PtxError::at(sp, "dot_wait needs an operand and a result"));
    };
    let pending = match op.attr("pending") {
        Some(kir_ir::Attr::Expr(e)) => {
            e.as_int().filter(|n| (0..=7).contains(n)).ok_or_else(|| {
                PtxError::at(
                    sp,
                    "`dot_wait pending` must be a constant from 0 to 7 on the PTX backend",
                )
            })?
        }
        _ => 0,
    };
    let v = c.val(d, sp)?;
    c.b.ins(PtxInst::new("wgmma.wait_group.sync.aligned").op(pending));
    if pending == 0 {
        c.asyncs.wgmma_in_flight = false;
    }
    c.values.vals.insert(r, v);
    Ok(())
}

/// A register A operand that is `cast(p)` of an f32 tile `p` in the same layout: `p` itself, so
/// the fragments are packed straight from it. `cvt.rn.{bf16,f16}x2.f32` rounds exactly as the
/// cast does, and the cast's own conversions become dead code.
fn cast_source(c: &Ctx, a: Value) -> Option<Val> {
    let ValueDef::Result(op, _) = c.k.dfg.values.get(a)?.def else {
        return None;
    };
    let od = &c.k.dfg.ops[op];
    let src = *od.operands.first()?;
    if od.opcode != Opcode::Cast || c.k.dfg.ty(src).dtype() != Some(Dtype::F32) {
        return None;
    }
    match (c.values.vals.get(&src)?, c.values.vals.get(&a)?) {
        (
            s @ Val::Tile {
                layout: ls,
                shape: ss,
                ..
            },
            Val::Tile {
                layout: la,
                shape: sa,
                ..
            },
        ) if ls == la && ss == sa => Some(s.clone()),
        _ => None,
    }
}

fn mma(
    c: &mut Ctx,
    a: &Val,
    b: &Val,
    acc: &[Reg],
    shape: &[usize],
    kdim: usize,
    d: Dtype,
    layout: Layout,
) -> Vec<Reg> {
    let (m, n) = (shape[0], shape[1]);
    // The warp's block of the output: rows [wmi·mw, +mw), columns [wni·nw, +nw).
    let (wm, wn) = if layout == Layout::Grid {
        layout::grid_dims(shape, c.plan.blk)
    } else {
        (c.plan.blk.warps as usize, 1)
    };
    let (mw, nw) = (m / wm, n / wn);
    let (nfs, kfs) = (nw / 8, kdim / 16);
    let mfs = mw / 16;
    let t = if d == Dtype::F16 { "f16" } else { "bf16" };
    let mut cur: Vec<Reg> = acc.to_vec();
    let (warp, g, colbase) = (c.thread.warp, c.thread.g, c.thread.colbase);
    let (wmi, wni) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
    c.b.ins(PtxInst::new("div.u32").op(wmi).op(warp).op(wn));
    c.b.ins(PtxInst::new("rem.u32").op(wni).op(warp).op(wn));
    // row0 = wmi·mw + g (this lane's first row); col0 = wni·nw (the warp's first column).
    let (row0, col0) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
    c.b.ins(PtxInst::new("mad.lo.s32").op(row0).op(wmi).op(mw).op(g));
    c.b.ins(PtxInst::new("mul.lo.s32").op(col0).op(wni).op(nw));
    // Per k step: the A fragments of every row fragment, then the B fragments in groups of
    // `NB` column fragments, each group loaded once and used by every row fragment. Only one
    // group of B fragments is live at a time, which keeps the register peak low when a warp
    // holds several row fragments and the accumulator is wide (P·V at d = 128).
    const NB: usize = 4;
    for kf in 0..kfs {
        let mut afrags: Vec<Vec<Reg>> = Vec::with_capacity(mfs);
        for mf in 0..mfs {
            let afrag: Vec<Reg> = match a {
                Val::Tile {
                    shape: sa, regs, ..
                } => {
                    let nfa = sa[1] / 8;
                    let slot = |nf: usize, cc: usize| regs[(mf * nfa + nf) * 4 + cc];
                    let mut f = Vec::new();
                    for (nf, h) in [(2 * kf, 0), (2 * kf, 1), (2 * kf + 1, 0), (2 * kf + 1, 1)] {
                        f.push(super::elem::pack_half2(
                            c,
                            t,
                            slot(nf, h * 2),
                            slot(nf, h * 2 + 1),
                        ));
                    }
                    f
                }
                _ if ldmatrix_ok(a, false) => {
                    let i0 = c.b.reg(RegClass::B32);
                    c.b.ins(PtxInst::new("mad.lo.s32").op(i0).op(wmi).op(mw).op(mf * 16));
                    let j0 = c.b.imm32((kf * 16) as i64);
                    ldmatrix_x4(c, a, i0, j0, false).to_vec()
                }
                _ => {
                    let mut f = Vec::new();
                    for (dr, dk) in [(0, 0), (8, 0), (0, 8), (8, 8)] {
                        let (i, j) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
                        c.b.ins(PtxInst::new("add.s32").op(i).op(row0).op(mf * 16 + dr));
                        c.b.ins(PtxInst::new("add.s32").op(j).op(colbase).op(kf * 16 + dk));
                        f.push(smem_pair(c, a, i, j, false));
                    }
                    f
                }
            };
            afrags.push(afrag);
        }
        for nf_lo in (0..nfs).step_by(NB) {
            let nf_hi = (nf_lo + NB).min(nfs);
            let mut bfrags: Vec<[Reg; 2]> = Vec::new();
            if ldmatrix_ok(b, true) && (nf_hi - nf_lo) % 2 == 0 {
                for nf2 in nf_lo / 2..nf_hi / 2 {
                    let (i0, j0) = (c.b.imm32((kf * 16) as i64), c.b.reg(RegClass::B32));
                    c.b.ins(PtxInst::new("add.s32").op(j0).op(col0).op(nf2 * 16));
                    let r = ldmatrix_x4(c, b, i0, j0, true);
                    bfrags.push([r[0], r[1]]);
                    bfrags.push([r[2], r[3]]);
                }
            }
            for nf in nf_lo + bfrags.len()..nf_hi {
                let mut pair = Vec::new();
                for dk in [0, 8] {
                    let (i, j) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
                    c.b.ins(PtxInst::new("add.s32").op(i).op(colbase).op(kf * 16 + dk));
                    c.b.ins(PtxInst::new("add.s32").op(j).op(g).op(nf * 8));
                    c.b.ins(PtxInst::new("add.s32").op(j).op(j).op(col0));
                    pair.push(smem_pair(c, b, i, j, true));
                }
                bfrags.push([pair[0], pair[1]]);
            }
            for (mf, afrag) in afrags.iter().enumerate() {
                for (i, bfrag) in bfrags.iter().enumerate() {
                    let base = (mf * nfs + nf_lo + i) * 4;
                    let dst: Vec<Reg> = (0..4).map(|_| c.b.reg(RegClass::F32)).collect();
                    c.b.need(Isa::MMA_M16N8K16).ins(
                        PtxInst::new("mma.sync.aligned.m16n8k16.row.col.f32")
                            .m(t)
                            .m(t)
                            .m("f32")
                            .vec([dst[0], dst[1], dst[2], dst[3]])
                            .vec([afrag[0], afrag[1], afrag[2], afrag[3]])
                            .vec([bfrag[0], bfrag[1]])
                            .vec([cur[base], cur[base + 1], cur[base + 2], cur[base + 3]]),
                    );
                    cur[base..base + 4].copy_from_slice(&dst);
                }
            }
        }
    }
    cur
}

/// True if fragments of shared tile `v` can be loaded with ldmatrix: 16-bit elements and one
/// of the two dims contiguous (then the other one is the row dim of the 8×8 matrices).
fn ldmatrix_ok(v: &Val, _pair_along_rows: bool) -> bool {
    matches!(v, Val::Shared { dtype: Dtype::F16 | Dtype::Bf16, row_stride, col_stride, .. } if *row_stride == 1 || *col_stride == 1)
}

/// Loads the four 8×8 matrices at tile origins (i0 + 8·(m&1), j0 + 8·(m>>1)) for m = 0..3 with
/// one `ldmatrix.x4`. The two elements each register holds lie along the tile's columns for an
/// A fragment (`pair_along_rows` false) or along its rows for a B fragment; the `.trans` form
/// is used when that direction is not the contiguous one.
fn ldmatrix_x4(c: &mut Ctx, v: &Val, i0: Reg, j0: Reg, pair_along_rows: bool) -> [Reg; 4] {
    let Val::Shared {
        off,
        dyn_off,
        row_stride,
        col_stride,
        ..
    } = *v
    else {
        return [i0; 4];
    };
    let contiguous_cols = col_stride == 1;
    // Non-transposed when the pair direction is the contiguous one.
    let trans = pair_along_rows == contiguous_cols;
    // The lane's row of its matrix runs along the non-contiguous dim.
    let (mi, mj, r) = c.ldmatrix_lane();
    let (i, j) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
    c.b.ins(PtxInst::new("add.s32").op(i).op(i0).op(mi));
    c.b.ins(PtxInst::new("add.s32").op(j).op(j0).op(mj));
    if contiguous_cols {
        c.b.ins(PtxInst::new("add.s32").op(i).op(i).op(r));
    } else {
        c.b.ins(PtxInst::new("add.s32").op(j).op(j).op(r));
    }
    let a = c.smem_addr(off, &[i, j], row_stride, col_stride, 2);
    let a = c.plus_dyn(a, dyn_off);
    let out = [
        c.b.reg(RegClass::B32),
        c.b.reg(RegClass::B32),
        c.b.reg(RegClass::B32),
        c.b.reg(RegClass::B32),
    ];
    let mut ld = PtxInst::new("ldmatrix.sync.aligned.m8n8.x4");
    if trans {
        ld = ld.m("trans");
    }
    c.b.need(Isa::LDMATRIX)
        .ins(ld.m("shared.b16").vec(out).addr(a));
    out
}

fn fma(
    c: &mut Ctx,
    a: &Val,
    b: &Val,
    acc: &[Reg],
    l: Layout,
    shape: &[usize],
    kdim: usize,
) -> Vec<Reg> {
    let coords = c.coords(l, shape);
    let mut out = Vec::new();
    for (sc, &init) in coords.iter().zip(acc) {
        let r = c.b.reg(RegClass::F32);
        c.b.ins(PtxInst::new("mov.f32").op(r).op(init));
        let (k, p) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::Pred));
        let (top, end) = (c.b.label("fma"), c.b.label("endfma"));
        c.b.ins(PtxInst::new("mov.b32").op(k).op(0));
        c.b.place(&top);
        c.b.ins(PtxInst::new("setp.ge.s32").op(p).op(k).op(kdim));
        c.b.ins_if(p, false, PtxInst::new("bra.uni").op(&end));
        let x = shared_elem(c, a, sc.idx[0], k, sc.valid);
        let y = shared_elem(c, b, k, sc.idx[1], sc.valid);
        c.b.ins(PtxInst::new("fma.rn.f32").op(r).op(x).op(y).op(r));
        c.b.ins(PtxInst::new("add.s32").op(k).op(k).op(1));
        c.b.ins(PtxInst::new("bra.uni").op(&top));
        c.b.place(&end);
        out.push(r);
    }
    out
}

/// Element (i, j) of a shared tile as f32 (0 when `valid` is false).
fn shared_elem(c: &mut Ctx, v: &Val, i: Reg, j: Reg, valid: Option<Reg>) -> Reg {
    let Val::Shared {
        off,
        dyn_off,
        dtype,
        row_stride,
        col_stride,
        ..
    } = *v
    else {
        return c.b.reg(RegClass::F32);
    };
    let eb = smem_bytes(dtype);
    let a = c.smem_addr(off, &[i, j], row_stride, col_stride, eb);
    let a = c.plus_dyn(a, dyn_off);
    let r = c.b.reg(RegClass::F32);
    c.b.ins(PtxInst::new("mov.f32").op(r).op(Operand::F32(0x00000000)));
    match dtype {
        Dtype::F16 | Dtype::Bf16 => {
            let h = c.b.reg(RegClass::B16);
            c.b.ins(PtxInst::new("mov.b16").op(h).op(0));
            c.b.ins_if_opt(valid, PtxInst::new("ld.shared.b16").op(h).addr(a));
            let t = if dtype == Dtype::F16 { "f16" } else { "bf16" };
            c.b.need(Isa::cvt_to_f32(dtype))
                .ins(PtxInst::new("cvt.f32").m(t).op(r).op(h));
        }
        _ => {
            c.b.ins_if_opt(valid, PtxInst::new("ld.shared.f32").op(r).addr(a))
        }
    }
    r
}
