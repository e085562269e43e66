//! `erf`, `pow` and `fma` on the interpreter (tests/in/authoring.kir) and the exact GELU
//! (tests/in/gelu_exact.kir), element by element against independent f64 oracles
//! (`oracle_ops::erf`, `f64::powf`, exact products), on fresh random ragged inputs of magnitudes
//! above 1 in f32, f16 and bf16. The interpreter computes erf and pow in f64 and fma with one
//! rounding, so each result must be within half a unit in the last place of its dtype (plus the
//! 2⁻¹³ of a unit that the f32 step adds before a 16-bit rounding); outputs start poisoned (NaN).

use kir_backends::interp::{run_printing, HostArg, HostTensor, RunOptions};
use kir_ir::Dtype;
use kir_tests::oracle_ops::{erf, gelu_erf};
use kir_tests::{round, t, F64s, Rng};
use std::collections::BTreeMap;

/// Runs tests/in/FILE with `defines` on the interpreter (the front end's output); returns the
/// outputs and what `print` wrote.
fn run_file(
    file: &str,
    defines: &[(&str, &str)],
    args: Vec<(&str, HostArg)>,
) -> (BTreeMap<String, HostTensor>, String) {
    let path = format!("{}/in/{file}", env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(&path).expect("read test input");
    let defs: Vec<(String, String)> = defines
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let m = kir_compiler::internal::pipeline::output(&src, &defs)
        .unwrap_or_else(|e| panic!("{}", e.render(file, &src)));
    let args = args.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let mut printed = Vec::new();
    let out = run_printing(&m, &args, &RunOptions::default(), &mut printed)
        .unwrap_or_else(|e| panic!("{file} {defines:?}: {e}"));
    (out, String::from_utf8(printed).expect("utf-8"))
}

/// The distance between neighbouring values of `dt` around |v| (its unit in the last place).
fn ulp(dt: Dtype, v: f64) -> f64 {
    let (bits, emin) = match dt {
        Dtype::F32 => (24, -126),
        Dtype::F16 => (11, -14),
        Dtype::Bf16 => (8, -126),
        _ => panic!("{dt} is not a float"),
    };
    let e = if v == 0.0 || !v.is_finite() {
        emin
    } else {
        (((v.abs().to_bits() >> 52) & 0x7ff) as i32 - 1023).max(emin)
    };
    2f64.powi(e - (bits - 1))
}

/// Each `got[i]` is within `tol` units in the last place of `want[i]` (NaN where `want` is NaN,
/// the same infinity where `want` rounds to one in `dt`).
fn within(what: &str, dt: Dtype, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if round(dt, w).is_infinite() {
            g == round(dt, w)
        } else {
            (g - w).abs() <= tol * ulp(dt, w)
        };
        assert!(
            ok,
            "{what} {dt} element {i}: got {g:e}, want {w:e} ({:.3} ulp)",
            (g - w).abs() / ulp(dt, w)
        );
    }
}

#[test]
fn erf_pow_and_fma_round_once() {
    for dt in [Dtype::F32, Dtype::F16, Dtype::Bf16] {
        let mut rng = Rng::fresh("authoring ops");
        let n = rng.range(2, 400);
        let (mut x, mut y, mut z) = (
            rng.tensor(n, 2.5, dt),
            rng.tensor(n, 1.5, dt),
            rng.tensor(n, 2.5, dt),
        );
        // Values whose text `%.9g` is also Rust's (printed below).
        let (s, s_text) = [
            (1.5, "1.5"),
            (-0.75, "-0.75"),
            (3.25, "3.25"),
            (-12.5, "-12.5"),
        ][rng.range(0, 4)];
        let x0_text = if dt == Dtype::F32 {
            // (1 + 2⁻¹²)² − 1 = 2⁻¹¹ + 2⁻²⁴ with one rounding; rounding the product first
            // (a tie, to even) gives 2⁻¹¹.
            let a = 1.0 + 2f64.powi(-12);
            (x[0], y[0], z[0]) = (a, a, -1.0);
            "1.00024414"
        } else {
            x[0] = -2.25;
            "-2.25"
        };
        let (out, printed) = run_file(
            "authoring.kir",
            &[("DTYPE", dt.name())],
            vec![
                ("x", t(dt, &[n], x.clone())),
                ("y", t(dt, &[n], y.clone())),
                ("z", t(dt, &[n], z.clone())),
                ("s", HostArg::Scalar(s)),
            ],
        );
        let r = out["r"].data.f64s();
        let row = |i: usize| &r[i * n..(i + 1) * n];
        let map = |f: &dyn Fn(usize) -> f64| (0..n).map(f).collect::<Vec<f64>>();
        // 16-bit results are rounded from f32, 2⁻¹³ of their unit at most.
        let tol = 0.5 + 2f64.powi(-12);
        within("erf", dt, row(0), &map(&|i| erf(x[i])), tol);
        let base = |i: usize| round(dt, x[i].abs() + 0.5);
        within(
            "pow(|x|+0.5, y)",
            dt,
            row(1),
            &map(&|i| base(i).powf(y[i])),
            tol,
        );
        within("pow(x, 3)", dt, row(2), &map(&|i| x[i] * x[i] * x[i]), tol);
        within("pow(x, y)", dt, row(3), &map(&|i| x[i].powf(y[i])), tol);
        for i in 0..n {
            let want_nan = x[i] < 0.0 && y[i].fract() != 0.0;
            assert_eq!(row(3)[i].is_nan(), want_nan, "pow({}, {})", x[i], y[i]);
        }
        // x·y is exact in f64 (at most 48 significant bits) and the sum rounds once, within
        // 2⁻⁵³ of the exact value: far below the half unit of f32.
        within(
            "fma(x, y, z)",
            dt,
            row(4),
            &map(&|i| x[i] * y[i] + z[i]),
            tol,
        );
        within("fma(x, s, z)", dt, row(5), &map(&|i| x[i] * s + z[i]), tol);
        if dt == Dtype::F32 {
            assert_eq!(
                row(4)[0],
                2f64.powi(-11) + 2f64.powi(-24),
                "fma rounds once"
            );
        }
        let want = format!(
            "(0, 0, 0) program 0: s, x[0]#0: {s_text}\n(0, 0, 0) program 0: s, x[0]#1: {x0_text}\n"
        );
        assert_eq!(printed, want, "{dt}");
    }
}

#[test]
fn exact_gelu_matches_its_f64_formula() {
    for (dt, bm, bn) in [
        (Dtype::F32, "16", "64"),
        (Dtype::F16, "8", "32"),
        (Dtype::Bf16, "32", "16"),
        (Dtype::F32, "1", "128"),
    ] {
        let mut rng = Rng::fresh("exact gelu");
        let (m, n) = (rng.range(1, 70), rng.range(1, 150));
        let x = rng.tensor(m * n, 3.0, dt);
        let (out, printed) = run_file(
            "gelu_exact.kir",
            &[("DTYPE", dt.name()), ("BM", bm), ("BN", bn)],
            vec![("x", t(dt, &[m, n], x.clone()))],
        );
        assert!(printed.is_empty());
        let y = out["y"].data.f64s();
        assert_eq!(y.len(), m * n);
        for (i, (&g, &xi)) in y.iter().zip(&x).enumerate() {
            let w = gelu_erf(xi);
            // x·e + x/2 cancels for negative x (e → −1): the kernel's f32 arithmetic is good
            // to about 2⁻²⁴·|x| there; one unit of the storage dtype on top.
            let tol = ulp(dt, w) + 2f64.powi(-22) * xi.abs();
            assert!(
                (g - w).abs() <= tol,
                "gelu {dt} [{m}, {n}] element {i}: gelu({xi:e}) = {g:e}, want {w:e}"
            );
        }
    }
}
