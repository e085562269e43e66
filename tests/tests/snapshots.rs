//! Golden snapshots (insta): canonical IR of every op and test input, generic and specialized,
//! and the rendered diagnostics of every error case in `tests/in/errors/`.
//! CI never writes snapshots; see docs/testing.md for how to review and update them.

use kir_tests::{kir_files, stem};

fn is_error_case(p: &std::path::Path) -> bool {
    p.parent().is_some_and(|d| d.ends_with("errors"))
}

#[test]
fn canonical_ir() {
    for f in kir_files().iter().filter(|p| !is_error_case(p)) {
        let src = std::fs::read_to_string(f).expect("read");
        let name = stem(f);
        let m = kir_ir::text::parse(&src).unwrap_or_else(|e| panic!("{}", e.render(&name, &src)));
        insta::assert_snapshot!(format!("ir__{name}"), kir_ir::text::print(&m));
        let (_, spec) = kir_compiler::internal::pipeline::frontend(&src, &[])
            .unwrap_or_else(|e| panic!("{}", e.render(&name, &src)));
        insta::assert_snapshot!(format!("spec__{name}"), kir_ir::text::print(&spec));
    }
}

/// One representative specialization per op, beyond the defaults.
#[test]
fn representative_specializations() {
    let cases: &[(&str, &[(&str, &str)])] = &[
        (
            "attention_fwd",
            &[("DTYPE", "bf16"), ("HEAD_DIM", "128"), ("CAUSAL", "1")],
        ),
        (
            "gemm",
            &[("DTYPE", "f16"), ("TRANS_B", "1"), ("EPILOGUE", "swiglu")],
        ),
        ("rmsnorm_bwd", &[("DTYPE", "f32"), ("GROUPS", "2")]),
    ];
    for (op, defs) in cases {
        let src = kir_compiler::internal::oplib::builtin(op).expect("built-in op");
        let d: Vec<(String, String)> = defs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        let (_, spec) = kir_compiler::internal::pipeline::frontend(src, &d)
            .unwrap_or_else(|e| panic!("{}", e.render(op, src)));
        let tag: Vec<String> = defs.iter().map(|(a, b)| format!("{a}={b}")).collect();
        insta::assert_snapshot!(
            format!("spec__{op}__{}", tag.join("_")),
            kir_ir::text::print(&spec)
        );
    }
}

#[test]
fn error_cases() {
    let mut n = 0;
    for f in kir_files().iter().filter(|p| is_error_case(p)) {
        let src = std::fs::read_to_string(f).expect("read");
        let name = format!("errors/{}.kir", stem(f));
        let rendered = match kir_compiler::internal::pipeline::frontend(&src, &[]) {
            Ok(_) => panic!("{name} is an error case but compiles cleanly"),
            Err(e) => e.render(&name, &src),
        };
        assert!(rendered.contains(&format!("{name}:")), "{rendered}");
        insta::assert_snapshot!(format!("error__{}", stem(f)), rendered);
        n += 1;
    }
    assert!(n >= 10, "expected at least 10 error cases, found {n}");
}
