//! attention_fwd on the CPU interpreter against the independent f64 oracle of
//! `kir_tests::oracle_attention`: every feature alone (varlen, KV offset, mask with P = 1, B and
//! B·Hq, window, softcap, bshd output, key capacity larger than the keys in use) and combined,
//! over S ∈ {1, 2, 30, 300}, Sq ≠ Sk, GQA 14/2, head dims 64/80/128/256/384, every dtype and
//! magnitudes 1 and 3; the f32 parity case; an fp16-accumulator regression that must fail;
//! canonical IR snapshots. Inputs are fresh per case, capacity
//! padding that the kernel must never read holds NaN, and outputs are poisoned by the runner.
//! The backward's checks are in `attention_bwd_ops.rs`, the located errors of a bad `-D`, a
//! missing or misshapen argument or a bad scale in `attention_fwd_errors.rs`.

use kir_backends::interp::{self, HostArg, HostTensor};
use kir_ir::Dtype;
use kir_tests::oracle_attention::{self as oracle, Problem};
use kir_tests::F64s;
use kir_tests::{compare, dtype, t, tolerance, Rng};
use std::collections::BTreeMap;

const FWD: &str = "attention_fwd";

fn fwd_src() -> &'static str {
    kir_compiler::internal::oplib::builtin(FWD).expect("attention_fwd is built in")
}

/// The `-D` values that select `p`'s switches.
fn defines(p: &Problem, dt: &str, bshd: bool) -> Vec<(String, String)> {
    let flag = |b: bool| if b { "1" } else { "0" }.to_string();
    vec![
        ("DTYPE".into(), dt.into()),
        ("HEAD_DIM".into(), p.d.to_string()),
        ("CAUSAL".into(), flag(p.causal || p.past_lengths.is_some())),
        ("VARLEN".into(), flag(p.total_lengths.is_some())),
        ("KV_OFFSET".into(), flag(p.past_lengths.is_some())),
        ("MASK".into(), flag(p.mask.is_some())),
        ("WINDOW".into(), flag(p.window.is_some())),
        ("SOFTCAP".into(), flag(p.softcap.is_some())),
        (
            "OUT_LAYOUT".into(),
            if bshd { "bshd" } else { "bhsd" }.into(),
        ),
    ]
}

/// The keys of batch `bi` the kernel may read: min(L, causal_max(Sq − 1) + 1). Keys past it are
/// padding (filled with NaN by the tests).
fn keys_used(p: &Problem, bi: usize) -> usize {
    let last = p.causal_max(bi, p.sq.max(1) - 1) + 1;
    p.key_len(bi).min(last).max(0) as usize
}

/// Random q, k, v of `dty` at magnitude `mag`; k and v rows past [`keys_used`] are NaN.
fn qkv(p: &Problem, dty: Dtype, mag: f64, rng: &mut Rng) -> [Vec<f64>; 3] {
    let q = rng.tensor(p.b * p.hq * p.sq * p.d, mag, dty);
    let mut kv = [0, 1].map(|_| rng.tensor(p.b * p.hkv * p.cap * p.d, mag, dty));
    for x in &mut kv {
        for bi in 0..p.b {
            for hk in 0..p.hkv {
                let base = (bi * p.hkv + hk) * p.cap;
                x[(base + keys_used(p, bi)) * p.d..(base + p.cap) * p.d].fill(f64::NAN);
            }
        }
    }
    let [k, v] = kv;
    [q, k, v]
}

/// A mask [rows, Sq, cap]: normal values at `mag`, about one in ten −inf, NaN in the key columns
/// that no batch uses, and (when Sq > 1) query 0 of mask row 0 all −inf, so that row of every
/// (batch, head) mapped to it has only −inf scores (o = 0, lse = −inf).
fn mask(p: &Problem, rows: usize, dty: Dtype, mag: f64, rng: &mut Rng) -> Vec<f64> {
    let used = (0..p.b).map(|bi| keys_used(p, bi)).max().unwrap_or(0);
    let mut m = rng.tensor(rows * p.sq * p.cap, mag, dty);
    for (idx, x) in m.iter_mut().enumerate() {
        let j = idx % p.cap;
        if j >= used {
            *x = f64::NAN;
        } else if rng.uniform() < 0.1 {
            *x = f64::NEG_INFINITY;
        }
    }
    if p.sq > 1 {
        m[..p.cap].fill(f64::NEG_INFINITY);
    }
    m
}

/// Runs attention_fwd from `src` (the op, or an edited copy) on problem `p`.
fn run_fwd(
    src: &str,
    p: &Problem,
    dt: &str,
    bshd: bool,
    qkv: &[Vec<f64>; 3],
) -> BTreeMap<String, HostTensor> {
    let dty = dtype(dt);
    let defs = defines(p, dt, bshd);
    let spec = kir_compiler::internal::pipeline::output(src, &defs)
        .unwrap_or_else(|e| panic!("{defs:?}:\n{}", e.render("attention_fwd.kir", src)));
    let mut args = BTreeMap::new();
    let kv_shape = [p.b, p.hkv, p.cap, p.d];
    args.insert(
        "q".to_string(),
        t(dty, &[p.b, p.hq, p.sq, p.d], qkv[0].clone()),
    );
    args.insert("k".to_string(), t(dty, &kv_shape, qkv[1].clone()));
    args.insert("v".to_string(), t(dty, &kv_shape, qkv[2].clone()));
    args.insert("scale".to_string(), HostArg::Scalar(p.scale));
    let lengths = |v: &[i64]| t(Dtype::I32, &[p.b], v.iter().map(|&x| x as f64).collect());
    if let Some(tl) = &p.total_lengths {
        args.insert("total_lengths".to_string(), lengths(tl));
    }
    if let Some(pl) = &p.past_lengths {
        args.insert("past_lengths".to_string(), lengths(pl));
    }
    if let Some((rows, m)) = &p.mask {
        args.insert("mask".to_string(), t(dty, &[*rows, p.sq, p.cap], m.clone()));
    }
    if let Some(w) = p.window {
        args.insert("window".to_string(), HostArg::Scalar(w as f64));
    }
    if let Some(c) = p.softcap {
        args.insert("softcap".to_string(), HostArg::Scalar(c));
    }
    interp::run(&spec, &args).unwrap_or_else(|e| panic!("{defs:?}: {e}"))
}

/// Errors of one run against the oracle: panics when o or lse is out of tolerance.
fn check(
    p: &Problem,
    dt: &str,
    bshd: bool,
    out: &BTreeMap<String, HostTensor>,
    qkv: &[Vec<f64>; 3],
    name: &str,
) {
    let dty = dtype(dt);
    let (o_ref, lse_ref) = oracle::attention_fwd(p, &qkv[0], &qkv[1], &qkv[2]);
    let (o_ref, o_shape) = if bshd {
        (oracle::to_bshd(p, &o_ref), vec![p.b, p.sq, p.hq * p.d])
    } else {
        (o_ref, vec![p.b, p.hq, p.sq, p.d])
    };
    assert_eq!(out["o"].shape, o_shape, "{name}: o shape");
    assert_eq!(out["lse"].shape, vec![p.b, p.hq, p.sq], "{name}: lse shape");
    compare(
        &format!("{name}: o"),
        out["o"].data.f64s(),
        &o_ref,
        tolerance(dty),
    );
    // lse is f32 from exactly rounded inputs: only f32 rounding separates it from f64, and that
    // rounding is of the scores' D-term dots, so it is measured against the size of those terms
    // (`oracle::lse_terms`); against lse itself a row whose lse is near 0 failed at d384 with
    // magnitudes 3 (rel 1.5e-5 over two rows, the scores about 9).
    kir_tests::compare_scaled(
        &format!("{name}: lse"),
        out["lse"].data.f64s(),
        &lse_ref,
        &oracle::lse_terms(p, &qkv[0], &qkv[1]),
        (1e-5, 1e-4),
    );
}

/// One forward case: fresh inputs for `p` (a mask with `mask_rows` rows when given), the kernel,
/// and the comparison with the oracle.
fn case(mut p: Problem, dt: &str, bshd: bool, mask_rows: Option<usize>, mag: f64) {
    let dty = dtype(dt);
    let name = format!(
        "{FWD} {dt} B{} Hq{} Hkv{} Sq{} cap{} D{} causal={} varlen={:?} past={:?} P={:?} window={:?} softcap={:?} bshd={bshd} mag {mag}",
        p.b, p.hq, p.hkv, p.sq, p.cap, p.d, p.causal, p.total_lengths, p.past_lengths,
        mask_rows, p.window, p.softcap
    );
    let mut rng = Rng::fresh(&name);
    let inputs = qkv(&p, dty, mag, &mut rng);
    if let Some(rows) = mask_rows {
        p.mask = Some((rows, mask(&p, rows, dty, mag, &mut rng)));
    }
    p.scale = p.scale as f32 as f64;
    let out = run_fwd(fwd_src(), &p, dt, bshd, &inputs);
    check(&p, dt, bshd, &out, &inputs, &name);
}

fn pr(b: usize, hq: usize, hkv: usize, sq: usize, sk: usize, d: usize) -> Problem {
    Problem::new(b, hq, hkv, sq, sk, d)
}

const DTYPES: [&str; 3] = ["f32", "f16", "bf16"];

#[test]
fn varlen_and_key_capacity() {
    for (n, dt) in DTYPES.into_iter().enumerate() {
        let mag = [1.0, 3.0][n % 2];
        for causal in [false, true] {
            // Lengths 0 (no key: o = 0, lse = −inf), ragged, and the full capacity.
            let mut p = pr(3, 2, 1, 30, 70, 64);
            p.causal = causal;
            p.total_lengths = Some(vec![0, 45, 70]);
            case(p, dt, false, None, mag);
            // Capacity 300 holding 1 and 2 keys; lengths past the capacity clamp to it.
            let mut p = pr(3, 2, 2, 2, 300, 32);
            p.causal = causal;
            p.total_lengths = Some(vec![1, 2, 1000]);
            case(p, dt, false, None, 4.0 - mag);
        }
    }
}

#[test]
fn kv_offset_prefill() {
    for (n, dt) in DTYPES.into_iter().enumerate() {
        let mag = [3.0, 1.0][n % 2];
        // Cache of capacity 300: 17 and 250 cached keys before 30 new queries; keys past
        // past + Sq − 1 are never read (NaN). A negative offset hides the first rows' keys.
        let mut p = pr(3, 2, 1, 30, 300, 64);
        p.past_lengths = Some(vec![17, 250, -5]);
        case(p, dt, false, None, mag);
        // Sq = 1 decode-like step and past at the end of the capacity.
        let mut p = pr(2, 4, 2, 1, 30, 80);
        p.past_lengths = Some(vec![29, 0]);
        case(p, dt, false, None, mag);
    }
}

#[test]
fn mask_broadcast_over_batch_and_heads() {
    for (n, dt) in DTYPES.into_iter().enumerate() {
        for (rows, mag) in [(1, 1.0), (2, 3.0), (6, 1.0 + 2.0 * (n % 2) as f64)] {
            // B = 2, Hq = 3: P = 1 (everything shared), B (per batch) and B·Hq (per head).
            case(pr(2, 3, 1, 30, 45, 64), dt, false, Some(rows), mag);
        }
        let mut p = pr(2, 3, 1, 30, 45, 64);
        p.causal = true;
        case(p, dt, false, Some(6), 3.0);
    }
}

#[test]
fn sliding_window() {
    for (n, dt) in DTYPES.into_iter().enumerate() {
        let mag = [1.0, 3.0][n % 2];
        for (causal, window) in [(true, 1), (true, 17), (true, 0), (false, 20), (true, -3)] {
            let mut p = pr(2, 2, 1, 30, 100, 64);
            p.causal = causal;
            p.window = Some(window);
            case(p, dt, false, None, mag);
        }
        // Windows that cut through key blocks of a long sequence (block skipping on both ends).
        let mut p = pr(1, 1, 1, 300, 300, 64);
        p.causal = true;
        p.window = Some(70);
        case(p, dt, false, None, mag);
    }
}

#[test]
fn softcap_with_and_without_causal() {
    for (n, dt) in DTYPES.into_iter().enumerate() {
        for (causal, cap, mag) in [
            (true, 5.0, 3.0),
            (true, 30.0, 1.0),
            (false, 2.0, 3.0),
            (true, 0.0, 3.0),
        ] {
            let mut p = pr(1, 4, 2, 30, 60 + n, 64);
            p.causal = causal;
            p.softcap = Some(cap);
            case(p, dt, false, None, mag);
        }
    }
}

#[test]
fn token_major_output() {
    for dt in DTYPES {
        for causal in [false, true] {
            let mut p = pr(2, 3, 1, 30, 40, 64);
            p.causal = causal;
            case(p, dt, true, None, 3.0);
        }
    }
}

#[test]
fn combinations() {
    for (n, dt) in DTYPES.into_iter().enumerate() {
        let mag = [1.0, 3.0][n % 2];
        // GQA 14/2 + causal + varlen + window.
        let mut p = pr(2, 14, 2, 30, 100, 64);
        p.causal = true;
        p.total_lengths = Some(vec![100, 57]);
        p.window = Some(25);
        case(p, dt, false, None, mag);
        // Per-head mask (P = B·Hq) with GQA and causal.
        let mut p = pr(2, 14, 2, 30, 33, 64);
        p.causal = true;
        case(p, dt, false, Some(28), 3.0);
        // Softcap + causal + mask shared over heads.
        let mut p = pr(2, 2, 1, 30, 30, 64);
        p.causal = true;
        p.softcap = Some(10.0);
        case(p, dt, false, Some(2), mag);
        // Everything: KV offset + varlen + window + mask + softcap, token-major output.
        let mut p = pr(2, 4, 2, 30, 300, 128);
        p.past_lengths = Some(vec![40, 250]);
        p.total_lengths = Some(vec![60, 290]);
        p.window = Some(45);
        p.softcap = Some(8.0);
        case(p, dt, true, Some(8), mag);
    }
}

#[test]
fn shapes_and_head_dims() {
    let seqs = [1, 2, 30, 300];
    for (n, &(sq, sk)) in [
        (1, 1),
        (1, 300),
        (2, 30),
        (30, 2),
        (300, 30),
        (30, 300),
        (300, 300),
    ]
    .iter()
    .enumerate()
    {
        assert!(seqs.contains(&sq) && seqs.contains(&sk));
        let dt = DTYPES[n % 3];
        for causal in [false, true] {
            let mut p = pr(1, 14, 2, sq, sk, 64);
            if sq * sk > 10_000 {
                (p.hq, p.hkv) = (2, 1);
            }
            p.causal = causal;
            case(p, dt, false, None, [1.0, 3.0][n % 2]);
        }
    }
    for (n, d) in [80, 128, 256, 384].into_iter().enumerate() {
        for (sq, sk) in [(300, 300), (2, 30)] {
            let mut p = pr(1, 1, 1, sq, sk, d);
            p.causal = n % 2 == 0;
            case(p, DTYPES[(n + sq) % 3], false, None, [3.0, 1.0][n % 2]);
        }
    }
}

/// The scalar FP32 parity case of the seed: DTYPE = f32, HEAD_DIM = 384, o token-major
/// [B, Sq, Hq·D], checked at the f32 tolerance.
#[test]
fn f32_parity_d384_token_major() {
    for (causal, sq, sk, mag) in [
        (false, 30, 300, 1.0),
        (true, 300, 300, 3.0),
        (true, 1, 2, 3.0),
    ] {
        let mut p = pr(1, 2, 1, sq, sk, 384);
        p.causal = causal;
        case(p, "f32", true, None, mag);
    }
}

#[test]
fn random_problems() {
    let mut rng = Rng::fresh("attention_fwd random problems");
    for _ in 0..4 {
        let hkv = rng.range(1, 3);
        let (b, sq, cap) = (rng.range(1, 3), rng.range(1, 120), rng.range(1, 160));
        let mut p = pr(b, hkv * rng.range(1, 4), hkv, sq, cap, 8 * rng.range(1, 17));
        p.causal = rng.range(0, 2) == 1;
        let coin = |rng: &mut Rng| rng.range(0, 2) == 1;
        if coin(&mut rng) {
            p.total_lengths = Some((0..b).map(|_| rng.range(0, cap + 1) as i64).collect());
        }
        if coin(&mut rng) {
            p.causal = true;
            p.past_lengths = Some((0..b).map(|_| rng.range(0, cap + 1) as i64).collect());
        }
        if coin(&mut rng) {
            p.window = Some(rng.range(0, 50) as i64);
        }
        if coin(&mut rng) {
            p.softcap = Some(rng.range(0, 30) as f64);
        }
        let rows = [None, Some(1), Some(b), Some(b * p.hq)][rng.range(0, 4)];
        let dt = DTYPES[rng.range(0, 3)];
        let (bshd, mag) = (coin(&mut rng), [1.0, 3.0][rng.range(0, 2)]);
        case(p, dt, bshd, rows, mag);
    }
}

/// An fp16 accumulator regression: both GEMMs accumulate in f16, as an mma with f16
/// accumulators does: the q·kᵀ scores are rounded to f16 after every 16-wide slice of the head
/// dim, and the running P·V accumulator after every key block. At magnitude 3 this must fail the
/// f16 relative-error check (measured: rel L2 ≈ 4e-3 non-causal, 3.5e-3 causal, tolerance 2e-3),
/// while the kernel as written passes on the same inputs (≈ 2e-4). The score accumulation is what
/// fails: q·k grows with the magnitude squared, so at magnitude 1 the same regression stays
/// within tolerance (≈ 1.2e-3), and rounding only the P·V accumulator stays near 4e-4 at either
/// magnitude. That is why the sweep includes magnitude 3.
#[test]
fn fp16_accumulator_regression_fails() {
    let src = fwd_src();
    let edits = [
        (
            "    %s_raw = dot %qt, %ktt, %s_zero : tile<BLOCK_M x BLOCK_N x f32>\n",
            "    %hd16 = const HEAD_DIM : i32\n    %c16 = const 16 : i32\n    \
             %s_raw = for %kk = %zero to %hd16 step %c16 iter(%s_acc = %s_zero) : tile<BLOCK_M x BLOCK_N x f32> {\n      \
             %q16 = load q[%b, %h, %m0, %kk] other 0.0 : tile<BLOCK_M x 16 x DTYPE>\n      \
             %k16 = load k[%b, %hk, %n0, %kk] other 0.0 : tile<BLOCK_N x 16 x DTYPE>\n      \
             %k16t = transpose %k16 : tile<16 x BLOCK_N x DTYPE>\n      \
             %s_sum = dot %q16, %k16t, %s_acc : tile<BLOCK_M x BLOCK_N x f32>\n      \
             %s_h = cast %s_sum : tile<BLOCK_M x BLOCK_N x f16>\n      \
             %s_r = cast %s_h : tile<BLOCK_M x BLOCK_N x f32>\n      yield %s_r\n    }\n",
        ),
        (
            "    yield %acc_new, %m_new, %l_new\n",
            "    %acc_h = cast %acc_new : tile<BLOCK_M x HEAD_DIM x f16>\n    \
             %acc_r = cast %acc_h : tile<BLOCK_M x HEAD_DIM x f32>\n    \
             yield %acc_r, %m_new, %l_new\n",
        ),
    ];
    let mut bad = src.to_string();
    for (from, to) in edits {
        assert_eq!(
            bad.matches(from).count(),
            1,
            "the regression edit no longer applies: {from}"
        );
        bad = bad.replace(from, to);
    }
    let dt = "f16";
    for causal in [false, true] {
        let mut p = pr(1, 2, 1, 300, 300, 256);
        p.causal = causal;
        p.scale = p.scale as f32 as f64;
        let mut rng = Rng::fresh(&format!("fp16 accumulator regression causal={causal}"));
        let inputs = qkv(&p, Dtype::F16, 3.0, &mut rng);
        let name = format!("f16 mag 3 causal={causal}");
        let good = run_fwd(src, &p, dt, false, &inputs);
        check(
            &p,
            dt,
            false,
            &good,
            &inputs,
            &format!("kernel as written, {name}"),
        );
        let regressed = run_fwd(&bad, &p, dt, false, &inputs);
        let failed = std::panic::catch_unwind(|| {
            check(
                &p,
                dt,
                false,
                &regressed,
                &inputs,
                &format!("fp16 accumulators, {name}"),
            )
        });
        let msg = match failed {
            Ok(()) => panic!("an fp16-accumulator attention passed the f16 check ({name})"),
            Err(e) => e.downcast_ref::<String>().cloned().unwrap_or_default(),
        };
        assert!(
            msg.contains("rel L2 error"),
            "failed for another reason: {msg}"
        );
        eprintln!("as required, the regression fails: {msg}");
    }
}

/// Canonical IR of attention_fwd with every switch on.
#[test]
fn canonical_ir_snapshot() {
    let defs: Vec<(String, String)> = [
        ("DTYPE", "f16"),
        ("HEAD_DIM", "80"),
        ("CAUSAL", "1"),
        ("VARLEN", "1"),
        ("KV_OFFSET", "1"),
        ("MASK", "1"),
        ("WINDOW", "1"),
        ("SOFTCAP", "1"),
        ("OUT_LAYOUT", "bshd"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    let (_, spec) =
        kir_compiler::internal::pipeline::frontend(fwd_src(), &defs).expect("front end");
    insta::assert_snapshot!("attention_fwd__all_features", kir_ir::text::print(&spec));
}

/// The running max moves only when a key block's max passes it by more than 8 in the log2
/// domain (the op's conditional rescaling). Keys whose scores grow block by block, by a little
/// (the max stays, P grows up to 2⁸) and by a lot (the max moves, the accumulator is
/// rescaled), and then shrink again, against the f64 oracle in every dtype, causal or not.
#[test]
fn conditional_rescaling_with_growing_and_shrinking_scores() {
    for (n, dt) in DTYPES.iter().enumerate() {
        for causal in [false, true] {
            let mut p = pr(1, 2, 1, 70, 300, 64);
            p.causal = causal;
            let dty = dtype(dt);
            let name = format!("{FWD} {dt} conditional rescaling causal={causal}");
            let mut rng = Rng::fresh(&name);
            let [q, mut k, v] = qkv(&p, dty, 1.0, &mut rng);
            // Key j's scale: small for the first keys, then steps of about 2 and then 6 (in
            // units of the score's spread), then back down: some blocks' maxima pass the
            // running max by less than 8 in log2 units, some by more.
            for j in 0..p.cap {
                let f = match j {
                    0..=40 => 0.3,
                    41..=120 => 1.5 + (n as f64) * 0.5,
                    121..=200 => 5.0,
                    _ => 0.5,
                };
                for x in &mut k[j * p.d..(j + 1) * p.d] {
                    *x = kir_tests::round(dty, *x * f);
                }
            }
            let inputs = [q, k, v];
            p.scale = (1.0 / (p.d as f64).sqrt()) as f32 as f64;
            let out = run_fwd(fwd_src(), &p, dt, false, &inputs);
            check(&p, dt, false, &out, &inputs, &name);
        }
    }
}
