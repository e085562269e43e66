//! The `persistent` pass, differentially on the CPU: every op-library kernel with a loop runs on
//! the interpreter before and after it (a few program counts, fewer and more than the tiles of
//! the ragged random inputs) and must give bit-identical outputs; then the persistent kernels
//! are pipelined and warp-specialized (the ring's count runs on across tiles) and must still
//! match under 20 scheduler seeds, which also checks the copy/barrier protocol across tiles.
//! Also: the verifier refuses register budgets over the block's entry allocation.

use kir_compiler::internal::passes::{
    persistent, pipelining, warp_specialize, warp_specialize_within, PipelineConfig, WsPlan,
};
use kir_ir::Opcode;
use kir_tests::sched_diff::{checked, count, differential, spec};

#[test]
fn persistent_kernels_compute_every_tile_once() {
    let cases: &[(&str, &[(&str, &str)])] = &[
        ("gemm", &[("BLOCK_M", "32"), ("BLOCK_N", "16")]),
        (
            "gemm",
            &[("BLOCK_M", "16"), ("BLOCK_N", "32"), ("GROUP_M", "4")],
        ),
        ("gemm", &[("EPILOGUE", "swiglu"), ("BLOCK_M", "32")]),
        ("attention_fwd", &[("CAUSAL", "1")]),
        ("attention_fwd", &[("CAUSAL", "1"), ("WINDOW", "1")]),
        ("rmsnorm_bwd", &[]),
        ("attention_bwd", &[]),
    ];
    for (name, defs) in cases {
        let before = spec(name, defs);
        for programs in [1, 3, 7] {
            let what = format!("{name} {defs:?} persistent {programs}");
            let after = checked(
                persistent(&before, programs, None).unwrap_or_else(|e| panic!("{what}: {e:?}")),
                &what,
            );
            // Every kernel with a top-level loop walks tiles: its grid is one axis now (a kernel
            // whose loops sit in an `if`, as the norm backward's dx kernels, keeps its grid).
            for (id, k) in after.kernels.iter() {
                let old = &before.kernels[id];
                let top_loop = old.dfg.blocks[old.body]
                    .ops
                    .iter()
                    .any(|&o| old.dfg.ops[o].opcode == Opcode::For);
                if !top_loop {
                    assert_eq!(k.grid, old.grid, "{what}: {}", k.name);
                    continue;
                }
                assert!(
                    k.grid[0].to_string().starts_with("min("),
                    "{what}: {}",
                    k.grid[0]
                );
            }
            differential(&what, &before, &after, 1);
        }
    }
}

/// Tiles walked in groups of rows (`persistent(m, P, Some(group))`, the configuration's group
/// for a kernel with none of its own): still every tile once, bit for bit, with groups that do
/// and do not divide the grid's rows, more and fewer programs than tiles, a user's matmul (a
/// 2-D grid, no group constant), gemm with and without its own groups (a 3-D grid: the batch is
/// walked slice by slice) and a causal attention forward.
#[test]
fn persistent_kernels_in_groups_of_rows_compute_every_tile_once() {
    let user = {
        let path = format!(
            "{}/in/user/matmul_leaky_relu.kir",
            env!("CARGO_MANIFEST_DIR")
        );
        let src = std::fs::read_to_string(&path).expect("read");
        let d = [
            ("BM".to_string(), "16".to_string()),
            ("BN".to_string(), "16".to_string()),
            ("BK".to_string(), "16".to_string()),
        ];
        kir_compiler::internal::pipeline::output(&src, &d).expect("specializes")
    };
    let cases = [
        ("user matmul".to_string(), user),
        (
            "gemm".to_string(),
            spec("gemm", &[("BLOCK_M", "16"), ("BLOCK_N", "16")]),
        ),
        (
            "gemm GROUP_M 4".to_string(),
            spec(
                "gemm",
                &[("BLOCK_M", "16"), ("BLOCK_N", "32"), ("GROUP_M", "4")],
            ),
        ),
        (
            "attention_fwd causal".to_string(),
            spec("attention_fwd", &[("CAUSAL", "1")]),
        ),
    ];
    for (name, before) in &cases {
        for (programs, group) in [(1, 2), (3, 3), (7, 8), (64, 5)] {
            let what = format!("{name} persistent {programs} in groups of {group}");
            let after = checked(
                persistent(before, programs, Some(group))
                    .unwrap_or_else(|e| panic!("{what}: {e:?}")),
                &what,
            );
            assert_ne!(
                kir_ir::text::print(&after),
                kir_ir::text::print(&persistent(before, programs, None).expect("persistent")),
                "{what}: the order is not grouped"
            );
            differential(&what, before, &after, 1);
        }
    }
}

#[test]
fn persistent_warp_specialized_rings_hold_under_20_seeds() {
    let cfg = PipelineConfig {
        smem_budget: 232_448,
        stages: Some(3),
        hold_carried_dots: false,
        tma_rings: false,
    };
    for (name, defs, plan) in [
        (
            "gemm",
            vec![("BLOCK_M", "32"), ("BLOCK_N", "16")],
            WsPlan::GEMM,
        ),
        (
            "gemm",
            vec![("EPILOGUE", "bias"), ("GROUP_M", "2"), ("BLOCK_M", "16")],
            WsPlan::one_consumer(8, None),
        ),
        ("attention_fwd", vec![], WsPlan::GEMM),
        (
            "attention_fwd",
            vec![("CAUSAL", "1")],
            WsPlan::one_consumer(4, None),
        ),
    ] {
        let before = spec(name, &defs);
        // Budget 0: the staged q gets one stage; the sm_90a budget: two.
        for (programs, budget) in [(2, 0), (5, 0), (2, 232_448), (5, 232_448)] {
            let what = format!(
                "{name} {defs:?} persistent {programs} plan {} budget {budget}",
                plan.name
            );
            let p = persistent(&before, programs, None).expect("persistent");
            let piped = pipelining(&p, &cfg).unwrap_or_else(|e| panic!("{what}: {e:?}"));
            let after = checked(
                warp_specialize_within(&piped, &plan, budget)
                    .unwrap_or_else(|e| panic!("{what}: {e:?}")),
                &what,
            );
            assert_eq!(count(&after, Opcode::WarpSpecialize), 1, "{what}");
            assert_eq!(
                count(&after, Opcode::AsyncWait),
                0,
                "{what}: copy groups left"
            );
            if name == "attention_fwd" {
                // The producer fills the query block too, once per tile, on its own barriers
                // (warp_specialize/stage.rs); the consumer only reads the stage.
                let text = kir_ir::text::print(&after);
                assert!(text.contains("async_copy q["), "{what}: q not staged");
                assert!(
                    !text.contains("load q["),
                    "{what}: the consumer still loads q"
                );
            }
            differential(&what, &before, &after, 20);
        }
    }
}

#[test]
fn a_persistent_kernel_takes_one_consumer() {
    let before = spec("attention_fwd", &[]);
    let cfg = PipelineConfig {
        smem_budget: 232_448,
        stages: Some(2),
        hold_carried_dots: false,
        tma_rings: false,
    };
    let piped =
        pipelining(&persistent(&before, 4, None).expect("persistent"), &cfg).expect("piped");
    let e = warp_specialize(&piped, &WsPlan::FA3).expect_err("two consumers");
    let msg = format!("{e:?}");
    assert!(
        msg.contains("persistent kernel takes one consumer"),
        "{msg}"
    );
}

#[test]
fn register_budgets_over_the_entry_allocation_are_refused() {
    // 4 producer warps at 32 + 8 consumer warps at 240: 63,488 + 4,096 = 65,536 registers, but
    // 384 threads start with 168 each (64,512): setmaxnreg.inc would wait forever.
    let src = "module m\nkernel @k(x: out tensor<f32>[4]) grid [1, 1, 1] {\n  \
               warp_specialize producer_warps 4 producer_regs 32 consumers 1 consumer_warps 8 consumer_regs 240 {\n    \
               yield\n  } consumer(%w) {\n    yield\n  }\n  yield\n}\n";
    let m = kir_ir::text::parse(src).expect("parses");
    let e = kir_ir::verifier::verify(&m).expect_err("over the pool");
    let msg = format!("{e:?}");
    assert!(msg.contains("over the 64512"), "{msg}");
    // The backend's plan for 8 consumer warps fits.
    let plan = WsPlan::one_consumer(8, None);
    assert!(
        (4 * plan.producer_regs + 8 * plan.consumer_regs) * 32 <= 64_512,
        "{plan:?}"
    );
}
