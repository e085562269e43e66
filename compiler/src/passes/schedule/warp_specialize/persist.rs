//! `warp_specialize` on a kernel whose pipelined loops sit in the body of one top-level outer
//! loop: a persistent grid's tile loop, `for %tile = program_id 0 to T step P` (`persistent`),
//! or a loop whose iterations the consumer accumulates over, carrying values (attention_bwd's
//! dK/dV kernel walks the query heads of a kv head's group, carrying dk and dv, and each head
//! runs its ring over the query blocks), followed by an epilogue that reads its results.
//!
//! The pass first splits the outer loop's body as it splits a kernel body (`warp_spec::build`
//! with that block), which leaves in it: the ops before the first prologue (the tile's
//! coordinates, offsets, the accumulator's initial value), the full/empty barriers and the
//! `warp_specialize` op. [`hoist`] then turns it inside out, so the partitions are entered once
//! and each walks the outer loop itself:
//! - the barriers move to the kernel body, and `warp_specialize` replaces the outer loop;
//! - the producer region becomes `for %tile … iter(%t = 0) { <the pure ops before the
//!   prologue, cloned>; <its ring loops, the first starting at %t>; yield <t after the last> }`;
//! - the consumer region becomes the same loop around the ops before the prologue (moved) and
//!   its own ring loops and epilogue, carrying its iteration count the same way, and the outer
//!   loop's own carried values after it; the kernel's ops after the outer loop (the epilogue
//!   that reads its results: dk and dv's stores) follow that loop in the consumer region.
//!
//! The ring's global iteration count t runs on across tiles, so stage `t mod S` and parity
//! `(t div S) mod 2` stay in step with the barriers' phases (restarting t at each tile would
//! alias phases, which the interpreter reports). The producer starts the next tile's copies as
//! soon as stages free up, while the consumer still runs the current tile's epilogue.

use super::types::{bad, Piped};
use kir_ir::edit::{self, iconst, simple, Cloner};
use kir_ir::{Block, Diagnostic, Dtype, Kernel, Op, Opcode, Span, Type, Value};
use std::collections::HashMap;

/// The kernel's outer loop: its only top-level `for`, whose body holds a loop (a persistent
/// tile loop carries nothing; another outer loop may carry the consumer's values).
pub(super) fn outer_loop(k: &Kernel) -> Option<Op> {
    let fors: Vec<Op> = k.dfg.blocks[k.body]
        .ops
        .iter()
        .copied()
        .filter(|&o| k.dfg.ops[o].opcode == Opcode::For)
        .collect();
    let [t] = fors[..] else { return None };
    let d = &k.dfg.ops[t];
    let body = d.regions[0];
    let nested = k.dfg.blocks[body]
        .ops
        .iter()
        .any(|&o| k.dfg.ops[o].opcode == Opcode::For);
    nested.then_some(t)
}

/// Replaces, in block `b` and every block below it, each use of a key of `map` by its value.
fn remap(k: &mut Kernel, b: Block, map: &HashMap<Value, Value>) {
    let ops = k.dfg.blocks[b].ops.clone();
    for o in ops {
        let od = &mut k.dfg.ops[o];
        edit::for_each_use(od, |v| {
            if let Some(&n) = map.get(v) {
                *v = n;
            }
        });
        let regions = od.regions.clone();
        for rb in regions {
            remap(k, rb, map);
        }
    }
}

/// A new loop body block with the tile and the carried iteration count as arguments, then one
/// argument of each type in `carried` (the outer loop's own carried values).
fn loop_block(k: &mut Kernel, carried: &[Type]) -> (Block, Value, Value, Vec<Value>) {
    let b = k.dfg.new_block();
    let i32t = Type::scalar(Dtype::I32);
    let tile = k
        .dfg
        .add_block_arg(b, i32t.clone(), Some("tile".into()), Span::default());
    let t = k
        .dfg
        .add_block_arg(b, i32t, Some("t".into()), Span::default());
    let args = carried
        .iter()
        .map(|ty| k.dfg.add_block_arg(b, ty.clone(), None, Span::default()))
        .collect();
    (b, tile, t, args)
}

/// Empties `region` and appends `for %tile = lo to hi step st iter(%t = 0, inits…) { body }`
/// (results: t, then one of each type in `carried`); returns the loop. The caller appends the
/// region's `yield`.
fn wrap(
    k: &mut Kernel,
    region: Block,
    bounds: [Value; 3],
    inits: &[Value],
    carried: &[Type],
    body: Block,
) -> Op {
    k.dfg.blocks[region].ops.clear();
    let zero = iconst(k, region, 0);
    let mut operands = vec![bounds[0], bounds[1], bounds[2], zero];
    operands.extend_from_slice(inits);
    let mut f = simple(Opcode::For, operands, None);
    f.regions = vec![body];
    let mut results = vec![(Type::scalar(Dtype::I32), None)];
    results.extend(carried.iter().map(|ty| (ty.clone(), None)));
    k.dfg.append_op(region, f, results)
}

/// Whether op `o` reads (at any depth) a value of `tainted`; if so its results join it.
fn taints(k: &Kernel, o: Op, tainted: &mut std::collections::HashSet<Value>) -> bool {
    let hit = edit::uses_deep(&k.dfg, o)
        .iter()
        .any(|v| tainted.contains(v));
    if hit {
        tainted.extend(k.dfg.ops[o].results.iter().copied());
    }
    hit
}

/// Turns the split outer loop `tl` inside out (see the module doc). `loops` are the pipelined
/// loops, now the consumer's ring loops, in order.
pub(super) fn hoist(k: &mut Kernel, tl: Op, loops: &[Piped]) -> Result<(), Diagnostic> {
    let span = k.dfg.ops[tl].span;
    let blk = k.dfg.ops[tl].regions[0];
    let iv = k.dfg.blocks[blk].args[0];
    let (bounds, inits) = {
        let o = &k.dfg.ops[tl].operands;
        ([o[0], o[1], o[2]], o[3..].to_vec())
    };
    // The outer loop's own carried values: block arguments, types, and what its body yields.
    let carried_args: Vec<Value> = k.dfg.blocks[blk].args[1..].to_vec();
    let carried: Vec<Type> = k.dfg.ops[tl]
        .results
        .iter()
        .map(|&r| k.dfg.ty(r).clone())
        .collect();
    let tl_results = k.dfg.ops[tl].results.clone();
    let ops = k.dfg.blocks[blk].ops.clone();
    let yielded: Vec<Value> = ops
        .iter()
        .rev()
        .find(|&&o| k.dfg.ops[o].opcode == Opcode::Yield)
        .map(|&o| k.dfg.ops[o].operands.clone())
        .unwrap_or_default();
    let Some(ws) = ops
        .iter()
        .copied()
        .find(|&o| k.dfg.ops[o].opcode == Opcode::WarpSpecialize)
    else {
        return Err(bad(span, k, "the outer loop was not split"));
    };
    let allocs: Vec<Op> = ops
        .iter()
        .copied()
        .filter(|&o| k.dfg.ops[o].opcode == Opcode::MbarAlloc)
        .collect();
    let pre: Vec<Op> = ops
        .iter()
        .copied()
        .filter(|&o| {
            !allocs.contains(&o) && o != ws && !matches!(k.dfg.ops[o].opcode, Opcode::Yield)
        })
        .collect();
    // The barriers go to the kernel body, and warp_specialize takes the outer loop's place.
    let top = k.body;
    let pos = k.dfg.blocks[top]
        .ops
        .iter()
        .position(|&o| o == tl)
        .expect("the outer loop is top-level");
    // The kernel's ops after the outer loop (less its `yield`): the consumer's epilogue.
    let mut after: Vec<Op> = k.dfg.blocks[top].ops.split_off(pos + 1);
    let top_yield = after.pop();
    if top_yield.is_some_and(|y| k.dfg.ops[y].opcode != Opcode::Yield) {
        return Err(bad(span, k, "the kernel body does not end with its yield"));
    }
    k.dfg.blocks[top].ops.extend(top_yield);
    k.dfg.blocks[top].ops[pos] = ws;
    for (i, &a) in allocs.iter().enumerate() {
        k.dfg.blocks[top].ops.insert(pos + i, a);
    }
    let (prod, cons) = (k.dfg.ops[ws].regions[0], k.dfg.ops[ws].regions[1]);

    // Producer: the pure ops before the prologue that do not read the consumer's carried
    // values, cloned, then its ring loops.
    let src = k.dfg.clone();
    let (pb, ptile, pt, _) = loop_block(k, &[]);
    let mut cl = Cloner::new(&src);
    cl.vmap.insert(iv, ptile);
    let mut tainted: std::collections::HashSet<Value> = carried_args.iter().copied().collect();
    for &o in &pre {
        if !taints(k, o, &mut tainted) && edit::is_pure(k, &src.ops[o]) {
            cl.op(&mut k.dfg, pb, o);
        }
    }
    let mut body_ops = k.dfg.blocks[prod].ops.clone();
    body_ops.pop(); // its yield
    let fors: Vec<Op> = body_ops
        .iter()
        .copied()
        .filter(|&o| k.dfg.ops[o].opcode == Opcode::For)
        .collect();
    let (Some(&first), Some(&last)) = (fors.first(), fors.last()) else {
        return Err(bad(span, k, "the producer has no ring loop"));
    };
    k.dfg.blocks[pb].ops.extend(body_ops);
    remap(k, pb, &cl.vmap);
    k.dfg.ops[first].operands[3] = pt;
    let t_end = k.dfg.ops[last].results[0];
    k.dfg
        .append_op(pb, simple(Opcode::Yield, vec![t_end], None), vec![]);
    wrap(k, prod, bounds, &[], &[], pb);
    k.dfg
        .append_op(prod, simple(Opcode::Yield, vec![], None), vec![]);

    // Consumer: the ops before the prologue (moved), then its loops and epilogue, yielding t
    // and the outer loop's carried values; then the kernel's epilogue.
    let (cb, ctile, ct, cargs) = loop_block(k, &carried);
    let mut body_ops = k.dfg.blocks[cons].ops.clone();
    body_ops.pop();
    k.dfg.blocks[cb].ops = pre;
    k.dfg.blocks[cb].ops.extend(body_ops);
    let mut map = HashMap::from([(iv, ctile)]);
    map.extend(carried_args.iter().copied().zip(cargs.iter().copied()));
    remap(k, cb, &map);
    let (f, l) = (&loops[0], &loops[loops.len() - 1]);
    k.dfg.ops[f.op].operands[3 + f.slot] = ct;
    let t_end = k.dfg.ops[l.op].results[l.slot];
    let yielded: Vec<Value> = yielded
        .iter()
        .map(|v| map.get(v).copied().unwrap_or(*v))
        .collect();
    let mut out = vec![t_end];
    out.extend(yielded);
    k.dfg
        .append_op(cb, simple(Opcode::Yield, out, None), vec![]);
    sink_past(k, cb, l.op);
    let outer = wrap(k, cons, bounds, &inits, &carried, cb);
    let results: Vec<Value> = k.dfg.ops[outer].results[1..].to_vec();
    k.dfg.blocks[cons].ops.extend(after);
    remap(k, cons, &tl_results.iter().copied().zip(results).collect());
    k.dfg
        .append_op(cons, simple(Opcode::Yield, vec![], None), vec![]);
    edit::dce(k);
    Ok(())
}

/// Moves the pure ops of block `b` before loop `last` that only ops after it use (the tile's
/// offsets, which the consumer needs for its epilogue alone) to just after it, in order, so
/// their values are not live across the mainloop.
fn sink_past(k: &mut Kernel, b: Block, last: Op) {
    let ops = k.dfg.blocks[b].ops.clone();
    let Some(at) = ops.iter().position(|&o| o == last) else {
        return;
    };
    // Values read by ops that stay at or before the loop (at any depth).
    let mut early: std::collections::HashSet<Value> = std::collections::HashSet::new();
    for &o in &ops[at..=at] {
        early.extend(edit::uses_deep(&k.dfg, o));
    }
    let mut sunk = vec![];
    for &o in ops[..at].iter().rev() {
        let d = &k.dfg.ops[o];
        let movable = d.regions.is_empty()
            && edit::is_pure(k, d)
            && d.results.iter().all(|r| !early.contains(r));
        if movable {
            sunk.push(o);
        } else {
            early.extend(edit::uses_deep(&k.dfg, o));
        }
    }
    if sunk.is_empty() {
        return;
    }
    sunk.reverse();
    let mut out: Vec<Op> = ops[..=at]
        .iter()
        .copied()
        .filter(|o| !sunk.contains(o))
        .collect();
    out.extend(sunk);
    out.extend(&ops[at + 1..]);
    k.dfg.blocks[b].ops = out;
}
