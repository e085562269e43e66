//! attention_bwd on the CPU interpreter against the analytic f64 gradients of
//! `kir_tests::oracle_attention`, which are themselves checked against central finite
//! differences of the f64 forward. Fresh inputs per case over every dtype, causal and not, GQA
//! 14/2, S ∈ {1, 2, 30, 300}, Sq ≠ Sk, head dims 64/80/128/256/384 and magnitudes 1 and 3, for
//! both the deterministic program (dq from its own pass) and the atomic one; the deterministic
//! program is bit-identical across parallel, sequential and repeated runs. The kernel's o and lse
//! inputs are the f64 oracle's forward, rounded as the forward kernel stores them.

use kir_backends::interp::{run_with, RunOptions};
use kir_ir::Dtype;
use kir_tests::bwd_cases::{check, data, inputs};
use kir_tests::oracle_attention::{self as oracle, Problem};
use kir_tests::F64s;
use kir_tests::{compare, dtype, tolerance, Rng};

const BWD: &str = "attention_bwd";

/// The attention_bwd program for `p` and `dt` as the pipeline outputs it (what runs).
fn program(p: &Problem, dt: &str, deterministic: bool) -> kir_ir::Module {
    program_with(p, dt, deterministic, &[])
}

/// [`program`] with `extra` `-D` values (tiles).
fn program_with(p: &Problem, dt: &str, det: bool, extra: &[(&str, &str)]) -> kir_ir::Module {
    let src = kir_compiler::internal::oplib::builtin(BWD).expect("attention_bwd is built in");
    let flag = |b: bool| if b { "1" } else { "0" }.to_string();
    let mut defs = vec![
        ("DTYPE".to_string(), dt.to_string()),
        ("HEAD_DIM".to_string(), p.d.to_string()),
        ("CAUSAL".to_string(), flag(p.causal)),
        ("DETERMINISTIC".to_string(), flag(det)),
    ];
    defs.extend(extra.iter().map(|(a, b)| (a.to_string(), b.to_string())));
    let spec = kir_compiler::internal::pipeline::output(src, &defs)
        .unwrap_or_else(|e| panic!("{defs:?}:\n{}", e.render("attention_bwd.kir", src)));
    spec
}

/// One backward case: the kernel against the analytic f64 oracle.
fn case(p: Problem, dt: &str, deterministic: bool, mag: f64) {
    case_with(p, dt, deterministic, mag, &[]);
}

/// [`case`] with `extra` `-D` values (tiles).
fn case_with(p: Problem, dt: &str, deterministic: bool, mag: f64, extra: &[(&str, &str)]) {
    let dty = dtype(dt);
    let name = format!(
        "{BWD} {dt} deterministic={deterministic} B{} Hq{} Hkv{} Sq{} Sk{} D{} causal={} mag {mag} {extra:?}",
        p.b, p.hq, p.hkv, p.sq, p.cap, p.d, p.causal
    );
    let mut rng = Rng::fresh(&name);
    let mut p = p;
    p.scale = p.scale as f32 as f64;
    let args = inputs(&p, dty, mag, &mut rng);
    let spec = program_with(&p, dt, deterministic, extra);
    let out =
        run_with(&spec, &args, &RunOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(
        out["dq"].shape,
        vec![p.b, p.hq, p.sq, p.d],
        "{name}: dq shape"
    );
    assert_eq!(
        out["dk"].shape,
        vec![p.b, p.hkv, p.cap, p.d],
        "{name}: dk shape"
    );
    let x = ["q", "k", "v", "do"].map(|n| data(&args, n));
    let grads = oracle::attention_bwd(&p, x[0], x[1], x[2], x[3]);
    check(&out, &grads, tolerance(dty), &name);
}

fn pr(b: usize, hq: usize, hkv: usize, sq: usize, sk: usize, d: usize, causal: bool) -> Problem {
    let mut p = Problem::new(b, hq, hkv, sq, sk, d);
    p.causal = causal;
    p
}

#[test]
fn small_ragged_and_gqa() {
    for (n, dt) in ["f32", "f16", "bf16"].into_iter().enumerate() {
        for causal in [false, true] {
            for deterministic in [true, false] {
                let mag = [1.0, 3.0][(n + deterministic as usize) % 2];
                case(pr(2, 2, 1, 1, 1, 64, causal), dt, deterministic, mag);
                case(pr(1, 2, 2, 2, 30, 64, causal), dt, deterministic, mag);
                // Sq > Sk with causal: the first rows see no key and get no gradient.
                case(pr(2, 3, 1, 30, 2, 32, causal), dt, deterministic, 4.0 - mag);
                case(pr(1, 14, 2, 30, 70, 64, causal), dt, deterministic, mag);
            }
        }
    }
}

#[test]
fn long_sequences_and_head_dims() {
    case(pr(1, 2, 1, 300, 300, 128, true), "bf16", true, 1.0);
    case(pr(1, 2, 1, 300, 300, 128, true), "f16", false, 3.0);
    case(pr(1, 1, 1, 300, 30, 64, false), "f32", true, 3.0);
    case(pr(1, 1, 1, 30, 300, 64, true), "bf16", false, 1.0);
    for (n, d) in [80, 256, 384].into_iter().enumerate() {
        let dt = ["f32", "f16", "bf16"][n];
        case(
            pr(1, 2, 1, 70, 45, d, n % 2 == 0),
            dt,
            n != 1,
            [1.0, 3.0][n % 2],
        );
    }
}

/// With HEAD_DIM > 128 and BLOCK_KV ≥ 64 (sm_90a's d256 row) the dK/dV kernel's two
/// accumulators are split between programs, dk's part and dv's (grid z = 2): both modes, causal
/// and not, GQA, ragged key blocks, at d136 and d256.
#[test]
fn split_accumulators() {
    let tiles = [("BLOCK_KV", "64"), ("BLOCK_M", "64"), ("BLOCK_N", "64")];
    for (n, dt) in ["f32", "f16", "bf16"].into_iter().enumerate() {
        for deterministic in [true, false] {
            let mag = [1.0, 3.0][(n + deterministic as usize) % 2];
            let (d, causal) = ([136, 256][n % 2], deterministic);
            case_with(
                pr(2, 4, 2, 70, 150, d, causal),
                dt,
                deterministic,
                mag,
                &tiles,
            );
        }
    }
}

/// The dQ kernel's own query blocks (BLOCK_MQ) apart from the dK/dV kernel's query steps
/// (BLOCK_M): sm_90a's d128 tiles (128-row dQ programs over 128-key blocks, 64-query dK/dV steps
/// of 128 keys) and smaller ones, causal and not, GQA, ragged sequences whose last blocks are
/// partial, every dtype.
#[test]
fn dq_blocks_of_their_own() {
    let sm90 = [
        ("BLOCK_MQ", "128"),
        ("BLOCK_N", "128"),
        ("BLOCK_KV", "128"),
        ("BLOCK_M", "64"),
    ];
    let small = [
        ("BLOCK_MQ", "32"),
        ("BLOCK_N", "16"),
        ("BLOCK_KV", "32"),
        ("BLOCK_M", "64"),
    ];
    for (n, dt) in ["f32", "f16", "bf16"].into_iter().enumerate() {
        for causal in [false, true] {
            let mag = [1.0, 3.0][(n + causal as usize) % 2];
            case_with(pr(1, 4, 2, 300, 290, 128, causal), dt, true, mag, &sm90);
            case_with(
                pr(2, 2, 1, 150, 170, 64, causal),
                dt,
                true,
                4.0 - mag,
                &small,
            );
        }
    }
}

/// ORDERED = 1: the dK/dV kernel adds dqᵀ into dq_acc in ascending key-block order, each add
/// waiting on its query block's counter: every dtype, causal and not, GQA, ragged shapes with
/// partial key blocks, the 32- and 128-key programs, the sm_90a d128 row's tiles (128 keys on 8
/// warps) and split accumulators at d256. The interpreter runs programs in grid order and fails
/// a wait that would never end on a GPU, so each case also checks the counts the kernel waits
/// for.
#[test]
fn ordered_dq() {
    for (n, dt) in ["f32", "f16", "bf16"].into_iter().enumerate() {
        for causal in [false, true] {
            let mag = [1.0, 3.0][(n + causal as usize) % 2];
            let ordered = [("ORDERED", "1")];
            case_with(pr(2, 4, 2, 70, 150, 64, causal), dt, true, mag, &ordered);
            case_with(
                pr(1, 14, 2, 30, 70, 32, causal),
                dt,
                true,
                4.0 - mag,
                &ordered,
            );
        }
    }
    let wide = [
        ("ORDERED", "1"),
        ("BLOCK_KV", "128"),
        ("BLOCK_M", "64"),
        ("BLOCK_N", "64"),
    ];
    case_with(pr(1, 4, 2, 300, 300, 128, true), "bf16", true, 3.0, &wide);
    case_with(pr(2, 2, 1, 150, 290, 128, false), "f16", true, 1.0, &wide);
    let split = [
        ("ORDERED", "1"),
        ("BLOCK_KV", "64"),
        ("BLOCK_M", "64"),
        ("BLOCK_N", "64"),
    ];
    case_with(pr(2, 4, 2, 70, 150, 256, true), "bf16", true, 3.0, &split);
}

/// ORDERED = 1 with the dK/dV programs' counts one too high: the interpreter, running programs
/// in grid order, reports the wait that a GPU would never see end.
#[test]
fn ordered_dq_reports_a_wait_that_never_ends() {
    let src = kir_compiler::internal::oplib::builtin(BWD).expect("attention_bwd is built in");
    let wrong = src.replace(
        "sem_wait dq_sem[%b, %h, %qblk], %nblk",
        "sem_wait dq_sem[%b, %h, %qblk], %one",
    );
    assert_ne!(wrong, src, "the ordered wait is in the op");
    let p = pr(1, 1, 1, 40, 90, 32, false);
    let defs: Vec<(String, String)> = [("DTYPE", "f32"), ("HEAD_DIM", "32"), ("ORDERED", "1")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let spec = kir_compiler::internal::pipeline::output(&wrong, &defs)
        .unwrap_or_else(|e| panic!("{}", e.render("attention_bwd.kir", &wrong)));
    let mut rng = Rng::fresh("attention_bwd ordered wrong count");
    let mut p = p;
    p.scale = p.scale as f32 as f64;
    let args = inputs(&p, Dtype::F32, 1.0, &mut rng);
    let err = run_with(&spec, &args, &RunOptions::default()).expect_err("the wait never ends");
    assert!(
        err.message.contains("would wait forever") && err.message.contains("program (0, 0, 0)"),
        "{}",
        err.message
    );
}

#[test]
fn random_shapes() {
    let mut rng = Rng::fresh("attention_bwd random shapes");
    for _ in 0..3 {
        let hkv = rng.range(1, 3);
        let p = pr(
            rng.range(1, 3),
            hkv * rng.range(1, 4),
            hkv,
            rng.range(1, 150),
            rng.range(1, 150),
            8 * rng.range(1, 17),
            rng.range(0, 2) == 1,
        );
        let dt = ["f32", "f16", "bf16"][rng.range(0, 3)];
        case(p, dt, rng.range(0, 2) == 1, [1.0, 3.0][rng.range(0, 2)]);
    }
}

/// The analytic f64 oracle agrees with central finite differences of the f64 forward, and the
/// f32 kernel agrees with both, on small shapes (GQA, causal with rows that see no key).
#[test]
fn finite_differences() {
    for (p, mag) in [
        (pr(1, 2, 1, 5, 7, 8, true), 1.0),
        (pr(1, 2, 1, 6, 4, 8, true), 3.0),
        (pr(2, 2, 2, 3, 5, 8, false), 3.0),
    ] {
        let name = format!(
            "finite differences Sq{} Sk{} causal={} mag {mag}",
            p.sq, p.cap, p.causal
        );
        let mut rng = Rng::fresh(&name);
        let mut p = p;
        p.scale = p.scale as f32 as f64;
        let args = inputs(&p, Dtype::F32, mag, &mut rng);
        let x = ["q", "k", "v", "do"].map(|n| data(&args, n));
        let g = oracle::attention_bwd(&p, x[0], x[1], x[2], x[3]);
        let (fq, fk, fv) = oracle::finite_differences(&p, x[0], x[1], x[2], x[3]);
        // f64 central differences, Richardson-extrapolated (h = 1e-4): truncation ~1e-16·f⁽⁵⁾,
        // cancellation ~1e-12 relative to the loss.
        for (key, a, f) in [("dq", &g.dq, &fq), ("dk", &g.dk, &fk), ("dv", &g.dv, &fv)] {
            compare(
                &format!("{name}: analytic {key} vs finite differences"),
                a,
                f,
                (1e-7, 1e-7),
            );
        }
        let out = run_with(&program(&p, "f32", true), &args, &RunOptions::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let fd = oracle::Grads {
            dq: fq,
            dk: fk,
            dv: fv,
            ..g
        };
        check(
            &out,
            &fd,
            tolerance(Dtype::F32),
            &format!("{name}: kernel vs FD"),
        );
    }
}

/// DETERMINISTIC = 1 has no float atomics: parallel, sequential and repeated runs give the same
/// bits. (The atomic program gives the same values within tolerance, checked above.)
#[test]
fn deterministic_is_bit_identical() {
    let mut p = pr(2, 4, 2, 150, 130, 64, true);
    p.scale = p.scale as f32 as f64;
    let mut rng = Rng::fresh("attention_bwd determinism");
    let args = inputs(&p, Dtype::Bf16, 3.0, &mut rng);
    let spec = program(&p, "bf16", true);
    let bits = |parallel: bool| -> Vec<u64> {
        let out = run_with(
            &spec,
            &args,
            &RunOptions {
                parallel,
                ..Default::default()
            },
        )
        .expect("run");
        ["dq", "dk", "dv"]
            .iter()
            .flat_map(|k| out[*k].data.f64s().iter().map(|x| x.to_bits()))
            .collect()
    };
    let first = bits(true);
    assert!(
        first.iter().all(|&b| f64::from_bits(b).is_finite()),
        "unwritten output"
    );
    for parallel in [false, true, false, true] {
        assert!(
            first == bits(parallel),
            "attention_bwd differs between runs (parallel={parallel})"
        );
    }
}

/// Canonical IR of attention_bwd: deterministic and causal, and the atomic program.
#[test]
fn canonical_ir_snapshots() {
    let p = pr(1, 1, 1, 1, 1, 64, true);
    insta::assert_snapshot!(
        "attention_bwd__bf16_d64_causal_deterministic",
        kir_ir::text::print(&program(&p, "bf16", true))
    );
    insta::assert_snapshot!(
        "attention_bwd__bf16_d64_causal_atomic",
        kir_ir::text::print(&program(&p, "bf16", false))
    );
}
