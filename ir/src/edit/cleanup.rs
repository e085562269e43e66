//! Clean-ups after a rewrite: common-subexpression elimination ([`cse`]), dead-code elimination
//! ([`dce`]) and merging sibling `for` loops of a kernel's top block ([`merge_loops`]).

use super::uses::{is_pure, region_inputs, replace_uses, writes_memory};
use crate::entities::{Block, Op, Value};
use crate::module::{Kernel, ValueDef};
use crate::ops::{Attr, Opcode};
use std::collections::HashMap;

/// Merges identical pure ops (same opcode, operands, attributes and result types), scoped by
/// region nesting: an op may reuse an equal op of its own block or of an enclosing one.
pub fn cse(k: &mut Kernel) {
    let body = k.body;
    cse_block(k, body, &mut vec![]);
}

fn cse_block(k: &mut Kernel, b: Block, scopes: &mut Vec<HashMap<String, Value>>) {
    scopes.push(HashMap::new());
    let ops = k.dfg.blocks[b].ops.clone();
    let mut keep = vec![];
    for o in ops {
        for rb in k.dfg.ops[o].regions.clone() {
            cse_block(k, rb, scopes);
        }
        let od = &k.dfg.ops[o];
        if !is_pure(k, od) || od.results.len() != 1 {
            keep.push(o);
            continue;
        }
        let ty = &k.dfg.values[od.results[0]].ty;
        let key = format!(
            "{:?}|{:?}|{:?}|{:?}|{:?}|{ty}",
            od.opcode,
            od.operands,
            od.lead.as_ref().map(strip),
            od.tensor
                .as_ref()
                .map(|t| (&t.param, format!("{:?}", t.offsets))),
            od.attrs
                .iter()
                .map(|(n, a)| (n, strip(a)))
                .collect::<Vec<_>>()
        );
        let found = scopes.iter().rev().find_map(|s| s.get(&key).copied());
        let r = od.results[0];
        match found {
            Some(prev) => replace_uses(&mut k.dfg, r, prev, None),
            None => {
                scopes.last_mut().map(|s| s.insert(key, r));
                keep.push(o);
            }
        }
    }
    k.dfg.blocks[b].ops = keep;
    scopes.pop();
}

/// An attribute without its span, for CSE keys.
fn strip(a: &Attr) -> String {
    match a {
        Attr::Expr(e) => format!("{e}"),
        Attr::Name(n, _) => n.clone(),
        Attr::Cmp(p) => p.name().to_string(),
        Attr::Reduce(k) => k.name().to_string(),
        Attr::Value(v) => format!("{v:?}"),
        Attr::List(l) => l
            .iter()
            .map(|e| format!("{e}"))
            .collect::<Vec<_>>()
            .join(","),
        Attr::Flag => "flag".into(),
        Attr::Str(t) => format!("{t:?}"),
    }
}

/// Removes pure ops whose results are unused, repeatedly, and loop-carried values of `for` ops
/// that nothing reads (neither after the loop nor inside it except to carry themselves).
pub fn dce(k: &mut Kernel) {
    loop {
        // Uses are counted over reachable ops only: an op already removed from its block (still
        // in the arena) must not keep its operands alive.
        let live_ops = live(k);
        let mut used: HashMap<Value, usize> = HashMap::new();
        for (_, ops) in &live_ops {
            for &o in ops {
                for v in k.dfg.ops[o].uses() {
                    *used.entry(v).or_default() += 1;
                }
            }
        }
        let mut changed = false;
        for (b, ops) in live_ops {
            let before = ops.len();
            let kept: Vec<Op> = ops
                .into_iter()
                .filter(|&o| {
                    let od = &k.dfg.ops[o];
                    !(is_pure(k, od) && od.results.iter().all(|r| !used.contains_key(r)))
                })
                .collect();
            changed |= kept.len() != before;
            k.dfg.blocks[b].ops = kept;
        }
        if !changed {
            return;
        }
    }
}

/// Every reachable block with its op list.
fn live(k: &Kernel) -> Vec<(Block, Vec<Op>)> {
    let mut out = vec![];
    let mut stack = vec![k.body];
    while let Some(b) = stack.pop() {
        let ops = k.dfg.blocks[b].ops.clone();
        for &o in &ops {
            stack.extend(k.dfg.ops[o].regions.iter().copied());
        }
        out.push((b, ops));
    }
    out
}

/// Merges every later `for` of the kernel's top block into an earlier one with the same bounds
/// when the later loop reads nothing defined between them and neither loop writes memory: one
/// loop carrying both sets of values. Returns how many loops were merged.
pub fn merge_loops(k: &mut Kernel) -> usize {
    let mut merged = 0;
    'again: loop {
        let top = k.dfg.blocks[k.body].ops.clone();
        for (i, &l1) in top.iter().enumerate() {
            for (j, &l2) in top.iter().enumerate().skip(i + 1) {
                let (a, b) = (&k.dfg.ops[l1], &k.dfg.ops[l2]);
                if a.opcode != Opcode::For || b.opcode != Opcode::For {
                    continue;
                }
                let ends_in_yield = |blk: Block| {
                    k.dfg.blocks[blk]
                        .ops
                        .last()
                        .is_some_and(|&y| k.dfg.ops[y].opcode == Opcode::Yield)
                };
                if a.operands[..3] != b.operands[..3]
                    || !ends_in_yield(a.regions[0])
                    || !ends_in_yield(b.regions[0])
                    || writes_memory(&k.dfg, a.regions[0])
                    || writes_memory(&k.dfg, b.regions[0])
                {
                    continue;
                }
                let between: Vec<Value> = top[i..j]
                    .iter()
                    .flat_map(|&o| k.dfg.ops[o].results.clone())
                    .collect();
                let mut needs = region_inputs(&k.dfg, b.regions[0]);
                needs.extend(b.operands.iter().copied());
                if needs.iter().any(|v| between.contains(v)) {
                    continue;
                }
                fuse_pair(k, l1, l2, j);
                merged += 1;
                continue 'again;
            }
        }
        return merged;
    }
}

/// Moves loop `l2` (at top-block index `j`) into loop `l1`.
fn fuse_pair(k: &mut Kernel, l1: Op, l2: Op, j: usize) {
    let d = &mut k.dfg;
    let (b1, b2) = (d.ops[l1].regions[0], d.ops[l2].regions[0]);
    // Induction variable and carried args of loop 2 become loop 1's.
    let iv1 = d.blocks[b1].args[0];
    let iv2 = d.blocks[b2].args[0];
    replace_uses(d, iv2, iv1, None);
    let args2: Vec<Value> = d.blocks[b2].args[1..].to_vec();
    for a in args2 {
        let idx = d.blocks[b1].args.len() as u32;
        d.values[a].def = ValueDef::Arg(b1, idx);
        d.blocks[b1].args.push(a);
    }
    let inits2: Vec<Value> = d.ops[l2].operands[3..].to_vec();
    d.ops[l1].operands.extend(inits2);
    let res2: Vec<Value> = d.ops[l2].results.clone();
    for r in res2 {
        let idx = d.ops[l1].results.len() as u32;
        d.values[r].def = ValueDef::Result(l1, idx);
        d.ops[l1].results.push(r);
    }
    // Bodies: loop 1's ops but its yield, loop 2's ops but its yield, one yield of both.
    let mut ops1 = d.blocks[b1].ops.clone();
    let mut ops2 = d.blocks[b2].ops.clone();
    let (y1, y2) = (ops1.pop(), ops2.pop());
    if let (Some(y1), Some(y2)) = (y1, y2) {
        let extra = d.ops[y2].operands.clone();
        d.ops[y1].operands.extend(extra);
        ops1.extend(ops2);
        ops1.push(y1);
    }
    d.blocks[b1].ops = ops1;
    d.blocks[k.body].ops.remove(j);
}
