//! `kirc explain FILE [-D NAME=VALUE]...`: for each kernel, what the e-graph phase did — the
//! runner's stop reason and limits, every rule applied (with counts), the rewrite chain of each
//! rewritten root (egg's explanations, capped in length), the cost model and the pure op count
//! before and after, and the time taken; then, for a module with a program, the
//! `fusion` pass's decisions: kernels fused, candidates not fused and why, buffers eliminated,
//! kernels and global bytes before and after.

use crate::common::{self, CliError};
use kir_compiler::internal::egraph::rules::all_rules;
use kir_compiler::internal::egraph::{KernelReport, Limits};
use kir_compiler::internal::passes;
use std::fmt::Write;
use std::process::ExitCode;

/// Arguments of `kirc explain`.
#[derive(clap::Args)]
pub struct Args {
    /// A .kir file, or the name of a built-in op (see `kirc ops`).
    file: String,
    /// Override a specialization constant (repeatable; the last one of a name wins).
    #[arg(short = 'D', value_name = "NAME=VALUE", value_parser = common::parse_define)]
    defines: Vec<(String, String)>,
}

/// The text `kirc explain` prints for one kernel.
pub fn render(r: &KernelReport, limits: &Limits) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "kernel @{}", r.kernel);
    let _ = writeln!(
        s,
        "  runner: stopped by {} after {} iteration(s), {} e-nodes in {} e-classes \
         (limits: {} iterations, {} nodes, {} ms)",
        r.stop_reason,
        r.iterations,
        r.nodes,
        r.classes,
        limits.iterations,
        limits.nodes,
        limits.time.as_millis()
    );
    if r.applied.is_empty() {
        let _ = writeln!(s, "  rules applied: none");
    } else {
        let _ = writeln!(s, "  rules applied:");
        for (name, n) in &r.applied {
            let _ = writeln!(s, "    {name} ×{n}");
        }
    }
    if !r.explanations.is_empty() {
        let _ = writeln!(s, "  rewrite chains (rule ⇒ subterm it produced):");
        for line in &r.explanations {
            let _ = writeln!(s, "    {line}");
        }
    }
    let _ = writeln!(
        s,
        "  cost: {:.1} -> {:.1} ({} pure ops -> {})",
        r.cost_before, r.cost_after, r.ops_before, r.ops_after
    );
    if let Some(why) = &r.kept_original {
        let _ = writeln!(s, "  kept the original kernel: {why}");
    }
    s
}

/// The text `kirc explain` prints for the `fusion` pass of a module with a program.
pub fn render_fusion(r: &passes::FusionReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "fusion");
    for f in &r.fused {
        let _ = writeln!(s, "  fused: {f}");
    }
    for f in &r.not_fused {
        let _ = writeln!(s, "  not fused: {f}");
    }
    let elim = if r.buffers_eliminated.is_empty() {
        "none".to_string()
    } else {
        r.buffers_eliminated.join(", ")
    };
    let _ = writeln!(s, "  buffers eliminated: {elim}");
    let _ = writeln!(s, "  kernels launched: {} -> {}", r.kernels.0, r.kernels.1);
    let b = |x: Option<u64>| x.map_or("unknown".to_string(), |v| v.to_string());
    let _ = writeln!(
        s,
        "  global bytes (every dim = {}): {} -> {}",
        passes::fusion::NOMINAL_DIM,
        b(r.bytes.0),
        b(r.bytes.1)
    );
    s
}

/// Runs `kirc explain`.
pub fn main(a: Args) -> Result<ExitCode, CliError> {
    let src = common::load(&a.file)?;
    let f = common::frontend(&src, &a.defines)?;
    let limits = Limits::default();
    let (_, reports) = passes::egraph_explained(&f.specialized, &all_rules(), &limits);
    let mut total = std::time::Duration::ZERO;
    let mut text = String::new();
    for r in &reports {
        text += &render(r, &limits);
        total += r.elapsed;
    }
    let _ = writeln!(
        text,
        "e-graph phase: {:.2} ms for {} kernel(s) (with explanations on; the pipeline runs without)",
        total.as_secs_f64() * 1e3,
        reports.len()
    );
    if f.optimized.program.is_some() {
        let (_, rep) = passes::fusion_with_report(&f.optimized);
        text += &render_fusion(&rep);
    }
    common::out(&text)?;
    Ok(ExitCode::SUCCESS)
}
