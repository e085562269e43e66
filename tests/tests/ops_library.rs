//! The normalization, SwiGLU and NF4 ops of the library on the CPU interpreter against
//! independent f64 oracles (`kir_tests::oracle_ops`), plus their specialization errors and
//! canonical-IR snapshots. The gemm features live in `ops_library_gemm.rs`.
//!
//! Inputs are fresh per case (`Rng::fresh`; replay with `KIR_TEST_SEED`), shapes are ragged
//! (N ∈ {1, 896, 4097}, rows not a multiple of the row group, K not a multiple of the k tile),
//! magnitudes are 1 and 3, and every DTYPE runs. Outputs are poisoned by the runner.

use kir_backends::interp::{run_with, HostArg, HostTensor, RunOptions};
use kir_ir::Dtype;
use kir_tests::oracle_ops as o;
use kir_tests::F64s;
use kir_tests::{
    compare, compare_column_sums, compare_scaled, dtype, run_op, t, tolerance, try_op, Rng,
};
use std::collections::BTreeMap;

const DTYPES: [&str; 3] = ["f32", "f16", "bf16"];

/// Rounds every value to f32 (what the forward writes for mean and rstd).
fn f32s(v: &[f64]) -> Vec<f64> {
    v.iter().map(|&x| x as f32 as f64).collect()
}

fn layernorm_fwd_case(dt: &str, rows: usize, n: usize, mag: f64, offset: f64) {
    layernorm_fwd_case_with(dt, rows, n, mag, offset, &[]);
}

fn layernorm_fwd_case_with(
    dt: &str,
    rows: usize,
    n: usize,
    mag: f64,
    offset: f64,
    defines: &[(&str, &str)],
) {
    let dty = dtype(dt);
    let mut rng = Rng::fresh(&format!("layernorm_fwd {dt} {rows}x{n} x{mag} +{offset}"));
    let x: Vec<f64> = rng
        .tensor(rows * n, mag, Dtype::F32)
        .iter()
        .map(|v| kir_tests::round(dty, v + offset))
        .collect();
    let w = rng.tensor(n, mag, dty);
    let b = rng.tensor(n, mag, dty);
    let eps = 1e-5f32 as f64;
    let (y_ref, mean_ref, rstd_ref) = o::layernorm_fwd(&x, &w, &b, rows, n, eps);
    let (xs, ws, bs) = (x.clone(), w.clone(), b.clone());
    let mut defs = vec![("DTYPE", dt)];
    defs.extend_from_slice(defines);
    let out = run_op(
        "layernorm_fwd",
        &defs,
        vec![
            ("x", t(dty, &[rows, n], x)),
            ("w", t(dty, &[n], w)),
            ("b", t(dty, &[n], b)),
            ("eps", HostArg::Scalar(eps)),
        ],
    );
    let name = format!("layernorm_fwd {dt} {rows}x{n} mag {mag} offset {offset} {defines:?}");
    assert_eq!(out["y"].shape, vec![rows, n]);
    if offset == 0.0 {
        compare(
            &format!("{name}: y"),
            out["y"].data.f64s(),
            &y_ref,
            tolerance(dty),
        );
    } else {
        // Centring x ≈ offset loses |offset|·2⁻²⁴ in any f32 evaluation (the mean itself is an
        // f32): measure y against the size of its terms, (|x| + |mean|)·rstd·|w| + |b|.
        let scale: Vec<f64> = (0..rows * n)
            .map(|i| {
                let (r, j) = (i / n, i % n);
                (xs[i].abs() + mean_ref[r].abs()) * rstd_ref[r] * ws[j].abs() + bs[j].abs()
            })
            .collect();
        let tol = tolerance(dty);
        compare_scaled(
            &format!("{name}: y"),
            out["y"].data.f64s(),
            &y_ref,
            &scale,
            tol,
        );
    }
    let f32_tol = tolerance(Dtype::F32);
    compare(
        &format!("{name}: mean"),
        out["mean"].data.f64s(),
        &mean_ref,
        f32_tol,
    );
    compare(
        &format!("{name}: rstd"),
        out["rstd"].data.f64s(),
        &rstd_ref,
        f32_tol,
    );
}

#[test]
fn layernorm_fwd_shapes() {
    for dt in DTYPES {
        for (rows, n) in [(1, 1), (7, 896), (3, 4097), (33, 100)] {
            for mag in [1.0, 3.0] {
                layernorm_fwd_case(dt, rows, n, mag, 0.0);
            }
        }
    }
    let mut rng = Rng::fresh("layernorm_fwd random shape");
    let (r, n) = (rng.range(1, 40), rng.range(1, 3000));
    layernorm_fwd_case(DTYPES[rng.range(0, 3)], r, n, 3.0, 0.0);
}

/// The paths of the rows per program: rows that fit one chunk (N ≤ BLOCK: read once, kept in
/// registers, the next row's load in flight) and longer rows (three passes over chunks), with
/// R not a multiple of ROWS (the last program's rows past R neither read nor written), N
/// ragged against BLOCK and equal to it, one row per program, and the defaults at a row of
/// exactly 4096 columns. The mean far from zero checks that the one-chunk path's variance is
/// centred too.
#[test]
fn layernorm_fwd_rows_per_program_and_chunks() {
    let small = [("BLOCK", "64"), ("ROWS", "3")];
    for dt in DTYPES {
        for (rows, n) in [(7, 50), (8, 64), (5, 130), (1, 1), (4, 65)] {
            layernorm_fwd_case_with(dt, rows, n, 3.0, 0.0, &small);
        }
    }
    layernorm_fwd_case_with("f32", 7, 60, 1.0, 1000.0, &small);
    layernorm_fwd_case_with("f32", 5, 200, 1.0, -1000.0, &small);
    layernorm_fwd_case_with("bf16", 5, 30, 3.0, 0.0, &[("ROWS", "1")]);
    layernorm_fwd_case_with("f16", 3, 100, 3.0, 0.0, &[("ROWS", "8"), ("BLOCK", "128")]);
    layernorm_fwd_case("bf16", 9, 4096, 3.0, 0.0);
}

/// A mean far from zero (1000 ± 1): a variance from Σx²/N − mean² would lose most of its
/// digits in f32 (mean² ≈ 10⁶ has an ulp of 0.06 against a variance of 1, and the sum of
/// squares is worse); the centred second pass keeps mean and rstd within the f32 tolerance.
#[test]
fn layernorm_fwd_variance_is_centred() {
    layernorm_fwd_case("f32", 5, 4097, 1.0, 1000.0);
    layernorm_fwd_case("f32", 3, 896, 3.0, -1000.0);
}

fn layernorm_bwd_inputs(dt: &str, rows: usize, n: usize, mag: f64) -> Vec<(&'static str, HostArg)> {
    let dty = dtype(dt);
    let mut rng = Rng::fresh(&format!("layernorm_bwd {dt} {rows}x{n} x{mag}"));
    let x = rng.tensor(rows * n, mag, dty);
    let w = rng.tensor(n, mag, dty);
    let b = vec![0.0; n];
    let dy = rng.tensor(rows * n, mag, dty);
    // mean and rstd as the forward saves them (f32).
    let (_, mean, rstd) = o::layernorm_fwd(&x, &w, &b, rows, n, 1e-5f32 as f64);
    vec![
        ("x", t(dty, &[rows, n], x)),
        ("w", t(dty, &[n], w)),
        ("dy", t(dty, &[rows, n], dy)),
        ("mean", t(Dtype::F32, &[rows], f32s(&mean))),
        ("rstd", t(Dtype::F32, &[rows], f32s(&rstd))),
    ]
}

fn data<'a>(args: &'a [(&str, HostArg)], name: &str) -> &'a [f64] {
    match args.iter().find(|(n, _)| *n == name) {
        Some((_, HostArg::Tensor(t))) => t.data.f64s(),
        _ => panic!("no tensor argument {name}"),
    }
}

fn layernorm_bwd_case(dt: &str, rows: usize, n: usize, mag: f64, defines: &[(&str, &str)]) {
    let dty = dtype(dt);
    let args = layernorm_bwd_inputs(dt, rows, n, mag);
    let g = o::layernorm_bwd(
        data(&args, "x"),
        data(&args, "w"),
        data(&args, "dy"),
        data(&args, "mean"),
        data(&args, "rstd"),
        rows,
        n,
    );
    let mut defs = vec![("DTYPE", dt)];
    defs.extend_from_slice(defines);
    let args_copy = args.clone();
    let out = run_op("layernorm_bwd", &defs, args);
    let name = format!("layernorm_bwd {dt} {rows}x{n} mag {mag} {defines:?}");
    let tol = tolerance(dty);
    compare_scaled(
        &format!("{name}: dx"),
        out["dx"].data.f64s(),
        &g.dx,
        &g.dx_scale,
        tol,
    );
    compare(&format!("{name}: dw"), out["dw"].data.f64s(), &g.dw, tol);
    compare(&format!("{name}: db"), out["db"].data.f64s(), &g.db, tol);
    // Element by element against the f64 sums rounded once, within the terms' size.
    let (x, dy) = (data(&args_copy, "x"), data(&args_copy, "dy"));
    let (mean, rstd) = (data(&args_copy, "mean"), data(&args_copy, "rstd"));
    let (mut dw_abs, mut db_abs) = (vec![0.0; n], vec![0.0; n]);
    for r in 0..rows {
        for j in 0..n {
            let i = r * n + j;
            dw_abs[j] += (dy[i] * (x[i] - mean[r]) * rstd[r]).abs();
            db_abs[j] += dy[i].abs();
        }
    }
    let (dwo, dbo) = (out["dw"].data.f64s(), out["db"].data.f64s());
    compare_column_sums(&format!("{name}: dw"), dwo, &g.dw, &dw_abs, dty, 1e-5);
    compare_column_sums(&format!("{name}: db"), dbo, &g.db, &db_abs, dty, 1e-5);
}

#[test]
fn layernorm_bwd_shapes() {
    for dt in DTYPES {
        for (rows, n) in [(1, 1), (7, 896), (5, 4097), (37, 100)] {
            for mag in [1.0, 3.0] {
                layernorm_bwd_case(dt, rows, n, mag, &[]);
            }
        }
    }
    // Row groups and column chunks that do not divide the shape.
    layernorm_bwd_case(
        "f32",
        13,
        300,
        1.0,
        &[("GROUPS", "3"), ("BLOCK", "64"), ("SUM_COLS", "24")],
    );
    layernorm_bwd_case("bf16", 2, 4097, 3.0, &[("GROUPS", "8"), ("BLOCK", "1000")]);
}

/// The default row groups (min(R, GROUPS) programs, each over rows g, g + G, …) and column
/// slices of the final sums, on shapes that divide neither: 1,000 rows in 264 groups of 3 or 4
/// rows, 1,000 columns in 16 slices of 64 (the last one partial), 5,000 columns in two chunks
/// of 4,096 (the two-pass path, its partial rows kept in memory), and 3 rows (3 groups).
#[test]
fn layernorm_bwd_row_groups_and_column_slices() {
    for dt in ["f32", "bf16"] {
        for (rows, n) in [(1000, 1000), (1000, 5000), (3, 5000), (3, 1000)] {
            layernorm_bwd_case(dt, rows, n, 3.0, &[]);
        }
    }
    layernorm_bwd_case("f16", 300, 700, 1.0, &[]);
    let small = [("GROUPS", "7"), ("BLOCK", "64"), ("SUM_COLS", "40")];
    layernorm_bwd_case("f32", 50, 300, 3.0, &small);
    layernorm_bwd_case("bf16", 50, 60, 3.0, &small);
    // A row of exactly BLOCK columns, 4 or 5 rows per group: each row's successor loaded ahead.
    let exact = [("GROUPS", "5"), ("BLOCK", "64"), ("SUM_COLS", "40")];
    layernorm_bwd_case("f16", 23, 64, 3.0, &exact);
}

#[test]
fn layernorm_bwd_is_bit_identical_across_runs() {
    let src =
        kir_compiler::internal::oplib::builtin("layernorm_bwd").expect("layernorm_bwd is built in");
    for dt in ["f32", "bf16"] {
        let (_, spec) =
            kir_compiler::internal::pipeline::frontend(src, &[("DTYPE".into(), dt.into())])
                .expect("front end");
        let args: BTreeMap<String, HostArg> = layernorm_bwd_inputs(dt, 301, 777, 3.0)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let bits = |o: &BTreeMap<String, HostTensor>| -> Vec<u64> {
            ["dx", "dw", "db"]
                .iter()
                .flat_map(|k| o[*k].data.f64s().iter().map(|v| v.to_bits()))
                .collect()
        };
        let first = bits(
            &run_with(
                &spec,
                &args,
                &RunOptions {
                    parallel: true,
                    ..Default::default()
                },
            )
            .expect("run"),
        );
        for parallel in [false, true, false, true] {
            let again = bits(
                &run_with(
                    &spec,
                    &args,
                    &RunOptions {
                        parallel,
                        ..Default::default()
                    },
                )
                .expect("run"),
            );
            assert!(
                first == again,
                "layernorm_bwd {dt} differs between runs (parallel={parallel})"
            );
        }
    }
}

#[test]
fn swiglu_shapes() {
    for dt in DTYPES {
        let dty = dtype(dt);
        for (rows, n) in [(1, 1), (7, 896), (3, 4097), (9, 33)] {
            for mag in [1.0, 3.0] {
                let mut rng = Rng::fresh(&format!("swiglu {dt} {rows}x{n}"));
                let gate = rng.tensor(rows * n, mag, dty);
                let up = rng.tensor(rows * n, mag, dty);
                let want = o::swiglu(&gate, &up);
                let out = run_op(
                    "swiglu",
                    &[("DTYPE", dt)],
                    vec![
                        ("gate", t(dty, &[rows, n], gate)),
                        ("up", t(dty, &[rows, n], up)),
                    ],
                );
                let name = format!("swiglu {dt} {rows}x{n} mag {mag}");
                compare(&name, out["out"].data.f64s(), &want, tolerance(dty));
            }
        }
    }
}

/// One NF4 weight: packed codes [n, k/2] and scales [n, k/64], random.
struct Nf4W {
    codes: Vec<u8>,
    scales: Vec<f64>,
}

impl Nf4W {
    fn random(rng: &mut Rng, k: usize, n: usize, mag: f64) -> Nf4W {
        let codes = (0..n * k / 2).map(|_| rng.range(0, 256) as u8).collect();
        let scales = (0..n * k.div_ceil(64))
            .map(|_| (rng.normal().abs() * mag + 0.01) as f32 as f64)
            .collect();
        Nf4W { codes, scales }
    }

    /// W [k, n].
    fn dequant(&self, k: usize, n: usize) -> Vec<f64> {
        o::nf4_dequant(&self.codes, &self.scales, k, n)
    }

    fn args(&self, prefix: &str, k: usize, n: usize) -> Vec<(String, HostArg)> {
        let codes = self.codes.iter().map(|&c| c as f64).collect();
        vec![
            (format!("{prefix}codes"), t(Dtype::U8, &[n, k / 2], codes)),
            (
                format!("{prefix}scales"),
                t(Dtype::F32, &[n, k.div_ceil(64)], self.scales.clone()),
            ),
        ]
    }
}

/// gemm_nf4 in one mode against the f64 oracle: forward c = a·W (or gate and up), transposed
/// grad_in = grad_out·Wᵀ (or grad_gate·W_gateᵀ + grad_up·W_upᵀ).
#[allow(clippy::too_many_arguments)]
fn nf4_case(
    dt: &str,
    m: usize,
    k: usize,
    n: usize,
    transpose: bool,
    gate_up: bool,
    mag: f64,
    block_k: &str,
) {
    let dty = dtype(dt);
    let what = format!("gemm_nf4 {dt} {m}x{k}x{n} transpose={transpose} gate_up={gate_up} x{mag} BLOCK_K={block_k}");
    let mut rng = Rng::fresh(&what);
    let w1 = Nf4W::random(&mut rng, k, n, mag);
    let w2 = Nf4W::random(&mut rng, k, n, mag);
    // The kernel rounds each dequantized weight to DTYPE before the product (documented).
    let rnd =
        |w: Vec<f64>| -> Vec<f64> { w.into_iter().map(|v| kir_tests::round(dty, v)).collect() };
    let (d1, d2) = (rnd(w1.dequant(k, n)), rnd(w2.dequant(k, n)));
    let mut args: Vec<(String, HostArg)> = Vec::new();
    if gate_up {
        args.extend(w1.args("gate_", k, n));
        args.extend(w2.args("up_", k, n));
    } else {
        args.extend(w1.args("", k, n));
    }
    // Each output is a dot product that can cancel to ~0, so its error is measured against the
    // magnitude of its terms: the same products with absolute values (`compare_scaled`).
    let abs = |v: &[f64]| -> Vec<f64> { v.iter().map(|x| x.abs()).collect() };
    let (a1, a2) = (abs(&d1), abs(&d2));
    let mut want: Vec<(&str, Vec<f64>, Vec<f64>)> = Vec::new();
    if transpose {
        let g1 = rng.tensor(m * n, mag, dty);
        let mut gi = o::matmul_wt(&g1, &d1, m, k, n);
        let mut gs = o::matmul_wt(&abs(&g1), &a1, m, k, n);
        if gate_up {
            let g2 = rng.tensor(m * n, mag, dty);
            let gi2 = o::matmul_wt(&g2, &d2, m, k, n);
            let gs2 = o::matmul_wt(&abs(&g2), &a2, m, k, n);
            gi.iter_mut().zip(gi2).for_each(|(x, y)| *x += y);
            gs.iter_mut().zip(gs2).for_each(|(x, y)| *x += y);
            args.push(("grad_gate".into(), t(dty, &[m, n], g1)));
            args.push(("grad_up".into(), t(dty, &[m, n], g2)));
        } else {
            args.push(("grad_out".into(), t(dty, &[m, n], g1)));
        }
        want.push(("grad_in", gi, gs));
    } else {
        let a = rng.tensor(m * k, mag, dty);
        let aa = abs(&a);
        if gate_up {
            want.push((
                "gate",
                o::matmul(&a, &d1, m, k, n),
                o::matmul(&aa, &a1, m, k, n),
            ));
            want.push((
                "up",
                o::matmul(&a, &d2, m, k, n),
                o::matmul(&aa, &a2, m, k, n),
            ));
        } else {
            want.push((
                "c",
                o::matmul(&a, &d1, m, k, n),
                o::matmul(&aa, &a1, m, k, n),
            ));
        }
        args.push(("a".into(), t(dty, &[m, k], a)));
    }
    let defs = [
        ("DTYPE", dt),
        ("TRANSPOSE", if transpose { "1" } else { "0" }),
        ("GATE_UP", if gate_up { "1" } else { "0" }),
        ("BLOCK_K", block_k),
    ];
    let out = run_op(
        "gemm_nf4",
        &defs,
        args.iter().map(|(k, v)| (k.as_str(), v.clone())).collect(),
    );
    for (name, reference, terms) in want {
        let shape = if name == "grad_in" {
            vec![m, k]
        } else {
            vec![m, n]
        };
        assert_eq!(out[name].shape, shape, "{what}: {name}");
        compare_scaled(
            &format!("{what}: {name}"),
            out[name].data.f64s(),
            &reference,
            &terms,
            tolerance(dty),
        );
    }
}

#[test]
fn gemm_nf4_forward() {
    for dt in DTYPES {
        for mag in [1.0, 3.0] {
            nf4_case(dt, 1, 64, 1, false, false, mag, "64");
            // K = 192 is not a multiple of the 128-wide k tile; M and N are ragged.
            nf4_case(dt, 37, 192, 130, false, false, mag, "128");
        }
    }
    nf4_case("bf16", 3, 128, 896, false, false, 1.0, "64");
    nf4_case("f16", 2, 64, 4097, false, false, 3.0, "64");
}

#[test]
fn gemm_nf4_transpose_and_gate_up() {
    for dt in DTYPES {
        nf4_case(dt, 37, 192, 130, true, false, 1.0, "128");
        nf4_case(dt, 37, 192, 130, false, true, 3.0, "128");
        nf4_case(dt, 37, 192, 130, true, true, 1.0, "128");
    }
    nf4_case("bf16", 1, 64, 1, true, true, 3.0, "64");
    nf4_case("bf16", 5, 256, 896, true, false, 3.0, "256");
    let mut rng = Rng::fresh("gemm_nf4 random shapes");
    for _ in 0..3 {
        let (m, k, n) = (rng.range(1, 80), 64 * rng.range(1, 5), rng.range(1, 200));
        let dt = DTYPES[rng.range(0, 3)];
        let bk = ["64", "128", "192"][rng.range(0, 3)];
        let (tr, gu) = (rng.range(0, 2) == 1, rng.range(0, 2) == 1);
        nf4_case(dt, m, k, n, tr, gu, [1.0, 3.0][rng.range(0, 2)], bk);
    }
}

/// Runs `op` and returns its error rendered against the op's source (file:line:col, caret).
fn op_error(op: &str, defines: &[(&str, &str)], args: Vec<(&str, HostArg)>) -> String {
    match try_op(op, defines, args) {
        Ok(_) => panic!("{op} {defines:?} ran, but an error was expected"),
        Err(e) => e,
    }
}

#[test]
fn nf4_errors_are_clear_and_located() {
    // K = 96 is not a multiple of 64: a launch-time `requires` error quoting the rule.
    let (m, k, n) = (2, 96, 3);
    let w = Nf4W {
        codes: vec![0; n * k / 2],
        scales: vec![1.0; n * 2],
    };
    let mut args: Vec<(String, HostArg)> = w.args("", k, n);
    args.push(("a".into(), t(Dtype::F32, &[m, k], vec![1.0; m * k])));
    let args: Vec<(&str, HostArg)> = args.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let e = op_error("gemm_nf4", &[("DTYPE", "f32")], args);
    assert!(
        e.contains("gemm_nf4.kir:") && e.contains("requirement `2 * KH % 64 == 0` does not hold"),
        "{e}"
    );
    assert!(e.contains("KH = 48"), "{e}");
    // A k tile that splits a scale group.
    let e = op_error("gemm_nf4", &[("BLOCK_K", "96")], vec![]);
    assert!(
        e.contains("`BLOCK_K` = 96 (set by -D) does not satisfy"),
        "{e}"
    );
    // A bad mode value.
    let e = op_error("gemm_nf4", &[("TRANSPOSE", "2")], vec![]);
    assert!(
        e.contains("gemm_nf4.kir:") && e.contains("`TRANSPOSE` = 2"),
        "{e}"
    );
}

#[test]
fn norm_errors_are_clear_and_located() {
    let e = op_error("layernorm_fwd", &[("DTYPE", "f64")], vec![]);
    assert!(e.contains("`f64` is not one of {f32, f16, bf16}"), "{e}");
    // A mean with the wrong number of rows.
    let mut args = layernorm_bwd_inputs("f32", 4, 8, 1.0);
    args[3] = ("mean", t(Dtype::F32, &[5], vec![0.0; 5]));
    let e = op_error("layernorm_bwd", &[("DTYPE", "f32")], args);
    assert!(
        e.contains("layernorm_bwd.kir:") && e.contains("dim `R` is 4"),
        "{e}"
    );
    let e = op_error(
        "swiglu",
        &[("DTYPE", "f32")],
        vec![("gate", t(Dtype::F32, &[2, 2], vec![0.0; 4]))],
    );
    assert!(e.contains("missing argument `up`"), "{e}");
}

/// Canonical IR of each new op under a representative specialization.
#[test]
fn canonical_ir_snapshots() {
    let cases: &[(&str, &[(&str, &str)])] = &[
        ("layernorm_fwd", &[("DTYPE", "bf16"), ("BLOCK", "256")]),
        ("layernorm_bwd", &[("DTYPE", "f32"), ("GROUPS", "2")]),
        ("swiglu", &[("DTYPE", "f16")]),
        ("gemm_nf4", &[("DTYPE", "bf16"), ("GATE_UP", "1")]),
        ("gemm_nf4", &[("DTYPE", "f32"), ("TRANSPOSE", "1")]),
        (
            "gemm",
            &[
                ("DTYPE", "f32"),
                ("TRANS_A", "1"),
                ("C_IN", "1"),
                ("BF16_COMPUTE", "1"),
                ("EPILOGUE", "gelu"),
            ],
        ),
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
            format!("{op}__{}", tag.join("_")),
            kir_ir::text::print(&spec)
        );
    }
}
