//! Def-use queries and use rewriting: the op defining a value, the ops reading it and how often,
//! where an op sits, which ops and values a region holds or reads, whether an op is pure or a
//! block writes memory, backward slices, and replacing every use of a value.

use crate::entities::{Block, Op, Value};
use crate::module::{Access, Dfg, Kernel, Offset, OpData, ParamKind, ValueDef};
use crate::ops::{Attr, Effect, OpClass};
use std::collections::HashSet;

/// The op defining `v`; `None` for a block argument or a value not in the arena.
pub fn def_op(dfg: &Dfg, v: Value) -> Option<Op> {
    match dfg.values.get(v)?.def {
        ValueDef::Result(o, _) => Some(o),
        ValueDef::Arg(..) => None,
    }
}

/// The data of the op defining `v`; `None` for a block argument or a value not in the arena.
pub fn def_data(dfg: &Dfg, v: Value) -> Option<&OpData> {
    def_op(dfg, v).map(|o| &dfg.ops[o])
}

/// Every op of the kernel (in any block) that reads `v` directly.
pub fn users(dfg: &Dfg, v: Value) -> Vec<Op> {
    dfg.ops
        .iter()
        .filter(|(_, od)| od.uses().contains(&v))
        .map(|(id, _)| id)
        .collect()
}

/// How many uses (operands, tensor offsets and value attributes) of the ops of the kernel's
/// arena are `v`; an op reading `v` twice counts twice.
pub fn use_count(dfg: &Dfg, v: Value) -> usize {
    dfg.ops
        .values()
        .map(|o| o.uses().iter().filter(|&&u| u == v).count())
        .sum()
}

/// The block whose op list holds op `o`. Panics if no block holds it (an op detached from the
/// kernel is a pass's bug).
pub fn parent_block(dfg: &Dfg, o: Op) -> Block {
    dfg.blocks
        .iter()
        .find(|(_, bd)| bd.ops.contains(&o))
        .map(|(b, _)| b)
        .expect("the op is in a block")
}

/// Adds the ops of block `b` (at any depth) to `out`.
pub fn ops_in(dfg: &Dfg, b: Block, out: &mut HashSet<Op>) {
    for &o in &dfg.blocks[b].ops {
        out.insert(o);
        for &r in &dfg.ops[o].regions {
            ops_in(dfg, r, out);
        }
    }
}

/// True if block `b` or a region nested in it holds an op for which `pred` holds.
pub fn contains(dfg: &Dfg, b: Block, pred: &dyn Fn(&OpData) -> bool) -> bool {
    dfg.blocks[b].ops.iter().any(|&o| {
        let od = &dfg.ops[o];
        pred(od) || od.regions.iter().any(|&r| contains(dfg, r, pred))
    })
}

/// True if block `b` (recursively) holds an op that writes global memory (a store, an atomic or
/// a semaphore: the `WritesMemory` effect).
pub fn writes_memory(dfg: &Dfg, b: Block) -> bool {
    contains(dfg, b, &|od| od.opcode.effect() == Effect::WritesMemory)
}

/// True if block `b` (recursively) holds a `print` (an op with the `Output` effect), which a
/// pass must keep even where the kernel's memory effects are not needed.
pub fn prints(dfg: &Dfg, b: Block) -> bool {
    contains(dfg, b, &|od| od.opcode.effect() == Effect::Output)
}

/// True for ops that CSE may merge and DCE may remove: the table's pure ops, and loads of tensors
/// the kernel only reads. Stores, atomics, control flow, scheduled-IR ops (which read or change
/// buffer, barrier or partition state) and `print` are never merged or removed.
pub fn is_pure(k: &Kernel, od: &OpData) -> bool {
    match od.opcode.effect() {
        Effect::Pure => true,
        Effect::ReadsMemory => od.tensor.as_ref().is_some_and(|t| {
            k.param(&t.param)
                .is_some_and(|p| matches!(p.kind, ParamKind::Tensor(Access::In, _)))
        }),
        Effect::WritesMemory
        | Effect::Control
        | Effect::Terminator
        | Effect::Schedule
        | Effect::Output => false,
    }
}

/// Every value op `o` reads, in it and in its regions (at any depth), in op order.
pub fn uses_deep(dfg: &Dfg, o: Op) -> Vec<Value> {
    let d = &dfg.ops[o];
    let mut out = d.uses();
    for &r in &d.regions {
        for &i in &dfg.blocks[r].ops {
            out.extend(uses_deep(dfg, i));
        }
    }
    out
}

/// Whether op `o` or an op in its regions (at any depth) reads `v`.
pub fn reads_deep(dfg: &Dfg, o: Op, v: Value) -> bool {
    let d = &dfg.ops[o];
    d.uses().contains(&v)
        || d.regions
            .iter()
            .any(|&r| dfg.blocks[r].ops.iter().any(|&i| reads_deep(dfg, i, v)))
}

/// Values the ops of block `b` (at any depth) read from outside it, in op order (a value read
/// twice is listed twice).
pub fn region_inputs(dfg: &Dfg, b: Block) -> Vec<Value> {
    let mut defined = HashSet::new();
    let mut out = vec![];
    fn walk(dfg: &Dfg, b: Block, defined: &mut HashSet<Value>, out: &mut Vec<Value>) {
        defined.extend(dfg.blocks[b].args.iter().copied());
        for &o in &dfg.blocks[b].ops {
            for u in dfg.ops[o].uses() {
                if !defined.contains(&u) {
                    out.push(u);
                }
            }
            for &r in &dfg.ops[o].regions {
                walk(dfg, r, defined, out);
            }
            defined.extend(dfg.ops[o].results.iter().copied());
        }
    }
    walk(dfg, b, &mut defined, &mut out);
    out
}

/// The ops a set of values needs that are defined by ops of `among` (transitively), in the
/// order of `among`; `None` if one of them has regions or side effects, accesses a tensor the
/// kernel writes, or reads a value of `forbid`.
pub fn slice_among(
    k: &Kernel,
    roots: &[Value],
    among: &[Op],
    forbid: &HashSet<Value>,
) -> Option<Vec<Op>> {
    let set: HashSet<Op> = among.iter().copied().collect();
    let mut need = HashSet::new();
    let mut stack = roots.to_vec();
    while let Some(v) = stack.pop() {
        if forbid.contains(&v) {
            return None;
        }
        if let ValueDef::Result(d, _) = k.dfg.values[v].def {
            if set.contains(&d) && need.insert(d) {
                let dd = &k.dfg.ops[d];
                if !dd.regions.is_empty()
                    || dd.opcode.has_side_effects()
                    || dd.opcode.info().class == OpClass::Memory
                        && dd.tensor.as_ref().is_some_and(|t| {
                            k.param(&t.param).is_some_and(
                                |p| matches!(p.kind, ParamKind::Tensor(a, _) if a.writes()),
                            )
                        })
                {
                    return None;
                }
                stack.extend(dd.uses());
            }
        }
    }
    Some(among.iter().copied().filter(|o| need.contains(o)).collect())
}

/// Calls `f` on every value op `od` reads itself (operands, tensor offsets, value attributes;
/// not its regions' ops).
pub fn for_each_use(od: &mut OpData, mut f: impl FnMut(&mut Value)) {
    od.operands.iter_mut().for_each(&mut f);
    if let Some(t) = &mut od.tensor {
        for off in &mut t.offsets {
            if let Offset::Value(v) = off {
                f(v);
            }
        }
    }
    for (_, a) in &mut od.attrs {
        if let Attr::Value(v) = a {
            f(v);
        }
    }
}

/// Replaces every use of `from` by `to` in the whole kernel, except in op `skip`.
pub fn replace_uses(dfg: &mut Dfg, from: Value, to: Value, skip: Option<Op>) {
    for (id, od) in dfg.ops.iter_mut() {
        if Some(id) != skip {
            for_each_use(od, |v| {
                if *v == from {
                    *v = to;
                }
            });
        }
    }
}
