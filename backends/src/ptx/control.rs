//! Structured control flow: `for` (plain, or software-pipelined: its dot-operand tiles are
//! prefetched into a ring of `stages` shared-memory buffers with cp.async groups) and `if`, with
//! loop-carried values in their own registers.

use super::builder::{Reg, RegClass};
use super::ctx::{Ctx, Val};
use super::layout::Place;
use super::lazy::lazy_ok;
use super::lower::{block, dtype, place, regs_in, shape};
use super::PtxError;
use kir_ir::{Attr, Block, OpData, Opcode, Span, Value};

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
    c.b.ins(format!("mov.{t} {dst}, {src}"));
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

pub(super) fn lower_for(c: &mut Ctx, op: &OpData) -> Result<(), PtxError> {
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
    let iv = c.b.reg(RegClass::B32);
    c.b.ins(format!("mov.b32 {iv}, {lo}"));
    // Carried values get their own registers, initialised from the inits.
    let mut carried = Vec::new();
    for (i, &init) in op.operands.iter().skip(3).enumerate() {
        let cur = c.val(init, sp)?;
        let arg = args
            .get(i + 1)
            .copied()
            .ok_or_else(|| PtxError::at(sp, "for: missing block arg"))?;
        let want = match c.places.get(&arg).copied().unwrap_or(Place::Scalar) {
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
        c.vals.insert(arg, v.clone());
        carried.push(v);
    }
    if let Some(&a0) = args.first() {
        c.vals.insert(a0, Val::Scalar(iv));
        let pre = if c.stages >= 2 {
            prefetchable(c, body, a0)
        } else {
            vec![]
        };
        if !pre.is_empty() {
            return lower_for_pipelined(c, op, body, a0, iv, hi, step, carried, pre);
        }
    }
    let (top, end) = (c.b.label("for"), c.b.label("endfor"));
    let p = c.b.reg(RegClass::Pred);
    c.b.place(&top);
    c.b.ins(format!("setp.ge.s32 {p}, {iv}, {hi}"));
    c.b.ins_if(p, false, format!("bra.uni {end}"));
    let yielded = block(c, body)?;
    for (dst, &src) in carried.iter().zip(&yielded) {
        assign(c, dst, src, sp)?;
    }
    c.b.ins(format!("add.s32 {iv}, {iv}, {step}"));
    c.b.ins(format!("bra.uni {top}"));
    c.b.place(&end);
    for (&r, v) in op.results.iter().zip(carried) {
        c.vals.insert(r, v);
    }
    Ok(())
}

/// Loads at the top level of a loop body that read a tile for dot operands (placed in shared
/// memory) at offsets known before the iteration starts (the induction variable or values from
/// outside the loop) with no mask or an index mask: their next tile can be fetched while the
/// current iteration computes. Returns (op, result, one buffer offset per stage).
fn prefetchable(c: &mut Ctx, body: Block, iv: Value) -> Vec<(kir_ir::Op, Value, Vec<u32>)> {
    let k = c.k;
    let ops = k.dfg.blocks[body].ops.clone();
    // The body's index/mask chains are known up front (block() registers the same ones).
    for &o in &ops {
        let op = &k.dfg.ops[o];
        if lazy_ok(c, op) {
            if let Some(&r) = op.results.first() {
                c.lazy.insert(r, o);
            }
        }
    }
    let mut out = Vec::new();
    for &o in &ops {
        let op = &k.dfg.ops[o];
        let Some(&r) = op.results.first() else {
            continue;
        };
        if op.opcode != Opcode::Load || place(c, r) != Place::Shared {
            continue;
        }
        let Some(t) = &op.tensor else { continue };
        let offsets_ok = t.offsets.iter().all(|off| match off {
            kir_ir::Offset::Value(v) => *v == iv || c.vals.contains_key(v),
            kir_ir::Offset::Expr(_) => true,
        });
        let mask_ok = match op.attr("mask") {
            None => true,
            Some(Attr::Value(m)) => c.lazy.contains_key(m),
            Some(_) => false,
        };
        let (Some(d), Some(s)) = (k.dfg.ty(r).dtype(), k.dfg.ty(r).shape()) else {
            continue;
        };
        if offsets_ok && mask_ok && s.len() == 2 {
            let bytes = if c.core.contains(&r) {
                super::wgmma::core_tile_bytes(&s, super::ctx::smem_bytes(d))
            } else {
                super::memory::shared_tile_bytes(&s, d)
            };
            let core = c.core.contains(&r);
            let bufs = (0..c.stages)
                .map(|_| {
                    if core {
                        c.alloc_shared_aligned(bytes, super::wgmma::CORE_ALIGN)
                    } else {
                        c.alloc_shared(bytes)
                    }
                })
                .collect();
            out.push((o, r, bufs));
        }
    }
    out
}

/// A loop whose dot-operand tiles are prefetched `S = stages` − 1 iterations ahead into a ring
/// of S buffers (one cp.async group per iteration). The body is emitted S times, copy h reading
/// buffer h, so every shared offset stays a constant. Each iteration j: wait until j's group
/// has landed (at most S − 2 younger groups pending), one barrier (the data is visible to every
/// thread, and every thread is done with iteration j − 1, whose buffer is refilled next), then
/// fetch iteration j + S − 1 into buffer (j − 1) mod S and compute j.
#[allow(clippy::too_many_arguments)]
fn lower_for_pipelined(
    c: &mut Ctx,
    op: &OpData,
    body: Block,
    iv_val: Value,
    iv: Reg,
    hi: Reg,
    step: Reg,
    carried: Vec<Val>,
    pre: Vec<(kir_ir::Op, Value, Vec<u32>)>,
) -> Result<(), PtxError> {
    let sp = op.span;
    let k = c.k;
    let stages = c.stages;
    let fetch = |c: &mut Ctx, at: Reg, buf: usize| -> Result<(), PtxError> {
        for (o, _, offs) in &pre {
            super::memory::prefetch_load(c, &k.dfg.ops[*o], iv_val, at, offs[buf])?;
        }
        Ok(())
    };
    // Fetches iteration `iv + ahead·step` into `buf` when it exists; always closes a group, so
    // group counts stay in step with iterations.
    let fetch_ahead = |c: &mut Ctx, ahead: usize, buf: usize| -> Result<(), PtxError> {
        let (at, p, skip) = (
            c.b.reg(RegClass::B32),
            c.b.reg(RegClass::Pred),
            c.b.label("pf_skip"),
        );
        c.b.ins(format!("mov.b32 {at}, {iv}"));
        for _ in 0..ahead {
            c.b.ins(format!("add.s32 {at}, {at}, {step}"));
        }
        c.b.ins(format!("setp.ge.s32 {p}, {at}, {hi}"));
        c.b.ins_if(p, false, format!("bra.uni {skip}"));
        fetch(c, at, buf)?;
        c.b.place(&skip);
        c.b.ins("cp.async.commit_group");
        Ok(())
    };
    // Prologue: iterations 0 … S − 2 into buffers 0 … S − 2.
    c.b.ins("bar.sync 0");
    for j in 0..stages - 1 {
        fetch_ahead(c, j, j)?;
    }
    let (top, end) = (c.b.label("pfor"), c.b.label("endpfor"));
    c.b.place(&top);
    for h in 0..stages {
        let done = c.b.reg(RegClass::Pred);
        c.b.ins(format!("setp.ge.s32 {done}, {iv}, {hi}"));
        c.b.ins_if(done, false, format!("bra.uni {end}"));
        c.b.ins(format!("cp.async.wait_group {}", stages - 2));
        super::memory::fence_async(c);
        c.b.ins("bar.sync 0");
        fetch_ahead(c, stages - 1, (h + stages - 1) % stages)?;
        for (_, r, offs) in &pre {
            c.prefetched.insert(*r, offs[h]);
        }
        let yielded = block(c, body)?;
        for (dst, &src) in carried.iter().zip(&yielded) {
            assign(c, dst, src, sp)?;
        }
        c.b.ins(format!("add.s32 {iv}, {iv}, {step}"));
    }
    c.b.ins(format!("bra.uni {top}"));
    c.b.place(&end);
    // Drain the (empty or unused) groups still pending, and let every thread finish reading
    // the ring before shared memory is used for anything else.
    c.b.ins("cp.async.wait_group 0");
    c.b.ins("bar.sync 0");
    for (_, r, _) in &pre {
        c.prefetched.remove(r);
    }
    for (&r, v) in op.results.iter().zip(carried) {
        c.vals.insert(r, v);
    }
    Ok(())
}

fn scalar(c: &mut Ctx, v: Value, sp: Span) -> Result<Reg, PtxError> {
    match c.val(v, sp)? {
        Val::Scalar(r) => Ok(r),
        _ => Err(PtxError::at(sp, "expected a scalar")),
    }
}

pub(super) fn lower_if(c: &mut Ctx, op: &OpData) -> Result<(), PtxError> {
    let sp = op.span;
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
                let n = super::layout::slots(l, &s, c.blk);
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
    let (els, end) = (c.b.label("else"), c.b.label("endif"));
    c.b.ins_if(cond, true, format!("bra.uni {els}"));
    for (i, &r) in op.regions.iter().enumerate() {
        let y = block(c, r)?;
        for (dst, &src) in outs.iter().zip(&y) {
            assign(c, dst, src, sp)?;
        }
        if i == 0 {
            c.b.ins(format!("bra.uni {end}"));
            c.b.place(&els);
        }
    }
    if op.regions.len() < 2 {
        c.b.place(&els);
    }
    c.b.place(&end);
    for (&r, v) in op.results.iter().zip(outs) {
        c.vals.insert(r, v);
    }
    Ok(())
}
