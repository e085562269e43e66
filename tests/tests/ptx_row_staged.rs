//! Row vectors carried by a TMA ring (compiler/src/passes/schedule/pipelining, "Row vectors";
//! backends/src/ptx/lower/bulk_copy.rs and row_staged.rs): attention_bwd's unspecialized dK/dV
//! kernel on sm_90a copies lse and delta (64 query rows of f32 each) into its ring beside the q
//! and do tiles, as bulk copies issued before the fill's arrival, and reads each from the stage
//! where its broadcast stands.
//!
//! - In the scheduled IR the vectors' copies precede the arrival, whose `tx` counts their bytes.
//! - In the PTX each copy is `mbarrier.expect_tx` of its 256 bytes and one `cp.async.bulk`
//!   behind a run-time test (in bounds, 16-byte aligned), else an element loop; the arrival
//!   announces only the tensor copies' bytes; each broadcast reads the thread's 16 columns with
//!   8 `ld.shared.v2.b32`, and no global load of the vectors remains. 40b63db loaded them with
//!   `ld.global.v2.f32` at the top of the loop body.
//! - On the interpreter, the scheduled program (the module the PTX backend lowers, under its
//!   protocol checks and several scheduler seeds) matches the f64 oracle on ragged shapes whose
//!   last query block is partial.

use kir_backends::interp::{run_with, RunOptions};
use kir_ir::Dtype;
use kir_tests::bwd_cases::{check, data, inputs};
use kir_tests::oracle_attention::{self as oracle, Problem};
use kir_tests::{tolerance, Rng};

/// attention_bwd compiled for sm_90a, unspecialized, with these constants.
fn compile(d: &[(&str, &str)]) -> kir_compiler::internal::compiled::Compiled {
    kir_tests::sm90a_op("attention_bwd", d, false)
}

/// The dK/dV kernel's PTX within `ptx`.
fn dkdv(ptx: &str) -> &str {
    kir_tests::entry_body(ptx, "attention_bwd_dkdv")
}

/// An instruction line without its indentation and guard (`@%p7 `).
fn unguarded(line: &str) -> &str {
    let l = line.trim();
    match l.strip_prefix('@') {
        Some(rest) => rest.split_once(' ').map_or(l, |(_, x)| x),
        None => l,
    }
}

/// The immediate after the last comma of an instruction line (`…, 256;`).
fn last_imm(line: &str) -> u64 {
    line.trim_end_matches(';')
        .rsplit(',')
        .next()
        .and_then(|x| x.trim().parse().ok())
        .unwrap_or_else(|| panic!("no immediate in `{line}`"))
}

#[test]
fn the_copies_precede_the_arrival_that_counts_their_bytes() {
    for hd in [64usize, 128] {
        let h = hd.to_string();
        let out = compile(&[("HEAD_DIM", &h)]);
        let ir = kir_ir::text::print(&out.module);
        let body = ir
            .split("kernel @attention_bwd_dkdv")
            .nth(1)
            .and_then(|k| k.split("\nkernel @").next())
            .expect("the dK/dV kernel in the scheduled module");
        let lines: Vec<&str> = body.lines().map(str::trim).collect();
        let arrivals: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].starts_with("mbar_arrive") && lines[i].contains(" tx "))
            .collect();
        assert!(!arrivals.is_empty(), "d{hd}: no fill");
        // q and do: 64 rows of hd 16-bit elements each; lse and delta: 64 f32 each.
        let tx = (2 * 64 * hd * 2 + 2 * 64 * 4) as u64;
        for &a in &arrivals {
            assert!(
                lines[a].ends_with(&format!("tx {tx}")),
                "d{hd}: {}",
                lines[a]
            );
            let before = &lines[a.saturating_sub(2)..a];
            let after = &lines[a + 1..a + 3];
            for (v, l) in ["lse_log2", "delta"].iter().zip(before) {
                assert!(l.starts_with(&format!("async_copy {v}[")), "d{hd}: {l}");
            }
            for (v, l) in ["q", "do"].iter().zip(after) {
                assert!(l.starts_with(&format!("async_copy {v}[")), "d{hd}: {l}");
            }
        }
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.contains("= smem_read") && l.ends_with(": tile<64xf32>"))
                .count(),
            2,
            "d{hd}: the vectors are read from their stages"
        );
    }
}

#[test]
fn each_vector_is_one_bulk_copy_and_eight_shared_pair_reads() {
    for hd in ["64", "128"] {
        for causal in ["0", "1"] {
            let out = compile(&[("HEAD_DIM", hd), ("CAUSAL", causal)]);
            let k = dkdv(&out.text);
            let tag = format!("d{hd} causal {causal}");
            let lines: Vec<&str> = k.lines().map(unguarded).collect();
            let bulk: Vec<usize> = (0..lines.len())
                .filter(|&i| lines[i].starts_with("cp.async.bulk.shared::cluster.global."))
                .collect();
            // One fill before the loop (two stages) and the refill in it, two vectors each.
            assert_eq!(bulk.len(), 4, "{tag}: bulk copies");
            for &i in &bulk {
                assert!(
                    lines[i].contains(", 256, ["),
                    "{tag}: a vector is 256 bytes: {}",
                    lines[i]
                );
                let expect = lines[i - 1];
                assert!(
                    expect.starts_with("mbarrier.expect_tx.relaxed.cta.shared::cta.b64")
                        && last_imm(expect) == 256,
                    "{tag}: the copy announces its own bytes: {expect}"
                );
            }
            // The fill's arrival announces the tensor copies' bytes only (q and do).
            let tensor_bytes = 2 * 64 * hd.parse::<u64>().expect("head dim") * 2;
            let arrivals: Vec<&str> = lines
                .iter()
                .copied()
                .filter(|l| l.contains("mbarrier.arrive.expect_tx"))
                .collect();
            assert!(!arrivals.is_empty(), "{tag}: no arrival");
            for a in arrivals {
                assert_eq!(last_imm(a), tensor_bytes, "{tag}: {a}");
            }
            assert_eq!(
                k.matches("ld.shared.v2.b32").count(),
                16,
                "{tag}: lse and delta read once each, 8 column pairs a thread"
            );
            assert!(
                !k.contains("ld.global.v2.f32"),
                "{tag}: the vectors are still loaded from global memory per thread"
            );
            let report = out
                .reports
                .iter()
                .find(|r| r.kernel == "attention_bwd_dkdv")
                .expect("the dK/dV kernel's report")
                .to_string();
            assert_eq!(
                report.matches("2 stages of 1x64 f32, 512 bytes").count(),
                2,
                "{tag}: {report}"
            );
        }
    }
}

#[test]
fn the_scheduled_program_matches_the_oracle() {
    // Sq 150: the ring's last query block holds 22 rows; Sk 133 a partial key block; GQA 4/2.
    for (hd, causal) in [(64, false), (64, true), (128, false), (128, true)] {
        let h = hd.to_string();
        let c = if causal { "1" } else { "0" };
        let module = compile(&[("HEAD_DIM", &h), ("CAUSAL", c)]).module;
        let mut p = Problem::new(1, 4, 2, 150, 133, hd);
        p.causal = causal;
        p.scale = p.scale as f32 as f64;
        let name = format!("attention_bwd sm_90a d{hd} causal {causal}");
        let mut rng = Rng::fresh(&name);
        let args = inputs(&p, Dtype::Bf16, 2.0, &mut rng);
        let x = ["q", "k", "v", "do"].map(|n| data(&args, n));
        let grads = oracle::attention_bwd(&p, x[0], x[1], x[2], x[3]);
        for seed in [1, 7] {
            let opts = RunOptions {
                parallel: true,
                seed,
            };
            let out = run_with(&module, &args, &opts)
                .unwrap_or_else(|e| panic!("{name} seed {seed}: {e}"));
            let tol = tolerance(Dtype::Bf16);
            check(&out, &grads, tol, &format!("{name} seed {seed}"));
        }
    }
}
