//! Renumbering: rebuilds a kernel's arenas in the order the parser allocates entities, so a
//! kernel produced by a pass compares equal to the parse of its printed text.

use crate::entities::{Block, Op, Value};
use crate::module::{Dfg, Kernel, Module, Offset, OpData};
use crate::ops::Attr;
use cranelift_entity::SecondaryMap;

/// Rebuilds every kernel of `m` in canonical entity order (see [`renumber_kernel`]).
pub fn renumber_module(m: &mut Module) {
    for k in m.kernels.values_mut() {
        renumber_kernel(k);
    }
}

/// Rebuilds `k.dfg` so that blocks, values and ops are numbered in parser order: a block
/// and its arguments when its region opens, ops after their regions, results after their op.
/// Unreachable entities are dropped. Spans, names and docs are preserved.
pub fn renumber_kernel(k: &mut Kernel) {
    let mut r = Renumber {
        old: &k.dfg,
        new: Dfg::default(),
        vmap: SecondaryMap::new(),
        depth: 0,
    };
    let body = r.block(k.body);
    k.body = body;
    k.dfg = r.new;
}

struct Renumber<'a> {
    old: &'a Dfg,
    new: Dfg,
    vmap: SecondaryMap<Value, Option<Value>>,
    depth: usize,
}

impl Renumber<'_> {
    fn map(&self, v: Value) -> Value {
        // An unmapped value (a use before its definition) keeps its old number; the
        // verifier reports such IR, and renumbering must not panic on it.
        self.vmap.get(v).copied().flatten().unwrap_or(v)
    }

    fn block(&mut self, b: Block) -> Block {
        let nb = self.new.new_block();
        let Some(bd) = self.old.blocks.get(b) else {
            return nb;
        };
        self.depth += 1;
        if self.depth > 1000 {
            self.depth -= 1;
            return nb;
        }
        for &a in &bd.args {
            let Some(vd) = self.old.values.get(a) else {
                continue;
            };
            let na = self
                .new
                .add_block_arg(nb, vd.ty.clone(), vd.name.clone(), vd.span);
            self.vmap[a] = Some(na);
        }
        for &o in &bd.ops {
            self.op(nb, o);
        }
        self.depth -= 1;
        nb
    }

    fn op(&mut self, nb: Block, o: Op) {
        let Some(od) = self.old.ops.get(o) else {
            return;
        };
        let regions: Vec<Block> = od.regions.iter().map(|&rb| self.block(rb)).collect();
        let new_op = OpData {
            opcode: od.opcode,
            results: vec![],
            operands: od.operands.iter().map(|&v| self.map(v)).collect(),
            lead: od.lead.clone(),
            tensor: od.tensor.clone().map(|mut t| {
                for off in &mut t.offsets {
                    if let Offset::Value(v) = off {
                        *v = self.map(*v);
                    }
                }
                t
            }),
            attrs: od
                .attrs
                .iter()
                .map(|(k, a)| {
                    let a = match a {
                        Attr::Value(v) => Attr::Value(self.map(*v)),
                        other => other.clone(),
                    };
                    (k.clone(), a)
                })
                .collect(),
            regions,
            doc: od.doc.clone(),
            span: od.span,
        };
        let rts: Vec<_> = od
            .results
            .iter()
            .filter_map(|&r| {
                self.old
                    .values
                    .get(r)
                    .map(|d| (d.ty.clone(), d.name.clone()))
            })
            .collect();
        let id = self.new.append_op(nb, new_op, rts);
        let news = self.new.ops[id].results.clone();
        for (&r, nr) in od.results.iter().zip(news) {
            if let Some(d) = self.old.values.get(r) {
                self.new.values[nr].span = d.span;
            }
            self.vmap[r] = Some(nr);
        }
    }
}
