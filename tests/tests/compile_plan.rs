//! The compile plan and the pass manager as a library: the target's own shared-memory limit
//! bounds every default, `ScheduleOptions` has one constructor, the dump of a scheduling pass is
//! the module that was lowered, and a pass registered from outside the compiler runs, dumps
//! and verifies like the built-in ones.

use kir_backends::Target;
use kir_compiler::internal::compile::{compile, compile_stage, CompileError, Emit, Stage};
use kir_compiler::internal::pass::{Level, Pass, PassContext, PassManager, Phase, Preserves};
use kir_compiler::internal::pipeline::{self, ScheduleOptions};
use kir_compiler::internal::plan::{CompilePlan, Flags};
use kir_ir::{Diagnostics, Module};

/// Every kernel of META `meta` fits `target`'s shared memory.
fn fits(meta: &serde_json::Value, target: Target, what: &str) {
    let kernels = meta["kernels"].as_array().expect("kernels");
    assert!(!kernels.is_empty(), "{what}");
    for k in kernels {
        let b = k["shared_bytes"].as_u64().expect("shared_bytes");
        assert!(
            b <= target.smem_per_block(),
            "{what}: {} needs {b} bytes",
            k["name"]
        );
    }
}

#[test]
fn every_default_fits_its_targets_shared_memory() {
    for (name, src) in kir_compiler::internal::oplib::builtins() {
        for target in Target::ALL {
            for emit in [Emit::Ptx, Emit::Cuda] {
                let c = compile(src, &[], None, target, emit)
                    .unwrap_or_else(|e| panic!("{name} {target:?} {emit:?}: {e}"));
                fits(
                    c.meta.as_ref().expect("meta"),
                    target,
                    &format!("{name} {target:?} {emit:?}"),
                );
            }
        }
    }
    // The cases hostile testing found, with their features.
    let cases: &[(&str, &[(&str, &str)], Target, Emit)] = &[
        ("attention_bwd", &[], Target::Sm120a, Emit::Ptx),
        (
            "attention_bwd",
            &[("CAUSAL", "1")],
            Target::Sm80,
            Emit::Cuda,
        ),
        ("attention_fwd", &[], Target::Sm120a, Emit::Cuda),
        (
            "attention_fwd",
            &[("CAUSAL", "1"), ("VARLEN", "1")],
            Target::Sm120a,
            Emit::Cuda,
        ),
        (
            "attention_fwd",
            &[("HEAD_DIM", "256")],
            Target::Sm80,
            Emit::Ptx,
        ),
        (
            "attention_fwd",
            &[("HEAD_DIM", "256")],
            Target::Sm80,
            Emit::Cuda,
        ),
    ];
    for (op, defs, target, emit) in cases {
        let d: Vec<(String, String)> = defs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        let src = kir_compiler::internal::oplib::builtin(op).expect("op");
        let c =
            compile(src, &d, None, *target, *emit).unwrap_or_else(|e| panic!("{op} {defs:?}: {e}"));
        fits(
            c.meta.as_ref().expect("meta"),
            *target,
            &format!("{op} {defs:?} {target:?}"),
        );
    }
}

#[test]
fn a_tile_over_the_targets_limit_is_an_error_naming_it() {
    let src = kir_compiler::internal::oplib::builtin("attention_fwd").expect("op");
    let d = vec![
        ("BLOCK_M".to_string(), "128".to_string()),
        ("BLOCK_N".to_string(), "128".to_string()),
    ];
    for (target, emit) in [(Target::Sm120a, Emit::Cuda), (Target::Sm80, Emit::Cuda)] {
        let e = compile(src, &d, None, target, emit).expect_err("over the limit");
        let limit = target.smem_per_block().to_string();
        assert!(e.to_string().contains(&limit), "{target:?}: {e}");
    }
    // An explicit ring depth that does not fit is not quietly reduced.
    let opts = kir_backends::ptx::PtxOptions {
        stages: Some(8),
        ..Default::default()
    };
    let e = compile_stage(
        src,
        &[],
        None,
        Target::Sm120a,
        Emit::Ptx,
        Stage::Output,
        &opts,
    );
    assert!(
        matches!(e, Err(CompileError::Source(_))),
        "{:?}",
        e.map(|c| c.text.len())
    );
}

#[test]
fn schedule_options_have_one_constructor() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    let mut stack = vec![
        root.join("compiler"),
        root.join("backends"),
        root.join("tests"),
        root.join("ir"),
    ];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).expect("source");
                let needle = ["ScheduleOptions", " {"].concat();
                for (i, line) in text.lines().enumerate() {
                    let literal = line.contains(&needle)
                        && !line.contains("struct")
                        && !line.contains(&["-> ", &needle].concat());
                    if literal {
                        found.push(format!("{}:{}", p.display(), i + 1));
                    }
                }
            }
        }
    }
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("plan.rs"), "{found:?}");
}

#[test]
fn the_dump_of_the_last_scheduling_pass_is_the_lowered_module() {
    for (op, target) in [
        ("gemm", Target::Sm90a),
        ("attention_fwd", Target::Sm90a),
        ("attention_fwd", Target::Sm80),
    ] {
        let src = kir_compiler::internal::oplib::builtin(op).expect("op");
        let plan =
            CompilePlan::resolve(src, &[], target, Emit::Ptx, Flags::default()).expect("plan");
        let mut last = None;
        let c = pipeline::compile_observed(src, &plan, &mut |pass, m| {
            last = Some((pass.to_string(), kir_ir::text::print(m)));
        })
        .expect("compiles");
        let (pass, text) = last.expect("a pass ran");
        assert!(
            pipeline::SCHEDULE_PASSES.contains(&pass.as_str()),
            "{op}: {pass}"
        );
        assert_eq!(text, kir_ir::text::print(&c.module), "{op} {target:?}");
    }
}

/// A toy pass from outside the compiler: it appends a doc line to the module.
struct Stamp;

impl Pass for Stamp {
    fn name(&self) -> &'static str {
        "stamp"
    }
    fn phase(&self) -> Phase {
        Phase::Frontend
    }
    fn needs(&self) -> Level {
        Level::Specialized
    }
    fn produces(&self) -> Level {
        Level::Specialized
    }
    fn preserves(&self) -> Preserves {
        Preserves {
            results: true,
            signature: true,
        }
    }
    fn run(&self, m: &Module, _cx: &PassContext) -> Result<Option<Module>, Diagnostics> {
        let mut out = m.clone();
        out.doc.push(" stamped by a test pass".to_string());
        Ok(Some(out))
    }
}

#[test]
fn a_pass_registered_from_a_test_runs_and_dumps() {
    let mut pm = PassManager::standard();
    pm.insert_after("egraph", Box::new(Stamp))
        .expect("registers");
    let names = pm.names();
    let at = names.iter().position(|n| *n == "stamp").expect("listed");
    assert_eq!(names[at - 1], "egraph");
    let src = kir_compiler::internal::oplib::builtin("rmsnorm_fwd").expect("op");
    let none = ScheduleOptions::default();
    let before = pm.dump_after(src, &[], "egraph", &none).expect("egraph");
    let after = pm.dump_after(src, &[], "stamp", &none).expect("stamp");
    assert!(!before.contains("stamped by a test pass"), "{before}");
    assert!(after.contains("stamped by a test pass"), "{after}");
    // It flows on to the front end's output.
    let f = pm
        .run_frontend(src, &[], &mut |_, _| {})
        .expect("front end");
    assert!(
        f.output.doc.iter().any(|d| d.contains("stamped")),
        "{:?}",
        f.output.doc
    );
    // The standard pipeline does not have it.
    assert!(!PassManager::standard().names().contains(&"stamp"));
    // Misplaced or duplicate registrations are errors.
    assert!(pm.insert_after("egraph", Box::new(Stamp)).is_err());
    let mut pm = PassManager::standard();
    assert!(pm.insert_after("no_such_pass", Box::new(Stamp)).is_err());
    assert!(
        pm.insert_after("pipelining", Box::new(Stamp)).is_err(),
        "front end after scheduling"
    );
}

#[test]
fn every_registered_pass_is_dumpable_and_named_once() {
    let pm = PassManager::standard();
    let names = pm.names();
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), names.len(), "{names:?}");
    assert_eq!(names, *pipeline::PASSES);
    let src = kir_compiler::internal::oplib::builtin("attention_fwd").expect("op");
    for name in &names {
        let opts = kir_compiler::internal::plan::explore(
            Some(Target::Sm90a),
            name,
            None,
            Default::default(),
            None,
        );
        let text = pm
            .dump_after(src, &[], name, &opts)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(text.contains("kernel @"), "{name}");
        if let Some(p) = pm.get(name) {
            assert!(p.needs() <= p.produces(), "{name}");
        }
    }
}
