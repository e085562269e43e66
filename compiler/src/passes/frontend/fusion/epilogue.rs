//! Epilogue fusion, part of the `fusion` pass: an elementwise consumer launch (straight-line,
//! every load and the store at the same offsets, only elementwise ops, no other effect such as
//! a `print`) is re-instantiated on the producer's stored tiles right after its stores.

use super::state::State;
use kir_ir::edit;
use kir_ir::{Offset, Opcode, ParamKind, TensorRef, Type};
use std::collections::HashMap;

impl State<'_> {
    /// Fuses an elementwise consumer launch into the launch that stores the buffers it reads.
    pub(super) fn fuse_epilogue(&mut self) -> bool {
        let g = self.graph();
        for e in g.edge_indices() {
            let Some((pi, ci)) = g.edge_endpoints(e) else {
                continue;
            };
            let (p, c) = (g[pi], g[ci]);
            match self.try_epilogue(p, c) {
                Ok(()) => return true,
                Err(why) => {
                    let line = format!(
                        "epilogue fusion of @{} into @{}: {why}",
                        self.kernels[c].name, self.kernels[p].name
                    );
                    if !self.rep.not_fused.contains(&line) {
                        self.rep.not_fused.push(line);
                    }
                }
            }
        }
        false
    }

    fn try_epilogue(&mut self, p: usize, c: usize) -> Result<(), String> {
        let kc = self.kernels[c].clone();
        let d = &kc.dfg;
        let top = &d.blocks[kc.body].ops;
        if top.iter().any(|&o| !d.ops[o].regions.is_empty()) {
            return Err("the consumer has control flow".into());
        }
        let stores: Vec<_> = top
            .iter()
            .filter(|&&o| d.ops[o].opcode == Opcode::Store)
            .collect();
        let [&st] = stores[..] else {
            return Err("the consumer does not store exactly once".into());
        };
        // Only the store's chain is re-instantiated: anything else with an effect would be lost.
        if let Some(&o) = top.iter().find(|&&o| {
            let op = d.ops[o].opcode;
            op.has_side_effects() && !matches!(op, Opcode::Store | Opcode::Yield)
        }) {
            return Err(format!(
                "the consumer has a `{}`, which the fused kernel would drop",
                d.ops[o].opcode.name()
            ));
        }
        let so = &d.ops[st];
        let offs = format!("{:?}", so.tensor.as_ref().map(|t| &t.offsets));
        let tile = d.ty(so.operands[0]).shape().unwrap_or_default();
        if so.attr("mask").is_some() || so.attr("guard").is_none() {
            return Err("the consumer's store is masked or unguarded".into());
        }
        // Ops reachable backwards from the stored value, stopping at loads.
        let mut need = vec![so.operands[0]];
        let mut ops = vec![];
        while let Some(v) = need.pop() {
            let kir_ir::ValueDef::Result(o, _) = d.values[v].def else {
                return Err("the stored value depends on a block argument".into());
            };
            if ops.contains(&o) {
                continue;
            }
            ops.push(o);
            let od = &d.ops[o];
            let ok = match od.opcode {
                Opcode::Load => {
                    let same = format!("{:?}", od.tensor.as_ref().map(|t| &t.offsets)) == offs;
                    if !same || od.attr("mask").is_some() || od.attr("other").is_none() {
                        return Err("a load is not at the store's offsets".into());
                    }
                    continue;
                }
                Opcode::Const | Opcode::Param => d.ty(od.results[0]).is_scalar(),
                op => elementwise(op),
            };
            let shape_ok = od
                .results
                .iter()
                .all(|&r| d.ty(r).is_scalar() || d.ty(r).shape() == Some(tile.clone()));
            if !ok || !shape_ok {
                return Err(format!("`{}` is not elementwise", od.opcode.name()));
            }
            need.extend(od.operands.iter().copied());
        }
        ops.sort_by_key(|o| top.iter().position(|x| x == o));
        let out_buf = self.buffer(c, so.tensor.as_ref().map_or("", |t| &t.param));
        let out_buf = out_buf.ok_or("unbound output")?;
        // The producer's stores of the buffers the consumer reads.
        let kp = &self.kernels[p];
        let pt = &kp.dfg.blocks[kp.body].ops;
        let mut stored = HashMap::new();
        let mut at = None;
        for (pos, &o) in pt.iter().enumerate() {
            let od = &kp.dfg.ops[o];
            if od.opcode != Opcode::Store || od.attr("mask").is_some() {
                continue;
            }
            let Some(t) = &od.tensor else { continue };
            if let Some(b) = self.buffer(p, &t.param) {
                stored.insert(b, (od.operands[0], t.offsets.clone()));
                at = Some(pos + 1);
            }
        }
        // A buffer the consumer reads must be written by the producer exactly once: by that
        // top-level unmasked store (one written in a loop, under an `if`, twice or by an atomic
        // has contents the stored tile does not describe).
        let mut writes: HashMap<String, usize> = HashMap::new();
        for o in all_ops(&kp.dfg, kp.body) {
            let od = &kp.dfg.ops[o];
            if matches!(od.opcode, Opcode::Store | Opcode::AtomicAdd) {
                if let Some(b) = od.tensor.as_ref().and_then(|t| self.buffer(p, &t.param)) {
                    *writes.entry(b).or_default() += 1;
                }
            }
        }
        let mut anchor: Option<(Vec<Offset>, Vec<usize>)> = None;
        let dims_out = self.buffer_dims(&out_buf);
        for &o in &ops {
            let od = &d.ops[o];
            if od.opcode != Opcode::Load {
                continue;
            }
            let b = self.buffer(c, od.tensor.as_ref().map_or("", |t| &t.param));
            let b = b.ok_or("unbound input")?;
            if self.buffer_dims(&b) != dims_out {
                return Err(format!("`{b}` and `{out_buf}` differ in shape"));
            }
            if let Some((v, offs)) = stored.get(&b) {
                if writes.get(&b).copied().unwrap_or(0) != 1 {
                    return Err(format!(
                        "the producer writes `{b}` more than once, in a loop or under a condition"
                    ));
                }
                let shape = kp.dfg.ty(*v).shape().unwrap_or_default();
                if let Some((o2, s2)) = &anchor {
                    if o2 != offs || *s2 != shape {
                        return Err("the producer stores at different offsets".into());
                    }
                }
                anchor = Some((offs.clone(), shape));
            }
        }
        let (anchor_offs, shape) = anchor.ok_or("the producer stores none of its inputs")?;
        if shape.len() != tile.len() {
            return Err("tile ranks differ".into());
        }
        // Rewrite: clone the consumer's ops on the producer's tiles, after its stores.
        let dims = self.dims_into(c, p)?;
        let at = at.unwrap_or(0);
        let mut vmap: HashMap<kir_ir::Value, kir_ir::Value> = HashMap::new();
        let retype = |t: &Type| match t {
            Type::Tile(_, e) => Type::Tile(
                shape.iter().map(|&n| kir_ir::Expr::int(n as i64)).collect(),
                e.clone(),
            ),
            s => s.clone(),
        };
        let mut pos = at;
        for &o in ops.iter().chain([&st]) {
            let od = d.ops[o].clone();
            let mut nd = od.clone();
            nd.results.clear();
            nd.operands = od
                .operands
                .iter()
                .map(|v| *vmap.get(v).unwrap_or(v))
                .collect();
            if let Some(t) = &od.tensor {
                let b = self.buffer(c, &t.param).ok_or("unbound")?;
                if od.opcode == Opcode::Load {
                    if let Some((v, _)) = stored.get(&b) {
                        vmap.insert(od.results[0], *v);
                        continue;
                    }
                }
                let kind = match &kc.param(&t.param).ok_or("no param")?.kind {
                    ParamKind::Tensor(a, tt) => {
                        let mut tt = tt.clone();
                        tt.dims = tt
                            .dims
                            .iter()
                            .map(|e| edit::rename_expr(e, &|n| dims.get(n).cloned()))
                            .collect();
                        ParamKind::Tensor(*a, tt)
                    }
                    k => k.clone(),
                };
                let name = self.bind(p, &b, kind);
                nd.tensor = Some(TensorRef {
                    param: name,
                    offsets: anchor_offs.clone(),
                    span: t.span,
                });
            }
            if let (Opcode::Param, Some(kir_ir::Attr::Name(n, sp))) = (od.opcode, &od.lead) {
                let b = self.buffer(c, n).ok_or("unbound scalar")?;
                let kind = kc.param(n).ok_or("no param")?.kind.clone();
                nd.lead = Some(kir_ir::Attr::Name(self.bind(p, &b, kind), *sp));
            }
            let tys = od
                .results
                .iter()
                .map(|&r| (retype(d.ty(r)), d.values[r].name.clone()))
                .collect();
            let kp = &mut self.kernels[p];
            let body = kp.body;
            let res = edit::insert_op(&mut kp.dfg, body, pos, nd, tys);
            pos += 1;
            for (r, nr) in od.results.iter().zip(res) {
                vmap.insert(*r, nr);
            }
        }
        let (kcn, kpn) = (kc.name.clone(), self.kernels[p].name.clone());
        self.kernels[p].name = format!("{kpn}_{kcn}");
        self.prog.launches[p].kernel = self.kernels[p].name.clone();
        self.kernels.remove(c);
        self.prog.launches.remove(c);
        self.rep.fused.push(format!(
            "epilogue fusion of @{kcn} into @{kpn}: writes `{out_buf}` from the stored tiles"
        ));
        Ok(())
    }
}

/// Every op of block `b` and of the regions of its ops, in program order.
fn all_ops(d: &kir_ir::Dfg, b: kir_ir::Block) -> Vec<kir_ir::Op> {
    let mut out = vec![];
    for &o in &d.blocks[b].ops {
        out.push(o);
        for &r in &d.ops[o].regions {
            out.extend(all_ops(d, r));
        }
    }
    out
}

/// Ops that map elements to elements at the same index (the op table's elementwise ops), except
/// `nf4`, which epilogue fusion has never taken.
fn elementwise(op: Opcode) -> bool {
    op.is_elementwise() && op != Opcode::Nf4
}
