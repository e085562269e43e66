//! Row vectors of a ping-pong loop read one iteration ahead.
//!
//! attention_bwd's 128-key dK/dV kernel reads, at each query step, the step's lse and delta into
//! the accumulator layout (`row_reload.rs`: each thread loads the columns it holds) and uses them
//! right after the step's first issue group, sᵀ and dpᵀ. Loaded at the top of the step, their
//! latency is covered by that group alone, and on an H100 the first use of lse was the kernel's
//! third hottest line (ncu, call V2 of 2026-12-08: 5 % of the stall samples, waiting on the load;
//! with lse and delta constant the kernel had run 5–13 % faster, call S1 of 2026-12-07). The
//! warpgroup's last issue group of the step (dk and dv) is followed by a wait for it, during
//! which the warpgroup has nothing to do.
//!
//! So in a loop body that holds a ping-pong issue group's last tail (`plan/roles.rs`), a
//! broadcast that `row_reload` would serve from a load whose every operand is defined outside
//! the body or is the loop's induction variable is read one iteration ahead:
//! - before the loop, the values of the first iteration are loaded into registers the loop
//!   carries;
//! - the broadcast copies them (so the carried registers may be overwritten later in the body);
//! - right after the last issue group's tail is issued and its turn handed on, before its wait,
//!   the next iteration's values (the induction variable plus the step) are loaded into the
//!   carried registers. Past the loop's end the loads are out of bounds and take the load's
//!   `other` (the per-column path's bounds), so nothing is read outside the tensor;
//! - a body whose tail was not lowered (it cannot happen for a body the plan gave turns, but the
//!   rule does not depend on it) loads them at the end of the body.
//!
//! The carried registers are live across the wait and the next step's first group, where the
//! step's own values were live before: the registers at the kernel's peak (the softmax, with sᵀ
//! and dpᵀ live) do not change. Warp-specialized kernels keep their own row vector paths
//! (`row_compact.rs`).

use super::ctx::{Ctx, Val};
use super::row_reload::{chain_of, reload};
use super::state::RowPrefetch;
use super::PtxError;
use crate::ptx::emit::{PtxInst, Reg, RegClass};
use crate::ptx::plan::layout::{rows_cols, Layout, Place};
use kir_ir::{Block, Offset, Opcode, Span, Value, ValueDef};

/// The distinct registers of `regs` in order, and each slot's index among them.
fn distinct(regs: &[Reg]) -> (Vec<Reg>, Vec<usize>) {
    let mut out: Vec<Reg> = Vec::new();
    let slots = regs
        .iter()
        .map(|r| match out.iter().position(|o| o == r) {
            Some(i) => i,
            None => {
                out.push(*r);
                out.len() - 1
            }
        })
        .collect();
    (out, slots)
}

fn mov(c: &mut Ctx, dst: Reg, src: Reg) {
    c.b.ins(PtxInst::new("mov.b32").op(dst).op(src));
}

/// Whether `v` is defined outside `body`'s ops (a param, a constant or a value of an enclosing
/// block), or is the induction variable `iv_arg`.
fn outside(c: &Ctx, body: Block, iv_arg: Value, v: Value) -> bool {
    if v == iv_arg {
        return true;
    }
    match c.k.dfg.values[v].def {
        ValueDef::Result(o, _) => !c.k.dfg.blocks[body].ops.contains(&o),
        ValueDef::Arg(b, _) => b != body,
    }
}

/// The tail of the last issue group among `body`'s own ops, if the plan gave the body turns.
fn last_tail(c: &Ctx, body: Block) -> Option<Value> {
    c.k.dfg.blocks[body].ops.iter().find_map(|&o| {
        let r = *c.k.dfg.ops[o].results.first()?;
        let t = c.plan.pingpong.get(&r)?;
        (t.tail && t.index + 1 == t.count).then_some(r)
    })
}

/// Before the loop whose body is `body` (induction variable in `iv`, already holding the first
/// iteration's value, and `step`): loads the first iteration's values of the body's row vectors
/// read ahead and records them. Returns how many were recorded (for [`leave`]).
pub(super) fn enter(
    c: &mut Ctx,
    body: Block,
    iv: Reg,
    step: Reg,
    sp: Span,
) -> Result<usize, PtxError> {
    let Some(&iv_arg) = c.k.dfg.blocks[body].args.first() else {
        return Ok(0);
    };
    if c.asyncs.ws.raw_tid.is_some() {
        return Ok(0);
    }
    let Some(tail) = last_tail(c, body) else {
        return Ok(0);
    };
    let mut found = Vec::new();
    for &o in &c.k.dfg.blocks[body].ops {
        let od = &c.k.dfg.ops[o];
        let (Opcode::Broadcast, Some(&v), Some(&src)) =
            (od.opcode, od.results.first(), od.operands.first())
        else {
            continue;
        };
        if c.plan.places.get(&v) != Some(&Place::Reg(Layout::RowMma)) {
            continue;
        }
        let shape = c.k.dfg.ty(v).shape().unwrap_or_default();
        let (m, n) = rows_cols(&shape);
        if shape.len() != 2 || m <= 1 || n % 8 != 0 {
            continue;
        }
        let Some((load, chain)) = chain_of(c, src) else {
            continue;
        };
        if !c.k.dfg.blocks[body].ops.contains(&load) {
            continue;
        }
        let lop = &c.k.dfg.ops[load];
        let Some(t) = lop.tensor.as_ref() else {
            continue;
        };
        let offsets_ok = t.offsets.iter().all(|off| match off {
            Offset::Value(x) => outside(c, body, iv_arg, *x),
            Offset::Expr(_) => true,
        });
        let chain_ok = chain.iter().all(|&l| {
            c.k.dfg.ops[l]
                .operands
                .iter()
                .filter(|&&a| c.k.dfg.ty(a).is_scalar())
                .all(|&a| outside(c, body, iv_arg, a))
        });
        if offsets_ok && chain_ok {
            found.push((v, src, shape));
        }
    }
    let mut count = 0;
    for (bcast, src, shape) in found {
        let Some(first) = reload(c, src, &shape, sp)? else {
            continue;
        };
        let (cols, slots) = distinct(&first);
        let regs: Vec<Reg> = cols
            .iter()
            .map(|&r| {
                let n = c.b.reg(r.class);
                mov(c, n, r);
                n
            })
            .collect();
        c.asyncs.row_prefetch.push(RowPrefetch {
            bcast,
            src,
            shape,
            regs,
            slots,
            iv_arg,
            iv,
            step,
            tail,
            issued: false,
        });
        count += 1;
    }
    Ok(count)
}

/// The registers of the broadcast `v` when it is read ahead: copies of the carried values.
pub(super) fn take(c: &mut Ctx, v: Value) -> Option<Vec<Reg>> {
    let p = c.asyncs.row_prefetch.iter().rev().find(|p| p.bcast == v)?;
    let (regs, slots) = (p.regs.clone(), p.slots.clone());
    let copies: Vec<Reg> = regs
        .iter()
        .map(|&r| {
            let n = c.b.reg(r.class);
            mov(c, n, r);
            n
        })
        .collect();
    Some(slots.iter().map(|&i| copies[i]).collect())
}

/// Loads the next iteration's values of the row vectors whose tail is `tail` (the module doc),
/// right after that tail's issue.
pub(super) fn issue_next(c: &mut Ctx, tail: Value, sp: Span) -> Result<(), PtxError> {
    let due: Vec<usize> = (0..c.asyncs.row_prefetch.len())
        .filter(|&i| {
            let p = &c.asyncs.row_prefetch[i];
            p.tail == tail && !p.issued
        })
        .collect();
    for i in due {
        load_next(c, i, sp)?;
    }
    Ok(())
}

fn load_next(c: &mut Ctx, i: usize, sp: Span) -> Result<(), PtxError> {
    let p = c.asyncs.row_prefetch[i].clone();
    let next = c.b.reg(RegClass::B32);
    c.b.ins(PtxInst::new("add.s32").op(next).op(p.iv).op(p.step));
    let saved = c.values.vals.insert(p.iv_arg, Val::Scalar(next));
    let loaded = reload(c, p.src, &p.shape, sp)?;
    match saved {
        Some(s) => c.values.vals.insert(p.iv_arg, s),
        None => c.values.vals.remove(&p.iv_arg),
    };
    let regs = loaded.ok_or_else(|| {
        PtxError::at(
            sp,
            "internal: a row vector read ahead has no per-column load",
        )
    })?;
    let (cols, slots) = distinct(&regs);
    if cols.len() != p.regs.len() || slots != p.slots {
        return Err(PtxError::at(
            sp,
            "internal: a row vector read ahead changed its column registers",
        ));
    }
    for (&dst, &src) in p.regs.iter().zip(&cols) {
        mov(c, dst, src);
    }
    c.asyncs.row_prefetch[i].issued = true;
    Ok(())
}

/// At the end of the body of the loop that recorded the last `count` entries: loads the values
/// of any whose tail was not lowered, then marks all of them due again for the next time the body
/// is emitted.
pub(super) fn end_of_body(c: &mut Ctx, count: usize, sp: Span) -> Result<(), PtxError> {
    let from = c.asyncs.row_prefetch.len() - count;
    for i in from..c.asyncs.row_prefetch.len() {
        if !c.asyncs.row_prefetch[i].issued {
            load_next(c, i, sp)?;
        }
        c.asyncs.row_prefetch[i].issued = false;
    }
    Ok(())
}

/// After the loop: forgets its `count` entries.
pub(super) fn leave(c: &mut Ctx, count: usize) {
    let keep = c.asyncs.row_prefetch.len() - count;
    c.asyncs.row_prefetch.truncate(keep);
}
