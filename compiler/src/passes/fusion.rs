//! The `fusion` pass: kernel-graph fusion over a module's program.
//!
//! The program is a petgraph graph: one node per launch, one edge per buffer a launch writes and
//! a later launch reads. On that graph the pass applies, until nothing changes, the first of
//! these that applies (temp elimination first):
//! - **horizontal merge** of two adjacent launches with the same grid that share an input buffer
//!   and do not depend on each other (gemm(gate) + gemm(up) on the same `a`): the bodies are
//!   concatenated, equal ops merged (CSE), and loops with the same bounds merged, so the shared
//!   loads happen once and both accumulators live in one loop;
//! - **RMSNorm → GEMM fusion** when the byte estimate says it pays (`fusion_norm.rs`);
//! - **epilogue fusion** of an elementwise consumer (straight-line, every load and the store at
//!   the same offsets, only elementwise ops) into the kernel that stores the buffers it reads:
//!   its ops are re-instantiated on the producer's stored tiles right after the stores;
//! - **temp elimination**: a temp no launch reads any more loses its stores, params and
//!   bindings; a launch left without stores is dropped, and so is its kernel.
//!
//! Every decision, and every candidate not fused with the reason, goes into a [`FusionReport`].
//! A module without a program, or without fusible patterns, comes back unchanged.

use kir_ir::edit::{self, Cloner};
use kir_ir::{
    renumber::renumber_kernel, verifier, Access, ArgBinding, Kernel, Module, Offset, Opcode, Param,
    ParamKind, Program, TensorRef, Type,
};
use petgraph::graph::{DiGraph, NodeIndex};
use std::collections::HashMap;

/// What the `fusion` pass did and why.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FusionReport {
    /// One line per fusion applied.
    pub fused: Vec<String>,
    /// One line per candidate considered and not fused, with the reason.
    pub not_fused: Vec<String>,
    /// Temps removed because no launch reads them any more.
    pub buffers_eliminated: Vec<String>,
    /// Kernels launched before and after.
    pub kernels: (usize, usize),
    /// Global bytes moved before and after, with every program dim at [`NOMINAL_DIM`].
    pub bytes: (Option<u64>, Option<u64>),
}

/// The size every program dim takes when the pass estimates bytes moved for its decisions.
pub const NOMINAL_DIM: i64 = 4096;

/// Fuses the program of `m`; see the module doc.
pub fn fusion(m: &Module) -> Module {
    fusion_with_report(m).0
}

/// [`fusion`] with its report. If the fused module does not verify, `m` is returned unchanged
/// and the report says so.
pub fn fusion_with_report(m: &Module) -> (Module, FusionReport) {
    let mut rep = FusionReport::default();
    let Some(prog) = &m.program else {
        return (m.clone(), rep);
    };
    let nominal = |_: &str| Some(NOMINAL_DIM);
    rep.bytes.0 = bytes_moved(m, &nominal);
    rep.kernels.0 = prog.launches.len();
    let mut st = State {
        kernels: prog
            .launches
            .iter()
            .filter_map(|l| m.kernel(&l.kernel).map(|(_, k)| k.clone()))
            .collect(),
        prog: prog.clone(),
        rep: &mut rep,
    };
    if st.kernels.len() != st.prog.launches.len() {
        return (m.clone(), rep);
    }
    loop {
        let changed =
            st.eliminate_temps() || st.merge_horizontal() || st.fuse_norm() || st.fuse_epilogue();
        if !changed {
            break;
        }
    }
    let (kernels, prog) = (st.kernels, st.prog);
    if rep.fused.is_empty() {
        rep.kernels.1 = rep.kernels.0;
        rep.bytes.1 = rep.bytes.0;
        return (m.clone(), rep);
    }
    let mut out = m.clone();
    out.kernels = cranelift_entity::PrimaryMap::new();
    for mut k in kernels {
        if out.kernel(&k.name).is_none() {
            renumber_kernel(&mut k);
            out.kernels.push(k);
        }
    }
    out.program = Some(prog);
    if let Err(d) = verifier::verify(&out) {
        rep.not_fused.push(format!(
            "kept the unfused module: the fused one does not verify: {}",
            d.0[0].message
        ));
        rep.fused.clear();
        rep.buffers_eliminated.clear();
        rep.kernels.1 = rep.kernels.0;
        rep.bytes.1 = rep.bytes.0;
        return (m.clone(), rep);
    }
    rep.kernels.1 = out.program.as_ref().map_or(0, |p| p.launches.len());
    rep.bytes.1 = bytes_moved(&out, &nominal);
    (out, rep)
}

/// The working state: the program and one kernel per launch (a launch's kernel is private to it,
/// so rewriting it never affects another launch).
pub(crate) struct State<'r> {
    pub(crate) prog: Program,
    pub(crate) kernels: Vec<Kernel>,
    pub(crate) rep: &'r mut FusionReport,
}

impl State<'_> {
    /// The buffer launch `i` binds to its param `p`.
    pub(crate) fn buffer(&self, i: usize, p: &str) -> Option<String> {
        let l = &self.prog.launches[i];
        l.args.iter().find(|a| a.param == p).map(|a| a.arg.clone())
    }

    /// (buffer, access) for every tensor param of launch `i`.
    pub(crate) fn tensors(&self, i: usize) -> Vec<(String, String, Access)> {
        self.kernels[i]
            .params
            .iter()
            .filter_map(|p| match &p.kind {
                ParamKind::Tensor(a, _) => Some((p.name.clone(), self.buffer(i, &p.name)?, *a)),
                ParamKind::Scalar(_) => None,
            })
            .collect()
    }

    /// The dataflow graph: launches, and an edge per buffer written by one launch and read by
    /// a later one.
    pub(crate) fn graph(&self) -> DiGraph<usize, String> {
        let mut g = DiGraph::new();
        let nodes: Vec<NodeIndex> = (0..self.kernels.len()).map(|i| g.add_node(i)).collect();
        for i in 0..nodes.len() {
            for (_, b, a) in self.tensors(i) {
                if !a.writes() {
                    continue;
                }
                for j in i + 1..nodes.len() {
                    if self
                        .tensors(j)
                        .iter()
                        .any(|(_, b2, a2)| *b2 == b && *a2 != Access::Out)
                    {
                        g.add_edge(nodes[i], nodes[j], b.clone());
                    }
                }
            }
        }
        g
    }

    /// The program-level dims of a buffer (its declared type), as printed text.
    pub(crate) fn buffer_dims(&self, b: &str) -> Option<Vec<String>> {
        let t = self
            .prog
            .params
            .iter()
            .find_map(|p| match &p.kind {
                ParamKind::Tensor(_, t) if p.name == b => Some(t.clone()),
                _ => None,
            })
            .or_else(|| {
                self.prog
                    .temps
                    .iter()
                    .find(|t| t.name == b)
                    .map(|t| t.ty.clone())
            })?;
        Some(t.dims.iter().map(|d| format!("{d}")).collect())
    }

    /// Program dim → kernel dim name, from launch `i`'s tensor bindings.
    fn dim_names(&self, i: usize) -> HashMap<String, String> {
        let mut out = HashMap::new();
        for p in &self.kernels[i].params {
            if let (ParamKind::Tensor(_, t), Some(b)) = (&p.kind, self.buffer(i, &p.name)) {
                for (kd, pd) in t.dims.iter().zip(self.buffer_dims(&b).unwrap_or_default()) {
                    out.entry(pd).or_insert_with(|| format!("{kd}"));
                }
            }
        }
        out
    }

    /// Renaming of launch `j`'s dims into launch `i`'s names, or why there is none.
    pub(crate) fn dims_into(&self, j: usize, i: usize) -> Result<HashMap<String, String>, String> {
        let into = self.dim_names(i);
        let mut map = HashMap::new();
        for (pd, kd) in self.dim_names(j) {
            let Some(n) = into.get(&pd) else {
                return Err(format!(
                    "dim `{kd}` of @{} has no counterpart",
                    self.kernels[j].name
                ));
            };
            map.insert(kd, n.clone());
        }
        Ok(map)
    }

    /// Adds to launch `i` a param bound to buffer `b` (reusing one already bound to it) and
    /// returns its name.
    pub(crate) fn bind(&mut self, i: usize, b: &str, kind: ParamKind) -> String {
        if let Some(a) = self.prog.launches[i].args.iter().find(|a| a.arg == b) {
            return a.param.clone();
        }
        let mut name = b.to_string();
        while self.kernels[i].param(&name).is_some() {
            name.push('_');
        }
        self.kernels[i].params.push(Param {
            name: name.clone(),
            kind,
            cond: None,
            span: kir_ir::Span::default(),
        });
        self.prog.launches[i].args.push(ArgBinding {
            param: name.clone(),
            arg: b.to_string(),
            span: kir_ir::Span::default(),
        });
        name
    }

    /// Merges adjacent independent launches with equal grids that share an input buffer.
    fn merge_horizontal(&mut self) -> bool {
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

    /// Fuses an elementwise consumer launch into the launch that stores the buffers it reads.
    fn fuse_epilogue(&mut self) -> bool {
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

    /// Removes temps no launch reads: their stores, params and bindings; then launches that
    /// write nothing any more.
    fn eliminate_temps(&mut self) -> bool {
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
            if edit::writes_memory(&self.kernels[i].dfg, self.kernels[i].body) {
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

/// Ops that map elements to elements at the same index (the op table's elementwise ops), except
/// `nf4`, which epilogue fusion has never taken.
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

fn elementwise(op: Opcode) -> bool {
    op.is_elementwise() && op != Opcode::Nf4
}

pub use crate::traffic::bytes_moved;
