//! attention_bwd with the forward's features: VARLEN (uneven key lengths, a zero-length batch,
//! lengths past the capacity), KV_OFFSET (positive, negative, at the capacity's end), MASK (P = 1,
//! B and B·Hq, with −inf entries and a row that is −inf throughout), WINDOW (on, 1, off by 0 and by
//! a negative width), SOFTCAP (on, off by 0), alone and combined, with GQA and causal, in both
//! DETERMINISTIC modes, over every dtype and magnitudes above 1, on ragged shapes (Sq = 37,
//! capacity 53 and others). dq, dk and dv from the interpreter (outputs poisoned by the runner,
//! key capacity the kernel must not read holding NaN) are checked against the analytic f64
//! oracle of `kir_tests::oracle_attention`, and that oracle is checked against central finite
//! differences of the f64 forward at random coordinates of every case kind, so it cannot share a
//! bug with the kernel. Also: the backward declares the forward's constants and feature params
//! exactly; the deterministic program with every feature is bit-identical across runs; a
//! combination the forward rejects is rejected the same way, located (the feature
//! specializations' ptxas check is in attention_bwd_wgmma.rs). With HEAD_DIM > 128 and
//! BLOCK_KV ≥ 64 the dK/dV accumulators are split between programs: every feature through both.
//! And the sm_90a d256 row's tiles, dQ over 80-key blocks, with uneven key lengths.

use kir_backends::interp::{run_with, HostArg, RunOptions};
use kir_ir::{Diagnostic, Dtype};
use kir_tests::bwd_cases::{self, check, data};
use kir_tests::oracle_attention::{self as oracle, Input, Problem};
use kir_tests::F64s;
use kir_tests::{compare, dtype, t, tolerance, Rng};
use std::collections::BTreeMap;

const BWD: &str = "attention_bwd";
const DTYPES: [&str; 3] = ["f32", "f16", "bf16"];

fn src() -> &'static str {
    kir_compiler::internal::oplib::builtin(BWD).expect("attention_bwd is built in")
}

/// The `-D` values that select `p`'s switches: the forward's names and values (CAUSAL is on
/// with a KV offset, as the forward requires), and DETERMINISTIC.
fn defines(p: &Problem, dt: &str, deterministic: bool) -> Vec<(String, String)> {
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
        ("DETERMINISTIC".into(), flag(deterministic)),
    ]
}

/// A mask [rows, Sq, cap]: values at `mag`, about one in ten −inf, NaN in the key columns no
/// batch uses, and query 0 of mask row 0 −inf throughout (lse = −inf: no gradient).
fn mask_values(p: &Problem, rows: usize, dty: Dtype, mag: f64, rng: &mut Rng) -> Vec<f64> {
    let used = (0..p.b).map(|bi| p.keys_used(bi)).max().unwrap_or(0);
    let mut m = rng.tensor(rows * p.sq * p.cap, mag, dty);
    for (idx, x) in m.iter_mut().enumerate() {
        if idx % p.cap >= used {
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

/// Fresh inputs of one case: q, do, and k, v with NaN past `Problem::keys_used`, at magnitude
/// `mag`; the mask (set into `p`) when `mask_rows` is given; o (rounded to the dtype) and lse
/// (rounded to f32) from the f64 forward, as the forward kernel stores them; lengths, scalars.
fn inputs(
    p: &mut Problem,
    dty: Dtype,
    mag: f64,
    mask_rows: Option<usize>,
    rng: &mut Rng,
) -> BTreeMap<String, HostArg> {
    p.scale = p.scale as f32 as f64;
    let (nq, nk) = (p.b * p.hq * p.sq * p.d, p.b * p.hkv * p.cap * p.d);
    let q = rng.tensor(nq, mag, dty);
    let d_o = rng.tensor(nq, mag, dty);
    let mut kv = [0, 1].map(|_| rng.tensor(nk, mag, dty));
    for x in &mut kv {
        for bi in 0..p.b {
            for hk in 0..p.hkv {
                let base = (bi * p.hkv + hk) * p.cap;
                x[(base + p.keys_used(bi)) * p.d..(base + p.cap) * p.d].fill(f64::NAN);
            }
        }
    }
    let [k, v] = kv;
    if let Some(rows) = mask_rows {
        p.mask = Some((rows, mask_values(p, rows, dty, mag, rng)));
    }
    let mut args = bwd_cases::args(p, dty, q, k, v, d_o);
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
    args
}

/// The attention_bwd program for `p` as the pipeline outputs it (what runs), with `extra` `-D`s.
fn program(p: &Problem, dt: &str, deterministic: bool, extra: &[(&str, &str)]) -> kir_ir::Module {
    let mut defs = defines(p, dt, deterministic);
    defs.extend(extra.iter().map(|(a, b)| (a.to_string(), b.to_string())));
    kir_compiler::internal::pipeline::output(src(), &defs)
        .unwrap_or_else(|e| panic!("{defs:?}:\n{}", e.render("attention_bwd.kir", src())))
}

/// One case: fresh inputs, the kernel on the interpreter, the analytic oracle.
fn case(p: Problem, dt: &str, deterministic: bool, mask_rows: Option<usize>, mag: f64) {
    case_with(p, dt, deterministic, mask_rows, mag, &[]);
}

/// [`case`] with `extra` `-D` values (tiles).
fn case_with(
    p: Problem,
    dt: &str,
    det: bool,
    rows: Option<usize>,
    mag: f64,
    extra: &[(&str, &str)],
) {
    let dty = dtype(dt);
    // `p` has no mask yet: its Debug form is one short line.
    let name = format!("{BWD} {dt} deterministic={det} P={rows:?} mag {mag} {extra:?} {p:?}");
    let mut rng = Rng::fresh(&name);
    let mut p = p;
    let args = inputs(&mut p, dty, mag, rows, &mut rng);
    let out = run_with(&program(&p, dt, det, extra), &args, &RunOptions::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(out["dq"].shape, vec![p.b, p.hq, p.sq, p.d], "{name}: dq");
    assert_eq!(out["dk"].shape, vec![p.b, p.hkv, p.cap, p.d], "{name}: dk");
    assert_eq!(out["dv"].shape, vec![p.b, p.hkv, p.cap, p.d], "{name}: dv");
    let x = ["q", "k", "v", "do"].map(|n| data(&args, n));
    let g = oracle::attention_bwd(&p, x[0], x[1], x[2], x[3]);
    check(&out, &g, tolerance(dty), &name);
}

fn pr(b: usize, hq: usize, hkv: usize, sq: usize, sk: usize, d: usize) -> Problem {
    Problem::new(b, hq, hkv, sq, sk, d)
}

/// Runs `f(dtype, deterministic, magnitude)` over every dtype and both modes, with the
/// magnitude alternating between 1 and 3.
fn sweep(mut f: impl FnMut(&str, bool, f64)) {
    for (n, dt) in DTYPES.into_iter().enumerate() {
        for deterministic in [true, false] {
            f(
                dt,
                deterministic,
                [1.0, 3.0][(n + deterministic as usize) % 2],
            );
        }
    }
}

#[test]
fn varlen_uneven_lengths() {
    sweep(|dt, det, mag| {
        for causal in [false, true] {
            // A zero-length batch (no gradient), a ragged one and the full capacity; GQA 4/2.
            let mut p = pr(3, 4, 2, 37, 53, 64);
            p.causal = causal;
            p.total_lengths = Some(vec![0, 29, 53]);
            case(p, dt, det, None, mag);
        }
        // One key, and a length past the capacity (clamped to it).
        let mut p = pr(2, 2, 1, 5, 70, 32);
        p.total_lengths = Some(vec![1, 1000]);
        case(p, dt, det, None, 4.0 - mag);
    });
}

#[test]
fn kv_offset_prefill() {
    sweep(|dt, det, mag| {
        // 17 and 80 cached keys before 37 new queries in a capacity of 140, and a negative
        // offset that hides the first rows' keys; with key lengths that end before the offset's
        // last key in one batch.
        let mut p = pr(3, 4, 2, 37, 140, 64);
        p.past_lengths = Some(vec![17, 80, -5]);
        case(p.clone(), dt, det, None, mag);
        p.total_lengths = Some(vec![45, 140, 20]);
        case(p, dt, det, None, 4.0 - mag);
        // A decode-like step (Sq = 1) at the capacity's end and at 0.
        let mut p = pr(2, 2, 2, 1, 53, 80);
        p.past_lengths = Some(vec![52, 0]);
        case(p, dt, det, None, mag);
    });
}

#[test]
fn mask_broadcast_planes() {
    sweep(|dt, det, mag| {
        // B = 2, Hq = 4, Hkv = 2: P = 1 (shared), B (per batch) and B·Hq (per head).
        for rows in [1, 2, 8] {
            case(pr(2, 4, 2, 37, 53, 64), dt, det, Some(rows), mag);
        }
        let mut p = pr(2, 4, 2, 37, 53, 64);
        p.causal = true;
        case(p, dt, det, Some(8), 4.0 - mag);
    });
}

#[test]
fn sliding_window() {
    sweep(|dt, det, mag| {
        for (causal, window) in [(true, 1), (true, 17), (true, 0), (false, 20), (true, -3)] {
            let mut p = pr(2, 2, 1, 37, 53, 64);
            p.causal = causal;
            p.window = Some(window);
            case(p, dt, det, None, mag);
        }
        // A window that cuts through the blocks of longer sequences on both ends.
        let mut p = pr(1, 2, 1, 150, 170, 32);
        p.causal = true;
        p.window = Some(45);
        case(p, dt, det, None, 4.0 - mag);
    });
}

#[test]
fn softcap_with_and_without_causal() {
    sweep(|dt, det, mag| {
        for (causal, cap, m) in [(true, 5.0, 3.0), (true, 30.0, 1.0), (false, 2.0, 3.0)] {
            let mut p = pr(1, 4, 2, 37, 53, 64);
            p.causal = causal;
            p.softcap = Some(cap);
            case(p, dt, det, None, m);
        }
        // softcap ≤ 0 turns the cap off.
        let mut p = pr(1, 2, 1, 37, 53, 64);
        p.causal = true;
        p.softcap = Some(0.0);
        case(p, dt, det, None, mag);
    });
}

#[test]
fn combinations() {
    sweep(|dt, det, mag| {
        // GQA 14/2 + causal + varlen + window.
        let mut p = pr(2, 14, 2, 37, 60, 32);
        p.causal = true;
        p.total_lengths = Some(vec![60, 41]);
        p.window = Some(25);
        case(p, dt, det, None, mag);
        // Softcap + causal + mask shared over heads.
        let mut p = pr(2, 2, 1, 37, 37, 64);
        p.causal = true;
        p.softcap = Some(10.0);
        case(p, dt, det, Some(2), mag);
        // Everything: KV offset + varlen + window + per-head mask + softcap, GQA 4/2.
        let mut p = pr(2, 4, 2, 37, 150, 64);
        p.past_lengths = Some(vec![40, 100]);
        p.total_lengths = Some(vec![60, 137]);
        p.window = Some(45);
        p.softcap = Some(8.0);
        case(p, dt, det, Some(8), 4.0 - mag);
    });
}

/// With HEAD_DIM > 128 and BLOCK_KV ≥ 64 the dK/dV kernel's accumulators are split between
/// programs (dk's part and dv's): every feature at once through both parts, and both modes.
#[test]
fn split_accumulators_with_every_feature() {
    for (dt, det, mag) in [("bf16", true, 3.0), ("f16", false, 1.0), ("f32", true, 1.0)] {
        let mut p = pr(2, 4, 2, 45, 150, 136);
        p.past_lengths = Some(vec![40, 100]);
        p.total_lengths = Some(vec![70, 137]);
        p.window = Some(60);
        p.softcap = Some(8.0);
        case_with(p, dt, det, Some(8), mag, &[("BLOCK_KV", "64")]);
    }
}

/// The sm_90a d256 row's tiles (configs/table.rs `BWD_64_KEYS_DQ80`: dQ programs over 80-key
/// blocks beside 64-key dK/dV programs): uneven key lengths that end inside a block of 80, a
/// zero-length batch, GQA, both modes.
#[test]
fn d256_row_tiles_with_80_key_dq_blocks() {
    let tiles = [
        ("BLOCK_MQ", "64"),
        ("BLOCK_N", "80"),
        ("BLOCK_KV", "64"),
        ("BLOCK_M", "64"),
    ];
    for (dt, det, mag) in [("bf16", true, 3.0), ("f16", false, 1.0)] {
        let mut p = pr(3, 4, 2, 41, 170, 256);
        p.total_lengths = Some(vec![0, 93, 170]);
        case_with(p, dt, det, None, mag, &tiles);
    }
}

#[test]
fn random_problems() {
    let mut rng = Rng::fresh("attention_bwd features random problems");
    for _ in 0..4 {
        let hkv = rng.range(1, 3);
        let (b, sq, cap) = (rng.range(1, 3), rng.range(1, 90), rng.range(1, 110));
        let mut p = pr(b, hkv * rng.range(1, 4), hkv, sq, cap, 8 * rng.range(1, 13));
        let coin = |rng: &mut Rng| rng.range(0, 2) == 1;
        p.causal = coin(&mut rng);
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
        let (dt, det) = (DTYPES[rng.range(0, 3)], coin(&mut rng));
        case(p, dt, det, rows, [1.0, 3.0][rng.range(0, 2)]);
    }
}

/// The analytic f64 oracle agrees with central finite differences of the f64 forward at random
/// coordinates of q, k and v (k and v rows some query may see), for every feature alone and
/// combined, at magnitudes 1 and 3.
#[test]
fn oracle_matches_finite_differences() {
    let mut cases = vec![];
    let mut p = pr(3, 2, 1, 9, 13, 8);
    p.causal = true;
    p.total_lengths = Some(vec![0, 7, 13]);
    cases.push((p, None));
    let mut p = pr(2, 2, 1, 9, 20, 8);
    p.past_lengths = Some(vec![6, -2]);
    cases.push((p, None));
    cases.push((pr(2, 4, 2, 9, 13, 8), Some(8)));
    cases.push((pr(2, 2, 1, 9, 13, 8), Some(1)));
    let mut p = pr(2, 2, 1, 9, 13, 8);
    p.causal = true;
    p.window = Some(4);
    cases.push((p, None));
    let mut p = pr(1, 2, 1, 9, 13, 8);
    p.window = Some(5);
    cases.push((p, Some(2)));
    let mut p = pr(1, 2, 1, 9, 13, 8);
    p.softcap = Some(2.0);
    cases.push((p, None));
    let mut p = pr(2, 4, 2, 9, 24, 8);
    p.past_lengths = Some(vec![8, 12]);
    p.total_lengths = Some(vec![10, 24]);
    p.window = Some(6);
    p.softcap = Some(3.0);
    cases.push((p, Some(8)));
    for (n, (p, rows)) in cases.into_iter().enumerate() {
        for mag in [1.0, 3.0] {
            let name = format!("finite differences case {n} mag {mag}: {p:?}");
            let mut rng = Rng::fresh(&name);
            let mut p = p.clone();
            let args = inputs(&mut p, Dtype::F32, mag, rows, &mut rng);
            let x = ["q", "k", "v", "do"].map(|n| data(&args, n));
            let g = oracle::attention_bwd(&p, x[0], x[1], x[2], x[3]);
            for (which, analytic) in [(Input::Q, &g.dq), (Input::K, &g.dk), (Input::V, &g.dv)] {
                let rows_of = |idx: usize| (idx / p.d) % p.cap;
                let batch_of = |idx: usize| idx / p.d / p.cap / p.hkv;
                // Coordinates of rows some query may see (k and v past them are NaN).
                let pool: Vec<usize> = (0..analytic.len())
                    .filter(|&i| which == Input::Q || rows_of(i) < p.keys_used(batch_of(i)))
                    .collect();
                // Half of the picks where the analytic gradient is not 0 (a window can leave
                // most key rows unseen: 12 picks from the whole pool all fell on such rows in
                // about 0.3 % of runs), half from the whole pool, so zeros are checked too.
                let live: Vec<usize> = pool
                    .iter()
                    .copied()
                    .filter(|&i| analytic[i] != 0.0)
                    .collect();
                assert!(!live.is_empty(), "{name}: {which:?}: every gradient is 0");
                let picks: Vec<usize> = (0..12)
                    .map(|j| match j % 2 {
                        0 => live[rng.range(0, live.len())],
                        _ => pool[rng.range(0, pool.len())],
                    })
                    .collect();
                let a: Vec<f64> = picks.iter().map(|&i| analytic[i]).collect();
                let f: Vec<f64> = picks
                    .iter()
                    .map(|&i| oracle::finite_difference(&p, x[0], x[1], x[2], x[3], which, i))
                    .collect();
                assert!(
                    f.iter().any(|&v| v != 0.0),
                    "{name}: {which:?}: every sampled gradient is 0"
                );
                compare(
                    &format!("{name}: analytic d{which:?} vs finite differences at {picks:?}"),
                    &a,
                    &f,
                    (1e-7, 1e-7),
                );
            }
        }
    }
}

/// DETERMINISTIC = 1 with every feature has no float atomics: parallel, sequential and repeated
/// runs give the same bits.
#[test]
fn deterministic_is_bit_identical_with_every_feature() {
    let mut p = pr(2, 4, 2, 70, 130, 64);
    p.past_lengths = Some(vec![30, 60]);
    p.total_lengths = Some(vec![90, 130]);
    p.window = Some(50);
    p.softcap = Some(6.0);
    let mut rng = Rng::fresh("attention_bwd features determinism");
    let args = inputs(&mut p, Dtype::Bf16, 3.0, Some(8), &mut rng);
    let spec = program(&p, "bf16", true, &[]);
    let bits = |parallel: bool| -> Vec<u64> {
        let opts = RunOptions {
            parallel,
            ..Default::default()
        };
        let out = run_with(&spec, &args, &opts).expect("run");
        ["dq", "dk", "dv"]
            .iter()
            .flat_map(|k| out[*k].data.f64s().iter().map(|x| x.to_bits()))
            .collect()
    };
    let first = bits(true);
    assert!(
        first.iter().all(|&b| f64::from_bits(b).is_finite()),
        "an output element was not written (or is not finite)"
    );
    for parallel in [false, true, false] {
        assert!(first == bits(parallel), "differs (parallel={parallel})");
    }
}

/// The backward declares the forward's feature constants with the same defaults and the same
/// `where`, and the same feature params (names, types, shapes, conditions), so a training step
/// passes one specialization to both.
#[test]
fn constants_and_feature_params_match_the_forward() {
    let parse = |name: &str| {
        let s = kir_compiler::internal::oplib::builtin(name).expect("built in");
        kir_ir::text::parse(s).unwrap_or_else(|e| panic!("{name}: {e:?}"))
    };
    let (fwd, bwd) = (parse("attention_fwd"), parse(BWD));
    let shown = |m: &kir_ir::Module, c: &str| {
        let text = kir_ir::text::print(m);
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("const {c}:")))
            .map(str::to_string);
        line.unwrap_or_else(|| panic!("{}: no constant {c}", m.name))
    };
    let features = ["CAUSAL", "VARLEN", "KV_OFFSET", "MASK", "WINDOW", "SOFTCAP"];
    for c in ["DTYPE", "HEAD_DIM"].into_iter().chain(features) {
        assert_eq!(shown(&fwd, c), shown(&bwd, c), "constant {c}");
    }
    let params = |m: &kir_ir::Module| -> BTreeMap<String, String> {
        let text = kir_ir::text::print(m);
        // The forward's kernel, and the backward's dK/dV kernel (which takes every one).
        let kernel = text
            .split("kernel @")
            .find(|k| k.starts_with("attention_fwd(") || k.starts_with("attention_bwd_dkdv("))
            .expect("the kernel")
            .to_string();
        let header = kernel.split(") grid").next().expect("params").to_string();
        header
            .lines()
            .filter_map(|l| {
                let l = l.trim().trim_end_matches(',');
                let (n, rest) = l.split_once(": ")?;
                ["total_lengths", "past_lengths", "mask", "window", "softcap"]
                    .contains(&n)
                    .then(|| (n.to_string(), rest.to_string()))
            })
            .collect()
    };
    let (pf, pb) = (params(&fwd), params(&bwd));
    assert_eq!(pf.len(), 5, "forward feature params: {pf:?}");
    assert_eq!(
        pf, pb,
        "feature params of attention_fwd and attention_bwd_dkdv"
    );
}

/// A combination the forward rejects is rejected by the backward the same way, located at the
/// rule; a missing or misshapen feature argument is a located launch error in both modes.
#[test]
fn feature_errors_are_clear_and_located() {
    let defs = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    let bad = defs(&[("KV_OFFSET", "1")]);
    for op in ["attention_fwd", BWD] {
        let s = kir_compiler::internal::oplib::builtin(op).expect("built in");
        let file = format!("{op}.kir");
        let err = kir_compiler::internal::pipeline::frontend(s, &bad)
            .expect_err("KV_OFFSET without CAUSAL must be rejected")
            .render(&file, s);
        assert!(err.starts_with(&format!("{file}:")), "{err}");
        assert!(
            err.contains("constant `KV_OFFSET` = 1 (set by -D) does not satisfy")
                && err.contains("KV_OFFSET == 1 && CAUSAL == 1")
                && err.contains('^'),
            "{err}"
        );
    }
    for deterministic in [true, false] {
        let mut p = pr(2, 2, 1, 5, 7, 64);
        let mut rng = Rng::fresh("attention_bwd feature errors");
        let mut args = inputs(&mut p, Dtype::F32, 1.0, Some(2), &mut rng);
        let spec = program(&p, "f32", deterministic, &[]);
        let render = |args: &BTreeMap<String, HostArg>| {
            let e = run_with(&spec, args, &RunOptions::default()).expect_err("must fail");
            let span = e.span.unwrap_or_else(|| panic!("no location: {e}"));
            Diagnostic::new(span, e.message).render("attention_bwd.kir", src())
        };
        args.remove("mask");
        let err = render(&args);
        assert!(err.contains("missing argument `mask`"), "{err}");
        assert!(
            err.contains("mask: in tensor<DTYPE>[P, Sq, Sk] if MASK == 1") && err.contains('^'),
            "{err}"
        );
        args.insert("mask".into(), t(Dtype::F32, &[3, 5, 7], vec![0.0; 105]));
        let err = render(&args);
        assert!(
            err.contains("requirement `P == 1 || P == B || P == B * Hq` does not hold")
                && err.contains("P = 3")
                && err.contains("MASK == 0 || P == 1 || P == B || P == B * Hq"),
            "{err}"
        );
    }
}

/// ORDERED = 1 (the deterministic mode that adds dqᵀ in the dK/dV kernel, in key-block order
/// under counters) with every feature it takes (all but WINDOW): key lengths, a KV offset
/// (negative too), mask planes, the soft cap, combined, causal or not, GQA, over every dtype,
/// and through split accumulators. The interpreter runs the programs in grid order and fails a
/// wait that a GPU would never see end, so every case also checks each wait's count.
#[test]
fn ordered_dq_with_features() {
    let ordered = [("ORDERED", "1")];
    for (n, dt) in DTYPES.into_iter().enumerate() {
        let mag = [1.0, 3.0][n % 2];
        for causal in [false, true] {
            let mut p = pr(3, 4, 2, 37, 53, 64);
            p.causal = causal;
            p.total_lengths = Some(vec![0, 29, 53]);
            case_with(p, dt, true, None, mag, &ordered);
            let mut p = pr(2, 4, 2, 37, 53, 64);
            p.causal = causal;
            p.softcap = Some(5.0);
            case_with(p, dt, true, Some(8), 4.0 - mag, &ordered);
        }
        let mut p = pr(3, 4, 2, 37, 140, 64);
        p.past_lengths = Some(vec![17, 80, -5]);
        p.total_lengths = Some(vec![45, 140, 20]);
        case_with(p, dt, true, Some(3), mag, &ordered);
    }
    let mut p = pr(2, 4, 2, 45, 150, 136);
    p.past_lengths = Some(vec![40, 100]);
    p.total_lengths = Some(vec![70, 137]);
    p.softcap = Some(8.0);
    case_with(
        p,
        "bf16",
        true,
        Some(8),
        3.0,
        &[("ORDERED", "1"), ("BLOCK_KV", "64")],
    );
}
