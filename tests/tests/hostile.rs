//! Regression tests of the second hostile review, below the command line (items 11 to 16 of
//! docs/testing.md, "Reliability"; the `kirc`-level ones are in
//! kirc/tests/cli_hostile.rs), each rebuilt from its description:
//!
//! 12. host values that overflow a float param's dtype (an integer for f16, `1e39` from an f64
//!     `.npy` into f32, bf16 and f16 overflow) are errors naming the param and the value; an
//!     infinity given as such stays one, and in-range random values round like the f64 oracle;
//! 13. constant grids out of range are located verifier errors, and launch dims over CUDA's
//!     limits are interpreter errors before any program runs;
//! 14. scheduled IR: a nested `warp_specialize`, a double `smem_release`, a duplicated
//!     `mbar_arrive` and a constant stage index out of range are located verifier errors, and
//!     the scheduler reports a double release or a duplicated arrival it cannot see statically
//!     under every seed.

use kir_backends::interp::{run_with, HostArg, HostData, HostTensor, RunOptions};
use kir_ir::Dtype;
use kir_tests::{F64s, Rng};
use std::collections::BTreeMap;

const RING: &str = include_str!("../in/sched/ring_ws.kir");

/// Runs `src` (specialized with no defines) on `args`; the outputs or the rendered error.
fn run(
    src: &str,
    args: Vec<(&str, HostArg)>,
    seed: u64,
) -> Result<BTreeMap<String, HostTensor>, String> {
    let (_, spec) =
        kir_compiler::internal::pipeline::frontend(src, &[]).map_err(|e| e.render("t.kir", src))?;
    let args: BTreeMap<String, HostArg> =
        args.into_iter().map(|(n, a)| (n.to_string(), a)).collect();
    let opts = RunOptions {
        parallel: true,
        seed,
    };
    run_with(&spec, &args, &opts).map_err(|e| match e.span {
        Some(sp) => kir_ir::Diagnostic::new(sp, e.message).render("t.kir", src),
        None => e.message,
    })
}

/// A tensor argument of host data.
fn tensor(dtype: Dtype, shape: &[usize], data: HostData) -> HostArg {
    HostArg::Tensor(HostTensor {
        dtype,
        shape: shape.to_vec(),
        data,
    })
}

/// `y = x + s` over a vector of dtype `dt` (x and s are rounded to `dt` on the way in).
fn add_kernel(dt: &str) -> String {
    format!(
        "module addk
kernel @k(x: in tensor<{dt}>[N], s: {dt}, y: out tensor<{dt}>[N]) grid [1, 1, 1] {{
  %s = param s : {dt}
  %o = const 0 : i32
  %v = load x[%o] other 0.0 : tile<8x{dt}>
  %w = add %v, %s : tile<8x{dt}>
  store y[%o], %w guard
}}
"
    )
}

/// f64 → `dt` by the rules of the `.npy` contract (round to nearest even), as the oracle does.
fn round_to(dt: Dtype, x: f64) -> f64 {
    match dt {
        Dtype::F32 => x as f32 as f64,
        Dtype::F16 => half::f16::from_f64(x).to_f64(),
        Dtype::Bf16 => half::bf16::from_f64(x).to_f64(),
        _ => unreachable!(),
    }
}

/// The largest finite value of `dt`.
fn max_of(dt: Dtype) -> f64 {
    match dt {
        Dtype::F32 => f32::MAX as f64,
        Dtype::F16 => 65504.0,
        Dtype::Bf16 => half::bf16::MAX.to_f64(),
        _ => unreachable!(),
    }
}

#[test]
fn host_values_that_overflow_a_float_param_are_errors() {
    let mut rng = Rng::fresh("host overflow");
    for (dt, name) in [
        (Dtype::F32, "f32"),
        (Dtype::F16, "f16"),
        (Dtype::Bf16, "bf16"),
    ] {
        let src = add_kernel(name);
        let max = max_of(dt);
        // In range, up to the largest finite value: the sum matches the f64 oracle of the
        // rounded operands (one rounding of the exact sum of two values of `dt`).
        let x: Vec<f64> = (0..8)
            .map(|i| match i {
                0 => max,
                1 => -max,
                _ => rng.normal() * 100.0,
            })
            .collect();
        let s = rng.normal();
        let out = run(
            &src,
            vec![
                ("x", tensor(dt, &[8], HostData::F64(x.clone()))),
                ("s", HostArg::Scalar(s)),
            ],
            0,
        )
        .unwrap_or_else(|e| panic!("{name}: in-range values fail: {e}"));
        let sr = round_to(dt, s);
        // The exact sum of two values of `dt` rounded to f32 (the op computes in f32), then to
        // `dt`.
        let want: Vec<f64> = x
            .iter()
            .map(|&v| round_to(dt, (round_to(dt, v) + sr) as f32 as f64))
            .collect();
        let got = out["y"].data.f64s();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(g == w, "{name}: y[{i}] = {g}, the oracle says {w}");
        }
        // Overflowing values, from f64 data, i64 data and scalar arguments: errors naming
        // the param and the value.
        let over = max * 2.0;
        let mut big = x.clone();
        big[5] = over;
        let cases: Vec<(&str, Vec<(&str, HostArg)>, String)> = vec![
            (
                "an f64 element",
                vec![
                    ("x", tensor(dt, &[8], HostData::F64(big))),
                    ("s", HostArg::Scalar(0.0)),
                ],
                "element 5 of `x`".into(),
            ),
            (
                "a float scalar",
                vec![
                    ("x", tensor(dt, &[8], HostData::F64(x.clone()))),
                    ("s", HostArg::Scalar(-over)),
                ],
                "scalar `s`".into(),
            ),
        ];
        for (what, args, needle) in cases {
            let e = run(&src, args, 0).err().unwrap_or_else(|| {
                panic!("{name}: {what} of {over:e} became an infinity without an error")
            });
            assert!(
                e.contains(&needle) && e.contains("out of range for"),
                "{name}: {what}: {e}"
            );
        }
        // An infinity given as one stays one.
        let mut inf = x.clone();
        inf[3] = f64::INFINITY;
        let out = run(
            &src,
            vec![
                ("x", tensor(dt, &[8], HostData::F64(inf))),
                ("s", HostArg::Scalar(f64::NEG_INFINITY)),
            ],
            0,
        )
        .unwrap_or_else(|e| panic!("{name}: explicit infinities fail: {e}"));
        let y = out["y"].data.f64s();
        assert!(y[3].is_nan() && y[0] == f64::NEG_INFINITY, "{name}: {y:?}");
    }
    // Integers: 70000 does not fit f16 (65504 is its largest finite value, 65519 still
    // rounds to it), as a scalar argument and as i64 data.
    let src = add_kernel("f16");
    let ok = run(
        &src,
        vec![
            ("x", tensor(Dtype::F16, &[8], HostData::I64(vec![65519; 8]))),
            ("s", HostArg::Int(-65519)),
        ],
        0,
    )
    .expect("65519 rounds to 65504");
    assert_eq!(ok["y"].data.f64s(), &[0.0; 8][..]);
    for (x, s, needle) in [
        (1, 70000, "scalar `s`: 70000 is out of range for f16"),
        (70000, 1, "element 0 of `x`: 70000 is out of range for f16"),
    ] {
        let e = run(
            &src,
            vec![
                ("x", tensor(Dtype::F16, &[8], HostData::I64(vec![x; 8]))),
                ("s", HostArg::Int(s)),
            ],
            0,
        )
        .expect_err("an integer over f16's range");
        assert!(e.contains(needle), "{e}");
    }
}

/// A kernel with grid `grid` that stores one value per program of its x axis.
fn grid_kernel(grid: &str) -> String {
    format!(
        "module g
kernel @k(x: in tensor<f32>[N], y: out tensor<f32>[N]) grid {grid} {{
  %o = const 0 : i32
  %v = load x[%o] : f32
  store y[%o], %v
}}
"
    )
}

#[test]
fn grids_out_of_range_are_errors_before_anything_runs() {
    // Constant grids: located verifier errors at the dimension at fault.
    for (grid, bad, needle) in [
        ("[-1, 1, 1]", "-1", "grid dimension x of kernel `@k` is -1"),
        ("[0, 1, 1]", "0", "must be at least 1"),
        (
            "[1, 0 - 3, 1]",
            "0 - 3",
            "grid dimension y of kernel `@k` is -3",
        ),
        (
            "[1, 65536, 1]",
            "65536",
            "over the limit of 65535 for axis y",
        ),
        (
            "[1, 1, 2147483647]",
            "2147483647",
            "over the limit of 65535 for axis z",
        ),
        (
            "[2147483648, 1, 1]",
            "2147483648",
            "over the limit of 2147483647 for axis x",
        ),
    ] {
        let src = grid_kernel(grid);
        let m = kir_ir::text::parse(&src).expect("parses");
        let d = kir_ir::verifier::verify(&m).expect_err(grid);
        let e =
            d.0.iter()
                .find(|e| e.message.contains(needle))
                .unwrap_or_else(|| panic!("{grid}: no `{needle}` in {d:?}"));
        assert_eq!(
            &src[e.span.start as usize..e.span.end as usize],
            bad,
            "{grid}"
        );
    }
    let largest = grid_kernel("[2147483647, 65535, 65535]");
    kir_ir::verifier::verify(&kir_ir::text::parse(&largest).unwrap()).expect("the limits");
    // Run-time grids: a y or z dim over 65535 is refused at launch, before any program runs
    // (it ran 70,000 programs, or 2^31 − 1 of them for hours).
    for (grid, needle) in [
        ("[1, N, 1]", "(axis y) is 70000, outside [0, 65535]"),
        ("[1, 1, N]", "(axis z) is 70000, outside [0, 65535]"),
    ] {
        let x = tensor(Dtype::F32, &[70000], HostData::F64(vec![1.0; 70000]));
        let e = run(&grid_kernel(grid), vec![("x", x)], 0).expect_err(grid);
        assert!(e.contains(needle), "{grid}: {e}");
    }
    // In range, it runs (x up to the program count used here).
    let x = tensor(Dtype::F32, &[3], HostData::F64(vec![2.5; 3]));
    let out = run(&grid_kernel("[1, N, N]"), vec![("x", x)], 0).expect("a small grid");
    assert_eq!(out["y"].data.f64s()[0], 2.5);
}

/// The ring with one textual edit (which must apply).
fn ring_with(from: &str, to: &str) -> String {
    assert!(RING.contains(from), "the ring no longer contains `{from}`");
    RING.replacen(from, to, 1)
}

/// The verifier's errors for `src`, rendered.
fn verify_errors(src: &str) -> String {
    let m = kir_ir::text::parse(src).expect("parses");
    match kir_ir::verifier::verify(&m) {
        Ok(()) => String::new(),
        Err(d) => d.render("ring.kir", src),
    }
}

#[test]
fn scheduled_ir_protocol_errors_are_found_statically() {
    let release = "      smem_release %buf, %s\n";
    let arrive = "      mbar_arrive %empty, %s\n";
    let read = "      %t = smem_read %buf, %s : tile<16x8xf32>\n";
    let cases = [
        (
            "nested warp_specialize",
            ring_with(
                "    %two_f = const 2.0 : f32\n",
                "    %two_f = const 2.0 : f32\n    warp_specialize producer_warps 1 producer_regs 40 consumers 1 consumer_warps 1 consumer_regs 40 {\n    } consumer(%w2) {\n    }\n",
            ),
            "`warp_specialize` inside a partition of another `warp_specialize`",
            "warp_specialize",
        ),
        (
            "double smem_release",
            ring_with(release, &format!("{release}{release}")),
            "releases the stage again",
            "smem_release %buf, %s",
        ),
        (
            "duplicated mbar_arrive",
            ring_with(arrive, &format!("{arrive}{arrive}")),
            "arrives again with no `mbar_wait`",
            "mbar_arrive %empty, %s",
        ),
        (
            "constant stage out of range",
            ring_with(read, "      %t = smem_read %buf, %two : tile<16x8xf32>\n"),
            "stage index 2 of `smem_read` is outside %buf, which has 2 stages",
            "%t = smem_read %buf, %two",
        ),
        (
            "constant barrier stage out of range",
            ring_with(arrive, "      %three = const 3 : i32\n      mbar_arrive %empty, %three\n"),
            "stage index 3 of `mbar_arrive` is outside %empty",
            "mbar_arrive %empty, %three",
        ),
    ];
    // Each error is located at the last occurrence of `at` (the nested or repeated op).
    for (what, src, needle, at) in cases {
        let e = verify_errors(&src);
        assert!(e.contains(needle), "{what}: expected `{needle}` in:\n{e}");
        let pos = src.rfind(at).expect("the op");
        let line = src[..pos].matches('\n').count() + 1;
        let col = pos - src[..pos].rfind('\n').map_or(0, |i| i + 1) + 1;
        let place = format!("ring.kir:{line}:{col}: error");
        assert!(e.contains(&place), "{what}: expected `{place}` in:\n{e}");
    }
    // The correct ring, a release after a read in each iteration, and arrivals separated by a
    // wait pass.
    assert_eq!(verify_errors(RING), "");
}

#[test]
fn the_scheduler_reports_duplicates_under_every_seed() {
    // The stage index recomputed, so the verifier cannot tell the two ops name one stage.
    let again = "      %s2 = rem %k, %two : i32\n";
    let cases = [
        (
            "duplicated mbar_arrive",
            ring_with(
                "      mbar_arrive %empty, %s\n",
                &format!("      mbar_arrive %empty, %s\n{again}      mbar_arrive %empty, %s2\n"),
            ),
            "consumer 0 arrives on barrier %empty[",
        ),
        (
            "duplicated mbar_arrive with tx",
            // After the copy, which may land before the duplicate arrives (then the
            // duplicate counts for the next phase) or after it.
            ring_with(
                "      async_copy x[%i, 0], %buf, %s other 0.0 bar %full\n",
                &format!("      async_copy x[%i, 0], %buf, %s other 0.0 bar %full\n{again}      mbar_arrive %full, %s2 tx 512\n"),
            ),
            "producer arrives on barrier %full[",
        ),
        (
            "double smem_release",
            ring_with(
                "      smem_release %buf, %s\n",
                &format!("      smem_release %buf, %s\n{again}      smem_release %buf, %s2\n"),
            ),
            "consumer 0 releases %buf[",
        ),
    ];
    let mut rng = Rng::fresh("sched duplicates");
    for (what, src, needle) in cases {
        assert_eq!(verify_errors(&src), "", "{what}: the verifier must pass it");
        for rows in [33, 80] {
            let x = rng.tensor(rows * 8, 3.0, Dtype::F32);
            for seed in 0..20 {
                let arg = tensor(Dtype::F32, &[rows, 8], HostData::F64(x.clone()));
                match run(&src, vec![("x", arg)], seed) {
                    Ok(_) => panic!("{what}: rows {rows} seed {seed} ran without a report"),
                    Err(e) => assert!(
                        e.contains(needle),
                        "{what}: rows {rows} seed {seed}: expected `{needle}` in:\n{e}"
                    ),
                }
            }
        }
    }
}

/// Item 16: `--warp-specialize on --overlap on` on sm_90a. The consumer reads q once from its
/// stage and both q·kᵀ dots (`dot_overlap`'s peeled one and its `dot_async`) take it as their
/// A operand; the backend required a single use of a stage read before giving its buffer
/// wgmma's layout, so q's tensor copy had no lowering and every such compile failed. Now each
/// default tile lowers (every dot on wgmma), assembles, and the scheduled module it lowered
/// gives bit-identical outputs to the plain kernel of the same configuration under several
/// scheduler seeds on random ragged inputs.
#[test]
fn warp_specialized_overlap_lowers_and_matches_the_plain_kernel() {
    use kir_backends::ptx::PtxOptions;
    use kir_backends::Target;
    use kir_compiler::internal::compile::{compile_stage, Emit, Stage};
    let ptxas = std::env::var("KIR_PTXAS").ok();
    let src = kir_compiler::internal::oplib::builtin("attention_fwd").expect("op");
    for (d, causal) in [("64", "0"), ("64", "1"), ("128", "0"), ("128", "1")] {
        let what = format!("attention_fwd d{d} causal {causal} --warp-specialize on --overlap on");
        let defs: Vec<(String, String)> = [("HEAD_DIM", d), ("CAUSAL", causal)]
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        let opts = PtxOptions {
            warp_specialize: Some(true),
            overlap: Some(true),
            ..Default::default()
        };
        let out = compile_stage(
            src,
            &defs,
            None,
            Target::Sm90a,
            Emit::Ptx,
            Stage::Output,
            &opts,
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        let r = &out.reports[0];
        assert!(r.dots.len() >= 3, "{what}: {} dots", r.dots.len());
        let text = r.render(Some(src));
        assert_eq!(
            text.matches("-> wgmma").count(),
            r.dots.len(),
            "{what}: a dot off wgmma:\n{text}"
        );
        // The lowered module is warp-specialized and rotated.
        let m = &out.module;
        let printed = kir_ir::text::print(m);
        assert!(
            printed.contains("warp_specialize") && printed.contains("dot_async"),
            "{what}"
        );
        // The plain kernel of the same configuration (the per-target tile of sm_90a).
        let plain = compile_stage(
            src,
            &defs,
            None,
            Target::Sm90a,
            Emit::Ir,
            Stage::Output,
            &PtxOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{what}: plain: {e}"))
        .module;
        kir_tests::sched_diff::differential(&what, &plain, m, 4);
        if let Some(ptxas) = &ptxas {
            let dir = std::env::temp_dir().join(format!(
                "kir_hostile_ws_overlap_{}_{d}_{causal}",
                std::process::id()
            ));
            std::fs::create_dir_all(&dir).expect("temp dir");
            let ptx = dir.join("k.ptx");
            std::fs::write(&ptx, &out.text).expect("write");
            let o = std::process::Command::new(ptxas)
                .args(["-arch=sm_90a", "-o"])
                .arg(dir.join("k.cubin"))
                .arg(&ptx)
                .output()
                .expect("ptxas runs");
            let log = String::from_utf8_lossy(&o.stderr);
            assert!(o.status.success(), "{what}: ptxas failed:\n{log}");
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}
