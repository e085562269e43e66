//! Regression tests for the crashes and silent errors found by trying kirc with hostile inputs
//! that live below the command line, numbered as in docs/testing.md ("Reliability") and each
//! rebuilt from its description (the `kirc`-level ones — closed or full stdout, partial
//! outputs, number arguments — are in kirc/tests/cli_reliability.rs):
//!
//! 1. long flat chains of a binary operator are a located error, not a stack overflow;
//! 2. `cdiv(i64::MIN, -1)` is an overflow error, not a panic;
//! 3. huge tiles are verifier errors naming the limit (no abort, no wrapped count, no kernel
//!    that silently does nothing);
//! 6. `store y[%o],` without an operand is a syntax error (so `parse(print(m)) == m` holds);
//! 7. i64 data never passes through f64 (interpreter, `.npy`, float params from i64 data);
//! 8. attention_fwd with `past_lengths` = 2^31 − 1 (and −2^31, with and without a window)
//!    matches the f64 oracle instead of overflowing into "no key visible";
//! 9. a kernel whose PTX unrolls past the limit is an error naming it;
//! 10. float literals out of range are errors, and PTX-only options with CUDA C are errors.
//!
//! Each test fails with the fix reverted (a crash, an `Ok` where an error is due, or a value off
//! by one).

use kir_backends::interp::{self, HostArg, HostData, HostTensor};
use kir_backends::ptx::PtxOptions;
use kir_backends::Target;
use kir_compiler::internal::compile::{
    compile, compile_stage, ptx_instructions, CompileError, Emit, Stage, MAX_PTX_INSTRUCTIONS,
};
use kir_compiler::internal::{npy, passes, pipeline};
use kir_ir::verifier::limits::{MAX_TILE_BYTES, MAX_TILE_ELEMENTS};
use kir_ir::{Dtype, EvalVal};
use kir_tests::oracle_attention::{self as oracle, Problem};
use kir_tests::{compare, run_op, t, F64s, Rng};
use std::collections::BTreeMap;

/// A minimal kernel, so a module with only constants is a valid one.
const KERNEL: &str = "kernel @k(x: in tensor<f32>[N], y: out tensor<f32>[N]) grid [1, 1, 1] {
  %z = const 0 : i32
  %v = load x[%z] : f32
  store y[%z], %v
}
";

/// Every message of a front-end failure.
fn messages(r: Result<kir_ir::Module, kir_ir::Diagnostics>) -> Vec<String> {
    match r {
        Ok(_) => vec![],
        Err(d) => d.0.into_iter().map(|e| e.message).collect(),
    }
}

/// The message of a compile error (panics on success).
fn compile_error(
    r: Result<kir_compiler::internal::compile::Compiled, CompileError>,
    what: &str,
) -> String {
    match r {
        Ok(_) => panic!("{what}: compiled, but must be an error"),
        Err(CompileError::Source(d)) => d.0.iter().map(|e| e.message.clone()).collect(),
        Err(CompileError::Plain(m)) => m,
    }
}

/// `1 op 1 op … op 1`, `n` terms.
fn chain(op: &str, n: usize) -> String {
    vec!["1"; n].join(&format!(" {op} "))
}

#[test]
fn long_operator_chains_are_errors_not_stack_overflows() {
    for op in ["+", "-", "*", "&&", "||", "==", "<"] {
        let src = format!("module m\nconst A: int = {}\n{KERNEL}", chain(op, 30_000));
        let e = messages(kir_ir::text::parse(&src));
        assert!(
            e.iter().any(|m| m.contains("nesting is too deep")),
            "{op}: {e:?}"
        );
        // check, fmt, compile and explain all start with the parser.
        assert!(pipeline::output(&src, &[]).is_err(), "{op}");
        let e = compile_error(compile(&src, &[], None, Target::Sm90a, Emit::Ptx), op);
        assert!(e.contains("nesting is too deep"), "{e}");
    }
    // In a tile dim and in a kernel's grid, too.
    let dim = format!("({})", chain("+", 30_000));
    let src = KERNEL.replace(
        "load x[%z] : f32",
        &format!("load x[%z] : tile<{dim} x f32>"),
    );
    assert!(!messages(kir_ir::text::parse(&src)).is_empty());
    let src = KERNEL.replace(
        "grid [1, 1, 1]",
        &format!("grid [{}, 1, 1]", chain("*", 30_000)),
    );
    assert!(!messages(kir_ir::text::parse(&src)).is_empty());
    // A chain within the limit parses, evaluates, prints and parses back.
    let src = format!("module m\nconst A: int = {}\n{KERNEL}", chain("+", 150));
    let m = kir_ir::text::parse(&src).expect("150 terms are fine");
    assert_eq!(
        kir_ir::text::parse(&kir_ir::text::print(&m)).as_ref(),
        Ok(&m)
    );
    let values = passes::const_values(&m, &[]).expect("evaluates");
    assert_eq!(values, vec![("A".to_string(), EvalVal::Int(150))]);
}

#[test]
fn cdiv_overflow_is_an_error_not_a_panic() {
    let src = format!("module m\nconst A: int = cdiv(-9223372036854775807 - 1, -1)\n{KERNEL}");
    let e = messages(pipeline::output(&src, &[]));
    assert!(e.iter().any(|m| m.contains("overflow")), "{e:?}");
    // As `/` and `%` already were; and the in-range extremes still evaluate.
    for (expr, want) in [
        ("cdiv(9223372036854775807, 1)", Some(i64::MAX)),
        ("cdiv(-9223372036854775807 - 1, 1)", Some(i64::MIN)),
        ("cdiv(9223372036854775807, 2)", Some(i64::MAX / 2 + 1)),
        ("(-9223372036854775807 - 1) / -1", None),
        ("(-9223372036854775807 - 1) % -1", None),
    ] {
        let src = format!("module m\nconst A: int = {expr}\n{KERNEL}");
        let m = kir_ir::text::parse(&src).unwrap();
        let got = passes::const_values(&m, &[]).ok().map(|v| v[0].1.clone());
        assert_eq!(got, want.map(EvalVal::Int), "{expr}");
    }
}

/// A kernel that loads and stores one tile of type `ty` of rank `rank`.
fn tile_kernel(ty: &str, rank: usize) -> String {
    let dims = ["M", "N"][2 - rank..].join(", ");
    let at = vec!["%z"; rank].join(", ");
    format!(
        "module m\nkernel @k(x: in tensor<f32>[{dims}], y: out tensor<f32>[{dims}]) grid [1, 1, 1] {{
  %z = const 0 : i32
  %v = load x[{at}] other 0.0 : {ty}
  store y[{at}], %v guard
}}
"
    )
}

#[test]
fn huge_tiles_are_verifier_errors_naming_the_limit() {
    for (ty, rank) in [
        ("tile<100000000 x 100000000 x f32>", 2),
        ("tile<65536 x 65536 x f32>", 2),
        // 2^32 · 2^32 wraps to 0 in 64 bits: it compiled to a kernel that did nothing.
        ("tile<4294967296 x 4294967296 x f32>", 2),
        // It emitted a CUDA loop bound of 18446744073709551614.
        ("tile<9223372036854775807 x f32>", 1),
        ("tile<65537 x f32>", 1),
    ] {
        let src = tile_kernel(ty, rank);
        let e = messages(pipeline::output(&src, &[]));
        assert!(e.iter().any(|m| m.contains("limit")), "{ty}: {e:?}");
        for emit in [Emit::Ptx, Emit::Cuda] {
            let e = compile_error(compile(&src, &[], None, Target::Sm80, emit), ty);
            assert!(e.contains("limit"), "{ty}: {e}");
        }
    }
    // The largest tile a block holds still compiles and runs.
    let src = tile_kernel("tile<256 x 256 x f32>", 2);
    assert_eq!(MAX_TILE_BYTES, 256 * 256 * 4);
    const { assert!(MAX_TILE_ELEMENTS >= 256 * 256) };
    let m = pipeline::output(&src, &[]).expect("at the limit");
    let x: Vec<f64> = (0..300 * 260).map(|i| (i % 1000) as f64).collect();
    let args = BTreeMap::from([("x".to_string(), t(Dtype::F32, &[300, 260], x.clone()))]);
    let out = interp::run(&m, &args).expect("runs");
    let y = out["y"].data.f64s();
    assert_eq!(y[255 * 260 + 255], x[255 * 260 + 255]);
    assert!(y[256].is_nan(), "outside the tile stays poisoned");
}

#[test]
fn store_without_an_operand_is_a_syntax_error() {
    for op in ["store y[%z],", "atomic_add y[%z],", "store y[%z], mask %m"] {
        let src = format!("module m\n{}", KERNEL.replace("store y[%z], %v", op));
        let e = messages(kir_ir::text::parse(&src));
        assert!(
            e.iter().any(|m| m.contains("expected a value")),
            "{op}: {e:?}"
        );
    }
    // The printed form of a well-formed store parses back to the same module.
    let m = kir_ir::text::parse(&format!("module m\n{KERNEL}")).unwrap();
    let printed = kir_ir::text::print(&m);
    assert!(printed.contains("store y[%z], %v"), "{printed}");
    assert_eq!(kir_ir::text::parse(&printed).as_ref(), Ok(&m));
}

/// An i64 copy and product kernel: y = x, z = x · s (wrapping), f = x as f32.
const I64_KERNEL: &str = "module m
kernel @k(x: in tensor<i64>[N], y: out tensor<i64>[N], z: out tensor<i64>[N], s: i64) grid [1, 1, 1] {
  %zero = const 0 : i32
  %v = load x[%zero] other 0 : tile<8 x i64>
  store y[%zero], %v guard
  %s = param s : i64
  %sv = splat %s : tile<8 x i64>
  %p = mul %v, %sv : tile<8 x i64>
  store z[%zero], %p guard
}
";

#[test]
fn i64_data_never_passes_through_f64() {
    let m = pipeline::output(I64_KERNEL, &[]).expect("valid");
    let xs: Vec<i64> = vec![
        (1 << 53) + 1,
        i64::MAX,
        i64::MIN,
        10_000_000_000_000_009,
        -(1 << 53) - 3,
    ];
    for s in [1i64, 3, i64::MAX] {
        let x = HostTensor {
            dtype: Dtype::I64,
            shape: vec![xs.len()],
            data: HostData::I64(xs.clone()),
        };
        let args = BTreeMap::from([
            ("x".to_string(), HostArg::Tensor(x)),
            ("s".to_string(), HostArg::Int(s)),
        ]);
        let out = interp::run(&m, &args).expect("runs");
        assert_eq!(out["y"].data, HostData::I64(xs.clone()), "copy");
        let want: Vec<i64> = xs.iter().map(|v| v.wrapping_mul(s)).collect();
        assert_eq!(out["z"].data, HostData::I64(want), "product by {s}");
    }
    // Through `.npy` and back, bit for bit.
    let bytes = npy::to_bytes(npy::NpyDtype::I64, &[xs.len()], &HostData::I64(xs.clone()));
    let a = npy::parse(&bytes, "x.npy").unwrap();
    assert_eq!(a.data, HostData::I64(xs.clone()));
    // An i64 element for an f32 param rounds once: 2^62 + 2^38 + 1 is just above the tie
    // between 2^62 and 2^62 + 2^39 (through f64 it would round to the tie, then down to even).
    let copy = "module m
kernel @k(x: in tensor<f32>[N], y: out tensor<f32>[N]) grid [1, 1, 1] {
  %z = const 0 : i32
  %v = load x[%z] : tile<2 x f32>
  store y[%z], %v
}
";
    let m = pipeline::output(copy, &[]).unwrap();
    let v = (1i64 << 62) + (1 << 38) + 1;
    let x = HostTensor {
        dtype: Dtype::I64,
        shape: vec![2],
        data: HostData::I64(vec![v, -v]),
    };
    let out = interp::run(&m, &BTreeMap::from([("x".into(), HostArg::Tensor(x))])).unwrap();
    let up = 2f64.powi(62) + 2f64.powi(39);
    assert_eq!(out["y"].data.f64s(), [up, -up]);
    // i64::MAX given exactly is accepted, and a float that is not an i64 is named as given.
    let args = |s: HostArg| {
        BTreeMap::from([
            (
                "x".to_string(),
                HostArg::Tensor(HostTensor {
                    dtype: Dtype::I64,
                    shape: vec![1],
                    data: HostData::I64(vec![1]),
                }),
            ),
            ("s".to_string(), s),
        ])
    };
    let m = pipeline::output(I64_KERNEL, &[]).unwrap();
    let out = interp::run(&m, &args(HostArg::Int(i64::MAX))).unwrap();
    assert_eq!(out["z"].data.as_i64(), Some(&[i64::MAX][..]));
    let e = interp::run(&m, &args(HostArg::Scalar(2.5))).unwrap_err();
    assert!(e.message.contains("2.5"), "{}", e.message);
}

/// attention_fwd at f32 on fresh inputs for `p`, against the oracle.
fn attention_matches_oracle(p: &Problem, label: &str) {
    let mut rng = Rng::fresh(label);
    let q = rng.tensor(p.b * p.hq * p.sq * p.d, 1.0, Dtype::F32);
    let k = rng.tensor(p.b * p.hkv * p.cap * p.d, 1.0, Dtype::F32);
    let v = rng.tensor(p.b * p.hkv * p.cap * p.d, 1.0, Dtype::F32);
    let past: Vec<f64> = p.past_lengths.iter().flatten().map(|&x| x as f64).collect();
    let mut args = vec![
        ("q", t(Dtype::F32, &[p.b, p.hq, p.sq, p.d], q.clone())),
        ("k", t(Dtype::F32, &[p.b, p.hkv, p.cap, p.d], k.clone())),
        ("v", t(Dtype::F32, &[p.b, p.hkv, p.cap, p.d], v.clone())),
        ("past_lengths", t(Dtype::I32, &[p.b], past)),
        ("scale", HostArg::Scalar(p.scale)),
    ];
    let window = p.window.map_or("0", |_| "1");
    if let Some(w) = p.window {
        args.push(("window", HostArg::Int(w)));
    }
    let d = p.d.to_string();
    let defines = [
        ("DTYPE", "f32"),
        ("HEAD_DIM", d.as_str()),
        ("CAUSAL", "1"),
        ("KV_OFFSET", "1"),
        ("WINDOW", window),
    ];
    let out = run_op("attention_fwd", &defines, args);
    let (o_ref, lse_ref) = oracle::attention_fwd(p, &q, &k, &v);
    compare(
        &format!("{label}: o"),
        out["o"].data.f64s(),
        &o_ref,
        (1e-5, 1e-4),
    );
    compare(
        &format!("{label}: lse"),
        out["lse"].data.f64s(),
        &lse_ref,
        (1e-5, 1e-4),
    );
}

#[test]
fn kv_offset_extremes_match_the_oracle() {
    let (max, min) = (i32::MAX as i64, i32::MIN as i64);
    // Batch 0: every key visible (it returned o = 0 and lse = −inf); batch 1: none; batch 2 an
    // ordinary offset.
    let mut p = Problem::new(3, 2, 1, 30, 40, 64);
    p.past_lengths = Some(vec![max, min, 7]);
    attention_matches_oracle(&p, "past 2^31-1, -2^31, 7");
    // With a window, the window moves with the offset: past 2^31 − 1 with a window of 5 sees no
    // key; a window of 2^31 − 1 from past −2^31 + 40 sees the keys up to each row's limit.
    for (past, window) in [
        (vec![max, 5, min + 40], 5),
        (vec![max, -3, min + 40], max),
        (vec![max - 1, 30, 45], 1),
    ] {
        let mut p = Problem::new(3, 2, 1, 30, 40, 64);
        p.past_lengths = Some(past.clone());
        p.window = Some(window);
        attention_matches_oracle(&p, &format!("past {past:?} window {window}"));
    }
}

#[test]
fn ptx_that_unrolls_past_the_limit_is_an_error() {
    let big = |op: &str, defines: &[(&str, &str)], warps, stages, target| {
        let src = kir_compiler::internal::oplib::builtin(op).unwrap();
        let d: Vec<(String, String)> = defines
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        let opts = PtxOptions {
            warps: Some(warps),
            stages: Some(stages),
            ..Default::default()
        };
        compile_stage(src, &d, None, target, Emit::Ptx, Stage::Output, &opts)
    };
    let limit = format!("over the limit of {MAX_PTX_INSTRUCTIONS} per kernel");
    let r = big(
        "layernorm_bwd",
        &[("DTYPE", "f16"), ("BLOCK", "16384")],
        1,
        2,
        Target::Sm100a,
    );
    let e = compile_error(r, "layernorm_bwd BLOCK=16384 --warps 1");
    assert!(e.contains(&limit) && e.contains("layernorm_bwd_dx"), "{e}");
    let r = big(
        "gemm_nf4",
        &[("GATE_UP", "1"), ("BLOCK_N", "256")],
        1,
        2,
        // sm_80's 163 KB do not hold the tile (189,440 bytes): sm_100a's 227 KB do.
        Target::Sm100a,
    );
    let e = compile_error(r, "gemm_nf4 BLOCK_N=256 --warps 1");
    assert!(e.contains(&limit) && e.contains("gemm_nf4"), "{e}");
    // The op library's largest kernels at their defaults stay far below it.
    for op in [
        "attention_bwd",
        "attention_fwd",
        "gemm_nf4",
        "layernorm_bwd",
    ] {
        let src = kir_compiler::internal::oplib::builtin(op).unwrap();
        let c = compile(src, &[], None, Target::Sm90a, Emit::Ptx).expect(op);
        let counts = ptx_instructions(&c.text);
        assert!(!counts.is_empty(), "{op}");
        for (sym, n) in counts {
            assert!(n > 0 && n < MAX_PTX_INSTRUCTIONS / 2, "{sym}: {n}");
        }
    }
}

#[test]
fn out_of_range_literals_and_ignored_options_are_errors() {
    let with = |lit: &str, ty: &str| {
        let body = KERNEL.replace(
            "%v = load x[%z] : f32",
            &format!("%c = const {lit} : {ty}\n  %v = load x[%z] : f32"),
        );
        format!("module m\n{body}")
    };
    // Out of f64's range: a lexer error, like an integer literal out of i64's.
    let src = format!(
        "module m\n{}",
        KERNEL.replace("load x[%z] : f32", "load x[%z] other 1e999 : f32")
    );
    let e = messages(kir_ir::text::parse(&src));
    assert!(
        e.iter().any(|m| m.contains("`1e999` is out of range")),
        "{e:?}"
    );
    // Out of the dtype's range: a verifier error.
    for (lit, ty) in [
        ("1e39", "f32"),
        ("-1e39", "f32"),
        ("70000.0", "f16"),
        ("65520.0", "f16"),
        ("70000", "f16"),
        ("3.4e38", "bf16"),
        ("1e39", "tile<4 x f32>"),
    ] {
        let e = messages(pipeline::output(&with(lit, ty), &[]));
        assert!(
            e.iter().any(|m| m.contains("rounds to infinity")),
            "{lit} {ty}: {e:?}"
        );
    }
    for (lit, ty) in [
        ("3.4028234e38", "f32"),
        ("65504.0", "f16"),
        ("65519.0", "f16"),
        ("inf", "f32"),
        ("-inf", "f16"),
        ("1e-50", "f32"),
    ] {
        let e = messages(pipeline::output(&with(lit, ty), &[]));
        assert!(e.is_empty(), "{lit} {ty}: {e:?}");
    }
    // A float scalar argument its param cannot hold.
    let src = "module m
kernel @k(y: out tensor<f32>[1], a: f32) grid [1, 1, 1] {
  %z = const 0 : i32
  %v = param a : f32
  store y[%z], %v
}
";
    let m = pipeline::output(src, &[]).unwrap();
    let run = |a: f64| interp::run(&m, &BTreeMap::from([("a".to_string(), HostArg::Scalar(a))]));
    let e = run(1e39).unwrap_err();
    assert!(e.message.contains("out of range for f32"), "{}", e.message);
    assert_eq!(
        run(f64::INFINITY).unwrap()["y"].data.f64s(),
        [f64::INFINITY]
    );
    // PTX-only options with CUDA C: an error, not silently ignored.
    let cuda_only = [
        PtxOptions {
            stages: Some(3),
            ..Default::default()
        },
        PtxOptions {
            warps: Some(8),
            ..Default::default()
        },
        PtxOptions {
            overlap: Some(true),
            ..Default::default()
        },
    ];
    options_are_errors(
        "rmsnorm_fwd",
        Emit::Cuda,
        &cuda_only,
        &["apply to --emit cuda"],
    );
}

/// Compiling built-in `op` for sm_90a with each of `opts` is an error whose message holds one
/// of `want`.
fn options_are_errors(op: &str, emit: Emit, opts: &[PtxOptions], want: &[&str]) {
    let src = kir_compiler::internal::oplib::builtin(op).expect("built-in op");
    for o in opts {
        let r = compile_stage(src, &[], None, Target::Sm90a, emit, Stage::Output, o);
        let e = compile_error(r, &format!("{op} with {o:?}"));
        assert!(want.iter().any(|w| e.contains(w)), "{o:?}: {e}");
    }
}

/// Out-of-range lowering options are clear errors, not panics or silent defaults.
#[test]
fn bad_ptx_options_are_errors() {
    let bad = [
        PtxOptions {
            warps: Some(3),
            ..Default::default()
        },
        PtxOptions {
            warps: Some(6),
            ..Default::default()
        },
        PtxOptions {
            warps: Some(64),
            ..Default::default()
        },
        PtxOptions {
            stages: Some(0),
            ..Default::default()
        },
        PtxOptions {
            stages: Some(17),
            ..Default::default()
        },
    ];
    options_are_errors("gemm", Emit::Ptx, &bad, &["--warps", "--stages"]);
}
