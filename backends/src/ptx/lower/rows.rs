//! The `Blocked` layout's register fast paths: row reductions with warp shuffles and one
//! exchange of partials, results that every thread holds whole ([`replicated`]), and
//! broadcasts whose sources are in the same thread.

use super::arith::{combine, identity, shfl_combine};
use super::convert::sty;
use super::ctx::round;
use super::ctx::{Ctx, Val};
use super::values::regs_in;
use super::PtxError;
use crate::ptx::emit::{PtxInst, Reg, RegClass};
use crate::ptx::plan::ir::lit;
use crate::ptx::plan::layout::{self, Layout, Place};
use kir_ir::{Attr, Dtype, OpData, Opcode, ReduceKind, Span, Value};

/// True if a row reduction of `a` (a [R, C] tile, `axis` 1) runs in registers plus one exchange
/// of partials: both in `Blocked`, rows of whole chunks (C a multiple of VEC), C/VEC and the
/// block size powers of two, a 32-bit dtype.
pub(super) fn rows_fit(c: &Ctx, a: Value, axis: usize, l: Layout, ss: &[usize], d: Dtype) -> bool {
    let v = crate::ptx::plan::VEC;
    l == Layout::Blocked
        && ss.len() == 2
        && axis == 1
        && ss[1] % v == 0
        && (ss[1] / v).is_power_of_two()
        && c.plan.blk.threads.is_power_of_two()
        && matches!(c.plan.places.get(&a), Some(Place::Reg(Layout::Blocked)))
        && matches!(d, Dtype::F32 | Dtype::F16 | Dtype::Bf16 | Dtype::I32)
}

/// Folds `regs` (one thread's slots) into a fresh register, in slot order.
fn fold(c: &mut Ctx, kind: ReduceKind, d: Dtype, regs: &[Reg]) -> Reg {
    let acc = c.reg(d);
    c.b.ins(PtxInst::new("mov").m(sty(d)).op(acc).op(regs[0]));
    for &r in &regs[1..] {
        combine(c, kind, d, acc, r);
    }
    acc
}

/// Row reduction of a `Blocked` [R, C] tile (see [`rows_fit`]). Each thread folds its slots of
/// a row, a warp-shuffle tree combines the chunks of a row within a warp, and the first lane of
/// each warp (or of each row, for rows narrower than a warp) writes its partial to a region of
/// shared memory of its own; after one barrier every thread sums the partials of the rows it
/// needs, in ascending order. A result of at most VEC rows comes out whole in every thread
/// (slot i = row i, see `tile::replicated`), so broadcasts and elementwise ops on it need no shared
/// memory. The order is fixed, so results are identical from run to run and across threads.
/// In a loop the region is guarded by a barrier before the writes (the previous iteration's
/// readers), unless another such reduction in the same block already separates those reads
/// from these writes ([`fenced_by_sibling`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn reduce_blocked_rows(
    c: &mut Ctx,
    kind: ReduceKind,
    op: &OpData,
    axis: usize,
    l: Layout,
    shape: &[usize],
    ss: &[usize],
    d: Dtype,
    sp: Span,
) -> Result<Option<Vec<Reg>>, PtxError> {
    let (Some(&a), Some(&res)) = (op.operands.first(), op.results.first()) else {
        return Ok(None);
    };
    if !rows_fit(c, a, axis, l, ss, d) {
        return Ok(None);
    }
    let (v, t, tid) = (
        crate::ptx::plan::VEC,
        c.plan.blk.threads as usize,
        c.thread.tid,
    );
    let src = regs_in(c, a, Layout::Blocked, ss, sp)?;
    let (rows, cpr) = (ss[0], ss[1] / v);
    let width = cpr.min(32);
    // Partials per row: one per warp when a row spans the block, else one per 32 chunks.
    let subs = if cpr >= t { t / 32 } else { cpr.div_ceil(32) };
    let off = c.alloc_shared((rows * subs * 4) as u32);
    if in_loop(c, res) && !fenced_by_sibling(c, res) {
        // The previous iteration's readers must be done with the region.
        c.sync_block();
    }
    // (partial, index of its slot in the region, whether this thread writes it)
    let mut parts: Vec<(Reg, Reg, Reg)> = Vec::new();
    let lead = c.b.reg(RegClass::B32);
    c.b.ins(PtxInst::new("and.b32").op(lead).op(tid).op(width - 1));
    if cpr >= t {
        // Chunk g·T + tid: every slot group of a row is in every thread, row = g·T / cpr.
        let per = cpr / t * v;
        for r in 0..rows {
            let acc = fold(c, kind, d, &src[r * per..(r + 1) * per]);
            let (idx, w) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::Pred));
            c.b.ins(
                PtxInst::new("add.s32")
                    .op(idx)
                    .op(c.thread.warp)
                    .op(r * subs),
            );
            c.b.ins(PtxInst::new("setp.eq.u32").op(w).op(lead).op(0));
            parts.push((acc, idx, w));
        }
    } else {
        // Chunk k = g·T + tid: row k / cpr = g·T/cpr + tid/cpr, sub-part (tid % cpr) / 32.
        for (g, regs) in src.chunks(v).enumerate() {
            let acc = fold(c, kind, d, regs);
            let w = c.b.reg(RegClass::Pred);
            c.b.ins(PtxInst::new("setp.eq.u32").op(w).op(lead).op(0));
            if (g + 1) * t > rows * cpr {
                let (k, p) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::Pred));
                c.b.ins(PtxInst::new("add.s32").op(k).op(tid).op(g * t));
                c.b.ins(PtxInst::new("setp.lt.u32").op(p).op(k).op(rows * cpr));
                let id = identity(c, kind, d);
                c.b.ins(PtxInst::new("selp").m(sty(d)).op(acc).op(acc).op(id).op(p));
                c.b.ins(PtxInst::new("and.pred").op(w).op(w).op(p));
            }
            let (idx, sub) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
            c.b.ins(
                PtxInst::new("div.u32")
                    .op(idx)
                    .op(tid)
                    .op(cpr)
                    .strength_reduced(),
            );
            c.b.ins(PtxInst::new("add.s32").op(idx).op(idx).op(g * (t / cpr)));
            c.b.ins(
                PtxInst::new("rem.u32")
                    .op(sub)
                    .op(tid)
                    .op(cpr)
                    .strength_reduced(),
            );
            c.b.ins(
                PtxInst::new("div.u32")
                    .op(sub)
                    .op(sub)
                    .op(32)
                    .strength_reduced(),
            );
            c.b.ins(PtxInst::new("mad.lo.s32").op(idx).op(idx).op(subs).op(sub));
            parts.push((acc, idx, w));
        }
    }
    let mut mask = width / 2;
    while mask >= 1 {
        for &(acc, _, _) in &parts {
            shfl_combine(c, kind, d, acc, mask);
        }
        mask /= 2;
    }
    for &(acc, idx, w) in &parts {
        let addr = c.b.reg(RegClass::B32);
        c.b.ins(
            PtxInst::new("mad.lo.s32")
                .op(addr)
                .op(idx)
                .op(4)
                .op(c.smem_base(off)),
        );
        c.b.ins_if(
            w,
            false,
            PtxInst::new("st.shared")
                .m(sty(d))
                .addr_off(addr, off)
                .op(acc),
        );
    }
    c.sync_block();
    let n = layout::slots(l, shape, c.plan.blk);
    let mut out = Vec::with_capacity(n);
    if rows <= v {
        for r in 0..rows {
            let base = c.b.reg(RegClass::B32);
            c.b.ins(
                PtxInst::new("add.s32")
                    .op(base)
                    .op(c.smem_base(off))
                    .op(off as usize + r * subs * 4),
            );
            out.push(sum_partials(c, kind, d, base, subs, None));
        }
        let first = out[0];
        out.resize(n, first);
    } else {
        for sc in c.coords(l, shape) {
            let base = c.b.reg(RegClass::B32);
            c.b.ins(
                PtxInst::new("mad.lo.s32")
                    .op(base)
                    .op(sc.idx[0])
                    .op(subs * 4)
                    .op(c.smem_base(off)),
            );
            c.b.ins(PtxInst::new("add.s32").op(base).op(base).op(off));
            out.push(sum_partials(c, kind, d, base, subs, sc.valid));
        }
    }
    Ok(Some(out))
}

/// Sums the `subs` partials at shared address `base` in ascending order (16-byte reads when
/// they come in fours), rounded to `d`; reads nothing unless `valid`.
fn sum_partials(
    c: &mut Ctx,
    kind: ReduceKind,
    d: Dtype,
    base: Reg,
    subs: usize,
    valid: Option<Reg>,
) -> Reg {
    let xs: Vec<Reg> = (0..subs).map(|_| identity(c, kind, d)).collect();
    let ty = sty(d);
    if subs % 4 == 0 {
        for (q, x) in xs.chunks(4).enumerate() {
            let at = q * 16;
            let l = PtxInst::new("ld.shared.v4")
                .m(ty)
                .vec([x[0], x[1], x[2], x[3]])
                .addr_off(base, at);
            c.b.ins_if_opt(valid, l);
        }
    } else {
        for (j, x) in xs.iter().enumerate() {
            c.b.ins_if_opt(
                valid,
                PtxInst::new("ld.shared").m(ty).op(x).addr_off(base, j * 4),
            );
        }
    }
    let acc = fold(c, kind, d, &xs);
    round(c, d, acc);
    acc
}

/// A broadcast between `Blocked` tiles without shared memory, when each result slot's source
/// is in the same thread: equal shapes; one replicated element; a [1, C] row to [R, C] when a
/// row spans whole multiples of the block; a replicated [R, 1] column to [R, C] then too (the
/// row of each slot group is known at compile time).
pub(super) fn blocked_broadcast(
    c: &mut Ctx,
    a: Value,
    src: &Val,
    shape: &[usize],
) -> Option<Vec<Reg>> {
    let Val::Tile {
        layout: Layout::Blocked,
        shape: ss,
        regs,
        ..
    } = src
    else {
        return None;
    };
    let (v, t) = (crate::ptx::plan::VEC, c.plan.blk.threads as usize);
    let n = layout::slots(Layout::Blocked, shape, c.plan.blk);
    if ss[..] == shape[..] {
        return Some(regs.clone());
    }
    let rep = replicated(c, a, 0);
    if rep && ss.iter().product::<usize>() == 1 {
        return Some(vec![regs[0]; n]);
    }
    if ss.len() != 2 || shape.len() != 2 || shape[1] % v != 0 {
        return None;
    }
    let cpr = shape[1] / v;
    if ss[0] == 1 && ss[1] == shape[1] && cpr % t == 0 {
        // Result chunk g·T + tid is source chunk (g·T mod cpr) + tid: this thread's group.
        return Some(
            (0..n)
                .map(|s| regs[(s / v * t % cpr / t) * v + s % v])
                .collect(),
        );
    }
    if rep && ss[1] == 1 && ss[0] == shape[0] && cpr % t == 0 {
        // A replicated column: group g of the result lies in row g·T / cpr.
        return Some((0..n).map(|s| regs[s / v * t / cpr]).collect());
    }
    None
}

/// True if the block holding the reduction that defines `res` also holds, directly, another
/// row reduction of [`reduce_blocked_rows`]: every path from this reduction's reads of its
/// region to its next write then runs the other one, whose barrier after its own writes every
/// thread reaches only after those reads, so no barrier of its own has to guard the region.
fn fenced_by_sibling(c: &Ctx, res: Value) -> bool {
    let dfg = &c.k.dfg;
    let Some(block) = dfg.blocks.values().find(|b| {
        b.ops
            .iter()
            .any(|&o| dfg.ops[o].opcode == Opcode::Reduce && dfg.ops[o].results.contains(&res))
    }) else {
        return false;
    };
    block.ops.iter().any(|&o| {
        let op = &dfg.ops[o];
        let (Some(&a), Some(&r)) = (op.operands.first(), op.results.first()) else {
            return false;
        };
        if op.opcode != Opcode::Reduce || r == res {
            return false;
        }
        let axis = lit(op.attr("axis")).unwrap_or(0.0) as usize;
        let (Some(Place::Reg(l)), Some(d), Some(ss)) =
            (c.plan.places.get(&r), dfg.ty(r).dtype(), dfg.ty(a).shape())
        else {
            return false;
        };
        rows_fit(c, a, axis, *l, &ss, d)
    })
}

/// True if `v` is defined inside the body of a `for` (so its op may run more than once).
pub(super) fn in_loop(c: &Ctx, v: Value) -> bool {
    fn defines(dfg: &kir_ir::Dfg, b: kir_ir::Block, v: Value) -> bool {
        dfg.blocks[b].ops.iter().any(|&o| {
            dfg.ops[o].results.contains(&v)
                || dfg.ops[o].regions.iter().any(|&r| defines(dfg, r, v))
        })
    }
    let dfg = &c.k.dfg;
    dfg.ops
        .values()
        .any(|o| o.opcode == Opcode::For && o.regions.iter().any(|&r| defines(dfg, r, v)))
}

/// True if `v` is a `Blocked` tile of at most VEC elements held whole by every thread (slot i =
/// element i, as in thread 0): constants and splats, the result of a row reduction that
/// `vector::reduce_blocked_rows` leaves whole, and elementwise ops, reshapes and register broadcasts
/// of such tiles.
pub(super) fn replicated(c: &Ctx, v: Value, depth: usize) -> bool {
    let dfg = &c.k.dfg;
    let ty = dfg.ty(v);
    if ty.is_scalar() {
        return true;
    }
    let numel = |v: Value| dfg.ty(v).shape().map_or(usize::MAX, |s| s.iter().product());
    if depth > 32
        || numel(v) > crate::ptx::plan::VEC
        || c.plan.places.get(&v) != Some(&Place::Reg(Layout::Blocked))
    {
        return false;
    }
    let Some(kir_ir::ValueDef::Result(o, _)) = dfg.values.get(v).map(|d| d.def) else {
        return false;
    };
    let op = &dfg.ops[o];
    let all = || op.operands.iter().all(|&a| replicated(c, a, depth + 1));
    match op.opcode {
        Opcode::Const | Opcode::Splat => true,
        Opcode::Reshape => all(),
        Opcode::Broadcast => {
            all()
                && op
                    .operands
                    .first()
                    .is_some_and(|&a| dfg.ty(a).is_scalar() || numel(a) == 1 || dfg.ty(a) == ty)
        }
        Opcode::Reduce => {
            let Some(&a) = op.operands.first() else {
                return false;
            };
            let ss = dfg.ty(a).shape().unwrap_or_default();
            let axis = match op.attr("axis") {
                Some(Attr::Expr(e)) => e.as_int().unwrap_or(0) as usize,
                _ => 0,
            };
            let d = ty.dtype().unwrap_or(Dtype::F32);
            rows_fit(c, a, axis, Layout::Blocked, &ss, d) && ss[0] <= crate::ptx::plan::VEC
        }
        kir_ir::elementwise_ops!() => all(),
        Opcode::ProgramId
        | Opcode::NumPrograms
        | Opcode::Dim
        | Opcode::Param
        | Opcode::Iota
        | Opcode::Transpose
        | Opcode::Load
        | Opcode::Store
        | Opcode::AtomicAdd
        | Opcode::SemWait
        | Opcode::SemSignal
        | Opcode::Dot
        | Opcode::For
        | Opcode::If
        | Opcode::StaticIf
        | Opcode::Print
        | Opcode::Yield => false,
        kir_ir::schedule_ops!() => false,
    }
}
