//! The program-level rewrites of the `fusion` pass: horizontal merge of adjacent independent
//! launches that share an input buffer, and elimination of temps no launch reads (with the
//! launches left writing nothing).

use super::state::State;
use kir_ir::edit::{self, Cloner};
use kir_ir::{Access, Opcode, ParamKind};
use petgraph::graph::NodeIndex;
use std::collections::HashMap;

impl State<'_> {
    /// Merges adjacent independent launches with equal grids that share an input buffer.
    pub(super) fn merge_horizontal(&mut self) -> bool {
        let g = self.graph();
        for i in 0..self.kernels.len().saturating_sub(1) {
            let j = i + 1;
            let (ni, nj) = (NodeIndex::new(i), NodeIndex::new(j));
            if g.contains_edge(ni, nj) {
                continue;
            }
            let (ti, tj) = (self.tensors(i), self.tensors(j));
            let shared = tj
                .iter()
                .any(|(_, b, a)| *a == Access::In && ti.iter().any(|(_, b2, _)| b2 == b));
            let clash = tj.iter().any(|(_, b, a)| {
                ti.iter()
                    .any(|(_, b2, a2)| b2 == b && (a.writes() || a2.writes()))
            });
            if !shared || clash {
                continue;
            }
            let (ki, kj) = (&self.kernels[i], &self.kernels[j]);
            let what = format!("horizontal merge of @{} and @{}", ki.name, kj.name);
            let dims = match self.dims_into(j, i) {
                Ok(d) => d,
                Err(e) => {
                    self.rep.not_fused.push(format!("{what}: {e}"));
                    continue;
                }
            };
            let grid_j: Vec<String> = kj
                .grid
                .iter()
                .map(|e| format!("{}", edit::rename_expr(e, &|n| dims.get(n).cloned())))
                .collect();
            let grid_i: Vec<String> = ki.grid.iter().map(|e| format!("{e}")).collect();
            if grid_i != grid_j {
                self.rep.not_fused.push(format!("{what}: the grids differ"));
                continue;
            }
            self.merge_into(i, j, dims);
            let k = &mut self.kernels[i];
            edit::cse(k);
            let loops = edit::merge_loops(k);
            edit::cse(k);
            edit::dce(k);
            self.rep.fused.push(format!(
                "{what} into @{} ({loops} loop(s) merged, shared loads read once)",
                self.kernels[i].name
            ));
            return true;
        }
        false
    }

    /// Appends launch `j`'s kernel body and bindings to launch `i`'s and drops launch `j`.
    fn merge_into(&mut self, i: usize, j: usize, dims: HashMap<String, String>) {
        let kj = self.kernels.remove(j);
        let lj = self.prog.launches.remove(j);
        let mut cl = Cloner::new(&kj.dfg);
        cl.dims = dims.clone();
        for p in &kj.params {
            let Some(b) = lj.args.iter().find(|a| a.param == p.name) else {
                continue;
            };
            let kind = match &p.kind {
                ParamKind::Tensor(a, t) => {
                    let mut t = t.clone();
                    t.dims = t
                        .dims
                        .iter()
                        .map(|d| edit::rename_expr(d, &|n| dims.get(n).cloned()))
                        .collect();
                    ParamKind::Tensor(*a, t)
                }
                k => k.clone(),
            };
            let name = self.bind(i, &b.arg, kind);
            cl.params.insert(p.name.clone(), name);
        }
        let k = &mut self.kernels[i];
        k.name = format!("{}_{}", k.name, kj.name);
        self.prog.launches[i].kernel = k.name.clone();
        let body = k.body;
        // The top block may end in an empty `yield`; keep one, at the end.
        let top = &mut k.dfg.blocks[body].ops;
        if top
            .last()
            .is_some_and(|&y| k.dfg.ops[y].opcode == Opcode::Yield)
        {
            top.pop();
        }
        for &o in &kj.dfg.blocks[kj.body].ops {
            cl.op(&mut k.dfg, body, o);
        }
    }

    /// Removes temps no launch reads: their stores, params and bindings; then launches that
    /// write nothing any more (and print nothing: a `print` is kept with its launch).
    pub(super) fn eliminate_temps(&mut self) -> bool {
        let mut changed = false;
        for t in self.prog.temps.clone() {
            let read = (0..self.kernels.len()).any(|i| {
                self.tensors(i)
                    .iter()
                    .any(|(_, b, a)| *b == t.name && *a != Access::Out)
            });
            if read {
                continue;
            }
            for i in 0..self.kernels.len() {
                let params: Vec<String> = self
                    .tensors(i)
                    .into_iter()
                    .filter(|(_, b, _)| *b == t.name)
                    .map(|(p, _, _)| p)
                    .collect();
                for p in params {
                    let k = &mut self.kernels[i];
                    for b in k.dfg.blocks.values_mut() {
                        let ops = &k.dfg.ops;
                        b.ops.retain(|&o| {
                            ops[o].opcode != Opcode::Store
                                || ops[o].tensor.as_ref().is_none_or(|r| r.param != p)
                        });
                    }
                    k.params.retain(|x| x.name != p);
                    edit::dce(k);
                    self.prog.launches[i].args.retain(|a| a.param != p);
                }
            }
            self.prog.temps.retain(|x| x.name != t.name);
            self.rep.buffers_eliminated.push(t.name.clone());
            changed = true;
        }
        let mut i = 0;
        while i < self.kernels.len() {
            let k = &self.kernels[i];
            if edit::writes_memory(&k.dfg, k.body) || edit::prints(&k.dfg, k.body) {
                i += 1;
                continue;
            }
            self.rep.fused.push(format!(
                "dropped @{}: it writes nothing read",
                self.kernels[i].name
            ));
            self.kernels.remove(i);
            self.prog.launches.remove(i);
            changed = true;
        }
        changed
    }
}
