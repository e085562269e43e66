//! Warp specialization: a kernel whose top-level loops were pipelined (`pipelining`) is split
//! into a producer partition that issues every copy and consumer partitions that compute, talking
//! through a full/empty mbarrier ring.
//!
//! Input: the kernel body holds top-level pipelined loops (a body with `async_wait`, one `if`
//! that prefetches with `async_copy`, `smem_read`s and `smem_release`s), each preceded by its
//! prologue of guarded copies and `async_commit`s. Output:
//! - `%full = mbar_alloc arrivals 1 : mbar<S>` and `%empty = mbar_alloc arrivals C : mbar<S>`
//!   (C consumers), then `warp_specialize` in place of the first prologue; every op after it
//!   moves into the consumer partition;
//! - the producer runs each loop's iteration space with a global iteration count t (carried
//!   across loops), stage s = t mod S and round r = t div S: `mbar_wait %empty, s, (r mod 2) xor 1`,
//!   `mbar_arrive %full, s tx BYTES`, then the loop's copies for iteration i into stage s, each
//!   completing on `%full`;
//! - each consumer loop carries t instead of the stage index: `mbar_wait %full, s, r mod 2` at the
//!   top, its stage reads, and after its releases `mbar_arrive %empty, s`; prologues, prefetches,
//!   commits and group waits are gone.
//!
//! With C > 1 consumers the program covers C tiles along `split_axis` of the grid: consumer w works
//! on tile `program_id(axis) · C + w`, the grid's axis shrinks to `cdiv(n, C)` (`num_programs` of
//! the axis is first rewritten as n, `split::num_programs_as_grid`), and the copies must
//! not depend on that axis (the consumers share every stage, as FA3's two consumer warpgroups share
//! K and V). When n is not a multiple of C, the last program's consumers past tile n − 1 (n
//! computed from the grid expression as IR, `schedule/grid.rs`) work on consumer 0's tile instead and
//! write nothing (every store and atomic is under `if` the tile is below n), while keeping their
//! waits, reads, releases, arrivals and turns in the ring. Loop bounds may depend on the axis
//! (causal key ranges do): the producer and every consumer walk the union [min lo, max hi) of the
//! consumers' ranges, and a consumer runs the body only for iterations inside its own range, while
//! still taking part in the ring. A copy that uses the loop's bounds (a key mask `j < hi`) gets the
//! union's, so a stage may hold keys past one consumer's own bound; this relies on the consumer's
//! own mask giving them no weight (as attention's −inf score mask does), which the differential
//! tests check bit for bit.
//! With `pingpong`, consumers take turns through an ordering barrier per consumer, so one
//! consumer's matrix work overlaps the other's softmax.
//! Around an outer loop that carries the consumer's values (`persist.rs`), C consumers split a
//! grid axis that only their own work reads (`outer_split.rs`: attention_bwd's d256 dK/dV
//! kernel, whose two programs per key block accumulate dk and dv over the same stages).
//! `warp_specialize_each` gives each kernel a list of plans and keeps the first that applies.

mod loops;
mod outer_split;
mod persist;
mod split;
mod stage;
mod types;

pub use types::WsPlan;

use kir_ir::edit::{self, iconst, op2, simple, Cloner};
use kir_ir::{
    Attr, Block, Diagnostic, Diagnostics, Dtype, Expr, Kernel, Module, Op, Opcode, Span, Type,
    Value, ValueDef,
};
use stage::{mbar, stage_operands, TileLoop};
use std::collections::HashSet;
use types::Split;
use types::{bad, Piped};

/// Warp-specializes every kernel of `m` with pipelined top-level loops (see the module doc).
/// Kernels without such loops are unchanged; a kernel the plan cannot split is an error that
/// says why.
pub fn warp_specialize(m: &Module, plan: &WsPlan) -> Result<Module, Diagnostics> {
    warp_specialize_within(m, plan, 0)
}

/// [`warp_specialize`] for a target with `smem_budget` bytes of shared memory per block: on a
/// persistent grid the operands the producer stages (`stage.rs`) get a second stage where
/// it fits (with a budget of 0, one stage each).
pub fn warp_specialize_within(
    m: &Module,
    plan: &WsPlan,
    smem_budget: u64,
) -> Result<Module, Diagnostics> {
    warp_specialize_each(m, &|_| vec![plan.clone()], smem_budget)
}

/// [`warp_specialize_within`] with each kernel's own plans, `plans(kernel)` (asked before the
/// kernel changes) in order of preference: the first that applies to the kernel; where none
/// does, the last one's error.
pub fn warp_specialize_each(
    m: &Module,
    plans: &dyn Fn(&Kernel) -> Vec<WsPlan>,
    smem_budget: u64,
) -> Result<Module, Diagnostics> {
    let mut out = m.clone();
    let mut errs = vec![];
    for k in out.kernels.values_mut() {
        let mut last = None;
        for plan in plans(k) {
            let mut tried = k.clone();
            match kernel(&mut tried, &plan, smem_budget) {
                Ok(()) => {
                    kir_ir::renumber::renumber_kernel(&mut tried);
                    *k = tried;
                    last = None;
                    break;
                }
                Err(d) => last = Some(d),
            }
        }
        errs.extend(last);
    }
    if errs.is_empty() {
        Ok(out)
    } else {
        Err(Diagnostics(errs))
    }
}

/// Recognizes a top-level loop that `pipelining` rewrote.
fn piped(k: &Kernel, l: Op) -> Result<Option<Piped>, Diagnostic> {
    let od = &k.dfg.ops[l];
    let body = od.regions[0];
    let ops = &k.dfg.blocks[body].ops;
    if !ops
        .iter()
        .any(|&o| k.dfg.ops[o].opcode == Opcode::AsyncWait)
    {
        return Ok(None);
    }
    let copy_if = ops.iter().copied().find(|&o| {
        let d = &k.dfg.ops[o];
        d.opcode == Opcode::If
            && d.regions.first().is_some_and(|&r| {
                k.dfg.blocks[r]
                    .ops
                    .iter()
                    .any(|&c| k.dfg.ops[c].opcode == Opcode::AsyncCopy)
            })
    });
    let Some(prefetch) = copy_if else {
        return Err(bad(od.span, k, "a pipelined loop without its prefetch"));
    };
    let then = k.dfg.ops[prefetch].regions[0];
    let copies: Vec<Op> = k.dfg.blocks[then]
        .ops
        .iter()
        .copied()
        .filter(|&c| k.dfg.ops[c].opcode == Opcode::AsyncCopy)
        .collect();
    let pf = k.dfg.ops[copies[0]].operands[1];
    let cond = k.dfg.ops[prefetch].operands[0];
    let at = match k.dfg.values[cond].def {
        ValueDef::Result(c, _) if k.dfg.ops[c].opcode == Opcode::Cmp => k.dfg.ops[c].operands[0],
        _ => {
            return Err(bad(
                od.span,
                k,
                "the prefetch is not guarded by the loop bound",
            ))
        }
    };
    let read = ops
        .iter()
        .copied()
        .find(|&o| k.dfg.ops[o].opcode == Opcode::SmemRead);
    let Some(read) = read else {
        return Err(bad(od.span, k, "a pipelined loop that reads no stage"));
    };
    let stage_arg = k.dfg.ops[read].operands[1];
    let slot = match k.dfg.values[stage_arg].def {
        ValueDef::Arg(b, i) if b == body && i >= 1 => i as usize - 1,
        _ => {
            return Err(bad(
                od.span,
                k,
                "the stage index is not carried by the loop",
            ))
        }
    };
    let mut stages = 0;
    let mut bytes = 0i64;
    for &c in &copies {
        let buf = k.dfg.ops[c].operands[0];
        let t = k.dfg.ty(buf);
        let (Some(shape), Some(dt)) = (t.shape(), t.dtype()) else {
            return Err(bad(od.span, k, "a stage buffer of unknown size"));
        };
        stages = shape[0];
        bytes += (shape[1..].iter().product::<usize>() * dt.size_bytes()) as i64;
    }
    Ok(Some(Piped {
        op: l,
        prefetch,
        at,
        pf,
        stage_arg,
        slot,
        stages,
        bytes,
    }))
}

fn kernel(k: &mut Kernel, plan: &WsPlan, smem_budget: u64) -> Result<(), Diagnostic> {
    let has_loop = k.dfg.blocks[k.body]
        .ops
        .iter()
        .any(|&o| k.dfg.ops[o].opcode == Opcode::For);
    if plan.consumers > 1 && has_loop {
        // The split shrinks the grid along its axis; the kernel's own count of programs there
        // is the count before the split (rewritten before the partitions are chosen).
        split::num_programs_as_grid(k, plan.split_axis as usize);
    }
    // The pipelined loops are top-level, or in the body of the one outer loop (a persistent
    // kernel's tile loop, or a loop carrying the consumer's values).
    let mut blk = k.body;
    let mut outer = None;
    let mut loops = piped_loops(k, blk)?;
    if loops.is_empty() {
        if let Some(tl) = persist::outer_loop(k) {
            blk = k.dfg.ops[tl].regions[0];
            loops = piped_loops(k, blk)?;
            outer = Some(tl);
        }
    }
    if loops.is_empty() {
        return Ok(());
    }
    let body_ops = k.dfg.blocks[blk].ops.clone();

    let stages = loops[0].stages;
    if loops.iter().any(|p| p.stages != stages) {
        return Err(bad(
            k.span,
            k,
            "its pipelined loops have different stage counts",
        ));
    }
    // The first prologue op: the first op after the previous non-prologue op before loop 0.
    let is_prologue = |k: &Kernel, o: Op| {
        let d = &k.dfg.ops[o];
        d.opcode == Opcode::AsyncCommit
            || d.opcode == Opcode::If
                && d.regions.first().is_some_and(|&r| {
                    k.dfg.blocks[r]
                        .ops
                        .iter()
                        .any(|&c| k.dfg.ops[c].opcode == Opcode::AsyncCopy)
                })
    };
    let first = body_ops
        .iter()
        .position(|&o| is_prologue(k, o))
        .unwrap_or(0);
    let (outside, inside): (Vec<Op>, Vec<Op>) =
        (body_ops[..first].to_vec(), body_ops[first..].to_vec());
    let yield_op = *inside.last().expect("a body ends with yield");
    let inside: Vec<Op> = inside[..inside.len() - 1]
        .iter()
        .copied()
        .filter(|&o| !is_prologue(k, o))
        .collect();
    let c = plan.consumers as i64;
    if let Some(tl) = outer {
        // Several consumers split a grid axis around an outer loop that carries their values;
        // a persistent grid's tile loop (which carries nothing) walks the split axis itself.
        let carries = k.dfg.ops[tl].operands.len() > 3;
        let split = match (c > 1, carries) {
            (false, _) => None,
            (true, true) => Some(outer_split::prepare(k, plan, tl, &loops)?),
            (true, false) => {
                return Err(bad(
                    k.span,
                    k,
                    "a persistent kernel takes one consumer (the plan has more)",
                ))
            }
        };
        let entry = build(
            k, plan, blk, &loops, outside, inside, yield_op, stages, None,
        )?;
        let tile = TileLoop {
            iv: k.dfg.blocks[blk].args[0],
            lo: k.dfg.ops[tl].operands[0],
            step: k.dfg.ops[tl].operands[2],
        };
        stage_operands(k, blk, plan, Some(tile), smem_budget);
        persist::hoist(k, tl, &loops)?;
        if let Some(os) = split {
            outer_split::enter(k, plan, os, &entry)?;
            // The tiles loaded before the outer loop (attention_bwd's key and value blocks)
            // are filled once by the producer: one copy in shared memory that every consumer
            // reads, where each consumer would otherwise stage its own.
            let body = k.body;
            stage_operands(k, body, plan, None, smem_budget);
            outer_split::shared_tiles_filled(k, plan)?;
            edit::dce(k);
        }
        return Ok(());
    }
    if c > 1 {
        let (stay, inside_all, split) = split::split_consumers(k, plan, &loops, &outside, &inside)?;
        let body = k.body;
        build(
            k,
            plan,
            body,
            &loops,
            stay,
            inside_all,
            yield_op,
            stages,
            Some(split),
        )?;
        return Ok(());
    }
    build(
        k, plan, blk, &loops, outside, inside, yield_op, stages, None,
    )?;
    stage_operands(k, blk, plan, None, smem_budget);
    edit::dce(k);
    Ok(())
}

/// The pipelined loops among the ops of block `b`, in order.
fn piped_loops(k: &Kernel, b: Block) -> Result<Vec<Piped>, Diagnostic> {
    let mut loops = vec![];
    for &o in &k.dfg.blocks[b].ops {
        if k.dfg.ops[o].opcode == Opcode::For {
            if let Some(p) = piped(k, o)? {
                loops.push(p);
            }
        }
    }
    Ok(loops)
}

/// Builds the barriers, the two partitions and the `warp_specialize` op; returns the ops at the
/// top of the consumer region that run once per consumer before its loops (consumer 0's first
/// ping-pong turn), which an outer loop's hoist must keep out of that loop.
#[allow(clippy::too_many_arguments)]
fn build(
    k: &mut Kernel,
    plan: &WsPlan,
    body: Block,
    loops: &[Piped],
    outside: Vec<Op>,
    inside: Vec<Op>,
    yield_op: Op,
    stages: usize,
    split: Option<Split>,
) -> Result<Vec<Op>, Diagnostic> {
    let c = plan.consumers as usize;
    let mut entry = vec![];
    // Barriers.
    let bar = |k: &mut Kernel, arrivals: i64, n: usize| mbar(k, body, arrivals, n);
    k.dfg.blocks[body].ops = outside;
    let full = bar(k, 1, stages);
    let empty = bar(k, c as i64, stages);
    let order = (plan.pingpong && c > 1).then(|| bar(k, 1, c));
    let prod = k.dfg.new_block();
    let cons = k.dfg.new_block();
    let wg = k.dfg.add_block_arg(
        cons,
        Type::scalar(Dtype::I32),
        Some("wg".into()),
        Span::default(),
    );
    // --- producer ---
    let loop_results: HashSet<Value> = inside
        .iter()
        .filter(|&&o| k.dfg.ops[o].opcode == Opcode::For)
        .flat_map(|&o| k.dfg.ops[o].results.clone())
        .collect();
    let src = k.dfg.clone();
    // Which loops' bounds differ between consumers (decided before the consumers' tile replaces
    // program_id).
    let split_bounds: Vec<bool> = loops
        .iter()
        .map(|p| {
            let d = &k.dfg.ops[p.op];
            split.as_ref().is_some_and(|sp| {
                split::bounds_split(
                    k,
                    &sp.pid_ops,
                    &inside,
                    &loop_results,
                    d.operands[0],
                    d.operands[1],
                )
            })
        })
        .collect();
    let mut cl = Cloner::new(&src);
    let mut t = iconst(k, prod, 0);
    for (p, &differs) in loops.iter().zip(&split_bounds) {
        let (lo, hi, step) = {
            let d = &src.ops[p.op];
            (d.operands[0], d.operands[1], d.operands[2])
        };
        let then = src.ops[p.prefetch].regions[0];
        // Bounds that differ between consumers come from `union_bounds`, and the copies read
        // them from there.
        let split_here = split.as_ref().filter(|_| differs);
        let mut roots = if split_here.is_some() {
            vec![step]
        } else {
            vec![lo, hi, step]
        };
        roots.extend(
            edit::region_inputs(&k.dfg, then).into_iter().filter(|&v| {
                v != p.at && v != p.pf && (split_here.is_none() || v != lo && v != hi)
            }),
        );
        let Some(need) = edit::slice_among(k, &roots, &inside, &loop_results) else {
            return Err(bad(
                src.ops[p.op].span,
                k,
                "the copies or bounds of a loop depend on values its consumers compute",
            ));
        };
        for o in need {
            if !cl.vmap.contains_key(&src.ops[o].results[0]) {
                cl.op(&mut k.dfg, prod, o);
            }
        }
        let (lo, hi) = match split_here {
            None => (
                cl.vmap.get(&lo).copied().unwrap_or(lo),
                cl.vmap.get(&hi).copied().unwrap_or(hi),
            ),
            Some(sp) => {
                let (ul, uh) =
                    split::union_bounds(k, prod, &src, sp, &inside, &loop_results, plan, [lo, hi]);
                cl.vmap.insert(lo, ul);
                cl.vmap.insert(hi, uh);
                (ul, uh)
            }
        };
        let bounds = [lo, hi, cl.vmap.get(&step).copied().unwrap_or(step)];
        t = loops::producer_loop(k, prod, &mut cl, p, bounds, t, full, empty, &src);
    }
    k.dfg
        .append_op(prod, simple(Opcode::Yield, vec![], None), vec![]);
    // --- consumers ---
    k.dfg.blocks[cons].ops = inside.clone();
    // program_id(axis) in the consumer is its own tile pid · C + wg, or pid · C (consumer 0's)
    // for a tile past the original grid, which then writes nothing (`guard_effects` below).
    let valid = split
        .as_ref()
        .map(|sp| split::consumer_tile(k, cons, plan, wg, sp));
    if let Some(ord) = order {
        // Consumer 0 has the first turn: phase 0 of its ordering barrier completes at once.
        let pre = k.dfg.new_block();
        let zero = iconst(k, pre, 0);
        let is0 = op2(
            k,
            pre,
            Opcode::Cmp,
            Some(kir_ir::CmpPred::Eq),
            wg,
            zero,
            Dtype::I1,
        );
        let then = k.dfg.new_block();
        k.dfg.append_op(
            then,
            simple(Opcode::MbarArrive, vec![ord, zero], None),
            vec![],
        );
        k.dfg
            .append_op(then, simple(Opcode::Yield, vec![], None), vec![]);
        let els = edit::yield_block(&mut k.dfg, vec![], vec![]);
        edit::append_if(&mut k.dfg, pre, is0, then, els, vec![]);
        let pre_ops = std::mem::take(&mut k.dfg.blocks[pre].ops);
        entry.extend(pre_ops.iter().copied());
        k.dfg.blocks[cons].ops.splice(0..0, pre_ops);
    }
    let mut t_in = None;
    for (p, &differs) in loops.iter().zip(&split_bounds) {
        let skip = match split.as_ref().filter(|_| differs) {
            None => None,
            Some(sp) => {
                // Walk the union of the consumers' ranges; run the body inside this one's own.
                let (own_lo, own_hi) = (k.dfg.ops[p.op].operands[0], k.dfg.ops[p.op].operands[1]);
                let scratch = k.dfg.new_block();
                let (lo, hi) = split::union_bounds(
                    k,
                    scratch,
                    &src,
                    sp,
                    &inside,
                    &loop_results,
                    plan,
                    [src.ops[p.op].operands[0], src.ops[p.op].operands[1]],
                );
                let ops = std::mem::take(&mut k.dfg.blocks[scratch].ops);
                let pos = k.dfg.blocks[cons]
                    .ops
                    .iter()
                    .position(|&o| o == p.op)
                    .expect("the loop is in the consumer");
                k.dfg.blocks[cons].ops.splice(pos..pos, ops);
                k.dfg.ops[p.op].operands[0] = lo;
                k.dfg.ops[p.op].operands[1] = hi;
                Some((own_lo, own_hi))
            }
        };
        t_in = Some(loops::consumer_loop(
            k, p, t_in, full, empty, order, wg, c, skip,
        ));
    }
    if let Some(valid) = valid {
        split::guard_effects(k, cons, valid);
    }
    k.dfg
        .append_op(cons, simple(Opcode::Yield, vec![], None), vec![]);
    let mut ws = simple(Opcode::WarpSpecialize, vec![], None);
    ws.attrs = [
        ("producer_warps", plan.producer_warps),
        ("producer_regs", plan.producer_regs),
        ("consumers", plan.consumers),
        ("consumer_warps", plan.consumer_warps),
        ("consumer_regs", plan.consumer_regs),
    ]
    .into_iter()
    .map(|(key, v)| (key.to_string(), Attr::Expr(Expr::int(v as i64))))
    .collect();
    ws.regions = vec![prod, cons];
    k.dfg.append_op(body, ws, vec![]);
    k.dfg.blocks[body].ops.push(yield_op);
    edit::dce(k);
    Ok(entry)
}
