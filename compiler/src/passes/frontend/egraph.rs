//! The `egraph` pass: rewrites every kernel's pure dataflow with the e-graph rule families.

use crate::egraph::rules::{all_rules, Rule};
use crate::egraph::{optimize_kernel, optimize_kernel_explained, KernelReport, Limits};
use kir_ir::{verifier, Module};

/// Rewrites every kernel of a specialized module with all rules under the default limits.
pub fn egraph(m: &Module) -> Module {
    egraph_with(m, &all_rules(), &Limits::default()).0
}

/// Rewrites every kernel of `m` with `rules` under `limits`; returns the module and one report
/// per kernel. If the rewritten module does not verify, the input is returned unchanged and every
/// report says so (the verifier is the last line of defence, and a test keeps it unused).
pub fn egraph_with(m: &Module, rules: &[Rule], limits: &Limits) -> (Module, Vec<KernelReport>) {
    run(m, rules, limits, false)
}

/// [`egraph_with`] with egg's explanations on: each report also carries the rewrite chain of
/// every rewritten root (for `kirc explain`; slower, never used by the pipeline).
pub fn egraph_explained(
    m: &Module,
    rules: &[Rule],
    limits: &Limits,
) -> (Module, Vec<KernelReport>) {
    run(m, rules, limits, true)
}

fn run(m: &Module, rules: &[Rule], limits: &Limits, explain: bool) -> (Module, Vec<KernelReport>) {
    let opt = if explain {
        optimize_kernel_explained
    } else {
        optimize_kernel
    };
    let mut out = m.clone();
    let mut reports = vec![];
    for k in out.kernels.values_mut() {
        let (nk, rep) = opt(k, rules, limits);
        *k = nk;
        reports.push(rep);
    }
    if let Err(d) = verifier::verify(&out) {
        let why = format!("the rewritten module does not verify: {}", d.0[0].message);
        for r in &mut reports {
            r.kept_original = Some(why.clone());
            r.cost_after = r.cost_before;
            r.ops_after = r.ops_before;
            r.explanations.clear();
        }
        return (m.clone(), reports);
    }
    (out, reports)
}
