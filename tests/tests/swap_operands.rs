//! The `swap_operands` pass (compiler/src/passes/schedule/swap_operands.rs): a dot loop's
//! accumulator computed transposed (`dot bᵀ, aᵀ, cᵀ`, transposed back after the loop) gives
//! the same bits as the loop as written, on the interpreter, for the built-in gemm with
//! transposed operands, an input accumulated into, the bias and activation epilogues, the
//! swiglu epilogue's two accumulators and a batch, and for a user's matmul; each output is
//! also checked against an f64 loop. The rewritten module verifies, carries the transposed
//! accumulator, and keeps the dot count; a kernel whose accumulator is read inside the loop is
//! left alone (printed the same). And on sm_90a the GEMM rows for at most 32 rows swap, with every dot on wgmma.

use kir_backends::interp::{self, HostArg};
use kir_backends::Target;
use kir_compiler::internal::compile::Emit;
use kir_compiler::internal::passes::swap_operands;
use kir_compiler::internal::pipeline;
use kir_compiler::internal::plan::{CompilePlan, Flags};
use kir_ir::{Dtype, Module, Opcode};
use kir_tests::defs;
use kir_tests::{compare, round, t, tolerance, Rng};
use std::collections::BTreeMap;

/// The front end's output of `src` with `d`, and the same module with operands swapped.
fn both(src: &str, d: &[(&str, &str)]) -> (Module, Module) {
    let m = pipeline::output(src, &defs(d))
        .unwrap_or_else(|e| panic!("{d:?}: {}", e.render("src", src)));
    let s = swap_operands(&m).expect("swap_operands");
    kir_ir::verifier::verify(&s).unwrap_or_else(|e| panic!("{d:?}: swapped module: {e:?}"));
    (m, s)
}

/// The bits of every output of `m` on `args`.
fn bits(m: &Module, args: &BTreeMap<String, HostArg>) -> BTreeMap<String, Vec<u64>> {
    interp::run(m, args)
        .expect("runs")
        .into_iter()
        .map(|(k, v)| {
            (
                k,
                v.data
                    .as_f64()
                    .expect("f64")
                    .iter()
                    .map(|x| x.to_bits())
                    .collect(),
            )
        })
        .collect()
}

/// The transposed dots of `s` against those of `m`: same count, each `[N, M]` for `[M, N]`.
fn dots_transposed(m: &Module, s: &Module) {
    let shapes = |m: &Module| -> Vec<Vec<usize>> {
        let k = m.kernels.values().next().expect("a kernel");
        k.dfg
            .ops
            .values()
            .filter(|o| o.opcode == Opcode::Dot)
            .map(|o| k.dfg.ty(o.results[0]).shape().expect("a tile"))
            .collect()
    };
    let (a, b) = (shapes(m), shapes(s));
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.iter().rev().copied().collect::<Vec<_>>(), *y);
    }
}

#[test]
fn swapped_gemm_gives_the_same_bits() {
    let src = kir_compiler::internal::oplib::builtin("gemm").expect("gemm");
    let mut rng = Rng::fresh("swap_operands gemm");
    let tiles = [("BLOCK_M", "16"), ("BLOCK_N", "32"), ("BLOCK_K", "16")];
    for (extra, bt, m, n, k) in [
        (&[][..], 1, 13, 70, 50),
        (&[("TRANS_A", "1"), ("TRANS_B", "1")][..], 2, 20, 33, 40),
        (&[("C_IN", "1"), ("EPILOGUE", "relu")][..], 1, 16, 64, 37),
        (&[("EPILOGUE", "bias"), ("DTYPE", "f16")][..], 1, 5, 90, 64),
        (&[("EPILOGUE", "swiglu")][..], 1, 9, 40, 30),
    ] {
        let mut d = tiles.to_vec();
        d.extend_from_slice(extra);
        let (plain, swapped) = both(src, &d);
        dots_transposed(&plain, &swapped);
        let dt = if extra.contains(&("DTYPE", "f16")) {
            Dtype::F16
        } else {
            Dtype::Bf16
        };
        let ta = extra.contains(&("TRANS_A", "1"));
        let tb = extra.contains(&("TRANS_B", "1"));
        let a = rng.tensor(bt * m * k, 3.0, dt);
        let b = rng.tensor(bt * k * n, 3.0, dt);
        let mut args: BTreeMap<String, HostArg> = BTreeMap::new();
        args.insert(
            "a".into(),
            t(dt, &if ta { [bt, k, m] } else { [bt, m, k] }, a.clone()),
        );
        args.insert(
            "b".into(),
            t(dt, &if tb { [bt, n, k] } else { [bt, k, n] }, b.clone()),
        );
        args.insert("alpha".into(), HostArg::Scalar(1.25));
        let b2 = rng.tensor(bt * k * n, 3.0, dt);
        let bias = rng.tensor(n, 3.0, dt);
        let cin = rng.tensor(bt * m * n, 3.0, dt);
        if extra.contains(&("EPILOGUE", "swiglu")) {
            args.insert("b2".into(), t(dt, &[bt, k, n], b2.clone()));
        }
        if extra.contains(&("EPILOGUE", "bias")) {
            args.insert("bias".into(), t(dt, &[n], bias.clone()));
        }
        if extra.contains(&("C_IN", "1")) {
            args.insert("c_in".into(), t(dt, &[bt, m, n], cin.clone()));
            args.insert("beta".into(), HostArg::Scalar(-0.5));
        }
        let name = format!("gemm {extra:?} {bt}x{m}x{n}x{k}");
        let (pb, sb) = (bits(&plain, &args), bits(&swapped, &args));
        assert_eq!(pb, sb, "{name}: the swapped module's bits differ");
        // The f64 oracle.
        let at = |x: usize, i: usize, kk: usize| {
            if ta {
                a[x * k * m + kk * m + i]
            } else {
                a[x * m * k + i * k + kk]
            }
        };
        let bv = |v: &[f64], x: usize, kk: usize, j: usize| {
            if tb {
                v[x * n * k + j * k + kk]
            } else {
                v[x * k * n + kk * n + j]
            }
        };
        let mut want = vec![0.0; bt * m * n];
        for x in 0..bt {
            for i in 0..m {
                for j in 0..n {
                    let dot =
                        |v: &[f64]| (0..k).map(|kk| at(x, i, kk) * bv(v, x, kk, j)).sum::<f64>();
                    let mut p = 1.25 * dot(&b);
                    if extra.contains(&("C_IN", "1")) {
                        p += -0.5 * cin[x * m * n + i * n + j];
                    }
                    let y = match extra
                        .iter()
                        .find(|(c, _)| *c == "EPILOGUE")
                        .map(|(_, e)| *e)
                    {
                        Some("relu") => p.max(0.0),
                        Some("bias") => p + bias[j],
                        Some("swiglu") => p / (1.0 + (-p).exp()) * 1.25 * dot(&b2),
                        _ => p,
                    };
                    want[x * m * n + i * n + j] = round(dt, y);
                }
            }
        }
        let out = interp::run(&swapped, &args).expect("runs");
        compare(
            &name,
            out["c"].data.as_f64().expect("f64"),
            &want,
            tolerance(dt),
        );
    }
}

#[test]
fn a_users_matmul_swaps_and_an_accumulator_read_in_the_loop_does_not() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/in/user/matmul_leaky_relu.kir");
    let src = std::fs::read_to_string(path).expect("user matmul");
    let (plain, swapped) = both(
        &src,
        &[("DT", "bf16"), ("BM", "16"), ("BN", "64"), ("BK", "32")],
    );
    dots_transposed(&plain, &swapped);
    let mut rng = Rng::fresh("swap_operands user matmul");
    let (m, n, k) = (7, 100, 45);
    let args: BTreeMap<String, HostArg> = [
        (
            "a".to_string(),
            t(Dtype::Bf16, &[m, k], rng.tensor(m * k, 2.0, Dtype::Bf16)),
        ),
        (
            "b".to_string(),
            t(Dtype::Bf16, &[k, n], rng.tensor(k * n, 2.0, Dtype::Bf16)),
        ),
    ]
    .into_iter()
    .collect();
    assert_eq!(bits(&plain, &args), bits(&swapped, &args));
    // An accumulator read by another op of the loop (doubled before the dot) is not swapped.
    let read = src.replace(
        "    %next = dot %a_blk, %b_blk, %part",
        "    %twice = add %part, %part : tile<BM x BN x f32>\n    %next = dot %a_blk, %b_blk, %twice",
    );
    assert_ne!(read, src, "the edit applies");
    let m2 = pipeline::output(&read, &defs(&[("DT", "bf16")])).expect("compiles");
    let print = kir_ir::text::print;
    assert_eq!(print(&swap_operands(&m2).expect("runs")), print(&m2));
}

#[test]
fn the_sm90a_rows_for_few_rows_swap_with_every_dot_on_wgmma() {
    let src = kir_compiler::internal::oplib::builtin("gemm").expect("gemm");
    for (m, swap) in [
        (1, true),
        (16, true),
        (17, true),
        (32, true),
        (33, false),
        (64, false),
    ] {
        let s = vec![
            ("a".into(), vec![1, m, 4096]),
            ("b".into(), vec![1, 4096, 14336]),
        ];
        let p = CompilePlan::resolve_for(src, &[], Target::Sm90a, Emit::Ptx, Flags::default(), &s)
            .expect("plan");
        let r = &p.config.report;
        assert_eq!(p.config.swap_operands, swap, "M = {m}: {r}");
        assert_eq!(r.contains("operands swapped"), swap, "M = {m}: {r}");
        if swap {
            let bm = if m <= 16 { 16 } else { 32 };
            assert!(
                r.contains(&format!("BLOCK_M={bm} (M tile), BLOCK_N=128 (N tile)")),
                "{r}"
            );
            let out = pipeline::compile(src, &p).expect("compiles");
            let dots: Vec<_> = out.reports.iter().flat_map(|k| k.dots.iter()).collect();
            assert_eq!(dots.len(), 1, "{dots:?}");
            assert!(
                out.text
                    .contains(&format!("wgmma.mma_async.sync.aligned.m64n{bm}k16")),
                "M = {m}: the few rows are wgmma's N"
            );
        }
    }
}
