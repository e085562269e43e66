//! Op semantics on the interpreter, one test input per family (tests/in/*.kir), each against
//! plain f64/i64 Rust loops over fresh random inputs with ragged sizes.

use kir_backends::interp::{run, HostArg, HostTensor};
use kir_ir::Dtype;
use kir_tests::F64s;
use kir_tests::{compare, round, t, Rng};
use std::collections::BTreeMap;

fn run_file(
    file: &str,
    defines: &[(&str, &str)],
    args: Vec<(&str, HostArg)>,
) -> BTreeMap<String, HostTensor> {
    let path = format!("{}/in/{file}", env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(&path).expect("read test input");
    let defs: Vec<(String, String)> = defines
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let (_, spec) = kir_compiler::internal::pipeline::frontend(&src, &defs)
        .unwrap_or_else(|e| panic!("{}", e.render(file, &src)));
    let args = args.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    run(&spec, &args).unwrap_or_else(|e| panic!("{file}: {e}"))
}

#[test]
fn elementwise_float_ops() {
    for dt in ["f32", "f16", "bf16"] {
        let mut rng = Rng::fresh("elementwise");
        let n = rng.range(1, 300);
        let x: Vec<f64> = (0..n).map(|_| (rng.normal() * 3.0) as f32 as f64).collect();
        let y: Vec<f64> = (0..n).map(|_| (rng.normal() * 3.0) as f32 as f64).collect();
        let out = run_file(
            "elementwise.kir",
            &[("DTYPE", dt)],
            vec![
                ("x", t(Dtype::F32, &[n], x.clone())),
                ("y", t(Dtype::F32, &[n], y.clone())),
            ],
        );
        let r = out["r"].data.f64s();
        let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
        let unary: [&dyn Fn(f64) -> f64; 13] = [
            &|v: f64| v.exp(),
            &|v: f64| v.exp2(),
            &|v: f64| v.abs().ln(),
            &|v: f64| v.abs().log2(),
            &|v: f64| v.abs().sqrt(),
            &|v: f64| 1.0 / v.abs().sqrt(),
            &|v: f64| v.tanh(),
            &|v: f64| sig(v),
            &|v: f64| v * sig(v),
            &|v: f64| 1.0 / v,
            &|v: f64| v.floor(),
            &|v: f64| -v,
            &|v: f64| v.abs(),
        ];
        for (row, f) in unary.iter().enumerate() {
            let want: Vec<f64> = x.iter().map(|&v| f(v)).collect();
            compare(
                &format!("unary row {row}"),
                &r[row * n..][..n],
                &want,
                (1e-6, 1e-5),
            );
        }
        let binary: [fn(f64, f64) -> f64; 6] = [
            |a, b| a + b,
            |a, b| a - b,
            |a, b| a * b,
            |a, b| a / b,
            f64::max,
            f64::min,
        ];
        for (i, f) in binary.iter().enumerate() {
            let row = 13 + i;
            let want: Vec<f64> = x.iter().zip(&y).map(|(&a, &b)| f(a, b)).collect();
            compare(
                &format!("binary row {row}"),
                &r[row * n..][..n],
                &want,
                (1e-7, 1e-6),
            );
        }
        // Row 19 must be exactly x rounded to the dtype (round to nearest even).
        let want: Vec<f64> = x.iter().map(|&v| round(kir_tests::dtype(dt), v)).collect();
        assert_eq!(&r[19 * n..][..n], &want[..], "cast through {dt}");
    }
}

#[test]
fn integer_ops_wrap_and_truncate() {
    let mut rng = Rng::fresh("integer ops");
    let n = rng.range(1, 200);
    let x: Vec<i64> = (0..n)
        .map(|_| (rng.next_u64() as i32) as i64 >> rng.range(0, 31))
        .collect();
    let y: Vec<i64> = (0..n)
        .map(|_| {
            let v = (rng.next_u64() as i32 as i64) >> rng.range(0, 31);
            if v == 0 {
                3
            } else {
                v
            }
        })
        .collect();
    let f = |v: &[i64]| v.iter().map(|&a| a as f64).collect::<Vec<_>>();
    let out = run_file(
        "integer_ops.kir",
        &[],
        vec![
            ("x", t(Dtype::I32, &[n], f(&x))),
            ("y", t(Dtype::I32, &[n], f(&y))),
        ],
    );
    let ops: [fn(i32, i32) -> i32; 14] = [
        |a, b| a.wrapping_add(b),
        |a, b| a.wrapping_sub(b),
        |a, b| a.wrapping_mul(b),
        |a, b| a.wrapping_div(b),
        |a, b| a.wrapping_rem(b),
        |a, b| a & b,
        |a, b| a | b,
        |a, b| a ^ b,
        |a, b| a.min(b),
        |a, b| a.max(b),
        |a, b| a.wrapping_shl((b & 7) as u32),
        |a, b| a >> (b & 7),
        |a, b| if a < b { a } else { b },
        |a, _| ((a as f32) * 0.5) as i32,
    ];
    let r = out["r"].data.f64s();
    for (row, op) in ops.iter().enumerate() {
        for i in 0..n {
            let want = op(x[i] as i32, y[i] as i32) as f64;
            assert_eq!(
                r[row * n + i],
                want,
                "row {row} element {i}: x={} y={}",
                x[i],
                y[i]
            );
        }
    }
}

#[test]
fn shapes_reductions_transpose_masks() {
    let mut rng = Rng::fresh("shapes");
    let (m, n) = (rng.range(1, 60), rng.range(1, 60));
    let gm = m.div_ceil(16);
    let x: Vec<f64> = (0..m * n)
        .map(|_| (rng.normal() * 3.0) as f32 as f64)
        .collect();
    let out = run_file(
        "shapes.kir",
        &[],
        vec![
            ("x", t(Dtype::F32, &[m, n], x.clone())),
            ("rowsum", t(Dtype::F32, &[m], vec![0.0; m])),
        ],
    );
    let rowsum: Vec<f64> = (0..m).map(|i| (0..n).map(|j| x[i * n + j]).sum()).collect();
    compare("rowsum", out["rowsum"].data.f64s(), &rowsum, (1e-6, 1e-5));
    let mut colmax = vec![f64::NEG_INFINITY; gm * n];
    for i in 0..m {
        for j in 0..n {
            let c = &mut colmax[(i / 16) * n + j];
            *c = c.max(x[i * n + j]);
        }
    }
    assert_eq!(out["colmax"].data.f64s(), colmax, "colmax");
    let tr: Vec<f64> = (0..n * m).map(|k| x[(k % m) * n + k / m]).collect();
    assert_eq!(out["t"].data.f64s(), tr, "transpose");
    let lower: Vec<f64> = (0..m * n)
        .map(|k| if k % n <= k / n { x[k] } else { 0.0 })
        .collect();
    assert_eq!(out["lower"].data.f64s(), lower, "masked stores");
}

#[test]
fn control_flow_and_nf4() {
    let mut rng = Rng::fresh("control");
    let (r, n, c) = (rng.range(1, 20), rng.range(1, 50), rng.range(1, 40));
    let x: Vec<f64> = (0..r * n)
        .map(|_| (rng.normal() * 3.0) as f32 as f64)
        .collect();
    let codes: Vec<f64> = (0..c).map(|_| (rng.next_u64() % 256) as f64).collect();
    let out = run_file(
        "control.kir",
        &[],
        vec![
            ("x", t(Dtype::F32, &[r, n], x.clone())),
            ("codes", t(Dtype::U8, &[c], codes.clone())),
        ],
    );
    let mut sum = vec![0.0; r];
    let mut cnt = vec![0.0; r];
    for i in 0..r {
        for j in 0..n {
            let v = x[i * n + j];
            sum[i] += if v > 0.0 { v } else { v * 0.5 };
            cnt[i] += (v > 0.0) as i32 as f64;
        }
    }
    compare("control sum", out["out"].data.f64s(), &sum, (1e-6, 1e-5));
    assert_eq!(out["count"].data.f64s(), cnt);
    // The NF4 codebook as published (QLoRA), independent of the op table.
    let nf4 = kir_tests::oracle_ops::NF4;
    let want: Vec<f64> = codes
        .iter()
        .map(|&cd| nf4[(cd as usize) & 15] as f32 as f64)
        .collect();
    assert_eq!(out["nf4out"].data.f64s(), want);
}

/// The test crate's rounding matches known values, including ties to even and subnormals.
#[test]
fn reference_rounding() {
    use kir_tests::round;
    // bf16: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 → even (1.0); just above rounds up.
    assert_eq!(round(Dtype::Bf16, 1.0 + 2f64.powi(-8)), 1.0);
    assert_eq!(
        round(Dtype::Bf16, 1.0 + 2f64.powi(-8) + 2f64.powi(-40)),
        1.0 + 2f64.powi(-7)
    );
    assert_eq!(
        round(Dtype::Bf16, 1.0 + 3.0 * 2f64.powi(-8)),
        1.0 + 2f64.powi(-6)
    );
    // f16: 2049 is a tie between 2048 and 2050 → 2048; 2051 → 2052; smallest subnormal 2^-24.
    assert_eq!(round(Dtype::F16, 2049.0), 2048.0);
    assert_eq!(round(Dtype::F16, 2051.0), 2052.0);
    assert_eq!(round(Dtype::F16, 2f64.powi(-24) * 0.75), 2f64.powi(-24));
    assert_eq!(round(Dtype::F16, 65520.0), f64::INFINITY);
    assert_eq!(round(Dtype::F16, 65519.0), 65504.0);
}
