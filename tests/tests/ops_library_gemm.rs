//! The gemm op's features on the CPU interpreter against the independent f64 oracle
//! (`kir_tests::oracle_ops::gemm`): TRANS_A, TRANS_B, C_IN (the backward accumulate pattern),
//! BF16_COMPUTE (truncation, not rounding), every EPILOGUE, batched Bt = B·H, and their
//! combinations, over every DTYPE, ragged M/N, K not a multiple of the k tile, N ∈ {1, 896,
//! 4097} and magnitudes 1 and 3. Also the gemm specialization errors.

use kir_backends::interp::HostArg;
use kir_ir::Dtype;
use kir_tests::oracle_ops::{self as o, Epi};
use kir_tests::F64s;
use kir_tests::{compare, dtype, round, run_op, t, tolerance, try_op, Rng};

/// One gemm problem: its specialization and shape.
#[derive(Clone, Copy, Debug)]
struct Case {
    dt: &'static str,
    /// (Bt, M, K, N).
    dims: (usize, usize, usize, usize),
    trans_a: bool,
    trans_b: bool,
    c_in: bool,
    bf16: bool,
    epi: Epi,
    mag: f64,
}

impl Case {
    fn new(dt: &'static str, dims: (usize, usize, usize, usize), epi: Epi, mag: f64) -> Case {
        Case {
            dt,
            dims,
            trans_a: false,
            trans_b: false,
            c_in: false,
            bf16: false,
            epi,
            mag,
        }
    }
    fn ta(self) -> Case {
        Case {
            trans_a: true,
            ..self
        }
    }
    fn tb(self) -> Case {
        Case {
            trans_b: true,
            ..self
        }
    }
    fn cin(self) -> Case {
        Case { c_in: true, ..self }
    }
    fn bf16(self) -> Case {
        Case { bf16: true, ..self }
    }
}

/// The inputs of one run, as the kernel sees them (rounded to DTYPE).
struct Inputs {
    a: Vec<f64>,
    b: Vec<f64>,
    b2: Vec<f64>,
    bias: Vec<f64>,
    c_in: Vec<f64>,
    alpha: f64,
    beta: f64,
}

/// Draws fresh inputs, runs the kernel and returns its `c` with the inputs.
fn run(c: Case) -> (Vec<f64>, Inputs) {
    let dty = dtype(c.dt);
    let (bt, m, k, n) = c.dims;
    let mut rng = Rng::fresh(&format!("gemm {c:?}"));
    let inp = Inputs {
        a: rng.tensor(bt * m * k, c.mag, dty),
        b: rng.tensor(bt * k * n, c.mag, dty),
        b2: rng.tensor(bt * k * n, c.mag, dty),
        bias: rng.tensor(n, c.mag, dty),
        // c_in at the size of the product, so both terms matter.
        c_in: rng.tensor(bt * m * n, c.mag * c.mag * (k as f64).sqrt(), dty),
        alpha: 0.75,
        beta: [1.0, -0.5][rng.range(0, 2)],
    };
    let ashape = if c.trans_a { [bt, k, m] } else { [bt, m, k] };
    let bshape = if c.trans_b { [bt, n, k] } else { [bt, k, n] };
    let mut args = vec![
        ("a", t(dty, &ashape, inp.a.clone())),
        ("b", t(dty, &bshape, inp.b.clone())),
        ("alpha", HostArg::Scalar(inp.alpha)),
    ];
    if c.epi == Epi::Swiglu {
        args.push(("b2", t(dty, &bshape, inp.b2.clone())));
    }
    if c.epi == Epi::Bias {
        args.push(("bias", t(dty, &[n], inp.bias.clone())));
    }
    if c.c_in {
        args.push(("c_in", t(dty, &[bt, m, n], inp.c_in.clone())));
        args.push(("beta", HostArg::Scalar(inp.beta)));
    }
    let flag = |b: bool| if b { "1" } else { "0" };
    let out = run_op(
        "gemm",
        &[
            ("DTYPE", c.dt),
            ("TRANS_A", flag(c.trans_a)),
            ("TRANS_B", flag(c.trans_b)),
            ("C_IN", flag(c.c_in)),
            ("BF16_COMPUTE", flag(c.bf16)),
            ("EPILOGUE", c.epi.name()),
        ],
        args,
    );
    assert_eq!(out["c"].shape, vec![bt, m, n], "{c:?}");
    (out["c"].data.f64s().to_vec(), inp)
}

/// The oracle for case `c` on `inp`; `bf16_trunc` says whether inputs are truncated.
fn reference(c: Case, inp: &Inputs, bf16_trunc: bool) -> Vec<f64> {
    o::gemm(&o::Gemm {
        dims: c.dims,
        a: &inp.a,
        b: &inp.b,
        b2: (c.epi == Epi::Swiglu).then_some(&inp.b2[..]),
        bias: (c.epi == Epi::Bias).then_some(&inp.bias[..]),
        c_in: c.c_in.then_some((&inp.c_in[..], inp.beta)),
        trans_a: c.trans_a,
        trans_b: c.trans_b,
        bf16_trunc,
        alpha: inp.alpha,
        epi: c.epi,
    })
}

/// Runs case `c` and compares it with the oracle at the tolerance of its DTYPE.
fn check(c: Case) {
    let (out, inp) = run(c);
    // A product beyond the output dtype's range is infinite in that dtype (f16 tops out at
    // 65504: a swiglu epilogue of magnitude-3 inputs reaches it), as the kernel's f32 result
    // rounded to it is; finite references stay unrounded.
    let d = dtype(c.dt);
    let want: Vec<f64> = reference(c, &inp, c.bf16)
        .into_iter()
        .map(|r| {
            if round(d, r).is_infinite() {
                round(d, r)
            } else {
                r
            }
        })
        .collect();
    compare(&format!("{c:?}"), &out, &want, tolerance(d));
}

#[test]
fn every_epilogue_every_dtype() {
    for dt in ["f32", "f16", "bf16"] {
        for epi in Epi::ALL {
            for mag in [1.0, 3.0] {
                check(Case::new(dt, (1, 67, 45, 130), epi, mag));
            }
            check(Case::new(dt, (2, 33, 70, 65), epi, 1.0).ta().tb());
        }
    }
}

#[test]
fn transposes_and_c_in_batched() {
    // Bt = B·H = 2·3; K = 300 is not a multiple of BLOCK_K = 32; M and N are ragged.
    for dt in ["f32", "f16", "bf16"] {
        for mag in [1.0, 3.0] {
            check(Case::new(dt, (6, 100, 300, 33), Epi::None, mag).ta());
            check(
                Case::new(dt, (6, 100, 300, 33), Epi::None, mag)
                    .ta()
                    .tb()
                    .cin(),
            );
            check(Case::new(dt, (6, 37, 45, 70), Epi::Bias, mag).cin());
        }
        check(Case::new(dt, (3, 1, 1, 1), Epi::None, 3.0).ta().tb().cin());
        check(Case::new(dt, (2, 20, 50, 30), Epi::Relu, 1.0).tb().cin());
    }
}

#[test]
fn wide_n() {
    // With N = 1 the rows give the outputs: M = 40 keeps silu's saturated tail (outputs that
    // underflow toward 0 where f64 still has ~1e-20) from being all there is to compare.
    for (dt, n, m, mag) in [
        ("bf16", 896, 3, 1.0),
        ("f32", 4097, 3, 3.0),
        ("f16", 1, 40, 3.0),
    ] {
        check(Case::new(dt, (1, m, 37, n), Epi::None, mag).ta());
        check(Case::new(dt, (1, m, 70, n), Epi::Silu, mag).tb().cin());
    }
}

/// The backward pattern with β = 1 accumulate: dA += dC·Bᵀ (TRANS_B) and dB += Aᵀ·dC
/// (TRANS_A), checked against the gradients written out directly.
#[test]
fn backward_accumulate_pattern() {
    let (bt, m, k, n) = (4, 45, 70, 33);
    for dt in ["f32", "bf16"] {
        let dty = dtype(dt);
        let mut rng = Rng::fresh(&format!("gemm backward {dt}"));
        let a = rng.tensor(bt * m * k, 1.0, dty);
        let b = rng.tensor(bt * k * n, 1.0, dty);
        let dc = rng.tensor(bt * m * n, 1.0, dty);
        let da0 = rng.tensor(bt * m * k, 3.0, dty);
        let db0 = rng.tensor(bt * k * n, 3.0, dty);
        let (mut da_ref, mut db_ref) = (da0.clone(), db0.clone());
        for x in 0..bt {
            for i in 0..m {
                for kk in 0..k {
                    for j in 0..n {
                        let g = dc[(x * m + i) * n + j];
                        da_ref[(x * m + i) * k + kk] += g * b[(x * k + kk) * n + j];
                        db_ref[(x * k + kk) * n + j] += a[(x * m + i) * k + kk] * g;
                    }
                }
            }
        }
        let defs = |ta: &'static str, tb: &'static str| {
            vec![
                ("DTYPE", dt),
                ("TRANS_A", ta),
                ("TRANS_B", tb),
                ("C_IN", "1"),
            ]
        };
        let one = || HostArg::Scalar(1.0);
        // dA [bt, m, k] = dC [bt, m, n] · (B [bt, k, n])ᵀ + dA0.
        let da = run_op(
            "gemm",
            &defs("0", "1"),
            vec![
                ("a", t(dty, &[bt, m, n], dc.clone())),
                ("b", t(dty, &[bt, k, n], b)),
                ("c_in", t(dty, &[bt, m, k], da0)),
                ("alpha", one()),
                ("beta", one()),
            ],
        );
        // dB [bt, k, n] = (A [bt, m, k])ᵀ · dC [bt, m, n] + dB0.
        let db = run_op(
            "gemm",
            &defs("1", "0"),
            vec![
                ("a", t(dty, &[bt, m, k], a)),
                ("b", t(dty, &[bt, m, n], dc)),
                ("c_in", t(dty, &[bt, k, n], db0)),
                ("alpha", one()),
                ("beta", one()),
            ],
        );
        compare(
            &format!("gemm backward {dt}: dA"),
            da["c"].data.f64s(),
            &da_ref,
            tolerance(dty),
        );
        compare(
            &format!("gemm backward {dt}: dB"),
            db["c"].data.f64s(),
            &db_ref,
            tolerance(dty),
        );
    }
}

/// BF16_COMPUTE truncates a, b (and b2) to bf16: the oracle truncates, and an oracle that
/// rounds to nearest instead is far outside the f32 tolerance of the same output.
#[test]
fn bf16_compute_truncates() {
    let cases = [
        Case::new("f32", (1, 67, 45, 130), Epi::Bias, 1.0).bf16(),
        Case::new("f32", (2, 40, 300, 33), Epi::None, 3.0)
            .bf16()
            .ta()
            .tb(),
        Case::new("f32", (1, 30, 70, 20), Epi::Swiglu, 1.0)
            .bf16()
            .tb(),
        Case::new("f32", (3, 20, 50, 30), Epi::Gelu, 3.0)
            .bf16()
            .ta()
            .cin(),
    ];
    for c in cases {
        let (out, inp) = run(c);
        let tol = tolerance(Dtype::F32);
        compare(&format!("{c:?}"), &out, &reference(c, &inp, true), tol);
        // The same inputs rounded (not truncated) to bf16 give a clearly different result.
        let rounded = Inputs {
            a: inp
                .a
                .iter()
                .map(|&x| kir_tests::round(Dtype::Bf16, x))
                .collect(),
            b: inp
                .b
                .iter()
                .map(|&x| kir_tests::round(Dtype::Bf16, x))
                .collect(),
            b2: inp
                .b2
                .iter()
                .map(|&x| kir_tests::round(Dtype::Bf16, x))
                .collect(),
            ..inp
        };
        let alt = reference(c, &rounded, false);
        let (num, den) = out.iter().zip(&alt).fold((0.0, 0.0), |(n, d), (o, r)| {
            (n + (o - r) * (o - r), d + r * r)
        });
        let rel = (num / den).sqrt();
        assert!(
            rel > 50.0 * tol.0,
            "{c:?}: rounding would also pass (rel {rel:.2e})"
        );
        // And without BF16_COMPUTE the full f32 inputs are used.
        let plain = Case { bf16: false, ..c };
        check(plain);
    }
    // One element by hand: 1 + 3·2⁻⁹ truncates to 1.0; rounding would give 1 + 2⁻⁷.
    let x = 1.0 + 3.0 * 2f64.powi(-9);
    let out = run_op(
        "gemm",
        &[("DTYPE", "f32"), ("BF16_COMPUTE", "1")],
        vec![
            ("a", t(Dtype::F32, &[1, 1, 1], vec![x])),
            ("b", t(Dtype::F32, &[1, 1, 1], vec![-x])),
            ("alpha", HostArg::Scalar(1.0)),
        ],
    );
    assert_eq!(out["c"].data.f64s(), vec![-1.0]);
}

#[test]
fn random_shapes_and_features() {
    let mut rng = Rng::fresh("gemm random features");
    for _ in 0..6 {
        let epi = Epi::ALL[rng.range(0, 6)];
        // silu, gelu and swiglu flatten to ~0 for very negative inputs, where finite precision
        // keeps no relative accuracy; at least 8×8 outputs make sure those are not all there is.
        let lo = if matches!(epi, Epi::Silu | Epi::Gelu | Epi::Swiglu) {
            8
        } else {
            1
        };
        let dims = (
            rng.range(1, 4),
            rng.range(lo, 150),
            rng.range(1, 200),
            rng.range(lo, 150),
        );
        let dt = ["f32", "f16", "bf16"][rng.range(0, 3)];
        let mut c = Case::new(dt, dims, epi, [1.0, 3.0][rng.range(0, 2)]);
        c.trans_a = rng.range(0, 2) == 1;
        c.trans_b = rng.range(0, 2) == 1;
        c.c_in = c.epi != Epi::Swiglu && rng.range(0, 2) == 1;
        c.bf16 = dt == "f32" && rng.range(0, 2) == 1;
        check(c);
    }
}

#[test]
fn gemm_errors_are_clear_and_located() {
    let err = |defs: &[(&str, &str)], args: Vec<(&str, HostArg)>| match try_op("gemm", defs, args) {
        Ok(_) => panic!("gemm {defs:?} ran, but an error was expected"),
        Err(e) => e,
    };
    let e = err(&[("EPILOGUE", "foo")], vec![]);
    assert!(
        e.contains("gemm.kir:")
            && e.contains(
                "-D EPILOGUE=foo: `foo` is not one of {none, bias, relu, silu, gelu, swiglu}"
            ),
        "{e}"
    );
    let e = err(&[("C_IN", "1"), ("EPILOGUE", "swiglu")], vec![]);
    assert!(
        e.contains("gemm.kir:") && e.contains("`C_IN` = 1 (set by -D) does not satisfy"),
        "{e}"
    );
    let e = err(&[("BF16_COMPUTE", "1"), ("DTYPE", "bf16")], vec![]);
    assert!(
        e.contains("`BF16_COMPUTE` = 1 (set by -D) does not satisfy") && e.contains("DTYPE == f32"),
        "{e}"
    );
    let x = || t(Dtype::F32, &[1, 2, 2], vec![1.0; 4]);
    // EPILOGUE=bias without a bias argument: a located runtime error naming the param.
    let e = err(
        &[("DTYPE", "f32"), ("EPILOGUE", "bias")],
        vec![("a", x()), ("b", x()), ("alpha", HostArg::Scalar(1.0))],
    );
    assert!(
        e.contains("gemm.kir:") && e.contains("missing argument `bias`"),
        "{e}"
    );
    // C_IN=1 without beta.
    let e = err(
        &[("DTYPE", "f32"), ("C_IN", "1")],
        vec![
            ("a", x()),
            ("b", x()),
            ("c_in", x()),
            ("alpha", HostArg::Scalar(1.0)),
        ],
    );
    assert!(e.contains("missing argument `beta`"), "{e}");
    // TRANS_A=1 with an `a` whose K does not match b's.
    let e = err(
        &[("DTYPE", "f32"), ("TRANS_A", "1")],
        vec![
            ("a", t(Dtype::F32, &[1, 3, 2], vec![1.0; 6])),
            ("b", x()),
            ("alpha", HostArg::Scalar(1.0)),
        ],
    );
    assert!(e.contains("gemm.kir:") && e.contains("dim `K` is 3"), "{e}");
}
