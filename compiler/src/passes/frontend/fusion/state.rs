//! The state and report of the `fusion` pass: the [`FusionReport`], the nominal program dim the
//! byte estimates use, and the working [`State`] (the program and one kernel per launch) with
//! the queries every rewrite of the pass shares (bindings, buffer dims, the launch graph).

use kir_ir::{Access, ArgBinding, Kernel, Param, ParamKind, Program};
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
}
