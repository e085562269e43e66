//! Several consumers for a kernel whose rings sit in an outer loop that carries the consumer's
//! values (`persist.rs`): the consumers split a grid axis that only the consumer's own work
//! depends on, so each consumer walks the whole outer loop for a tile of its own while the
//! producer fills one ring that all of them read.
//!
//! attention_bwd's dK/dV kernel at head dims above 128 is the case: its grid axis 2 has two
//! programs per key block, one accumulating dk and one dv over every query head of the group
//! (the outer loop) and every query block (the ring), and both read the same q and do stages.
//! As two consumers of one block they read each stage once from global memory, share the
//! key and value tiles loaded before the partitions, and issue matrix work side by side.
//!
//! [`prepare`] runs before the outer loop is split (`mod.rs`, `persist::hoist`): it checks that
//! the copies, the ring loops' bounds and the outer loop's bounds do not depend on the axis
//! (the consumers share every stage and walk the same outer loop), that the code before the
//! outer loop that depends on it writes nothing, and shrinks the grid along the axis to
//! cdiv(n, C). [`enter`] runs after the hoist: the ops of the kernel body that depend on the
//! axis move to the top of the consumer region, where `program_id(axis)` becomes the
//! consumer's tile p · C + w (`split::tile_of`), and when n need not be a multiple of C every
//! store and atomic of the region is guarded by the tile being inside the original grid.

use super::split::{
    any_writes, axis_dependents, axis_ops, depends_on, guard_effects, has_semaphores, shrink_grid,
    tile_of, SEMAPHORES,
};
use super::types::{bad, Piped, Split, WsPlan};
use kir_ir::edit;
use kir_ir::{Diagnostic, Kernel, Op, Opcode, Type, Value};
use std::collections::HashSet;

/// What [`prepare`] found: the split and the kernel-body ops (before the outer loop) that
/// depend on the split axis, the `program_id` ops among them.
pub(super) struct OuterSplit {
    split: Split,
    moved: Vec<Op>,
}

/// Checks that the consumers of `plan` may split its grid axis around outer loop `tl` (ring
/// loops `loops`) and shrinks the grid along that axis (see the module doc).
pub(super) fn prepare(
    k: &mut Kernel,
    plan: &WsPlan,
    tl: Op,
    loops: &[Piped],
) -> Result<OuterSplit, Diagnostic> {
    let refuse = |k: &Kernel, why: &str| {
        bad(
            k.span,
            k,
            &format!(
                "plan `{}` splits grid axis {} among {} consumers around the outer loop, but {why}",
                plan.name, plan.split_axis, plan.consumers
            ),
        )
    };
    if has_semaphores(k) {
        return Err(refuse(k, SEMAPHORES));
    }
    let axis = plan.split_axis as usize;
    let pid_ops = axis_ops(k, Opcode::ProgramId, axis);
    let top: Vec<Op> = k.dfg.blocks[k.body].ops.clone();
    let Some(at) = top.iter().position(|&o| o == tl) else {
        return Err(refuse(k, "the outer loop is not top-level"));
    };
    if pid_ops.iter().any(|o| !top[..at].contains(o)) {
        return Err(refuse(
            k,
            "the axis's `program_id` is read inside or after the outer loop, not before it",
        ));
    }
    // The ops before the outer loop that depend on the axis.
    let (moved, dep) = axis_dependents(k, &pid_ops, &top[..at]);
    if any_writes(k, &moved) {
        return Err(refuse(
            k,
            "code before the outer loop that depends on the axis writes memory",
        ));
    }
    // The outer loop's bounds, and each ring loop's bounds, step and copies, are the same for
    // every consumer.
    let outer_body = k.dfg.ops[tl].regions[0];
    let mut among: Vec<Op> = top[..at].to_vec();
    among.extend(k.dfg.blocks[outer_body].ops.iter().copied());
    let mut roots: Vec<Value> = k.dfg.ops[tl].operands[..3].to_vec();
    for p in loops {
        let d = &k.dfg.ops[p.op];
        roots.extend_from_slice(&d.operands[..3]);
        let then = k.dfg.ops[p.prefetch].regions[0];
        roots.extend(
            edit::region_inputs(&k.dfg, then)
                .into_iter()
                .filter(|&v| v != p.at && v != p.pf),
        );
    }
    if depends_on(k, &roots, &dep, &among).is_some() {
        return Err(refuse(
            k,
            "the copies or the loop bounds depend on it (the consumers share every stage and walk the same loops)",
        ));
    }
    let split = shrink_grid(k, plan, pid_ops).map_err(|why| refuse(k, &why))?;
    Ok(OuterSplit { split, moved })
}

/// After `persist::hoist`: moves the ops that depend on the split axis from the kernel body to
/// the top of the consumer region, with `program_id(axis)` as the consumer's tile, and guards
/// the region's stores and atomics unless every consumer's tile is inside the grid.
pub(super) fn enter(
    k: &mut Kernel,
    plan: &WsPlan,
    os: OuterSplit,
    entry: &[Op],
) -> Result<(), Diagnostic> {
    let Some(ws) = k.dfg.blocks[k.body]
        .ops
        .iter()
        .copied()
        .find(|&o| k.dfg.ops[o].opcode == Opcode::WarpSpecialize)
    else {
        return Err(bad(k.span, k, "the outer loop was not split"));
    };
    let (prod, cons) = (k.dfg.ops[ws].regions[0], k.dfg.ops[ws].regions[1]);
    let moved_values: HashSet<Value> = os
        .moved
        .iter()
        .flat_map(|&o| k.dfg.ops[o].results.clone())
        .collect();
    let producer_reads = k.dfg.blocks[prod].ops.iter().any(|&o| {
        edit::uses_deep(&k.dfg, o)
            .iter()
            .any(|v| moved_values.contains(v))
    });
    if producer_reads {
        return Err(bad(
            k.span,
            k,
            &format!(
                "its producer reads a value that depends on grid axis {}, which plan `{}` splits among its consumers",
                plan.split_axis, plan.name
            ),
        ));
    }
    let wg = k.dfg.blocks[cons].args[0];
    let head = k.dfg.new_block();
    let (tile, valid) = tile_of(k, head, plan, wg, &os.split);
    k.dfg.blocks[k.body].ops.retain(|o| !os.moved.contains(o));
    for &o in &os.moved {
        if os.split.pid_ops.contains(&o) {
            let old = k.dfg.ops[o].results[0];
            edit::replace_uses(&mut k.dfg, old, tile, None);
        } else {
            k.dfg.blocks[head].ops.push(o);
        }
    }
    // Consumer 0's first ping-pong turn, which the hoist left in the outer loop's body, is
    // given once, before that loop.
    if !entry.is_empty() {
        let blocks: Vec<kir_ir::Block> = k.dfg.blocks.keys().collect();
        for b in blocks {
            if b != head {
                k.dfg.blocks[b].ops.retain(|o| !entry.contains(o));
            }
        }
        k.dfg.blocks[head].ops.extend_from_slice(entry);
    }
    let ops = std::mem::take(&mut k.dfg.blocks[head].ops);
    k.dfg.blocks[cons].ops.splice(0..0, ops);
    let whole = os
        .split
        .tiles
        .as_int()
        .is_some_and(|n| n % plan.consumers as i64 == 0);
    if !whole {
        guard_effects(k, cons, valid);
    }
    edit::dce(k);
    Ok(())
}

/// An error unless every tile the consumers read that is loaded before the partitions was
/// taken over by the producer (`stage_operands`): a tile load left there is lowered in the
/// consumer region, each consumer staging its own copy (a load that no tensor copy makes: a
/// masked one, as attention_bwd's key and value blocks under key lengths or a KV offset, or a
/// tile of columns that are not a multiple of 64), which at d256 outgrows the block's shared
/// memory; the caller then takes its next plan.
pub(super) fn shared_tiles_filled(k: &Kernel, plan: &WsPlan) -> Result<(), Diagnostic> {
    for &o in &k.dfg.blocks[k.body].ops {
        let od = &k.dfg.ops[o];
        if od.opcode == Opcode::WarpSpecialize {
            break;
        }
        let tile = od
            .results
            .iter()
            .any(|&r| matches!(k.dfg.ty(r), Type::Tile(..)));
        if od.opcode == Opcode::Load && tile {
            let name = od.results[0];
            let name = k.dfg.values[name]
                .name
                .as_ref()
                .map_or("a tile".to_string(), |n| format!("`%{n}`"));
            return Err(bad(
                od.span,
                k,
                &format!(
                    "{name} is loaded before the partitions in a form no tensor copy of the producer makes (masked, or its columns not a multiple of 64), so each of plan `{}`'s {} consumers would stage its own copy",
                    plan.name, plan.consumers
                ),
            ));
        }
    }
    Ok(())
}
