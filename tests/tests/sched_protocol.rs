//! The scheduled-IR protocol checker of the interpreter: a correct two-stage producer/consumer
//! ring (tests/in/sched/ring_ws.kir) matches an f64 oracle under 20 scheduler seeds and ragged
//! row counts, and each planted protocol bug (deadlock, unfilled read, overwrite in use, barrier
//! byte count, barrier phase) is reported, with the op at fault, under every seed that exposes it.

use kir_backends::interp::{run_with, RunOptions};
use kir_ir::Dtype;
use kir_tests::F64s;
use kir_tests::{compare, t, Rng};
use std::collections::BTreeMap;

const RING: &str = include_str!("../in/sched/ring_ws.kir");
const SEEDS: u64 = 20;

/// Runs `src` on x of `rows` × 8 under `seed`; the output y, or the rendered error.
fn run(src: &str, x: &[f64], rows: usize, seed: u64) -> Result<Vec<f64>, String> {
    run_shaped(src, x, &[rows, 8], seed)
}

fn run_shaped(src: &str, x: &[f64], shape: &[usize], seed: u64) -> Result<Vec<f64>, String> {
    let (_, spec) = kir_compiler::internal::pipeline::frontend(src, &[])
        .map_err(|e| e.render("ring_ws.kir", src))?;
    let mut args = BTreeMap::new();
    args.insert("x".to_string(), t(Dtype::F32, shape, x.to_vec()));
    let opts = RunOptions {
        parallel: true,
        seed,
    };
    match run_with(&spec, &args, &opts) {
        Ok(out) => Ok(out["y"].data.f64s().to_vec()),
        Err(e) => Err(match e.span {
            Some(sp) => kir_ir::Diagnostic::new(sp, e.message).render("ring_ws.kir", src),
            None => e.message,
        }),
    }
}

fn input(rows: usize) -> Vec<f64> {
    let mut rng = Rng::fresh(&format!("sched ring {rows}"));
    rng.tensor(rows * 8, 3.0, Dtype::F32)
}

#[test]
fn correct_ring_matches_the_oracle_under_every_seed() {
    for rows in [1, 16, 37, 64, 101] {
        let x = input(rows);
        let want: Vec<f64> = x.iter().map(|v| 2.0 * v).collect();
        for seed in 0..SEEDS {
            let y = run(RING, &x, rows, seed)
                .unwrap_or_else(|e| panic!("rows {rows} seed {seed}: {e}"));
            compare(
                &format!("ring rows {rows} seed {seed}"),
                &y,
                &want,
                (0.0, 0.0),
            );
        }
    }
}

/// Plants `bug` (a textual edit of the ring) and returns the error of each seed.
fn planted(edit: (&str, &str), rows: usize) -> Vec<(u64, Result<Vec<f64>, String>)> {
    assert!(
        RING.contains(edit.0),
        "the ring no longer contains `{}`",
        edit.0
    );
    let src = RING.replacen(edit.0, edit.1, 1);
    let x = input(rows);
    (0..SEEDS).map(|s| (s, run(&src, &x, rows, s))).collect()
}

/// Every seed fails with a message containing each of `needles`.
fn caught_always(name: &str, edit: (&str, &str), needles: &[&str]) {
    for (seed, r) in planted(edit, 37) {
        match r {
            Ok(_) => panic!("{name}: seed {seed} ran without a report"),
            Err(e) => {
                for n in needles {
                    assert!(
                        e.contains(n),
                        "{name}: seed {seed}: expected `{n}` in:\n{e}"
                    );
                }
            }
        }
    }
}

#[test]
fn deadlock_is_reported_with_every_waiting_partition() {
    // The producer waits on the empty barrier's current phase instead of the previous one.
    caught_always(
        "deadlock",
        ("mbar_wait %empty, %s, %pe", "mbar_wait %empty, %s, %rp"),
        &[
            "deadlock",
            "the producer at `mbar_wait %empty",
            "consumer 0 at `mbar_wait %full",
            "ring_ws.kir:",
        ],
    );
}

#[test]
fn read_of_an_unfilled_stage_is_reported() {
    // The consumer reads without waiting for the full barrier.
    for (seed, r) in planted(("mbar_wait %full, %s, %pf\n", ""), 37) {
        let e = r.expect_err("a read without a wait must be reported");
        let ok = e.contains("which no producer has filled")
            || e.contains("while a copy into it is still in flight")
            || e.contains("before waiting for its fill");
        assert!(ok && e.contains("smem_read"), "seed {seed}:\n{e}");
    }
}

#[test]
fn producer_overwriting_a_stage_in_use_is_reported() {
    // The producer refills a stage without waiting for the consumer to release it. Whether the
    // consumer still holds the stage depends on the interleaving, so some seeds may run clean;
    // every report names the overwrite, and most seeds must catch it.
    let runs = planted(("mbar_wait %empty, %s, %pe\n", ""), 101);
    let mut caught = 0;
    for (seed, r) in &runs {
        if let Err(e) = r {
            // The producer runs ahead: it refills a stage in use, arrives on a full barrier
            // whose previous phase the consumer has not taken yet, or (with no wait left in
            // its loop) arrives on a stage again with no `mbar_wait` in between.
            let ok = e.contains("overwrites") && e.contains("async_copy")
                || e.contains("more than its 1 expected arrivals")
                    && e.contains("mbar_arrive %full")
                || e.contains("again with no `mbar_wait`") && e.contains("mbar_arrive %full");
            assert!(ok, "seed {seed}:\n{e}");
            caught += 1;
        }
    }
    assert!(
        caught * 2 > runs.len(),
        "only {caught} of {} seeds caught the overwrite",
        runs.len()
    );
}

#[test]
fn barrier_byte_counts_that_do_not_match_the_copies_are_reported() {
    // Too few bytes announced: the copy over-delivers, reported at the copy.
    caught_always(
        "expect_tx too small",
        ("tx 512", "tx 256"),
        &["expect_tx of 256 bytes", "256 bytes more", "async_copy"],
    );
    // Too many: the phase never completes; the deadlock report shows the byte ledger.
    caught_always(
        "expect_tx too large",
        ("tx 512", "tx 1024"),
        &[
            "deadlock",
            "expect_tx announced 1024 bytes, copies issued for the phase deliver 512",
        ],
    );
}

#[test]
fn a_wait_on_the_wrong_phase_parity_is_reported() {
    // The consumer waits for parity 1 in every round: a fresh barrier passes it at once, so the
    // consumer reads a stage whose fill it never observed; when the fill has already completed
    // phase 0, the wait blocks on a phase that never comes.
    for (seed, r) in planted(
        ("mbar_wait %full, %s, %pf", "mbar_wait %full, %s, %one"),
        37,
    ) {
        let e = r.expect_err("a wrong-parity wait must be reported");
        let ok = e.contains("consumer 0 reads %buf")
            || e.contains("deadlock") && e.contains("consumer 0 at `mbar_wait %full, %s, %one`");
        assert!(ok, "seed {seed}:\n{e}");
    }
}

#[test]
fn async_dot_release_before_wait_is_reported() {
    let src = "module m\n\nkernel @k(x: in tensor<f32>[16, 16], y: out tensor<f32>[16, 16]) grid [1, 1, 1] {\n\
  %zero = const 0 : i32\n\
  %buf = smem_alloc : smem<1x16x16xf32>\n\
  async_copy x[0, 0], %buf, %zero\n\
  async_commit\n\
  async_wait\n\
  %a = smem_read %buf, %zero : tile<16x16xf32>\n\
  %acc = const 0.0 : tile<16x16xf32>\n\
  %d = dot_async %a, %a, %acc : tile<16x16xf32>\n\
  smem_release %buf, %zero\n\
  %r = dot_wait %d : tile<16x16xf32>\n\
  store y[0, 0], %r\n\
}\n";
    let x = input(32);
    let e = run_shaped(src, &x, &[16, 16], 0).expect_err("must be reported");
    assert!(
        e.contains("while `dot_async`") && e.contains("smem_release"),
        "{e}"
    );
}
