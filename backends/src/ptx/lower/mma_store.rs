//! Stores of `RowMma` register tiles (mma.sync and wgmma accumulators with the warps stacked
//! along rows, and what is computed from them: attention's output and its row statistics,
//! sm_90a GEMM's C) to global memory.
//!
//! A thread of these layouts holds a few whole rows' worth of elements at column offsets that
//! are constants relative to its lane's column base (layout.rs, `rowmma_slot`). So the store
//! computes, once per tile:
//! - the leading dims' part of the address and their bounds (the dims the tile does not span);
//! - per distinct row offset a thread holds, one row at a time: the row's address (with the
//!   lane's column base) and its bounds predicate;
//! - per distinct column offset, a bounds predicate, unless the columns are statically inside the
//!   tensor (a literal column offset and a literal innermost dim);
//!
//! and then one predicated `st.global` per element at `[row address + column · element size]`
//! with an immediate offset. For f16/bf16 tiles whose lanes hold column pairs at 8j and 8j + 1
//! (J a multiple of 4), a block-uniform run-time check first picks a 16-byte path: the quad of
//! lanes exchanges its pairs in two butterfly rounds so that each lane stores 8 consecutive
//! columns with one `st.global.v4.b32` (the quad's columns inside, 16-byte aligned). Else, for
//! tiles whose lanes hold column pairs (the mma and wgmma accumulators), a packed path: when all of a lane's
//! columns are inside the tensor and the base and row stride are 4-byte aligned, each pair is
//! one `cvt.rn.{f16,bf16}x2.f32` and one `st.global.b32` under the row's predicate alone. The general path (memory.rs) computes the full address and every
//! dim's bound per element (about 20 instructions per element of a rank-4 tensor). Taken for
//! unmasked stores, and unmasked f32 `atomic_add`s (one `red.global.add.f32` per element at
//! the same addresses: attention_bwd's dqᵀ), into tensors whose innermost dim is contiguous.

use super::ctx::Val;
use super::ctx::{Ctx, TensorInfo};
use super::elem::{gty, store_bits};
use crate::ptx::emit::{PtxInst, Reg, RegClass};
use crate::ptx::plan::layout::{self, Layout};
use kir_ir::{Dtype, ExprKind, Offset, OpData, Opcode, ParamKind};
use std::collections::BTreeMap;

/// Stores `regs`, a `layout` tile of `shape` (rank 1 or 2), at `offs` of tensor `info` when the
/// fast path applies (`RowMma`; `Grid` tiles keep the general path, where ptxas spilled the
/// sm_80 GEMM's epilogue by 8 bytes with this one); returns false (having emitted nothing) when it does not. `owner` limits
/// each element to one thread of those that hold it (replicated [M, 1] columns).
#[allow(clippy::too_many_arguments)]
pub(super) fn store(
    c: &mut Ctx,
    op: &OpData,
    info: &TensorInfo,
    offs: &[Reg],
    layout: Layout,
    shape: &[usize],
    regs: &[Reg],
    owner: Option<Reg>,
) -> bool {
    let rank = offs.len();
    let atomic = op.opcode == Opcode::AtomicAdd;
    let eligible = layout == Layout::RowMma
        && (!atomic || info.dtype == Dtype::F32)
        && matches!(shape.len(), 1 | 2)
        && rank >= shape.len()
        && info.contiguous_last
        && op.attr("mask").is_none()
        && regs.len() == layout::slots(layout, shape, c.plan.blk);
    if !eligible {
        return false;
    }
    let (_, n) = layout::rows_cols(shape);
    let column = shape.len() == 1 || n == 1;
    let esize = info.dtype.size_bytes();
    // Bases of this thread's rows and columns.
    let (rowbase, colbase) = (c.rowbase(shape), c.thread.colbase);
    // The dims the tile does not span: address part and bounds, once.
    let lead = rank - shape.len();
    let base = c.b.reg(RegClass::B64);
    c.b.ins(PtxInst::new("mov.b64").op(base).op(info.ptr));
    let mut lead_ok: Option<Reg> = None;
    for d in 0..lead {
        add_scaled(c, base, offs[d], info.strides[d], esize);
        let p = c.b.reg(RegClass::Pred);
        c.b.ins(
            PtxInst::new("setp.lt.u32")
                .op(p)
                .op(offs[d])
                .op(info.dims[d]),
        );
        lead_ok = Some(and(c, lead_ok, p));
    }
    // The tile's row dim, and for 2-D tiles its column dim and this lane's first column
    // (a column [M, 1] has no lane offset: its lanes replicate).
    let rd = lead;
    let col0 = if shape.len() == 2 {
        let cd = rank - 1;
        let c0 = if column {
            offs[cd]
        } else {
            let c0 = c.b.reg(RegClass::B32);
            c.b.ins(PtxInst::new("add.s32").op(c0).op(offs[cd]).op(colbase));
            c0
        };
        add_scaled(c, base, c0, info.strides[cd], esize);
        Some(c0)
    } else {
        None
    };
    let static_cols = col0.is_none() || cols_inside(c, op, n);
    // Row by row (so one row's address is live at a time): the row's address and predicate,
    // then its elements, each with its column's predicate unless the columns are static.
    let mut by_row: BTreeMap<usize, Vec<(usize, Reg)>> = BTreeMap::new();
    for (s, &r) in regs.iter().enumerate() {
        let (ro, co) = layout::rowmma_slot(shape, s);
        by_row
            .entry(ro)
            .or_default()
            .push((if column { 0 } else { co }, r));
    }
    let row_addr = |c: &mut Ctx, ro: usize| {
        let (row, rp, a) = (
            c.b.reg(RegClass::B32),
            c.b.reg(RegClass::Pred),
            c.b.reg(RegClass::B64),
        );
        c.b.ins(PtxInst::new("add.s32").op(row).op(rowbase).op(ro));
        c.b.ins(PtxInst::new("add.s32").op(row).op(row).op(offs[rd]));
        c.b.ins(PtxInst::new("setp.lt.u32").op(rp).op(row).op(info.dims[rd]));
        let rp = and(c, lead_ok, rp);
        c.b.ins(PtxInst::new("mov.b64").op(a).op(base));
        add_scaled(c, a, row, info.strides[rd], esize);
        (rp, a)
    };
    // Packed path: 16-bit elements whose lane holds column pairs (co even, co + 1) of every
    // row, every column of the lane inside the tensor and every pair 4-byte aligned: one
    // `st.global.b32` per pair, no column predicates. Chosen at run time, else the element path.
    let packed = matches!(info.dtype, Dtype::F16 | Dtype::Bf16)
        && !atomic
        && owner.is_none()
        && !column
        && col0.is_some()
        && by_row.values().all(|e| {
            e.len() % 2 == 0 && e.chunks(2).all(|p| p[0].0 % 2 == 0 && p[1].0 == p[0].0 + 1)
        });
    let done = packed.then(|| {
        let (slow, done) = (c.b.label("st_pairs_slow"), c.b.label("st_pairs_done"));
        let t = if info.dtype == Dtype::F16 {
            "f16"
        } else {
            "bf16"
        };
        // Quads of lanes: each row's pairs at columns 8j and 8j + 1 of the lane (j = 0..J, J a
        // multiple of 4), so a quad's four lanes hold 8 consecutive columns per j. Four pairs
        // exchanged across the quad (two butterfly rounds) give each lane 8 consecutive
        // columns, one 16-byte store instead of four 4-byte ones (ncu: the 4-byte stores used
        // half of each 32-byte sector and throttled the LSU in the GEMM's epilogue). Taken when
        // the quad's columns are all inside and 16-byte aligned: the same for every lane.
        let quads = by_row.values().all(|e| {
            e.len() % 8 == 0
                && e.chunks(2)
                    .enumerate()
                    .all(|(j, p)| p[0].0 == 8 * j && p[1].0 == 8 * j + 1)
        });
        if quads && esize == 2 {
            let skip = c.b.label("st_quads_skip");
            let j_max = by_row.values().map(|e| e.len() / 2).max().unwrap_or(0);
            let c0 = col0.unwrap_or(offs[rank - 1]);
            let colbase = c.thread.colbase;
            // The quad's first column c0 − colbase, its last 8·J − 1 further; its base is the
            // lane's less 2·colbase bytes.
            let ok = inside_aligned(c, info, base, (c0, Some(colbase)), 8 * j_max - 1, rd, 16);
            c.b.ins_if(ok, true, PtxInst::new("bra.uni").op(&skip));
            // Lane q of the quad (colbase = 2q): its bits choose what it sends in each round.
            let (q1, q2, w) = (
                c.b.reg(RegClass::Pred),
                c.b.reg(RegClass::Pred),
                c.b.reg(RegClass::B32),
            );
            c.b.ins(PtxInst::new("and.b32").op(w).op(colbase).op(2));
            c.b.ins(PtxInst::new("setp.ne.u32").op(q1).op(w).op(0));
            c.b.ins(PtxInst::new("and.b32").op(w).op(colbase).op(4));
            c.b.ins(PtxInst::new("setp.ne.u32").op(q2).op(w).op(0));
            // The lane's byte offset from its own columns to its 16-byte slot: 8q columns from
            // the quad's base, the base 2q columns below the lane's: 12q bytes = 6·colbase.
            let (shift, shift64) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B64));
            c.b.ins(PtxInst::new("mul.lo.s32").op(shift).op(colbase).op(6));
            c.b.ins(PtxInst::new("cvt.u64.u32").op(shift64).op(shift));
            for (&ro, elems) in &by_row {
                let (rp, a) = row_addr(c, ro);
                c.b.ins(PtxInst::new("add.s64").op(a).op(a).op(shift64));
                for (b, blk) in elems.chunks(8).enumerate() {
                    let mut wd: Vec<Reg> = blk
                        .chunks(2)
                        .map(|p| super::elem::pack_half2(c, t, p[0].1, p[1].1))
                        .collect();
                    for (m, pm) in [(1usize, q1), (2, q2)] {
                        for k in (0..4).filter(|k| k & m == 0) {
                            let (send, recv) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
                            // Lanes with the bit set send their k-th word, the others their
                            // (k + m)-th; each puts what it receives where it sent from.
                            c.b.ins(
                                PtxInst::new("selp.b32")
                                    .op(send)
                                    .op(wd[k])
                                    .op(wd[k + m])
                                    .op(pm),
                            );
                            c.b.need(crate::ptx::emit::isa::Isa::SHFL_SYNC).ins(
                                PtxInst::new("shfl.sync.bfly.b32")
                                    .op(recv)
                                    .op(send)
                                    .op(m as i64)
                                    .op(31)
                                    .op(crate::ptx::emit::Operand::Hex(u32::MAX)),
                            );
                            let (lo_w, hi_w) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
                            c.b.ins(PtxInst::new("selp.b32").op(lo_w).op(recv).op(wd[k]).op(pm));
                            c.b.ins(
                                PtxInst::new("selp.b32")
                                    .op(hi_w)
                                    .op(wd[k + m])
                                    .op(recv)
                                    .op(pm),
                            );
                            wd[k] = lo_w;
                            wd[k + m] = hi_w;
                        }
                    }
                    c.b.ins_if(
                        rp,
                        false,
                        PtxInst::new("st.global.v4.b32")
                            .addr_off(a, 64 * b)
                            .vec(wd.iter().copied()),
                    );
                }
            }
            c.b.ins(PtxInst::new("bra.uni").op(&done));
            c.b.place(&skip);
        }
        let last = by_row.values().flatten().map(|e| e.0).max().unwrap_or(0);
        let c0 = col0.unwrap_or(offs[rank - 1]);
        let ok = inside_aligned(c, info, base, (c0, None), last, rd, 4);
        // Not uniform: an edge tile's lanes may differ.
        c.b.ins_if(ok, true, PtxInst::new("bra").op(&slow));
        for (&ro, elems) in &by_row {
            let (rp, a) = row_addr(c, ro);
            for p in elems.chunks(2) {
                // The pair's second column goes to the upper half.
                let w = super::elem::pack_half2(c, t, p[0].1, p[1].1);
                c.b.ins_if(
                    rp,
                    false,
                    PtxInst::new("st.global.b32")
                        .addr_off(a, p[0].0 * esize)
                        .op(w),
                );
            }
        }
        c.b.ins(PtxInst::new("bra.uni").op(&done));
        c.b.place(&slow);
        done
    });
    let mut cols: BTreeMap<usize, Reg> = BTreeMap::new();
    for (ro, elems) in by_row {
        let (rp, a) = row_addr(c, ro);
        for (co, r) in elems {
            let mut p = rp;
            if !static_cols {
                let cp = match cols.get(&co) {
                    Some(&q) => q,
                    None => {
                        let (x, q) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::Pred));
                        // Not static: a 2-D tile, so col0 is set.
                        let c0 = col0.unwrap_or(offs[rank - 1]);
                        let dim = info.dims[rank - 1];
                        c.b.ins(PtxInst::new("add.s32").op(x).op(c0).op(co));
                        c.b.ins(PtxInst::new("setp.lt.u32").op(q).op(x).op(dim));
                        cols.insert(co, q);
                        q
                    }
                };
                p = and(c, Some(p), cp);
            }
            if let Some(o) = owner {
                p = and(c, Some(p), o);
            }
            let bits = store_bits(c, info.dtype, r);
            let inst = if atomic {
                PtxInst::new("red.global.add.f32")
            } else {
                PtxInst::new("st.global").m(gty(info.dtype))
            };
            c.b.ins_if(p, false, inst.addr_off(a, co * esize).op(bits));
        }
    }
    if let Some(done) = done {
        c.b.place(&done);
    }
    true
}

/// Whether a lane's run of columns from `first.0` (less `first.1`, a column base, when given)
/// to `span` further is inside the tensor (unsigned, so a negative start fails), and its base
/// address (`base`, less the column base's bytes) and the row stride of dim `rd` in bytes are
/// multiples of `align`.
fn inside_aligned(
    c: &mut Ctx,
    info: &TensorInfo,
    base: Reg,
    first: (Reg, Option<Reg>),
    span: usize,
    rd: usize,
    align: i64,
) -> Reg {
    let rank = info.dims.len();
    let esize = info.dtype.size_bytes();
    let (x, ok, lo, bits, al) = (
        c.b.reg(RegClass::B32),
        c.b.reg(RegClass::Pred),
        c.b.reg(RegClass::B32),
        c.b.reg(RegClass::B32),
        c.b.reg(RegClass::Pred),
    );
    let (c0, sub) = first;
    match sub {
        Some(cb) => {
            c.b.ins(PtxInst::new("sub.s32").op(x).op(c0).op(cb));
            c.b.ins(PtxInst::new("add.s32").op(x).op(x).op(span));
        }
        None => c.b.ins(PtxInst::new("add.s32").op(x).op(c0).op(span)),
    }
    let dim = info.dims[rank - 1];
    c.b.ins(PtxInst::new("setp.lt.u32").op(ok).op(x).op(dim));
    c.b.ins(PtxInst::new("cvt.u32.u64").op(lo).op(base));
    if let Some(cb) = sub {
        let back = -(esize as i64);
        c.b.ins(PtxInst::new("mad.lo.s32").op(lo).op(cb).op(back).op(lo));
    }
    let stride = PtxInst::new("mul.lo.s32")
        .op(bits)
        .op(info.strides[rd])
        .op(esize);
    c.b.ins(stride);
    c.b.ins(PtxInst::new("or.b32").op(bits).op(bits).op(lo));
    c.b.ins(PtxInst::new("and.b32").op(bits).op(bits).op(align - 1));
    c.b.ins(PtxInst::new("setp.eq.u32").op(al).op(bits).op(0));
    c.b.ins(PtxInst::new("and.pred").op(ok).op(ok).op(al));
    ok
}

/// `addr += idx · stride · esize` (64-bit).
fn add_scaled(c: &mut Ctx, addr: Reg, idx: Reg, stride: Reg, esize: usize) {
    let (lin, w) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B64));
    c.b.ins(PtxInst::new("mul.lo.s32").op(lin).op(idx).op(stride));
    c.b.ins(PtxInst::new("mul.wide.s32").op(w).op(lin).op(esize));
    c.b.ins(PtxInst::new("add.s64").op(addr).op(addr).op(w));
}

/// `a ∧ b` (just `b` without `a`).
fn and(c: &mut Ctx, a: Option<Reg>, b: Reg) -> Reg {
    match a {
        None => b,
        Some(a) => {
            let p = c.b.reg(RegClass::Pred);
            c.b.ins(PtxInst::new("and.pred").op(p).op(a).op(b));
            p
        }
    }
}

/// True if the store's `n` columns lie inside the tensor for every launch: a literal innermost
/// offset c0 ≥ 0 and a literal innermost dim D with c0 + n ≤ D.
fn cols_inside(c: &Ctx, op: &OpData, n: usize) -> bool {
    let Some(t) = &op.tensor else { return false };
    let c0 = match t.offsets.last() {
        Some(Offset::Expr(e)) => e.as_int(),
        Some(Offset::Value(v)) => c.values.statics.get(v).copied(),
        None => None,
    };
    let dim = match c.k.param(&t.param).map(|p| &p.kind) {
        Some(ParamKind::Tensor(_, tt)) => tt.dims.last().and_then(|d| match d.kind {
            ExprKind::Int(v) => Some(v),
            _ => None,
        }),
        _ => None,
    };
    matches!((c0, dim), (Some(c0), Some(d)) if c0 >= 0 && c0 + n as i64 <= d)
}

/// The registers of the f32 tile that `v`, a `cast` to `d` (f16/bf16), rounds, when they are in
/// `layout` registers of the same shape: a store of `v` converts them itself (`cvt.rn`
/// to `d` rounds exactly as the cast does), so the cast's own rounding becomes dead code.
pub(super) fn unrounded(
    c: &Ctx,
    v: kir_ir::Value,
    d: Dtype,
    shape: &[usize],
    layout: Layout,
) -> Option<Vec<Reg>> {
    let kir_ir::ValueDef::Result(o, _) = c.k.dfg.values.get(v)?.def else {
        return None;
    };
    let od = &c.k.dfg.ops[o];
    let src = *od.operands.first()?;
    let is_round = od.opcode == Opcode::Cast
        && matches!(d, Dtype::F16 | Dtype::Bf16)
        && c.k.dfg.ty(v).dtype() == Some(d)
        && c.k.dfg.ty(src).dtype() == Some(Dtype::F32);
    match c.values.vals.get(&src)? {
        Val::Tile {
            layout: l,
            shape: s,
            regs,
            ..
        } if is_round && *l == layout && s[..] == shape[..] => Some(regs.clone()),
        _ => None,
    }
}

/// The f32 source of `ops[i]` when it is a `cast` to f16/bf16 whose only use is the value of a
/// `store` later in the same block, with only ops without regions or dots in between: the store
/// converts the f32 registers itself (`cvt.rn`, exactly the cast's rounding), so the cast is not
/// lowered (kernel.rs records it in `Ctx::store_casts`).
pub(super) fn store_cast(c: &Ctx, ops: &[kir_ir::Op], i: usize) -> Option<kir_ir::Value> {
    let k = c.k;
    let od = &k.dfg.ops[ops[i]];
    let (&r, &src) = (od.results.first()?, od.operands.first()?);
    let to16 = matches!(k.dfg.ty(r).dtype(), Some(Dtype::F16 | Dtype::Bf16));
    let same_place = matches!(
        c.plan.places.get(&r),
        Some(crate::ptx::plan::layout::Place::Reg(_))
    ) && c.plan.places.get(&r) == c.plan.places.get(&src);
    if od.opcode != Opcode::Cast
        || !to16
        || k.dfg.ty(src).dtype() != Some(Dtype::F32)
        || !same_place
    {
        return None;
    }
    if kir_ir::edit::use_count(&k.dfg, r) != 1 {
        return None;
    }
    for &o in &ops[i + 1..] {
        let u = &k.dfg.ops[o];
        if u.opcode == Opcode::Store && u.operands.first() == Some(&r) {
            return Some(src);
        }
        if !u.regions.is_empty()
            || u.operands.contains(&r)
            || matches!(u.opcode, Opcode::Dot | Opcode::DotAsync)
        {
            return None;
        }
    }
    None
}
