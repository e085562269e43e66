//! GEMM variants on the sm_90a rows by their structure (compiler/src/structure/,
//! compiler/src/configs/table.rs, docs/configs.md): a dot loop that loads a tile of its
//! output's shape (gemm's `C_IN = 1`, `Features::acc_loads`) takes its own 128×128 row, and one
//! whose A is stored transposed (`TRANS_A = 1`, read M-major by wgmma) the rows of the
//! untransposed GEMM; the scheduled kernels of both match an f64 oracle on the interpreter, on
//! ragged shapes with magnitudes above 1. (Their PTX assembles without spills:
//! tests/tests/shape_configs.rs, `every_gemm_row_and_epilogue_assembles_without_spills`.)

use kir_backends::interp;
use kir_backends::Target;
use kir_compiler::internal::compile::Emit;
use kir_compiler::internal::pipeline;
use kir_compiler::internal::plan::{CompilePlan, Flags};
use kir_ir::Dtype;
use kir_tests::{compare, round, t, tolerance, Rng};
use std::collections::BTreeMap;

fn gemm() -> &'static str {
    kir_compiler::internal::oplib::builtin("gemm").expect("gemm")
}

/// `a` as [1, M, K] and `b` as [1, K, N].
fn shapes(m: usize, n: usize, k: usize) -> Vec<(String, Vec<usize>)> {
    vec![("a".into(), vec![1, m, k]), ("b".into(), vec![1, k, n])]
}

/// The sm_90a plan of `src` with `d` for the shapes `s`.
fn plan(src: &str, d: &[(String, String)], s: &[(String, Vec<usize>)]) -> CompilePlan {
    CompilePlan::resolve_for(src, d, Target::Sm90a, Emit::Ptx, Flags::default(), s).expect("plan")
}

/// A GEMM that adds a tile of its output's shape (`C_IN = 1`: `c = alpha·a·b + beta·c_in`)
/// takes the 128×128 row, with shapes or without, where the plain GEMM keeps 128×256; the
/// scheduled kernel (warp-specialized, persistent) matches an f64 oracle on ragged shapes.
#[test]
fn a_gemm_adding_a_tile_of_its_output_takes_the_128x128_row_and_stays_correct() {
    let c_in = vec![("C_IN".to_string(), "1".to_string())];
    for s in [vec![], shapes(8192, 8192, 8192), shapes(16384, 14336, 4096)] {
        let r = plan(gemm(), &c_in, &s).config.report;
        for want in [
            "BLOCK_M=128 (M tile), BLOCK_N=128 (N tile), BLOCK_K=64 (K tile), GROUP_M=8",
            "warps 8, stages 4, warp-specialized, persistent",
            "a tile of the output's shape loaded",
        ] {
            assert!(r.contains(want), "{want}\n{r}");
        }
        let plain = plan(gemm(), &[], &s).config.report;
        assert!(plain.contains("BLOCK_N=256 (N tile)"), "{plain}");
        assert!(!plain.contains("output's shape loaded"), "{plain}");
    }
    let dt = Dtype::Bf16;
    let mut rng = Rng::fresh("c_in gemm");
    for (m, n, k) in [(300, 257, 130), (129, 1001, 70)] {
        let p = plan(gemm(), &c_in, &shapes(m, n, k));
        assert!(p.config.persistent, "{}", p.config.report);
        let out = pipeline::compile(gemm(), &p).expect("compiles");
        assert!(out.text.contains("wgmma.mma_async"), "wgmma");
        let a = rng.tensor(m * k, 3.0, dt);
        let b = rng.tensor(k * n, 3.0, dt);
        // As large as the product's terms sum to (1.5·√K·9), so c_in's part is half the output.
        let c0 = rng.tensor(m * n, 2.0 * (k as f64).sqrt() * 9.0, dt);
        let args: BTreeMap<String, interp::HostArg> = [
            ("a".to_string(), t(dt, &[1, m, k], a.clone())),
            ("b".to_string(), t(dt, &[1, k, n], b.clone())),
            ("c_in".to_string(), t(dt, &[1, m, n], c0.clone())),
            ("alpha".to_string(), interp::HostArg::Scalar(1.5)),
            ("beta".to_string(), interp::HostArg::Scalar(-0.75)),
        ]
        .into_iter()
        .collect();
        let res = interp::run(&out.module, &args).expect("runs");
        let c = res["c"].data.as_f64().expect("f64");
        let mut want = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k).map(|kk| a[i * k + kk] * b[kk * n + j]).sum();
                want[i * n + j] = round(dt, 1.5 * s - 0.75 * c0[i * n + j]);
            }
        }
        compare(&format!("gemm c_in {m}x{n}x{k}"), c, &want, tolerance(dt));
    }
}

/// A GEMM whose A is stored transposed (`TRANS_A = 1`: a is [Bt, K, M], the weight gradient
/// dB = Aᵀ·dC of a linear layer's backward) takes the same sm_90a rows as one that is not (A
/// read M-major by wgmma, docs/backends.md), with or without B transposed; the scheduled kernels
/// match an f64 oracle on ragged shapes.
#[test]
fn a_transposed_a_takes_the_wgmma_rows_and_stays_correct() {
    let ta = |tb: bool| {
        let mut d = vec![("TRANS_A".to_string(), "1".to_string())];
        if tb {
            d.push(("TRANS_B".to_string(), "1".to_string()));
        }
        d
    };
    let shapes_t = |m: usize, n: usize, k: usize, tb: bool| -> Vec<(String, Vec<usize>)> {
        let b = if tb { vec![1, n, k] } else { vec![1, k, n] };
        vec![("a".into(), vec![1, k, m]), ("b".into(), b)]
    };
    for tb in [false, true] {
        for (s, want) in [
            (vec![], "BLOCK_M=128 (M tile), BLOCK_N=256 (N tile)"),
            (shapes_t(8192, 8192, 8192, tb), "BLOCK_N=256 (N tile)"),
            (
                shapes_t(100, 4096, 4096, tb),
                "BLOCK_M=128 (M tile), BLOCK_N=128",
            ),
        ] {
            let r = plan(gemm(), &ta(tb), &s).config.report;
            assert!(r.contains(want), "{want}\n{r}");
            assert!(r.contains("A transposed") && !r.contains("A not"), "{r}");
        }
    }
    let dt = Dtype::Bf16;
    let mut rng = Rng::fresh("trans_a gemm");
    for (m, n, k, tb) in [
        (300, 257, 130, false),
        (129, 1001, 70, true),
        (40, 300, 200, false),
    ] {
        let p = plan(gemm(), &ta(tb), &shapes_t(m, n, k, tb));
        let out = pipeline::compile(gemm(), &p).expect("compiles");
        assert!(
            out.text.contains("wgmma.mma_async"),
            "wgmma: {}",
            p.config.report
        );
        // a is [K, M]; b is [N, K] when transposed, else [K, N].
        let a = rng.tensor(k * m, 3.0, dt);
        let b = rng.tensor(k * n, 3.0, dt);
        let b_dims = if tb { [1, n, k] } else { [1, k, n] };
        let args: BTreeMap<String, interp::HostArg> = [
            ("a".to_string(), t(dt, &[1, k, m], a.clone())),
            ("b".to_string(), t(dt, &b_dims, b.clone())),
            ("alpha".to_string(), interp::HostArg::Scalar(1.5)),
        ]
        .into_iter()
        .collect();
        let res = interp::run(&out.module, &args).expect("runs");
        let c = res["c"].data.as_f64().expect("f64");
        let mut want = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k)
                    .map(|kk| a[kk * m + i] * if tb { b[j * k + kk] } else { b[kk * n + j] })
                    .sum();
                want[i * n + j] = round(dt, 1.5 * s);
            }
        }
        compare(
            &format!("gemm trans_a {m}x{n}x{k} tb {tb}"),
            c,
            &want,
            tolerance(dt),
        );
    }
}
