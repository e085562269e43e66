//! Intra-warpgroup overlap (FlashAttention-3's): in a loop over a TMA ring whose body starts a
//! fresh dot on the stage it just waited for (attention's scores `s = q · kᵀ`), that dot is
//! issued one iteration early, as `dot_async`, so the matrix units compute the next block's
//! scores while the current block's softmax runs.
//!
//! Input: the `pipelining` pass's TMA ring (no warp specialization): a top-level `for` whose body
//! waits `mbar_wait %full, %s, %par` on its carried stage and parity, reads `%r = smem_read %buf,
//! %s`, optionally transposes it, and takes it into `%d = dot %a, %r', %z` with `%a` and a zero
//! `%z` from outside the loop; every `smem_release` of the body names `%s`. Output:
//! - before the loop, `if lo < hi` the first block's dot is computed as before (wait, read, dot),
//!   else its value is `%z`; the loop carries it as `%s_cur`, and every use of `%d` reads it;
//! - where the wait was, the body computes the next iteration's stage and parity (clones of the
//!   yield's own update ops), waits for that stage when there is a next iteration
//!   (`n + step < hi`), and issues `dot_async %a, smem_read(%buf, next or, in the last iteration,
//!   the current stage), %z`;
//! - before the body's first `smem_release` (the releases name the current stage, which the last
//!   iteration's early dot reads), `dot_wait` takes the next scores, which the loop yields.
//!
//! The first iteration's scores and every later one are the same dots of the same stages, so the
//! result is bit-identical (tests/tests/dot_overlap.rs runs the interpreter before and after,
//! under several scheduler seeds; the interpreter checks the ring protocol: every read after
//! its fill, no release while a `dot_async` reads the stage). The last iteration's early dot
//! reads the current stage again and is discarded. The overlap needs the next stage filled a
//! full iteration ahead — a ring of at least 3 stages; with 2 the wait for the next stage follows
//! its fill at once (correct, and slower).

use crate::kedit::{self, op2, simple, Cloner};
use kir_ir::{
    Block, CmpPred, Diagnostics, Dtype, ExprKind, Kernel, Module, Op, Opcode, Value, ValueDef,
};
use std::collections::HashSet;

/// Rotates the fresh stage dot of every qualifying loop of `m` (see the module doc); other
/// kernels and loops are unchanged. Returns the module and how many loops it rotated.
pub fn dot_overlap(m: &Module) -> Result<(Module, usize), Diagnostics> {
    let mut out = m.clone();
    let mut n = 0;
    for k in out.kernels.values_mut() {
        let loops: Vec<Op> = k.dfg.blocks[k.body]
            .ops
            .iter()
            .copied()
            .filter(|&o| k.dfg.ops[o].opcode == Opcode::For)
            .collect();
        let mut changed = false;
        for l in loops {
            if let Some(f) = find(k, l) {
                if !super::dot_overlap_pair::rotate_pair(k, &f) {
                    rotate(k, &f);
                }
                changed = true;
                n += 1;
            }
        }
        if changed {
            kir_ir::renumber::renumber_kernel(k);
        }
    }
    Ok((out, n))
}

/// The parts of a qualifying loop.
pub(super) struct Found {
    pub(super) l: Op,
    /// `mbar_wait %full, %s, %par` and its position in the body.
    pub(super) wait: Op,
    pos: usize,
    read: Op,
    transpose: Option<Op>,
    pub(super) dot: Op,
    /// Indices of the stage and parity among the loop's carried values.
    pub(super) stage: usize,
    parity: usize,
}

fn def_op(k: &Kernel, v: Value) -> Option<Op> {
    match k.dfg.values.get(v)?.def {
        ValueDef::Result(o, _) => Some(o),
        ValueDef::Arg(..) => None,
    }
}

/// The ops of block `b` (at any depth) by id.
fn ops_in(k: &Kernel, b: Block, out: &mut HashSet<Op>) {
    for &o in &k.dfg.blocks[b].ops {
        out.insert(o);
        for &r in &k.dfg.ops[o].regions {
            ops_in(k, r, out);
        }
    }
}

fn uses(k: &Kernel, v: Value) -> Vec<Op> {
    kedit::users(&k.dfg, v)
}

pub(super) fn find(k: &Kernel, l: Op) -> Option<Found> {
    let lo = &k.dfg.ops[l];
    let body = *lo.regions.first()?;
    let args = k.dfg.blocks[body].args.clone();
    let ops = k.dfg.blocks[body].ops.clone();
    let mut inside = HashSet::new();
    ops_in(k, body, &mut inside);
    let outside =
        |v: Value| def_op(k, v).is_none_or(|o| !inside.contains(&o)) && !args.contains(&v);
    let carried = |v: Value| args[1..].iter().position(|&a| a == v);
    // The full-barrier wait on the carried stage and parity.
    let (pos, wait) = ops.iter().enumerate().find_map(|(i, &o)| {
        let d = &k.dfg.ops[o];
        (d.opcode == Opcode::MbarWait
            && d.operands.len() == 3
            && carried(d.operands[1]).is_some()
            && carried(d.operands[2]).is_some())
        .then_some((i, o))
    })?;
    let (stage_v, par_v) = (k.dfg.ops[wait].operands[1], k.dfg.ops[wait].operands[2]);
    // Its first fresh dot of a stage read.
    let (read, transpose, dot) = ops[pos + 1..].iter().find_map(|&o| {
        let d = &k.dfg.ops[o];
        if d.opcode != Opcode::Dot {
            return None;
        }
        let (a, b, z) = (d.operands[0], d.operands[1], d.operands[2]);
        let zero = def_op(k, z).is_some_and(|zo| {
            let zd = &k.dfg.ops[zo];
            zd.opcode == Opcode::Const
                && matches!(&zd.lead, Some(kir_ir::Attr::Expr(e))
                    if matches!(e.kind, ExprKind::Float(x) if x.0 == 0.0)
                        || matches!(e.kind, ExprKind::Int(0)))
        });
        if !outside(a) || !outside(z) || !zero {
            return None;
        }
        let bo = def_op(k, b)?;
        let (tr, src) = match k.dfg.ops[bo].opcode {
            Opcode::Transpose => (Some(bo), *k.dfg.ops[bo].operands.first()?),
            _ => (None, b),
        };
        let ro = def_op(k, src)?;
        let rd = &k.dfg.ops[ro];
        let single = |v: Value| uses(k, v).len() == 1;
        (rd.opcode == Opcode::SmemRead
            && rd.operands.get(1) == Some(&stage_v)
            && ops.contains(&ro)
            && tr.is_none_or(|t| ops.contains(&t))
            && single(src)
            && (tr.is_none() || single(b)))
        .then_some((ro, tr, o))
    })?;
    // Every release names the current stage (the last iteration's early dot reads it).
    let releases_ok = ops.iter().all(|&o| {
        let d = &k.dfg.ops[o];
        d.opcode != Opcode::SmemRelease || d.operands.get(1) == Some(&stage_v)
    });
    let no_async = !inside.iter().any(|&o| {
        matches!(
            k.dfg.ops[o].opcode,
            Opcode::DotAsync | Opcode::DotWait | Opcode::WarpSpecialize
        )
    });
    if !releases_ok || !no_async {
        return None;
    }
    // The next stage and parity must be computable where the wait was.
    let y = *ops.last()?;
    let (st, pa) = (carried(stage_v)?, carried(par_v)?);
    let yd = &k.dfg.ops[y].operands;
    let slice = update_slice(k, &ops[pos..], *yd.get(st)?, *yd.get(pa)?);
    if !slice.iter().all(|&o| {
        let d = &k.dfg.ops[o];
        d.regions.is_empty()
            && kedit::is_pure(k, d)
            && d.results.iter().all(|&r| k.dfg.ty(r).is_scalar())
    }) {
        return None;
    }
    Some(Found {
        l,
        wait,
        pos,
        read,
        transpose,
        dot,
        stage: carried(stage_v)?,
        parity: carried(par_v)?,
    })
}

/// Clones the wait, read, transpose and dot of `f` into block `b` with stage `s` and parity
/// `p` (the dot as `opcode`); returns the dot's result.
fn clone_chain(k: &mut Kernel, f: &Found, b: Block, s: Value, p: Value, opcode: Opcode) -> Value {
    let src = k.dfg.clone();
    let mut c = Cloner::new(&src);
    let (stage_v, par_v) = (src.ops[f.wait].operands[1], src.ops[f.wait].operands[2]);
    c.vmap.insert(stage_v, s);
    c.vmap.insert(par_v, p);
    c.op(&mut k.dfg, b, f.read);
    if let Some(t) = f.transpose {
        c.op(&mut k.dfg, b, t);
    }
    let d = c.op(&mut k.dfg, b, f.dot);
    k.dfg.ops[d].opcode = opcode;
    k.dfg.ops[d].results[0]
}

/// Appends to block `b` the loop's full-barrier wait for stage `s` with parity `p`.
fn append_wait(k: &mut Kernel, f: &Found, b: Block, s: Value, p: Value) {
    let full = k.dfg.ops[f.wait].operands[0];
    k.dfg
        .append_op(b, simple(Opcode::MbarWait, vec![full, s, p], None), vec![]);
}

fn rotate(k: &mut Kernel, f: &Found) {
    let l = f.l;
    let body = k.dfg.ops[l].regions[0];
    let (lo, hi, step) = {
        let d = &k.dfg.ops[l].operands;
        (d[0], d[1], d[2])
    };
    let (s0, p0) = (
        k.dfg.ops[l].operands[3 + f.stage],
        k.dfg.ops[l].operands[3 + f.parity],
    );
    let s_old = k.dfg.ops[f.dot].results[0];
    let ty = k.dfg.ty(s_old).clone();
    let zero = k.dfg.ops[f.dot].operands[2];
    // Before the loop: the first block's scores, when there is a first block.
    let top = k.dfg.new_block();
    let has0 = op2(k, top, Opcode::Cmp, Some(CmpPred::Lt), lo, hi, Dtype::I1);
    let then = k.dfg.new_block();
    append_wait(k, f, then, s0, p0);
    let first = clone_chain(k, f, then, s0, p0, Opcode::Dot);
    k.dfg
        .append_op(then, simple(Opcode::Yield, vec![first], None), vec![]);
    let els = kedit::yield_block(&mut k.dfg, vec![], vec![zero]);
    let iff = kedit::append_if(&mut k.dfg, top, has0, then, els, vec![(ty.clone(), None)]);
    let s_first = k.dfg.ops[iff].results[0];
    let at = k.dfg.blocks[k.body]
        .ops
        .iter()
        .position(|&o| o == l)
        .unwrap_or(0);
    let new_top = std::mem::take(&mut k.dfg.blocks[top].ops);
    k.dfg.blocks[k.body].ops.splice(at..at, new_top);
    // The loop carries the scores.
    let (s_cur, _) = kedit::add_carried(&mut k.dfg, l, s_first, ty, Some("s_cur".into()));
    kedit::replace_uses(&mut k.dfg, s_old, s_cur, None);
    // The body: the next stage's wait and early dot where the wait was.
    let args = k.dfg.blocks[body].args.clone();
    let (n0, stage_v, par_v) = (args[0], args[1 + f.stage], args[1 + f.parity]);
    let yield_op = *k.dfg.blocks[body]
        .ops
        .last()
        .expect("a loop body ends with yield");
    let (ys, yp) = (
        k.dfg.ops[yield_op].operands[f.stage],
        k.dfg.ops[yield_op].operands[f.parity],
    );
    let nb = k.dfg.new_block();
    let nn = op2(k, nb, Opcode::Add, None, n0, step, Dtype::I32);
    let has_next = op2(k, nb, Opcode::Cmp, Some(CmpPred::Lt), nn, hi, Dtype::I1);
    let (sn, pn) = clone_update(k, body, f.pos, nb, ys, yp);
    let wb = k.dfg.new_block();
    append_wait(k, f, wb, sn, pn);
    k.dfg
        .append_op(wb, simple(Opcode::Yield, vec![], None), vec![]);
    let we = kedit::yield_block(&mut k.dfg, vec![], vec![]);
    kedit::append_if(&mut k.dfg, nb, has_next, wb, we, vec![]);
    let rs = {
        let id = k.dfg.append_op(
            nb,
            simple(Opcode::Select, vec![has_next, sn, stage_v], None),
            vec![(kir_ir::Type::scalar(Dtype::I32), None)],
        );
        k.dfg.ops[id].results[0]
    };
    let d_next = clone_chain(k, f, nb, rs, par_v, Opcode::DotAsync);
    // Out with the old wait, read, transpose and dot; in with the new ops.
    let gone: HashSet<Op> = [Some(f.wait), Some(f.read), f.transpose, Some(f.dot)]
        .into_iter()
        .flatten()
        .collect();
    let mut ops: Vec<Op> = k.dfg.blocks[body].ops.clone();
    let new_ops = std::mem::take(&mut k.dfg.blocks[nb].ops);
    ops.splice(f.pos..f.pos, new_ops);
    ops.retain(|o| !gone.contains(o));
    k.dfg.blocks[body].ops = ops;
    // The wait for the early dot, before the first release (or the yield).
    let rel = k.dfg.blocks[body]
        .ops
        .iter()
        .position(|&o| {
            matches!(
                k.dfg.ops[o].opcode,
                Opcode::SmemRelease | Opcode::MbarArrive | Opcode::Yield
            ) && k.dfg.ops[o].regions.is_empty()
        })
        .unwrap_or(k.dfg.blocks[body].ops.len() - 1);
    let ty = k.dfg.ty(d_next).clone();
    let s_next = kedit::insert_op(
        &mut k.dfg,
        body,
        rel,
        simple(Opcode::DotWait, vec![d_next], None),
        vec![(ty, Some("s_next".into()))],
    )[0];
    let y = *k.dfg.blocks[body].ops.last().expect("yield");
    k.dfg.ops[y].operands.push(s_next);
}

/// Clones into block `dst` the body ops at or after `from` that compute the yield's next stage
/// `ys` and parity `yp` (pure scalar ops; earlier values are used as they are); returns the
/// cloned values.
fn clone_update(
    k: &mut Kernel,
    body: Block,
    from: usize,
    dst: Block,
    ys: Value,
    yp: Value,
) -> (Value, Value) {
    let ops = k.dfg.blocks[body].ops.clone();
    let slice = update_slice(k, &ops[from..], ys, yp);
    let src = k.dfg.clone();
    let mut c = Cloner::new(&src);
    for o in slice {
        c.op(&mut k.dfg, dst, o);
    }
    let get = |v: Value| c.vmap.get(&v).copied().unwrap_or(v);
    (get(ys), get(yp))
}

/// The ops of `late` (in order) that `ys` and `yp` need, transitively.
fn update_slice(k: &Kernel, late: &[Op], ys: Value, yp: Value) -> Vec<Op> {
    let mut need: HashSet<Value> = [ys, yp].into_iter().collect();
    let mut slice = vec![];
    for &o in late.iter().rev() {
        let d = &k.dfg.ops[o];
        if d.results.iter().any(|r| need.contains(r)) {
            slice.push(o);
            need.extend(d.operands.iter().copied());
        }
    }
    slice.reverse();
    slice
}
