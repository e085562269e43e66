//! E-graph rewriting of each kernel's pure dataflow (egg).
//!
//! [`lang`] generates the e-graph language from the op table, [`analysis`] carries dtype, shape
//! and constant facts (and folds constants), [`cost`] is the extraction cost model, [`convert`]
//! moves a kernel into an e-graph and back, and [`rules`] holds the rule families.
//! [`optimize_kernel`] runs the rules under explicit [`Limits`] and returns a [`KernelReport`]
//! (stop reason, rules applied, cost before and after) which is also logged with `tracing`.

pub mod analysis;
pub mod convert;
pub mod cost;
pub mod explain;
pub mod lang;
pub mod rules;

use egg::Runner;
use kir_ir::Kernel;
use rules::Rule;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Runner limits; always set explicitly (egg's defaults are not used).
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Maximum rule-application iterations.
    pub iterations: usize,
    /// Maximum e-nodes.
    pub nodes: usize,
    /// Maximum wall time of the rule runner.
    pub time: Duration,
}

impl Default for Limits {
    /// 12 iterations, 20,000 nodes, 200 ms: every kernel of the op library saturates well
    /// inside them (see `kirc explain`), so the result does not depend on machine speed.
    fn default() -> Limits {
        Limits {
            iterations: 12,
            nodes: 20_000,
            time: Duration::from_millis(200),
        }
    }
}

/// What the e-graph phase did to one kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelReport {
    /// The kernel's name.
    pub kernel: String,
    /// Why the runner stopped (`Saturated`, `IterationLimit(n)`, `NodeLimit(n)`, `TimeLimit(s)`).
    pub stop_reason: String,
    /// Runner iterations.
    pub iterations: usize,
    /// E-nodes and e-classes at the end.
    pub nodes: usize,
    /// E-classes at the end.
    pub classes: usize,
    /// How many times each rule was applied, by name.
    pub applied: BTreeMap<String, usize>,
    /// Cost model of the pure ops before and after (instructions + bytes, per program).
    pub cost_before: f64,
    /// See `cost_before`.
    pub cost_after: f64,
    /// Pure ops before and after.
    pub ops_before: usize,
    /// See `ops_before`.
    pub ops_after: usize,
    /// Why the original kernel was kept, when it was.
    pub kept_original: Option<String>,
    /// Wall time of conversion, rewriting, extraction and rebuilding (and explaining, when on).
    pub elapsed: Duration,
    /// The rewrite chain of each rewritten root, from egg's explanations (see [`explain`]);
    /// empty unless the run was [`optimize_kernel_explained`].
    pub explanations: Vec<String>,
}

/// Rewrites `k` with `rules` under `limits`. Never fails: when conversion or rebuilding is not
/// possible, or the result would cost more, the original kernel is returned and the report
/// says why.
pub fn optimize_kernel(k: &Kernel, rules: &[Rule], limits: &Limits) -> (Kernel, KernelReport) {
    run(k, rules, limits, false)
}

/// [`optimize_kernel`] with egg's explanations enabled: the report also carries the rewrite
/// chain of each rewritten root. Slower (the e-graph keeps every node ever added); only
/// `kirc explain` uses it.
pub fn optimize_kernel_explained(
    k: &Kernel,
    rules: &[Rule],
    limits: &Limits,
) -> (Kernel, KernelReport) {
    run(k, rules, limits, true)
}

/// The roots of `k`'s e-graph: every class an anchor reads, labelled by the value's name.
fn roots(k: &Kernel, conv: &convert::Conversion) -> Vec<(String, egg::Id)> {
    let mut seen = std::collections::HashSet::new();
    let mut out = vec![];
    for (o, od) in k.dfg.ops.iter() {
        if conv.pure_ops.contains(&o) {
            continue;
        }
        for v in od.uses() {
            let Some(&id) = conv.class_of.get(&v) else {
                continue;
            };
            if seen.insert(id) {
                let name = match &k.dfg.values[v].name {
                    Some(n) => format!("%{n}"),
                    None => format!("%v{}", cranelift_entity::EntityRef::index(v)),
                };
                out.push((format!("{name} (read by {})", od.opcode.name()), id));
            }
        }
    }
    out
}

fn run(k: &Kernel, rules: &[Rule], limits: &Limits, explain: bool) -> (Kernel, KernelReport) {
    let start = Instant::now();
    let cost_before = convert::kernel_cost(k);
    let ops_before = convert::pure_op_count(k);
    let mut rep = KernelReport {
        kernel: k.name.clone(),
        stop_reason: String::new(),
        iterations: 0,
        nodes: 0,
        classes: 0,
        applied: BTreeMap::new(),
        cost_before,
        cost_after: cost_before,
        ops_before,
        ops_after: ops_before,
        kept_original: None,
        elapsed: Duration::ZERO,
        explanations: vec![],
    };
    let result = (|| {
        let mut conv = convert::to_egraph_with(k, explain)?;
        let runner = Runner::default()
            .with_egraph(std::mem::take(&mut conv.graph))
            .with_iter_limit(limits.iterations)
            .with_node_limit(limits.nodes)
            .with_time_limit(limits.time)
            .run(rules);
        rep.stop_reason = match &runner.stop_reason {
            Some(r) => format!("{r:?}"),
            None => "none".into(),
        };
        rep.iterations = runner.iterations.len();
        for it in &runner.iterations {
            for (name, n) in &it.applied {
                *rep.applied.entry(name.to_string()).or_default() += n;
            }
        }
        conv.graph = runner.egraph;
        rep.nodes = conv.graph.total_number_of_nodes();
        rep.classes = conv.graph.number_of_classes();
        let new = convert::from_egraph(k, &conv)?;
        if explain {
            let roots = roots(k, &conv);
            rep.explanations = explain::rewrite_chains(&mut conv.graph, &roots);
        }
        Ok(new)
    })();
    let out = match result {
        Ok(new) => {
            let after = convert::kernel_cost(&new);
            if after <= cost_before {
                rep.cost_after = after;
                rep.ops_after = convert::pure_op_count(&new);
                new
            } else {
                rep.kept_original = Some(format!("extraction cost {after:.1} > {cost_before:.1}"));
                k.clone()
            }
        }
        Err(e) => {
            rep.kept_original = Some(e);
            k.clone()
        }
    };
    rep.elapsed = start.elapsed();
    // The target users filter on (`KIR_LOG=kir_compiler::egraph=debug`), kept as it was before
    // the module moved under `internal`.
    tracing::debug!(
        target: "kir_compiler::egraph",
        kernel = %rep.kernel,
        stop = %rep.stop_reason,
        iterations = rep.iterations,
        nodes = rep.nodes,
        cost_before = rep.cost_before,
        cost_after = rep.cost_after,
        kept_original = ?rep.kept_original,
        "egraph"
    );
    (out, rep)
}
