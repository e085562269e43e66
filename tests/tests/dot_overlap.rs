//! The `dot_overlap` pass (FlashAttention-3's intra-warpgroup overlap as IR): attention_fwd's
//! TMA ring, rotated so that block j's q·kᵀ and block j − 1's p·v are asynchronous groups, runs
//! on the interpreter before and after the rotation, on fresh random ragged inputs (causal, window, KV offset, GQA), under 20
//! scheduler seeds, and must give bit-identical outputs — the interpreter checks the ring
//! protocol on the way (every stage read after its fill, no release while a `dot_async` reads
//! it). Loops the pass must leave alone (GEMM's carried dot, a cp.async ring) stay unchanged; on
//! sm_90a the rotated kernels lower with the p·v wgmma group running under the softmax and
//! assemble without spills.

use kir_backends::ptx::PtxOptions;
use kir_backends::Target;
use kir_compiler::internal::compile::{compile_stage, Emit, Stage};
use kir_compiler::internal::passes::{
    dot_overlap, pipelining, warp_specialize, PipelineConfig, WsPlan,
};
use kir_ir::Opcode;
use kir_tests::sched_diff::{count, differential, spec};
use std::process::Command;

fn tma(stages: usize) -> PipelineConfig {
    PipelineConfig {
        smem_budget: 232_448,
        stages: Some(stages),
        hold_carried_dots: false,
        tma_rings: true,
    }
}

#[test]
fn rotated_attention_rings_are_exact_under_20_seeds() {
    let cases: &[&[(&str, &str)]] = &[
        &[],
        &[("CAUSAL", "1")],
        &[("CAUSAL", "1"), ("KV_OFFSET", "1")],
        &[("CAUSAL", "1"), ("WINDOW", "1")],
        &[("HEAD_DIM", "128"), ("CAUSAL", "1"), ("DTYPE", "f16")],
    ];
    for defs in cases {
        for stages in [2, 3] {
            let what = format!("attention_fwd {defs:?} {stages} stages");
            let before = spec("attention_fwd", defs);
            let piped = pipelining(&before, &tma(stages)).expect("pipelining");
            assert_eq!(count(&piped, Opcode::MbarAlloc), 2, "{what}: no TMA ring");
            let (after, n) = dot_overlap(&piped).expect("dot_overlap");
            assert_eq!(n, 1, "{what}: the key loop was not rotated");
            kir_ir::verifier::verify(&after).unwrap_or_else(|e| panic!("{what}: {e:?}"));
            let text = kir_ir::text::print(&after);
            let again = kir_ir::text::parse(&text).unwrap_or_else(|e| panic!("{what}: {e:?}"));
            assert_eq!(kir_ir::text::print(&again), text, "{what}: not canonical");
            // The loop issues block j's q·kᵀ and block j − 1's p·v as asynchronous groups.
            assert_eq!(count(&after, Opcode::DotAsync), 2, "{what}");
            assert_eq!(count(&after, Opcode::DotWait), 2, "{what}");
            // Block 0's q·kᵀ before the loop and the last block's p·v after it.
            assert_eq!(count(&after, Opcode::Dot), 2, "{what}");
            differential(&what, &before, &after, 20);
        }
    }
}

/// In a warp-specialized kernel the pass rotates the consumer's loop (its stage computed from the
/// carried count, its releases the empty-barrier arrivals): exact under 20 seeds for the plans
/// of one consumer and of FA3's two ping-pong consumers, on ragged causal and plain inputs
/// (FA3's causal consumers, which guard their body by their own key range, are left alone).
#[test]
fn rotated_consumer_loops_are_exact_under_20_seeds() {
    let cp = PipelineConfig {
        tma_rings: false,
        ..tma(3)
    };
    let cases: &[&[(&str, &str)]] = &[&[], &[("CAUSAL", "1")], &[("HEAD_DIM", "128")]];
    for defs in cases {
        for plan in [WsPlan::one_consumer(4, None), WsPlan::FA3] {
            let what = format!("attention_fwd {defs:?} warp-specialized ({})", plan.name);
            let before = spec("attention_fwd", defs);
            let piped = pipelining(&before, &cp).expect("pipelining");
            let ws = warp_specialize(&piped, &plan).expect("warp_specialize");
            let (after, n) = dot_overlap(&ws).expect("dot_overlap");
            if plan.consumers > 1 && !defs.is_empty() && defs[0].0 == "CAUSAL" {
                // Each consumer runs the body only inside its own key range (an `if` around
                // it), which the pass does not rotate.
                assert_eq!((n, &after), (0, &ws), "{what}: must be left alone");
                continue;
            }
            assert_eq!(n, 1, "{what}: the consumer's key loop was not rotated");
            kir_ir::verifier::verify(&after).unwrap_or_else(|e| panic!("{what}: {e:?}"));
            assert_eq!(count(&after, Opcode::DotAsync), 2, "{what}");
            assert_eq!(count(&after, Opcode::WarpSpecialize), 1, "{what}");
            differential(&what, &before, &after, 20);
        }
    }
}

#[test]
fn loops_without_a_fresh_stage_dot_are_left_alone() {
    // GEMM's dot accumulates into a carried value; a cp.async ring has no mbarrier wait.
    for (name, c) in [
        ("gemm", tma(3)),
        (
            "attention_fwd",
            PipelineConfig {
                tma_rings: false,
                ..tma(3)
            },
        ),
    ] {
        let piped = pipelining(&spec(name, &[]), &c).expect("pipelining");
        let (after, n) = dot_overlap(&piped).expect("dot_overlap");
        assert_eq!(n, 0, "{name}");
        assert_eq!(after, piped, "{name}");
    }
}

#[test]
fn rotated_rings_lower_with_the_pv_group_under_the_softmax() {
    let Ok(ptxas) = std::env::var("KIR_PTXAS") else {
        panic!("KIR_PTXAS is not set: run ./scripts/test.sh (it installs the pinned ptxas)");
    };
    let src = kir_compiler::internal::oplib::builtin("attention_fwd").expect("op");
    for (d, causal) in [("64", "0"), ("64", "1"), ("128", "0"), ("128", "1")] {
        let what = format!("attention_fwd d{d} causal {causal} --overlap on");
        let defs: Vec<(String, String)> = [
            ("DTYPE", "bf16"),
            ("HEAD_DIM", d),
            ("CAUSAL", causal),
            ("BLOCK_M", "128"),
            ("BLOCK_N", "128"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        let opts = PtxOptions {
            warps: Some(8),
            stages: Some(3),
            overlap: Some(true),
            ..Default::default()
        };
        let sm90a = |opts: &PtxOptions| {
            compile_stage(
                src,
                &defs,
                None,
                Target::Sm90a,
                Emit::Ptx,
                Stage::Output,
                opts,
            )
            .unwrap_or_else(|e| panic!("{what}: {e}"))
        };
        let out = sm90a(&opts);
        let lines: Vec<&str> = out.text.lines().map(str::trim).collect();
        // Inside the key loop the previous block's p·v group is committed and left running
        // while this block's softmax exponentials issue: exactly one commit has `ex2`s before
        // the next `wgmma.wait_group` (every other group is waited for first).
        let commits: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i] == "wgmma.commit_group.sync.aligned;")
            .collect();
        let overlapped = commits
            .iter()
            .filter(|&&i| {
                lines[i + 1..]
                    .iter()
                    .take_while(|l| !l.starts_with("wgmma.wait_group"))
                    .filter(|l| l.starts_with("ex2.approx"))
                    .count()
                    >= 16
            })
            .count();
        assert_eq!(overlapped, 1, "{what}: one wgmma group under the softmax");
        // No branch joins while it runs (ptxas would retire it there: the mask `if` comes
        // before the p·v's issue).
        assert_eq!(
            out.reports[0].joins_in_flight,
            vec![],
            "{what}: an `if` with a wgmma group in flight"
        );
        // Without `--stages`, the compile driver gives the overlapped ring its third stage.
        let auto = sm90a(&PtxOptions {
            stages: None,
            ..opts.clone()
        });
        let depths: Vec<usize> = auto.reports[0].rings.iter().map(|r| r.stages).collect();
        assert_eq!(depths, vec![3, 3], "{what}: ring depths without --stages");
        let dir =
            std::env::temp_dir().join(format!("kir_overlap_{}_{d}_{causal}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let ptx = dir.join("k.ptx");
        std::fs::write(&ptx, &out.text).expect("write");
        let o = Command::new(&ptxas)
            .args(["-arch=sm_90a", "-v", "-o"])
            .arg(dir.join("k.cubin"))
            .arg(&ptx)
            .output()
            .expect("ptxas runs");
        let log = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{what}: ptxas failed:\n{log}");
        assert!(
            log.contains(" 0 bytes spill stores"),
            "{what}: spills:\n{log}"
        );
        assert!(!log.contains("warning"), "{what}: ptxas warns:\n{log}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
