//! Program order between the accesses one program instance makes to one tensor from different
//! threads (docs/backends.md, "Stores").
//!
//! The IR runs a program instance's ops in order, so a later store to an element wins over an
//! earlier one and a load sees the program's own earlier store. The PTX backend spreads each
//! access over the block's threads by the value's layout, so two accesses of one element may be
//! made by different threads, which nothing orders. Each access therefore has a *distribution*:
//! a scalar (made by thread 0 alone for a store), or a register tile's layout and shape (each
//! element by the thread that holds it). Two accesses to one tensor with the same distribution
//! at the same offsets touch each element from the same thread, which program order within a
//! thread orders; any other pair is separated by `bar.sync 0`, which orders the block's global
//! accesses. The state is the distribution of the last store to each tensor since the last such
//! barrier:
//! - a store, atomic or load of T whose distribution differs from T's last store's emits the
//!   barrier first (and forgets every tensor: the barrier orders them all);
//! - a loop's body starts from the state its previous iteration leaves: a tensor the body
//!   accesses with more than one distribution is *mixed* there (its first access in every
//!   iteration waits), and a barrier before the loop separates the loop's accesses from
//!   earlier stores of another distribution;
//! - an `if` merges its branches' states (a tensor whose distributions differ becomes mixed).
//!
//! Assumed, not checked: successive accesses with one distribution at different offsets do not
//! overlap (a loop storing overlapping tiles of one layout, say). Accesses by other program
//! instances are never ordered (docs/ir.md).

use super::ctx::Ctx;
pub use super::state::{Dist, State};
use crate::ptx::plan::layout::{Layout, Place};
use kir_ir::{Block, Kernel, OpData, Opcode};
use std::collections::HashMap;

/// The distribution of memory op `op` (a `load`, `store` or `atomic_add`), from the layout of
/// the value it reads or writes (a shared tile is stored through the `Blocked` layout).
pub fn dist(c: &Ctx, op: &OpData) -> Option<Dist> {
    let v = match op.opcode {
        Opcode::Load => *op.results.first()?,
        Opcode::Store | Opcode::AtomicAdd => *op.operands.first()?,
        _ => return None,
    };
    let shape = c.k.dfg.ty(v).shape().unwrap_or_default();
    Some(
        match c.plan.places.get(&v).copied().unwrap_or(Place::Scalar) {
            Place::Scalar => Dist::Scalar,
            Place::Reg(l) => Dist::Tile(l, shape),
            Place::Shared => Dist::Tile(Layout::Blocked, shape),
        },
    )
}

/// Before memory op `op` on `tensor`: the barrier if an earlier store of another distribution
/// may touch the same elements; then, for a store or atomic, record it.
pub fn before_access(c: &mut Ctx, op: &OpData, tensor: &str) {
    let Some(d) = dist(c, op) else { return };
    let conflict = match c.mem.stores.get(tensor) {
        None => false,
        Some(Dist::Mixed) => true,
        Some(last) => *last != d,
    };
    if conflict {
        barrier(c);
    }
    if op.opcode != Opcode::Load {
        c.mem.stores.insert(tensor.to_string(), d);
    }
}

fn barrier(c: &mut Ctx) {
    c.sync_block();
    c.mem.stores.clear();
}

/// The (tensor, distribution) pairs of every memory op in block `b` and its regions.
fn accesses(c: &Ctx, k: &Kernel, b: Block, out: &mut Vec<(String, Dist)>) {
    for &o in &k.dfg.blocks[b].ops {
        let od = &k.dfg.ops[o];
        if let (Some(t), Some(d)) = (&od.tensor, dist(c, od)) {
            let x = (t.param.clone(), d);
            if !out.contains(&x) {
                out.push(x);
            }
        }
        for &r in &od.regions {
            accesses(c, k, r, out);
        }
    }
}

/// Before a loop whose body is `body`: a barrier if the body accesses a tensor that an earlier
/// store wrote with another distribution, then the state the body's first iteration starts
/// from (and, conservatively, every later one: what a previous iteration left).
pub fn enter_loop(c: &mut Ctx, body: Block) {
    let mut acc = Vec::new();
    accesses(c, c.k, body, &mut acc);
    let mut per: HashMap<String, Vec<Dist>> = HashMap::new();
    for (t, d) in acc {
        per.entry(t).or_default().push(d);
    }
    let before_conflicts = per.iter().any(|(t, ds)| match c.mem.stores.get(t) {
        None => false,
        Some(last) => ds.iter().any(|d| d != last),
    });
    if before_conflicts {
        barrier(c);
    }
    for (t, ds) in per {
        let d = if ds.len() == 1 {
            ds[0].clone()
        } else {
            Dist::Mixed
        };
        c.mem.stores.insert(t, d);
    }
}

/// The state after two paths (an `if`'s branches, or a loop that may run no iteration): a
/// tensor the paths left with different distributions is mixed.
pub fn merge(a: &State, b: &State) -> State {
    let mut out = a.clone();
    for (t, d) in b {
        match out.get(t) {
            // Absent on one path: nothing unordered there, so the other path's store stands.
            None => {
                out.insert(t.clone(), d.clone());
            }
            Some(x) if x == d => {}
            Some(_) => {
                out.insert(t.clone(), Dist::Mixed);
            }
        }
    }
    out
}
