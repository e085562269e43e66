//! The interpreter's before/after check driven from the pass registry: for every pass that
//! `PassManager::standard()` lists and that says it preserves results, the module right before
//! it and right after it run on the same fresh random inputs (ragged dims, magnitudes 1 and 3)
//! and must agree. Front-end passes may reassociate floats, so they are held to the dtype's
//! documented tolerance; scheduling passes move data and never arithmetic, so the modules they
//! produce — the ones a compilation for the target lowers, from the compile plan's schedule
//! search — must give bit-identical outputs under several scheduler seeds. A pass added to the
//! registry is checked here with no new test.

use kir_backends::interp::{self, HostArg, HostTensor, RunOptions};
use kir_backends::Target;
use kir_compiler::internal::compile::Emit;
use kir_compiler::internal::pass::{PassManager, Phase};
use kir_compiler::internal::pipeline;
use kir_compiler::internal::plan::{CompilePlan, Flags};
use kir_ir::Module;
use kir_tests::inputs::inputs;
use kir_tests::{compare, tolerance, F64s, Rng};
use std::collections::BTreeMap;

/// The sources checked: op-library kernels at their defaults and small variants.
fn corpus() -> Vec<(&'static str, Vec<(String, String)>)> {
    let d = |p: &[(&str, &str)]| {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    vec![
        ("rmsnorm_fwd", d(&[])),
        ("layernorm_fwd", d(&[])),
        ("swiglu", d(&[])),
        ("gemm", d(&[("EPILOGUE", "silu")])),
        ("attention_fwd", d(&[("HEAD_DIM", "64"), ("CAUSAL", "1")])),
        ("attention_fwd", d(&[("HEAD_DIM", "64")])),
    ]
}

/// Runs `m` on `args` (scheduler seed `seed`).
fn run(
    what: &str,
    m: &Module,
    args: &BTreeMap<String, HostArg>,
    seed: u64,
) -> BTreeMap<String, HostTensor> {
    let opts = RunOptions {
        parallel: true,
        seed,
    };
    interp::run_with(m, args, &opts).unwrap_or_else(|e| panic!("{what}: {e}"))
}

#[test]
fn every_front_end_pass_keeps_results() {
    let pm = PassManager::standard();
    let mut checked = BTreeMap::new();
    for (op, defs) in corpus() {
        let src = kir_compiler::internal::oplib::builtin(op).expect("op");
        let mut seen: Vec<(String, Module)> = Vec::new();
        pm.run_frontend(src, &defs, &mut |pass, m| {
            seen.push((pass.to_string(), m.clone()))
        })
        .unwrap_or_else(|e| panic!("{op}: {}", e.render(op, src)));
        // From `specialize` on, each module runs; `parse`'s generic module does not.
        for pair in seen.windows(2).skip(1) {
            let ((_, before), (pass, after)) = (&pair[0], &pair[1]);
            let p = pm.get(pass).expect("registered");
            assert_eq!(p.phase(), Phase::Frontend);
            if !p.preserves().results {
                continue;
            }
            for mag in [1.0, 3.0] {
                let what = format!("{op} {defs:?} {pass} mag {mag}");
                let mut rng = Rng::fresh(&what);
                let args = inputs(before, mag, &mut rng);
                let (a, b) = (run(&what, before, &args, 0), run(&what, after, &args, 0));
                for (name, ta) in &a {
                    compare(
                        &format!("{what}: {name}"),
                        b[name].data.f64s(),
                        ta.data.f64s(),
                        tolerance(ta.dtype),
                    );
                }
            }
            *checked.entry(pass.clone()).or_insert(0) += 1;
        }
    }
    // Every registered front-end pass but `specialize` (whose input does not run) was checked.
    for name in pm.names().iter().skip(2) {
        if pm.get(name).is_some_and(|p| p.phase() == Phase::Frontend) {
            assert!(
                checked.contains_key(*name),
                "{name} was never checked: {checked:?}"
            );
        }
    }
}

#[test]
fn every_scheduling_pass_the_plan_runs_keeps_results_exactly() {
    let mut checked = BTreeMap::new();
    for target in [Target::Sm90a, Target::Sm80] {
        for (op, defs) in corpus() {
            let src = kir_compiler::internal::oplib::builtin(op).expect("op");
            let plan = CompilePlan::resolve(src, &defs, target, Emit::Ptx, Flags::default())
                .expect("plan");
            let mut seen: Vec<(String, Module)> = Vec::new();
            pipeline::compile_observed(src, &plan, &mut |pass, m| {
                seen.push((pass.to_string(), m.clone()))
            })
            .unwrap_or_else(|e| panic!("{op} {target:?}: {e}"));
            let first = seen
                .iter()
                .position(|(p, _)| pipeline::SCHEDULE_PASSES.contains(&p.as_str()));
            let Some(first) = first else { continue };
            let what = format!("{op} {defs:?} {target:?}");
            let mut rng = Rng::fresh(&what);
            let reference = &seen[first - 1].1;
            let args = inputs(reference, 3.0, &mut rng);
            let want = run(&what, reference, &args, 0);
            for (pass, m) in &seen[first..] {
                for seed in [0, 1, 7] {
                    let got = run(&format!("{what} {pass} seed {seed}"), m, &args, seed);
                    for (name, t) in &want {
                        let (g, w) = (got[name].data.f64s(), t.data.f64s());
                        let same = g.iter().zip(w).all(|(x, y)| x.to_bits() == y.to_bits());
                        assert!(
                            same && g.len() == w.len(),
                            "{what} {pass} seed {seed}: {name} differs"
                        );
                    }
                }
                *checked.entry(pass.clone()).or_insert(0) += 1;
            }
        }
    }
    for pass in ["pipelining", "warp_specialize", "persistent"] {
        assert!(checked.contains_key(pass), "{pass} never ran: {checked:?}");
    }
}
