//! Software pipelining: the tile loads of each innermost `for` loop become asynchronous copies
//! into an N-stage shared-memory ring, issued N − 1 iterations ahead (scheduled IR).
//!
//! A load qualifies when it reads a 2-D tile of an `in` tensor directly in the loop body, feeds
//! an operand of a `dot` or `dot_async` of the body or of a branch of an `if` in it (directly or
//! through `transpose`), and its
//! offsets and mask depend only on the induction variable and on values defined before the loop
//! (through pure ops of the body: the *address slice*). Dot operands are what the matrix units
//! read from shared memory; other tiles are better loaded straight into registers. For a loop `for %i = lo to hi step st`
//! with S stages the pass emits, with the copies of iteration t in copy group t and stage t mod S:
//! - before the loop, for j in 0..S−1: `if lo + j·st < hi { slice(i := lo + j·st); async_copy
//!   into stage j }`, then `async_commit` (one group per j, empty or not);
//! - at the top of the body: `if i + (S−1)·st < hi { slice(i := i + (S−1)·st); async_copy into
//!   stage (t + S − 1) mod S }`, `async_commit`, `async_wait pending S−1` (group t has landed);
//! - each load becomes `smem_read` of stage t mod S; before the `yield`, `smem_release` of every
//!   stage read (the next refill of that stage happens one iteration later);
//! - the stage t mod S is a carried i32.
//!
//!
//! **Held rings.** With `hold_carried_dots`, a loop of S ≥ 3 stages with a `dot` whose
//! accumulator is a value the loop carries (GEMM's K loop; 16-bit operands with M and K
//! multiples of 64) reads each stage for one iteration
//! longer: copies run S − 2 iterations ahead (the prologue fills S − 2 stages, the body refills
//! stage (t + S − 2) mod S, `async_wait pending S−2`), and the release of stage t comes at the
//! end of iteration t + 1 (`if i != lo { smem_release stage (t − 1) mod S }` before the yield,
//! and after the loop `if trips > 0 { smem_release stage (trips − 1) mod S }`). A backend may
//! then keep the dot of iteration t running until iteration t + 1 ends (docs/backends.md).
//!
//! Buffers are allocated once at the top of the kernel and shared by every pipelined loop that
//! reads the same tensor with the same tile type at the same position, since such loops run one
//! after another and each leaves its ring drained. The stage count is the requested one, or by
//! default the most in 2..=3 whose buffers fit the budget; a request that does not fit is an error
//! naming the bytes. A loop whose default ring does not fit is left as it is.

mod candidates;
mod hold;
pub(super) mod tma;

use candidates::{candidates, innermost_loops, slice, BufKey, Cand};
use hold::{has_carried_dot, release_after, release_if, stage_plus};
use kir_ir::edit::{self, add_carried, iconst, insert_op, op2, simple, Cloner};
use kir_ir::verifier::rules_sched::kernel_smem_bytes;
use kir_ir::{
    Attr, Block, Diagnostic, Diagnostics, Dtype, ElemType, Expr, Kernel, Module, Op, OpData,
    Opcode, Type, Value,
};
use std::collections::{HashMap, HashSet};
use tma::Fill;

/// What the pass may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PipelineConfig {
    /// Shared memory one block may use, in bytes (the target's budget).
    pub smem_budget: u64,
    /// Stages requested (`--stages`); `None` picks the deepest ring in 2..=3 that fits.
    pub stages: Option<usize>,
    /// Hold each stage one iteration longer in loops whose `dot` accumulates into a carried
    /// value, when the ring has at least 3 stages (see the module doc): the target's matrix
    /// units can then keep that dot in flight across iterations (sm_90a wgmma).
    pub hold_carried_dots: bool,
    /// Make rings whose copies a tensor copy can do into TMA rings (see "TMA rings"): the
    /// target has TMA and wgmma (sm_90a).
    pub tma_rings: bool,
}

/// Pipelines every innermost loop of every kernel of `m` (see the module doc).
pub fn pipelining(m: &Module, cfg: &PipelineConfig) -> Result<Module, Diagnostics> {
    let mut out = m.clone();
    let mut errs = Vec::new();
    for k in out.kernels.values_mut() {
        if let Err(d) = kernel(k, cfg) {
            errs.push(d);
        }
    }
    if !errs.is_empty() {
        return Err(Diagnostics(errs));
    }
    for k in out.kernels.values_mut() {
        kir_ir::renumber::renumber_kernel(k);
    }
    Ok(out)
}

fn kernel(k: &mut Kernel, cfg: &PipelineConfig) -> Result<(), Diagnostic> {
    let loops = innermost_loops(k);
    // How many loops read each buffer key (loops that share a buffer keep cp.async rings).
    let mut key_loops: HashMap<BufKey, usize> = HashMap::new();
    for &l in &loops {
        let keys: HashSet<BufKey> = candidates(k, l).into_iter().map(|c| c.key).collect();
        for key in keys {
            *key_loops.entry(key).or_insert(0) += 1;
        }
    }
    let mut bufs: HashMap<BufKey, (Value, u64)> = HashMap::new();
    let base = kernel_smem_bytes(k);
    let mut changed = false;
    for l in loops {
        let cands = candidates(k, l);
        if cands.is_empty() {
            continue;
        }
        let per_stage: u64 = cands.iter().map(|c| c.bytes).sum();
        // Buffers already made for earlier loops are reused when their keys match.
        let carried_dot = has_carried_dot(k, l);
        let holds = |s: usize| cfg.hold_carried_dots && s >= 3 && carried_dot;
        let keyed = |c: &Cand, s: usize| BufKey {
            stages: s,
            held: holds(s),
            ..c.key.clone()
        };
        let used: u64 = base + bufs.values().map(|(_, b)| *b).sum::<u64>();
        let extra = |s: usize| -> u64 {
            cands
                .iter()
                .filter(|c| !bufs.contains_key(&keyed(c, s)))
                .map(|c| c.bytes * s as u64)
                .sum()
        };
        let fits = |s: usize| used + extra(s) <= cfg.smem_budget;
        let stages = match cfg.stages {
            Some(s) if s < 2 => {
                return Err(Diagnostic::new(
                    k.dfg.ops[l].span,
                    format!("pipelining needs at least 2 stages, {s} requested"),
                ))
            }
            Some(s) if !fits(s) => {
                let need = used + extra(s);
                return Err(Diagnostic::new(
                    k.dfg.ops[l].span,
                    format!(
                        "{s} pipeline stages of this loop's loads need {need} bytes of shared memory ({per_stage} bytes per stage), over the target's {} bytes per block",
                        cfg.smem_budget
                    ),
                ));
            }
            Some(s) => s,
            None => match (2..=3).rev().find(|&s| fits(s)) {
                Some(s) => s,
                None => continue,
            },
        };
        let mut stage_bufs = Vec::with_capacity(cands.len());
        for c in &cands {
            let key = keyed(c, stages);
            let v = match bufs.get(&key) {
                Some(&(v, _)) => v,
                None => {
                    let v = alloc(k, &c.dims, &c.elem, stages);
                    bufs.insert(key, (v, c.bytes * stages as u64));
                    v
                }
            };
            stage_bufs.push(v);
        }
        let held = holds(stages);
        // A TMA ring owns its buffers: loops that share buffers keep cp.async rings.
        let shared = cands.iter().any(|c| key_loops.get(&c.key) != Some(&1));
        let tma_ring = cfg.tma_rings && !held && !shared && tma::eligible(k, l, &cands);
        let bars = tma_ring.then(|| tma::alloc_bars(k, stages));
        let nest = match bars {
            Some(_) => tma::enclosing_loops(k, l).unwrap_or_default(),
            None => vec![],
        };
        rewrite_loop(k, l, &cands, &stage_bufs, stages, held, bars, &nest);
        changed = true;
    }
    if changed {
        edit::cse(k);
        edit::dce(k);
    }
    Ok(())
}

/// `smem_alloc` of `stages` stages of `tile<dims x e>`, at the top of the kernel body.
pub(super) fn alloc(k: &mut Kernel, dims: &[Expr], e: &ElemType, stages: usize) -> Value {
    let mut sdims = vec![Expr::int(stages as i64)];
    sdims.extend(dims.iter().cloned());
    let n = k.dfg.blocks[k.body]
        .ops
        .iter()
        .filter(|&&o| k.dfg.ops[o].opcode == Opcode::SmemAlloc)
        .count();
    insert_op(
        &mut k.dfg,
        k.body,
        n,
        simple(Opcode::SmemAlloc, vec![], None),
        vec![(Type::Smem(sdims, e.clone()), None)],
    )[0]
}

/// Appends `if cond { slice(iv := at); async_copy … into stage }` for every candidate.
#[allow(clippy::too_many_arguments)]
fn guarded_copies(
    k: &mut Kernel,
    b: Block,
    l: Op,
    cands: &[Cand],
    bufs: &[Value],
    at: Value,
    stage: Value,
    hi: Value,
    fill: Option<Fill>,
) {
    let cond = op2(
        k,
        b,
        Opcode::Cmp,
        Some(kir_ir::CmpPred::Lt),
        at,
        hi,
        Dtype::I1,
    );
    let then = k.dfg.new_block();
    let body = k.dfg.ops[l].regions[0];
    let iv = k.dfg.blocks[body].args[0];
    let src = k.dfg.clone();
    let mut cl = Cloner::new(&src);
    cl.vmap.insert(iv, at);
    let mut done: HashSet<Op> = HashSet::new();
    if let Some(f) = &fill {
        f.start(k, then, stage);
    }
    for (c, &buf) in cands.iter().zip(bufs) {
        for o in slice(k, l, c.op).unwrap_or_default() {
            if done.insert(o) {
                cl.op(&mut k.dfg, then, o);
            }
        }
        let od = &src.ops[c.op];
        let mut tensor = od.tensor.clone();
        if let Some(t) = &mut tensor {
            for off in &mut t.offsets {
                if let kir_ir::Offset::Value(v) = off {
                    *v = cl.vmap.get(v).copied().unwrap_or(*v);
                }
            }
        }
        let mut attrs: Vec<(String, Attr)> = od
            .attrs
            .iter()
            .map(|(key, a)| match a {
                Attr::Value(v) => (
                    key.clone(),
                    Attr::Value(cl.vmap.get(v).copied().unwrap_or(*v)),
                ),
                a => (key.clone(), a.clone()),
            })
            .collect();
        if let Some(f) = &fill {
            attrs.push(("bar".into(), Attr::Value(f.full)));
        }
        attrs.sort_by_key(|(key, _)| {
            Opcode::AsyncCopy
                .info()
                .keywords
                .iter()
                .position(|(kk, _)| kk == key)
        });
        let copy = OpData {
            opcode: Opcode::AsyncCopy,
            results: vec![],
            operands: vec![buf, stage],
            lead: None,
            tensor,
            attrs,
            regions: vec![],
            doc: vec![],
            span: od.span,
        };
        k.dfg.append_op(then, copy, vec![]);
    }
    k.dfg
        .append_op(then, simple(Opcode::Yield, vec![], None), vec![]);
    let els = edit::yield_block(&mut k.dfg, vec![], vec![]);
    let iff = edit::append_if(&mut k.dfg, b, cond, then, els, vec![]);
    // The refill is located at the first load it copies (reports and errors point there).
    if let Some(c) = cands.first() {
        k.dfg.ops[iff].span = k.dfg.ops[c.op].span;
    }
    if fill.is_none() {
        k.dfg
            .append_op(b, simple(Opcode::AsyncCommit, vec![], None), vec![]);
    }
}

/// Whether a TMA prologue (or a load) may move over op `od`: it is pure (arithmetic, a load of
/// an `in` tensor) and holds no region.
fn movable_over(k: &Kernel, od: &OpData) -> bool {
    od.regions.is_empty() && edit::is_pure(k, od)
}

/// The op of `parent` before which a TMA ring's prologue goes: loop `l`, or earlier, over the
/// ops right before it that are pure (arithmetic, loads of `in` tensors: nothing writes memory,
/// touches a ring or holds a region in between) and define none of the prologue's `inputs`.
/// The copies only write their fresh stages, so issuing them earlier changes no value.
fn prologue_at(k: &Kernel, parent: Block, l: Op, inputs: &HashSet<Value>) -> Op {
    let ops = &k.dfg.blocks[parent].ops;
    let mut i = ops
        .iter()
        .position(|&o| o == l)
        .expect("the loop is in its parent block");
    while i > 0 {
        let od = &k.dfg.ops[ops[i - 1]];
        if !movable_over(k, od) || od.results.iter().any(|r| inputs.contains(r)) {
            break;
        }
        i -= 1;
    }
    ops[i]
}

/// Moves the tile loads of `in` tensors in the run of pure ops right before a TMA ring's
/// prologue (`pro`, already in `parent`) to right after it, in their order, where neither the
/// prologue nor an op between reads them: the prologue's copies then start first when its
/// bounds come from ops after such a load (attention_fwd's causal key range, computed after
/// its query tile's load).
fn sink_loads_past(k: &mut Kernel, parent: Block, pro: &[Op]) {
    let (Some(&first), Some(&last)) = (pro.first(), pro.last()) else {
        return;
    };
    let pos = |k: &Kernel, o: Op| {
        k.dfg.blocks[parent]
            .ops
            .iter()
            .position(|&x| x == o)
            .expect("the prologue is in its parent block")
    };
    for i in (0..pos(k, first)).rev() {
        let x = k.dfg.blocks[parent].ops[i];
        let od = &k.dfg.ops[x];
        // Only the run of pure ops right before the prologue is searched: loads stay on their
        // side of any op with effects or regions.
        if !movable_over(k, od) {
            break;
        }
        if od.opcode != Opcode::Load {
            continue;
        }
        let end = pos(k, last);
        let ops = &k.dfg.blocks[parent].ops;
        let read = od.results.iter().any(|&r| {
            ops[i + 1..=end]
                .iter()
                .any(|&o| edit::reads_deep(&k.dfg, o, r))
        });
        if !read {
            let ops = &mut k.dfg.blocks[parent].ops;
            ops.remove(i);
            ops.insert(end, x);
        }
    }
}

/// Rewrites loop `l` as the module doc describes; with `bars` (full, empty) as a TMA ring, which
/// inside the loops `nest` (outermost first) carries a parity per stage through them.
#[allow(clippy::too_many_arguments)]
fn rewrite_loop(
    k: &mut Kernel,
    l: Op,
    cands: &[Cand],
    bufs: &[Value],
    stages: usize,
    hold: bool,
    bars: Option<(Value, Value)>,
    nest: &[Op],
) {
    let bytes: u64 = cands.iter().map(|c| c.bytes).sum();
    let fill = |wait_empty| {
        bars.map(|(full, _)| Fill {
            full,
            bytes,
            wait_empty,
        })
    };
    // Copies run `ahead` iterations ahead of their reads.
    let ahead = stages - 1 - usize::from(hold);
    let (lo, hi, step) = {
        let od = &k.dfg.ops[l];
        (od.operands[0], od.operands[1], od.operands[2])
    };
    let parent = kir_ir::edit::parent_block(&k.dfg, l);
    // A nested TMA ring's parity mask on entry (see `tma::thread_parities`).
    let pm0 = match bars {
        Some(_) if !nest.is_empty() => Some(tma::thread_parities(k, nest)),
        _ => None,
    };
    // Prologue, built in a scratch block and spliced in before the loop.
    let pro = k.dfg.new_block();
    for j in 0..ahead {
        let jv = iconst(k, pro, j as i64);
        let off = iconst(k, pro, j as i64);
        let jst = op2(k, pro, Opcode::Mul, None, off, step, Dtype::I32);
        let at = op2(k, pro, Opcode::Add, None, lo, jst, Dtype::I32);
        // A nested ring's stage j was last read in the ring's previous run: its release first.
        let wait = match (bars, pm0) {
            (Some((_, empty)), Some(pm0)) => Some((empty, tma::mask_bit(k, pro, pm0, jv, true))),
            _ => None,
        };
        guarded_copies(k, pro, l, cands, bufs, at, jv, hi, fill(wait));
    }
    let zero = iconst(k, pro, 0);
    // A TMA ring's first copies go as early as their operands allow, so they are in flight
    // while, say, the query tile's load (whose wait for its own copy comes at once) runs.
    if bars.is_some() {
        let pro_ops = k.dfg.blocks[pro].ops.clone();
        let inputs: HashSet<Value> = edit::region_inputs(&k.dfg, pro).into_iter().collect();
        let at = prologue_at(k, parent, l, &inputs);
        edit::splice_ops(&mut k.dfg, parent, at, pro, false);
        sink_loads_past(k, parent, &pro_ops);
    } else {
        edit::splice_ops(&mut k.dfg, parent, l, pro, false);
    }
    // The carried stage index.
    let (s, _) = add_carried(&mut k.dfg, l, zero, Type::scalar(Dtype::I32), None);
    // A TMA ring's parity of the current round, or a nested one's parity mask.
    let (ph, pm_res) = match (bars, pm0) {
        (Some(_), Some(pm0)) => {
            let (a, r) = add_carried(&mut k.dfg, l, pm0, Type::scalar(Dtype::I32), None);
            (Some(a), Some(r))
        }
        (Some(_), None) => (
            Some(add_carried(&mut k.dfg, l, zero, Type::scalar(Dtype::I32), None).0),
            None,
        ),
        _ => (None, None),
    };
    let body = k.dfg.ops[l].regions[0];
    let iv = k.dfg.blocks[body].args[0];
    let head = k.dfg.new_block();
    let ahead_v = iconst(k, head, ahead as i64);
    let ast = op2(k, head, Opcode::Mul, None, ahead_v, step, Dtype::I32);
    let at = op2(k, head, Opcode::Add, None, iv, ast, Dtype::I32);
    // Prefetch stage (s + ahead) mod S = s < S − ahead ? s + ahead : s − (S − ahead).
    let pf = stage_plus(k, head, s, ahead, stages);
    match (bars, ph) {
        (Some((full, empty)), Some(ph)) => {
            // The refilled stage was last read one iteration ago: that round's parity.
            let (pe, pw) = match pm_res {
                Some(_) => (
                    tma::mask_bit(k, head, ph, pf, true),
                    tma::mask_bit(k, head, ph, s, false),
                ),
                None => (tma::flip_at(k, head, s, 0, ph), ph),
            };
            guarded_copies(k, head, l, cands, bufs, at, pf, hi, fill(Some((empty, pe))));
            tma::wait(k, head, full, s, pw);
        }
        _ => {
            guarded_copies(k, head, l, cands, bufs, at, pf, hi, None);
            let mut wait = simple(Opcode::AsyncWait, vec![], None);
            wait.attrs = vec![("pending".into(), Attr::Expr(Expr::int(ahead as i64)))];
            k.dfg.append_op(head, wait, vec![]);
        }
    }
    let head_ops = std::mem::take(&mut k.dfg.blocks[head].ops);
    k.dfg.blocks[body].ops.splice(0..0, head_ops);
    // Loads become stage reads.
    for (c, &buf) in cands.iter().zip(bufs) {
        let pos = k.dfg.blocks[body]
            .ops
            .iter()
            .position(|&o| o == c.op)
            .expect("load in body");
        let old = k.dfg.ops[c.op].results[0];
        let name = k.dfg.values[old].name.clone();
        let mut rd = simple(Opcode::SmemRead, vec![buf, s], None);
        rd.span = k.dfg.ops[c.op].span;
        let new = insert_op(&mut k.dfg, body, pos, rd, vec![(c.ty.clone(), name)])[0];
        k.dfg.blocks[body].ops.retain(|&o| o != c.op);
        edit::replace_uses(&mut k.dfg, old, new, None);
        k.dfg.values[old].name = None;
    }
    // Releases and the next stage index before the yield.
    let y = *k.dfg.blocks[body]
        .ops
        .last()
        .expect("the body ends with yield");
    let tail = k.dfg.new_block();
    let mut uniq = HashSet::new();
    let released: Vec<Value> = bufs.iter().copied().filter(|b| uniq.insert(*b)).collect();
    if hold {
        // The stage read one iteration earlier, on every iteration but the first.
        let prev = stage_plus(k, tail, s, stages - 1, stages);
        let not_first = op2(
            k,
            tail,
            Opcode::Cmp,
            Some(kir_ir::CmpPred::Ne),
            iv,
            lo,
            Dtype::I1,
        );
        release_if(k, tail, not_first, &released, prev);
    } else {
        for &buf in &released {
            k.dfg.append_op(
                tail,
                simple(Opcode::SmemRelease, vec![buf, s], None),
                vec![],
            );
        }
    }
    let next_ph = match (bars, ph) {
        (Some((_, empty)), Some(ph)) => {
            tma::arrive(k, tail, empty, s);
            Some(match pm_res {
                Some(_) => tma::flip_bit(k, tail, ph, s),
                None => tma::flip_at(k, tail, s, stages - 1, ph),
            })
        }
        _ => None,
    };
    let one_t = iconst(k, tail, 1);
    let zero_t = iconst(k, tail, 0);
    let lim = iconst(k, tail, stages as i64 - 1);
    let at_end = op2(
        k,
        tail,
        Opcode::Cmp,
        Some(kir_ir::CmpPred::Eq),
        s,
        lim,
        Dtype::I1,
    );
    let sp1 = op2(k, tail, Opcode::Add, None, s, one_t, Dtype::I32);
    let next = {
        let id = k.dfg.append_op(
            tail,
            simple(Opcode::Select, vec![at_end, zero_t, sp1], None),
            vec![(Type::scalar(Dtype::I32), None)],
        );
        k.dfg.ops[id].results[0]
    };
    let tail_ops = std::mem::take(&mut k.dfg.blocks[tail].ops);
    let ypos = k.dfg.blocks[body].ops.len() - 1;
    k.dfg.blocks[body].ops.splice(ypos..ypos, tail_ops);
    k.dfg.ops[y].operands.push(next);
    k.dfg.ops[y].operands.extend(next_ph);
    if hold {
        release_after(k, parent, l, &released, stages);
    }
    if let Some(r) = pm_res {
        tma::close(k, nest, r);
    }
}
