//! The public front door (`kir_compiler::Kernel`) against `kirc compile`, the binary itself:
//! for the same source and settings, the code, META.json and the report (less its cache line)
//! are byte for byte what kirc writes, and a failure renders exactly kirc's standard error.
//! Cases: gemm and attention_fwd on sm_90a (with and without flags and constants), CUDA C,
//! rmsnorm_fwd on every target, and a user's source file, valid and broken.

mod common;

use common::{kirc, s, scratch, stderr};
use kir_compiler::{Backend, Error, Kernel, Target};

/// Runs `kirc compile FILE ARGS -o out --meta meta.json [--report=r.txt] --no-cache` and
/// returns (code, META.json, report) as kirc wrote them.
fn kirc_compile(test: &str, file: &str, args: &[&str], ptx: bool) -> (String, String, String) {
    let d = scratch("api_parity", test);
    let (out, meta, report) = (d.join("out"), d.join("meta.json"), d.join("report.txt"));
    let report_arg = format!("--report={}", s(&report));
    let mut all = vec![
        "compile",
        file,
        "-o",
        s(&out),
        "--meta",
        s(&meta),
        "--no-cache",
    ];
    if ptx {
        all.push(&report_arg);
    }
    all.extend_from_slice(args);
    let o = kirc(&all);
    assert_eq!(o.status.code(), Some(0), "kirc {all:?}: {}", stderr(&o));
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
    (read(&out), read(&meta), read(&report))
}

/// Compiles `k` and checks it against kirc with `args` (the same settings as flags).
fn same_as_kirc(test: &str, k: Kernel, file: &str, args: &[&str], ptx: bool) {
    let (code, meta, report) = kirc_compile(test, file, args, ptx);
    let c = k
        .cache(false)
        .compile()
        .unwrap_or_else(|e| panic!("{test}: {}", e.render()));
    assert!(!code.is_empty(), "{test}: kirc wrote no code");
    assert!(code == c.code(), "{test}: the code differs from kirc's");
    assert_eq!(meta, c.meta_json(), "{test}: META.json differs from kirc's");
    assert_eq!(c.cache_outcome(), "cache: off");
    if ptx {
        assert_eq!(
            report,
            format!("{}{}\n", c.report(), c.cache_outcome()),
            "{test}: the report differs from kirc's"
        );
        assert!(!c.report().is_empty());
    }
    // The symbols are the code's entries, in META's order.
    for sym in c.symbols() {
        assert!(code.contains(sym), "{test}: symbol {sym} not in the code");
    }
}

#[test]
fn gemm_on_sm90a_matches_kirc() {
    same_as_kirc(
        "gemm",
        Kernel::op("gemm").target(Target::Sm90a),
        "gemm",
        &["--target", "sm_90a"],
        true,
    );
}

#[test]
fn gemm_with_flags_and_constants_matches_kirc() {
    let k = Kernel::op("gemm")
        .target(Target::Sm90a)
        .define("DTYPE", "f16")
        .warps(8)
        .stages(3)
        .warp_specialize(false);
    let args = [
        "--target",
        "sm_90a",
        "-D",
        "DTYPE=f16",
        "--warps",
        "8",
        "--stages",
        "3",
        "--warp-specialize",
        "off",
    ];
    same_as_kirc("gemm_flags", k, "gemm", &args, true);
}

#[test]
fn attention_fwd_on_sm90a_matches_kirc() {
    let k = Kernel::op("attention_fwd").target(Target::Sm90a);
    same_as_kirc("attn", k, "attention_fwd", &["--target", "sm_90a"], true);
    let k = Kernel::load("attention_fwd.kir")
        .target(Target::Sm90a)
        .define("HEAD_DIM", 64);
    let args = ["--target", "sm_90a", "-D", "HEAD_DIM=64"];
    same_as_kirc("attn64", k, "attention_fwd.kir", &args, true);
}

#[test]
fn cuda_c_matches_kirc() {
    let k = Kernel::op("attention_fwd")
        .target(Target::Sm80)
        .backend(Backend::Cuda);
    let args = ["--target", "sm_80", "--emit", "cuda"];
    same_as_kirc("cuda_attn", k, "attention_fwd", &args, false);
    let k = Kernel::op("layernorm_fwd")
        .target(Target::Sm120a)
        .backend(Backend::Cuda);
    let args = ["--target", "sm_120a", "--emit", "cuda"];
    same_as_kirc("cuda_ln", k, "layernorm_fwd", &args, false);
}

#[test]
fn rmsnorm_on_every_target_matches_kirc() {
    for t in Target::ALL {
        let k = Kernel::op("rmsnorm_fwd").target(t);
        let test = format!("rms_{}", t.name());
        same_as_kirc(&test, k, "rmsnorm_fwd", &["--target", t.name()], true);
    }
}

/// A user's kernel: `y = x + x` over 128-element blocks.
const USER: &str = "module twice

kernel @double(x: in tensor<f32>[N], y: out tensor<f32>[N]) grid [cdiv(N, 128), 1, 1] {
  %p = program_id 0 : i32
  %b = const 128 : i32
  %o = mul %p, %b : i32
  %x = load x[%o] other 0.0 : tile<128xf32>
  %y = add %x, %x : tile<128xf32>
  store y[%o], %y guard
}
";

#[test]
fn a_user_source_matches_kirc() {
    let d = scratch("api_parity", "user_src");
    let path = d.join("twice.kir");
    std::fs::write(&path, USER).unwrap();
    for (t, b, emit) in [
        (Target::Sm90a, Backend::Ptx, "ptx"),
        (Target::Sm80, Backend::Ptx, "ptx"),
        (Target::Sm100a, Backend::Cuda, "cuda"),
    ] {
        let test = format!("user_{}_{emit}", t.name());
        let args = ["--target", t.name(), "--emit", emit];
        let k = Kernel::path(&path).target(t).backend(b);
        same_as_kirc(&test, k, s(&path), &args, b == Backend::Ptx);
        // The same text given as source, under the same name, compiles to the same bytes.
        let a = Kernel::path(&path).target(t).backend(b).cache(false);
        let b2 = Kernel::source(s(&path), USER)
            .target(t)
            .backend(b)
            .cache(false);
        assert_eq!(a.compile().unwrap(), b2.compile().unwrap());
    }
}

#[test]
fn errors_render_as_kirc_prints_them() {
    let d = scratch("api_parity", "errors");
    let path = d.join("broken.kir");
    // Line 5, column 8: an op that does not exist.
    let broken = USER.replace("%x = load", "%x = frobnicate");
    std::fs::write(&path, &broken).unwrap();
    let o = kirc(&["compile", s(&path), "--no-cache"]);
    assert_eq!(o.status.code(), Some(2));
    let e = Kernel::path(&path).cache(false).compile().unwrap_err();
    assert_eq!(e.render(), stderr(&o));
    let loc = e.location().expect("a located error");
    assert_eq!((loc.file.as_str(), loc.line, loc.column), (s(&path), 7, 8));
    match &e {
        Error::Source { message, .. } => assert!(message.contains("frobnicate"), "{message}"),
        other => panic!("{other:?}"),
    }

    // No place in the source: a flag out of range, an unknown constant, an unknown op.
    let cases: [(Kernel, &[&str]); 3] = [
        (
            Kernel::op("gemm").warps(3),
            &["compile", "gemm", "--warps", "3"],
        ),
        (
            Kernel::op("gemm").define("NO_SUCH", 1),
            &["compile", "gemm", "-D", "NO_SUCH=1"],
        ),
        (Kernel::load("no_such_op"), &["compile", "no_such_op"]),
    ];
    for (k, args) in cases {
        let o = kirc(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let e = k.cache(false).compile().unwrap_err();
        assert_eq!(e.render(), stderr(&o), "{args:?}");
        assert_eq!(e.location(), None);
    }
}
