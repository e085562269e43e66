//! The `egraph` pass, differentially: for every kernel of the op library and of tests/in (with
//! several specializations), the interpreter runs the program before and after the pass on
//! fresh random inputs (magnitudes 1 and 3) and every output agrees within the output dtype's
//! tolerance. A deliberately wrong rule is shown to be caught by the same comparison.

use kir_backends::interp::{self, HostTensor};
use kir_compiler::internal::egraph::rules::{all_rules, rule, var, Rule};
use kir_compiler::internal::egraph::Limits;
use kir_compiler::internal::{passes, pipeline};
use kir_ir::Module;
use kir_tests::F64s;
use kir_tests::{compare, inputs::inputs, tolerance, Rng};
use std::time::Instant;

/// Runs `before` and `after` on the same random inputs and compares every output.
fn differential(what: &str, before: &Module, after: &Module) {
    for mag in [1.0, 3.0] {
        let mut rng = Rng::fresh(what);
        let args = inputs(before, mag, &mut rng);
        let a = interp::run(before, &args).unwrap_or_else(|e| panic!("{what}: before: {e}"));
        let b = interp::run(after, &args).unwrap_or_else(|e| panic!("{what}: after: {e}"));
        for (name, ta) in &a {
            let tb: &HostTensor = &b[name];
            compare(
                &format!("{what} mag {mag}: {name}"),
                tb.data.f64s(),
                ta.data.f64s(),
                tolerance(ta.dtype),
            );
        }
    }
}

/// A source name, its text and its `-D` overrides.
type Case = (String, String, Vec<(String, String)>);

/// Every op-library and tests/in source with the specializations the test covers.
fn corpus() -> Vec<Case> {
    let d = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect::<Vec<_>>()
    };
    let mut v = vec![];
    for (name, src) in kir_compiler::internal::oplib::builtins() {
        let mut specs = vec![d(&[]), d(&[("DTYPE", "f32")])];
        match name {
            "attention_fwd" => {
                specs.push(d(&[
                    ("CAUSAL", "1"),
                    ("MASK", "1"),
                    ("SOFTCAP", "1"),
                    ("DTYPE", "f32"),
                ]));
                specs.push(d(&[
                    ("WINDOW", "1"),
                    ("CAUSAL", "1"),
                    ("OUT_LAYOUT", "bshd"),
                ]));
            }
            "gemm" => {
                specs.push(d(&[("EPILOGUE", "swiglu")]));
                specs.push(d(&[("EPILOGUE", "bias"), ("C_IN", "1"), ("DTYPE", "f32")]));
            }
            "gemm_nf4" => {
                specs.push(d(&[("GATE_UP", "1")]));
                specs.push(d(&[("TRANSPOSE", "1")]));
            }
            _ => {}
        }
        for s in specs {
            v.push((name.to_string(), src.to_string(), s));
        }
    }
    for p in kir_tests::kir_files() {
        if p.parent().is_some_and(|d| d.ends_with("in")) {
            let src = std::fs::read_to_string(&p).expect("read");
            v.push((kir_tests::stem(&p), src, vec![]));
        }
    }
    v
}

#[test]
fn every_kernel_agrees_before_and_after() {
    let mut rewritten = 0;
    for (name, src, defs) in corpus() {
        let what = format!("{name} {defs:?}");
        let f = pipeline::run_observed(&src, &defs, &mut |_, _| {})
            .unwrap_or_else(|e| panic!("{what}: {}", e.render(&name, &src)));
        let (_, reports) = passes::egraph_with(&f.specialized, &all_rules(), &Limits::default());
        for r in &reports {
            assert_eq!(r.kept_original, None, "{what}: kernel {} kept", r.kernel);
            assert!(
                r.stop_reason.starts_with("Saturated"),
                "{what}: {}",
                r.stop_reason
            );
            assert!(r.cost_after <= r.cost_before, "{what}");
            rewritten += (r.cost_after < r.cost_before) as usize;
        }
        differential(&what, &f.specialized, &f.optimized);
    }
    assert!(rewritten >= 5, "only {rewritten} kernels changed");
}

#[test]
fn attention_fwd_phase_is_fast() {
    let src = kir_compiler::internal::oplib::builtin("attention_fwd").expect("op");
    let (_, spec) = pipeline::frontend(src, &[]).expect("frontend");
    let rules = all_rules();
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        let _ = passes::egraph_with(&spec, &rules, &Limits::default());
        best = best.min(t.elapsed().as_secs_f64());
    }
    eprintln!("egraph phase for attention_fwd: {:.2} ms", best * 1e3);
    assert!(best < 0.010, "{best}");
}

/// exp(x) = exp2(x) is wrong (it forgets the log2 e multiplier).
fn broken_rule() -> Rule {
    rule("exp-to-exp2-broken", "(exp ?x)", |g, r, s| {
        let x = var(s, "?x")?;
        Some(kir_compiler::internal::egraph::rules::add_like(
            g,
            kir_ir::Opcode::Exp2,
            r,
            vec![x],
        ))
    })
}

const EXP_KERNEL: &str = "module m\n\n\
    kernel @k(x: in tensor<f32>[N], y: out tensor<f32>[N]) grid [cdiv(N, 64), 1, 1] {\n\
    \x20 %i = program_id 0 : i32\n\
    \x20 %bs = const 64 : i32\n\
    \x20 %o = mul %i, %bs : i32\n\
    \x20 %t = load x[%o] other 0.0 : tile<64xf32>\n\
    \x20 %e = exp %t : tile<64xf32>\n\
    \x20 store y[%o], %e guard\n\
    }\n";

#[test]
fn the_differential_test_catches_a_broken_rule() {
    let (_, spec) = pipeline::frontend(EXP_KERNEL, &[]).expect("frontend");
    // The real rule set rewrites exp and agrees ...
    let (good, _) = passes::egraph_with(&spec, &all_rules(), &Limits::default());
    assert!(kir_ir::text::print(&good).contains("exp2"));
    differential("exp kernel", &spec, &good);
    // ... the broken rule rewrites it too, and the comparison fails.
    let mut rules = all_rules();
    rules.retain(|r| r.name.as_str() != "exp-to-exp2");
    rules.push(broken_rule());
    let (bad, reps) = passes::egraph_with(&spec, &rules, &Limits::default());
    assert_eq!(reps[0].applied.get("exp-to-exp2-broken"), Some(&1));
    let caught = std::panic::catch_unwind(|| differential("broken", &spec, &bad));
    assert!(caught.is_err(), "the broken rule was not caught");
}

/// The IR after the pass for the rule-family example and attention_fwd, and the rules applied
/// (the `kirc explain` data): reviewed as code when they change.
#[test]
fn snapshots_after_egraph() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let rules_src = std::fs::read_to_string(root.join("in/egraph_rules.kir")).expect("read");
    let attn = kir_compiler::internal::oplib::builtin("attention_fwd").expect("op");
    for (name, src) in [
        ("egraph_rules", rules_src.as_str()),
        ("attention_fwd", attn),
    ] {
        let ir = pipeline::dump_after(src, &[], "egraph").expect("dump");
        let (_, spec) = pipeline::frontend(src, &[]).expect("frontend");
        let (_, reps) = passes::egraph_with(&spec, &all_rules(), &Limits::default());
        let applied: Vec<String> = reps
            .iter()
            .map(|r| {
                format!(
                    "@{}: {:?} cost {:.1} -> {:.1}",
                    r.kernel, r.applied, r.cost_before, r.cost_after
                )
            })
            .collect();
        insta::assert_snapshot!(
            format!("egraph__{name}"),
            format!("{}\n\n{ir}", applied.join("\n"))
        );
    }
}

/// `kirc explain`'s rewrite chains: on with `egraph_explained` (naming the rule that rewrote the
/// stored value), absent from the pipeline's `egraph_with`, and the same module either way.
#[test]
fn explanations_only_when_asked_for() {
    let (_, spec) = pipeline::frontend(EXP_KERNEL, &[]).expect("frontend");
    let (plain, reps) = passes::egraph_with(&spec, &all_rules(), &Limits::default());
    assert!(reps[0].explanations.is_empty());
    let (explained, reps) = passes::egraph_explained(&spec, &all_rules(), &Limits::default());
    let text = reps[0].explanations.join("\n");
    assert!(text.contains("%e (read by store)"), "{text}");
    assert!(text.contains("exp-to-exp2 ⇒ (exp2"), "{text}");
    assert_eq!(kir_ir::text::print(&plain), kir_ir::text::print(&explained));
}
