//! GEMM variants on the sm_90a rows by their structure (compiler/src/structure/,
//! compiler/src/configs/table.rs, docs/configs.md): a dot loop that loads a tile of its
//! output's shape (gemm's `C_IN = 1`, `Features::acc_loads`) takes its own 128×128 row, one
//! of two dots sharing A (`EPILOGUE=swiglu`) the two-accumulator 128×128 row, and one whose A
//! is stored transposed (`TRANS_A = 1`, read M-major by wgmma) the rows of the untransposed
//! GEMM; the scheduled kernels match the f64 oracle (`kir_tests::oracle_ops::gemm`) on the
//! interpreter, on ragged shapes with magnitudes above 1.
//! (Their PTX assembles without spills: tests/tests/shape_configs.rs,
//! `every_gemm_row_and_epilogue_assembles_without_spills`.)

use kir_backends::interp::{self, HostArg};
use kir_compiler::internal::pipeline;
use kir_compiler::internal::plan::CompilePlan;
use kir_ir::Dtype;
use kir_tests::oracle_ops::{self, Epi};
use kir_tests::{compare, round, sm90a_plan as plan, t, tolerance, Rng};
use std::collections::BTreeMap;

fn gemm() -> &'static str {
    kir_compiler::internal::oplib::builtin("gemm").expect("gemm")
}

/// One GEMM problem: M×N×K, A stored [1, K, M] when `ta` (else [1, M, K]), B [1, N, K] when
/// `tb` (else [1, K, N]), a c_in added when `c_in`, and the SwiGLU epilogue over a second B
/// (b2, stored as B is) when `swiglu`.
#[derive(Clone, Copy)]
struct Problem {
    m: usize,
    n: usize,
    k: usize,
    ta: bool,
    tb: bool,
    c_in: bool,
    swiglu: bool,
}

impl Problem {
    fn a_dims(&self) -> [usize; 3] {
        if self.ta {
            [1, self.k, self.m]
        } else {
            [1, self.m, self.k]
        }
    }

    fn b_dims(&self) -> [usize; 3] {
        if self.tb {
            [1, self.n, self.k]
        } else {
            [1, self.k, self.n]
        }
    }

    /// The `-D`s of the problem's variant.
    fn defs(&self) -> Vec<(String, String)> {
        let mut d = vec![];
        for (on, name) in [
            (self.ta, "TRANS_A"),
            (self.tb, "TRANS_B"),
            (self.c_in, "C_IN"),
        ] {
            if on {
                d.push((name.to_string(), "1".to_string()));
            }
        }
        if self.swiglu {
            d.push(("EPILOGUE".to_string(), "swiglu".to_string()));
        }
        d
    }

    /// The input shapes a caller hands the plan (`kirc bench --shape`).
    fn shapes(&self) -> Vec<(String, Vec<usize>)> {
        let mut s = vec![
            ("a".into(), self.a_dims().to_vec()),
            ("b".into(), self.b_dims().to_vec()),
        ];
        if self.swiglu {
            s.push(("b2".into(), self.b_dims().to_vec()));
        }
        s
    }

    /// The sm_90a plan of gemm for this problem.
    fn plan(&self) -> CompilePlan {
        plan(gemm(), &self.defs(), &self.shapes())
    }
}

/// The scheduled kernel of `p`'s plan on the interpreter with `alpha`, its output against the
/// f64 oracle rounded to bf16: inputs fresh per call, about 3 in magnitude; c_in as large as the
/// product's terms sum to (1.5·√K·9), so that its part is half the output and a wrong beta or
/// a c_in element at the wrong place fails. The callers alternate alpha = 1 (kir.torch's
/// plain product) with 1.5.
fn check_scheduled(p: Problem, alpha: f64, rng: &mut Rng) {
    let dt = Dtype::Bf16;
    let plan = p.plan();
    let out = pipeline::compile(gemm(), &plan).expect("compiles");
    assert!(
        out.text.contains("wgmma.mma_async"),
        "wgmma: {}",
        plan.config.report
    );
    let (m, n, k) = (p.m, p.n, p.k);
    let a = rng.tensor(m * k, 3.0, dt);
    let b = rng.tensor(k * n, 3.0, dt);
    let c0 = rng.tensor(m * n, 2.0 * (k as f64).sqrt() * 9.0, dt);
    let b2 = rng.tensor(k * n, 3.0, dt);
    let mut args: BTreeMap<String, HostArg> = [
        ("a".to_string(), t(dt, &p.a_dims(), a.clone())),
        ("b".to_string(), t(dt, &p.b_dims(), b.clone())),
        ("alpha".to_string(), HostArg::Scalar(alpha)),
    ]
    .into_iter()
    .collect();
    if p.c_in {
        args.insert("c_in".into(), t(dt, &[1, m, n], c0.clone()));
        args.insert("beta".into(), HostArg::Scalar(-0.75));
    }
    if p.swiglu {
        args.insert("b2".into(), t(dt, &p.b_dims(), b2.clone()));
    }
    let res = interp::run(&out.module, &args).expect("runs");
    let c = res["c"].data.as_f64().expect("f64");
    let want: Vec<f64> = oracle_ops::gemm(&oracle_ops::Gemm {
        dims: (1, m, k, n),
        a: &a,
        b: &b,
        b2: p.swiglu.then_some(&b2[..]),
        bias: None,
        c_in: p.c_in.then_some((&c0[..], -0.75)),
        trans_a: p.ta,
        trans_b: p.tb,
        bf16_trunc: false,
        alpha,
        epi: if p.swiglu { Epi::Swiglu } else { Epi::None },
    })
    .into_iter()
    .map(|x| round(dt, x))
    .collect();
    let what = format!("gemm {m}x{n}x{k} alpha {alpha} {:?}", p.defs());
    compare(&what, c, &want, tolerance(dt));
}

/// A GEMM that adds a tile of its output's shape (`C_IN = 1`: `c = alpha·a·b + beta·c_in`)
/// takes the 128×128 row, with shapes or without, where the plain GEMM keeps 128×256; the
/// scheduled kernel (warp-specialized, persistent) matches the f64 oracle on ragged shapes.
#[test]
fn a_gemm_adding_a_tile_of_its_output_takes_the_128x128_row_and_stays_correct() {
    let c_in = |m, n, k| Problem {
        m,
        n,
        k,
        ta: false,
        tb: false,
        c_in: true,
        swiglu: false,
    };
    let plain = |m, n, k| Problem {
        c_in: false,
        ..c_in(m, n, k)
    };
    for (m, n, k) in [(8192, 8192, 8192), (16384, 14336, 4096)] {
        for s in [vec![], c_in(m, n, k).shapes()] {
            let r = plan(gemm(), &c_in(m, n, k).defs(), &s).config.report;
            for want in [
                "BLOCK_M=128 (M tile), BLOCK_N=128 (N tile), BLOCK_K=64 (K tile), GROUP_M=8",
                "warps 8, stages 4, warp-specialized, persistent",
                "a tile of the output's shape loaded",
            ] {
                assert!(r.contains(want), "{want}\n{r}");
            }
            let r = plan(gemm(), &plain(m, n, k).defs(), &s).config.report;
            assert!(r.contains("BLOCK_N=256 (N tile)"), "{r}");
            assert!(!r.contains("output's shape loaded"), "{r}");
        }
    }
    let mut rng = Rng::fresh("c_in gemm");
    for ((m, n, k), alpha) in [((300, 257, 130), 1.5), ((129, 1001, 70), 1.0)] {
        let p = c_in(m, n, k);
        assert!(p.plan().config.persistent, "{}", p.plan().config.report);
        check_scheduled(p, alpha, &mut rng);
    }
}

/// A GEMM whose A is stored transposed (`TRANS_A = 1`: a is [Bt, K, M], the weight gradient
/// dB = Aᵀ·dC of a linear layer's backward) takes the same sm_90a rows as one that is not (A
/// read M-major by wgmma, docs/backends.md), with or without B transposed, with or without a
/// c_in; the scheduled kernels match the f64 oracle on ragged shapes.
#[test]
fn a_transposed_a_takes_the_wgmma_rows_and_stays_correct() {
    let ta = |m, n, k, tb| Problem {
        m,
        n,
        k,
        ta: true,
        tb,
        c_in: false,
        swiglu: false,
    };
    for tb in [false, true] {
        for (p, want) in [
            (
                ta(8192, 8192, 8192, tb),
                "BLOCK_M=128 (M tile), BLOCK_N=256 (N tile)",
            ),
            (ta(100, 4096, 4096, tb), "BLOCK_M=128 (M tile), BLOCK_N=128"),
        ] {
            for r in [
                p.plan().config.report,
                plan(gemm(), &p.defs(), &[]).config.report,
            ] {
                assert!(r.contains("BLOCK_N=") && r.contains("A transposed"), "{r}");
                assert!(!r.contains("A not"), "{r}");
            }
            let r = p.plan().config.report;
            assert!(r.contains(want), "{want}\n{r}");
        }
    }
    let mut rng = Rng::fresh("trans_a gemm");
    for (p, alpha) in [
        (ta(300, 257, 130, false), 1.0),
        (ta(129, 1001, 70, true), 1.5),
        (ta(40, 300, 200, false), 1.5),
        (
            Problem {
                c_in: true,
                ..ta(150, 300, 90, true)
            },
            1.0,
        ),
    ] {
        check_scheduled(p, alpha, &mut rng);
    }
}

/// A dot loop of two dots sharing A (gemm's `EPILOGUE=swiglu`: silu(α·a·b) ⊙ α·a·b2, an MLP's
/// gate and up projections in one kernel) takes the two-accumulator 128×128 row (warp-specialized,
/// persistent; it kept the op's 64×64 tiles on mma.sync before), with shapes or without, B
/// transposed or not; the scheduled kernels match the f64 oracle on ragged shapes.
#[test]
fn two_dots_sharing_a_take_the_two_accumulator_row_and_stay_correct() {
    let sw = |m, n, k, tb| Problem {
        m,
        n,
        k,
        ta: false,
        tb,
        c_in: false,
        swiglu: true,
    };
    for tb in [false, true] {
        for p in [sw(8192, 4096, 4096, tb), sw(100, 14336, 4096, tb)] {
            for r in [
                p.plan().config.report,
                plan(gemm(), &p.defs(), &[]).config.report,
            ] {
                for want in [
                    "BLOCK_M=128 (M tile), BLOCK_N=128 (N tile), BLOCK_K=64 (K tile), GROUP_M=8",
                    "warps 8, stages 4, warp-specialized, persistent",
                    "2 dots sharing A",
                ] {
                    assert!(r.contains(want), "{want}\n{r}");
                }
            }
        }
    }
    let mut rng = Rng::fresh("swiglu gemm");
    for (p, alpha) in [
        (sw(300, 257, 130, false), 1.0),
        (sw(129, 1001, 70, true), 1.5),
    ] {
        assert!(
            p.plan().config.warp_specialize,
            "{}",
            p.plan().config.report
        );
        check_scheduled(p, alpha, &mut rng);
    }
}
