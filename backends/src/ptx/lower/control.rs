//! Structured control flow: `for` (plain, or unrolled once per stage when it carries the stage
//! index of a shared-memory ring, see `sched.rs`) and `if`, with loop-carried values in their own
//! registers.

use super::ctx::{dtype, place, shape};
use super::ctx::{Ctx, Val};
use super::region::Regions;
use super::sched::{contains, stage_ring, Ring};
use super::values::regs_in;
use super::PtxError;
use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::{PtxInst, Reg, RegClass};
use crate::ptx::plan::layout::Place;
use kir_ir::{OpData, Opcode, Span, Value};

/// Copies `src` into fresh registers (so loop-carried registers are distinct from their inits).
fn fresh_copy(c: &mut Ctx, v: &Val) -> Val {
    match v {
        Val::Scalar(r) => Val::Scalar(copy_reg(c, *r)),
        Val::Tile {
            layout,
            shape,
            dtype,
            regs,
        } => {
            let regs = regs.iter().map(|&r| copy_reg(c, r)).collect();
            Val::Tile {
                layout: *layout,
                shape: shape.clone(),
                dtype: *dtype,
                regs,
            }
        }
        Val::Shared { .. } => v.clone(),
    }
}

fn copy_reg(c: &mut Ctx, r: Reg) -> Reg {
    let n = c.b.reg(r.class);
    mov(c, n, r);
    n
}

fn mov(c: &mut Ctx, dst: Reg, src: Reg) {
    let t = match dst.class {
        RegClass::Pred => "pred",
        RegClass::B16 => "b16",
        RegClass::B32 => "b32",
        RegClass::B64 => "b64",
        RegClass::F32 => "f32",
    };
    c.b.ins(PtxInst::new("mov").m(t).op(dst).op(src));
}

/// Moves the registers of `src` (a value of `v`'s place) into the registers of `dst`.
fn assign(c: &mut Ctx, dst: &Val, src: Value, sp: Span) -> Result<(), PtxError> {
    match dst {
        Val::Scalar(d) => match c.val(src, sp)? {
            Val::Scalar(s) => {
                mov(c, *d, s);
                Ok(())
            }
            _ => Err(PtxError::at(sp, "internal: tile yielded for a scalar")),
        },
        Val::Tile {
            layout,
            shape,
            regs,
            ..
        } => {
            let srcs = regs_in(c, src, *layout, shape, sp)?;
            for (d, s) in regs.clone().into_iter().zip(srcs) {
                if d != s {
                    mov(c, d, s);
                }
            }
            Ok(())
        }
        Val::Shared { .. } => Err(PtxError::at(
            sp,
            "a shared-memory tile cannot be loop-carried or yielded from `if`",
        )),
    }
}

pub(super) fn lower_for(c: &mut Ctx, op: &OpData, lower: &dyn Regions) -> Result<(), PtxError> {
    let sp = op.span;
    let body = *op
        .regions
        .first()
        .ok_or_else(|| PtxError::at(sp, "for needs a body"))?;
    let args = c.k.dfg.blocks[body].args.clone();
    let (lo, hi, step) = match (op.operands.first(), op.operands.get(1), op.operands.get(2)) {
        (Some(&a), Some(&b), Some(&s)) => (scalar(c, a, sp)?, scalar(c, b, sp)?, scalar(c, s, sp)?),
        _ => return Err(PtxError::at(sp, "for needs lo, hi, step")),
    };
    // A TMA ring read only by wgmma keeps its stage index in a register (one body, not one per
    // stage: sched.rs, `dynamic_ring`).
    let dynamic = super::sched::dynamic_ring(c, op);
    let ring = stage_ring(c, op).filter(|_| !dynamic);
    // Accesses of one tensor by different threads in program order (store_order.rs).
    super::store_order::enter_loop(c, body);
    let stores_before = c.mem.stores.clone();
    let was_dynamic = c.asyncs.tma.dynamic_ring;
    c.asyncs.tma.dynamic_ring |= dynamic;
    let iv = c.b.reg(RegClass::B32);
    c.b.ins(PtxInst::new("mov.b32").op(iv).op(lo));
    // Carried values get their own registers, initialised from the inits (the stage index of a
    // ring is known in each unrolled copy instead).
    let mut carried = Vec::new();
    for (i, &init) in op.operands.iter().skip(3).enumerate() {
        let arg = args
            .get(i + 1)
            .copied()
            .ok_or_else(|| PtxError::at(sp, "for: missing block arg"))?;
        if ring.is_some_and(|r| r.carried == i) {
            carried.push(None);
            continue;
        }
        let cur = c.val(init, sp)?;
        let want = match c.plan.places.get(&arg).copied().unwrap_or(Place::Scalar) {
            Place::Reg(l) => {
                let s = shape(c, arg);
                let regs = regs_in(c, init, l, &s, sp)?;
                Val::Tile {
                    layout: l,
                    shape: s,
                    dtype: dtype(c, arg),
                    regs,
                }
            }
            _ => cur,
        };
        let v = fresh_copy(c, &want);
        c.values.vals.insert(arg, v.clone());
        carried.push(Some(v));
    }
    if let Some(&a0) = args.first() {
        c.values.vals.insert(a0, Val::Scalar(iv));
    }
    // The previous iteration's releases precede this iteration's copies (and the last
    // iteration's precede whatever follows the loop).
    let releases = contains(c.k, body, Opcode::SmemRelease);
    c.mem.release_pending |= releases;
    if let Some(ring) = ring {
        let arg = args[ring.carried + 1];
        lower_ring(c, op, body, iv, hi, step, &carried, ring, arg, lower)?;
    } else {
        let bound = bound_in_shared(c, op, dynamic, hi);
        let (top, end) = (c.b.label("for"), c.b.label("endfor"));
        let p = c.b.reg(RegClass::Pred);
        c.b.place(&top);
        let hi = match bound {
            Some(a) => {
                let t = c.b.reg(RegClass::B32);
                c.b.ins(PtxInst::new("ld.shared.u32").op(t).addr(a));
                t
            }
            None => hi,
        };
        c.b.ins(PtxInst::new("setp.ge.s32").op(p).op(iv).op(hi));
        c.b.ins_if(p, false, PtxInst::new("bra.uni").op(&end));
        iteration(c, body, iv, step, &carried, sp, lower)?;
        c.b.ins(PtxInst::new("bra.uni").op(&top));
        c.b.place(&end);
    }
    c.asyncs.tma.dynamic_ring = was_dynamic;
    c.mem.stores = super::store_order::merge(&stores_before, &c.mem.stores);
    c.mem.release_pending |= releases;
    if c.asyncs.wgmma_in_flight {
        // A held dot's last group: its accumulator is the loop's result.
        c.b.need(Isa::WGMMA)
            .ins(PtxInst::new("wgmma.wait_group.sync.aligned").op(0));
        c.asyncs.wgmma_in_flight = false;
        // The stages it read, released late (tma.rs).
        super::tma::pay_owed(c, sp)?;
    }
    for (&r, v) in op.results.iter().zip(carried) {
        if let Some(v) = v {
            if let (true, Val::Tile { regs, .. }) = (c.plan.lazy.finish.contains(&r), &v) {
                super::reduce::quad_sum(c, regs);
            }
            c.values.vals.insert(r, v);
        }
    }
    Ok(())
}

/// The shared address holding the bound of a TMA ring loop read only by wgmma (`dynamic`) in a
/// kernel that is not warp-specialized, when the bound is computed in the kernel (not a
/// constant, parameter or dim): the filling thread stores it once before the loop (then a
/// block barrier) and the loop's exit test loads it each iteration. ptxas keeps a computed
/// bound of such a loop, and the values it derives from it, in registers across the whole loop
/// (4 more at causal attention d64's 128×128 tile, which then misses two blocks per SM at 128);
/// a bound it reads from shared memory costs one load per iteration and no register. The word is
/// written once per program: the `pipelining` pass builds no TMA ring inside another loop
/// (pipelining_tma.rs), so such a loop is entered once and no thread still tests an old bound.
fn bound_in_shared(c: &mut Ctx, op: &OpData, dynamic: bool, hi: Reg) -> Option<Reg> {
    let b = *op.operands.get(1)?;
    let computed = match c.k.dfg.values.get(b)?.def {
        kir_ir::ValueDef::Result(o, _) => !matches!(
            c.k.dfg.ops[o].opcode,
            Opcode::Const | Opcode::Param | Opcode::Dim
        ),
        kir_ir::ValueDef::Arg(..) => false,
    };
    if !dynamic || !computed || c.asyncs.ws.raw_tid.is_some() {
        return None;
    }
    let off = c.alloc_shared_aligned(4, 4);
    let zero = c.b.imm32(0);
    let a = c.shared_at(off, zero);
    let e = super::tma::elected(c);
    c.b.ins(PtxInst::new("st.shared.u32").addr(a).op(hi).guard(e, false));
    c.sync_block();
    Some(a)
}

/// One iteration of a loop body: the body, its yielded values into the carried registers, and
/// the induction variable's step.
fn iteration(
    c: &mut Ctx,
    body: kir_ir::Block,
    iv: Reg,
    step: Reg,
    carried: &[Option<Val>],
    sp: Span,
    lower: &dyn Regions,
) -> Result<(), PtxError> {
    let yielded = lower.block(c, body)?;
    // The yield is a parallel copy: a carried argument yielded into another carried slot
    // (`dot_overlap`'s stage of the pending block, `yield …, %stage`) is read before any
    // carried register is overwritten, so it is copied aside first.
    let args = c.k.dfg.blocks[body].args.clone();
    let mut saved = vec![];
    for (i, &src) in yielded.iter().enumerate() {
        let other_slot = args[1..]
            .iter()
            .position(|&a| a == src)
            .is_some_and(|j| j != i);
        if other_slot && !saved.iter().any(|(s, _)| *s == src) {
            if let Some(v) = c.values.vals.get(&src).cloned() {
                let snap = fresh_copy(c, &v);
                c.values.vals.insert(src, snap);
                saved.push((src, v));
            }
        }
    }
    for (dst, &src) in carried.iter().zip(&yielded) {
        if let Some(dst) = dst {
            assign(c, dst, src, sp)?;
        }
    }
    for (src, v) in saved {
        c.values.vals.insert(src, v);
    }
    c.b.ins(PtxInst::new("add.s32").op(iv).op(iv).op(step));
    Ok(())
}

/// A loop carrying the stage index of a ring of S stages: the body is emitted S times, copy h
/// with the stage index known (stage (init + h) mod S), so every stage address is a constant.
/// Each copy checks the exit condition first.
#[allow(clippy::too_many_arguments)]
fn lower_ring(
    c: &mut Ctx,
    op: &OpData,
    body: kir_ir::Block,
    iv: Reg,
    hi: Reg,
    step: Reg,
    carried: &[Option<Val>],
    ring: Ring,
    arg: Value,
    lower: &dyn Regions,
) -> Result<(), PtxError> {
    let sp = op.span;
    let releases = contains(c.k, body, Opcode::SmemRelease);
    let (top, end) = (c.b.label("pfor"), c.b.label("endpfor"));
    c.values.vals.remove(&arg);
    c.b.place(&top);
    for h in 0..ring.stages {
        c.values
            .statics
            .insert(arg, ((ring.init + h) % ring.stages) as i64);
        c.mem.release_pending |= releases;
        let done = c.b.reg(RegClass::Pred);
        c.b.ins(PtxInst::new("setp.ge.s32").op(done).op(iv).op(hi));
        c.b.ins_if(done, false, PtxInst::new("bra.uni").op(&end));
        iteration(c, body, iv, step, carried, sp, lower)?;
    }
    c.b.ins(PtxInst::new("bra.uni").op(&top));
    c.b.place(&end);
    c.values.statics.remove(&arg);
    Ok(())
}

fn scalar(c: &mut Ctx, v: Value, sp: Span) -> Result<Reg, PtxError> {
    match c.val(v, sp)? {
        Val::Scalar(r) => Ok(r),
        _ => Err(PtxError::at(sp, "expected a scalar")),
    }
}

pub(super) fn lower_if(c: &mut Ctx, op: &OpData, lower: &dyn Regions) -> Result<(), PtxError> {
    let sp = op.span;
    // An `if` with code in it joins branches under the group (one holding only releases, which
    // emit nothing, does not).
    let emits = op.regions.iter().any(|&r| {
        c.k.dfg.blocks[r]
            .ops
            .iter()
            .any(|&o| !matches!(c.k.dfg.ops[o].opcode, Opcode::Yield | Opcode::SmemRelease))
    });
    if c.asyncs.wgmma_in_flight && emits {
        super::notes::note_join_in_flight(c, op);
    }
    let cond = scalar(
        c,
        *op.operands
            .first()
            .ok_or_else(|| PtxError::at(sp, "if needs a condition"))?,
        sp,
    )?;
    // Results get registers in their assigned places.
    let mut outs = Vec::new();
    for &r in &op.results {
        let d = dtype(c, r);
        let v = match place(c, r) {
            Place::Reg(l) => {
                let s = shape(c, r);
                let n = crate::ptx::plan::layout::slots(l, &s, c.plan.blk);
                let regs = (0..n).map(|_| c.reg(d)).collect();
                Val::Tile {
                    layout: l,
                    shape: s,
                    dtype: d,
                    regs,
                }
            }
            _ => Val::Scalar(c.reg(d)),
        };
        outs.push(v);
    }
    // A copy in a region after a release: synchronize once here rather than in the region.
    if c.mem.release_pending
        && op
            .regions
            .iter()
            .any(|&r| contains(c.k, r, Opcode::AsyncCopy))
    {
        c.sync_block();
        c.mem.release_pending = false;
    }
    let pending_in = c.mem.release_pending;
    // An empty `else` (no results, just `yield`) needs no branch around it.
    let regions: Vec<kir_ir::Block> = match op.regions[..] {
        [t, e]
            if op.results.is_empty()
                && c.k.dfg.blocks[e]
                    .ops
                    .iter()
                    .all(|&o| c.k.dfg.ops[o].opcode == Opcode::Yield) =>
        {
            vec![t]
        }
        _ => op.regions.clone(),
    };
    let mut pending_out = regions.len() < 2 && pending_in;
    let (els, end) = (c.b.label("else"), c.b.label("endif"));
    c.b.ins_if(cond, true, PtxInst::new("bra.uni").op(&els));
    let stores_in = c.mem.stores.clone();
    let mut stores_out: Option<super::store_order::State> = None;
    for (i, &r) in regions.iter().enumerate() {
        c.mem.release_pending = pending_in;
        c.mem.stores = stores_in.clone();
        let y = if super::producer::producer_block(c.k, &c.k.dfg.blocks[r].ops) {
            super::producer::lower_producer_block(c, r, lower)?
        } else {
            lower.block(c, r)?
        };
        pending_out |= c.mem.release_pending;
        stores_out = Some(match &stores_out {
            None => c.mem.stores.clone(),
            Some(o) => super::store_order::merge(o, &c.mem.stores),
        });
        for (dst, &src) in outs.iter().zip(&y) {
            assign(c, dst, src, sp)?;
        }
        if i == 0 && regions.len() > 1 {
            c.b.ins(PtxInst::new("bra.uni").op(&end));
            c.b.place(&els);
        }
    }
    if regions.len() < 2 {
        c.b.place(&els);
    }
    c.b.place(&end);
    c.mem.release_pending = pending_out;
    // One region (no else): the path around it keeps the state from before.
    let around = (regions.len() < 2).then_some(&stores_in);
    c.mem.stores = match (stores_out, around) {
        (Some(o), Some(a)) => super::store_order::merge(&o, a),
        (Some(o), None) => o,
        (None, _) => stores_in,
    };
    for (&r, v) in op.results.iter().zip(outs) {
        c.values.vals.insert(r, v);
    }
    Ok(())
}
