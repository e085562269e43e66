//! `warp_specialize` on a kernel whose ring loops sit in an outer loop that carries the
//! consumer's values (compiler/src/passes/schedule/warp_specialize/persist.rs): attention_bwd's
//! dK/dV kernel walks the query heads of its kv head's group, carrying dk and dv, and runs a
//! ring over the query blocks for each. Pipelined and warp-specialized, the module must give
//! the unscheduled module's outputs bit for bit under 20 scheduler seeds (the ring's count runs
//! on across heads, and the epilogue that stores dk and dv follows the consumer's outer loop),
//! in both modes (deterministic, and dQ by atomics), causal or not. `--warp-specialize on`
//! compiles the whole attention_bwd program on sm_90a: each kernel with a dot on its own warps
//! (dK/dV on 8 for 128-key rows, dQ on 4), the delta preprocess (no dot) as it is.

use kir_backends::Target;
use kir_compiler::internal::compile::Emit;
use kir_compiler::internal::passes::{
    pipelining, warp_specialize_each, warp_specialize_within, PipelineConfig, WsPlan,
};
use kir_compiler::internal::pipeline;
use kir_compiler::internal::plan::{CompilePlan, Flags};
use kir_ir::{Module, Opcode};
use kir_tests::sched_diff::{checked, count, differential, spec};

#[test]
fn the_dkdv_kernels_outer_loop_is_warp_specialized_and_exact() {
    let cases: [&[(&str, &str)]; 6] = [
        &[],
        &[("CAUSAL", "1")],
        &[("DETERMINISTIC", "0")],
        &[("CAUSAL", "1"), ("BLOCK_KV", "16"), ("BLOCK_M", "16")],
        // Head dims over 128 with 64-key programs split the accumulators between two programs:
        // the epilogue is an `if` over the program's part.
        &[("HEAD_DIM", "136"), ("BLOCK_KV", "64"), ("BLOCK_M", "16")],
        // The features the d256 row (warp-specialized) takes: ragged lengths, a window, the
        // kv offset, causal.
        &[
            ("HEAD_DIM", "136"),
            ("BLOCK_KV", "64"),
            ("BLOCK_M", "16"),
            ("CAUSAL", "1"),
            ("VARLEN", "1"),
            ("WINDOW", "1"),
            ("KV_OFFSET", "1"),
        ],
    ];
    for defs in cases {
        for stages in [2, 3] {
            let what = format!("attention_bwd {defs:?} stages {stages}");
            let (before, piped) = spec_piped(defs, stages, &what);
            let after = checked(
                warp_specialize_within(&piped, &WsPlan::one_consumer(4, None), 232_448)
                    .unwrap_or_else(|e| panic!("{what}: {e:?}")),
                &what,
            );
            let dkdv = dkdv_of(&after);
            // The kernel body holds warp_specialize and no loop: each partition walks the heads.
            let top: Vec<Opcode> = dkdv.dfg.blocks[dkdv.body]
                .ops
                .iter()
                .map(|&o| dkdv.dfg.ops[o].opcode)
                .collect();
            assert!(top.contains(&Opcode::WarpSpecialize), "{what}: {top:?}");
            assert!(!top.contains(&Opcode::For), "{what}: {top:?}");
            assert!(
                !top.contains(&Opcode::Store),
                "{what}: the epilogue stayed outside"
            );
            assert_eq!(
                count(&after, Opcode::AsyncWait),
                0,
                "{what}: copy groups left"
            );
            differential(&what, &before, &after, 20);
        }
    }
}

/// Two consumers that split grid axis 2 around the outer loop (outer_split.rs): the dK/dV
/// kernel's two programs per key block at head dims above 128 (dk's and dv's accumulators)
/// become two consumers of one block that read every q and do stage once, the key and value
/// blocks filled once by the producer; with and without ping-pong turns, causal and with a
/// window, bit for bit the unscheduled module under 20 scheduler seeds. The grid loses its
/// axis-2 programs, and only the consumer region reads the consumer's role. The forward's `fa3`
/// split of axis 0 (two key blocks a block, their own key and value tiles) is exact too, and
/// refused when causal (each consumer's query range starts at its key block). With key lengths
/// the key and value loads are masked, which no tensor copy makes: the plan is refused (each
/// consumer would stage its own copy) and the next one, a single consumer, applies.
#[test]
fn two_consumers_split_the_dkdv_roles_around_the_outer_loop_exactly() {
    let cases: [&[(&str, &str)]; 3] = [
        &[("HEAD_DIM", "192"), ("BLOCK_KV", "64"), ("BLOCK_M", "16")],
        &[
            ("HEAD_DIM", "192"),
            ("BLOCK_KV", "64"),
            ("BLOCK_M", "16"),
            ("CAUSAL", "1"),
        ],
        &[
            ("HEAD_DIM", "192"),
            ("BLOCK_KV", "64"),
            ("BLOCK_M", "32"),
            ("CAUSAL", "1"),
            ("WINDOW", "1"),
        ],
    ];
    for defs in cases {
        for pingpong in [false, true] {
            let what = format!("attention_bwd {defs:?} pingpong {pingpong}");
            let (before, piped) = spec_piped(defs, 2, &what);
            let roles = WsPlan {
                pingpong,
                ..WsPlan::roles(4, None)
            };
            let plan = |k: &kir_ir::Kernel| {
                if k.name == "attention_bwd_dkdv" {
                    vec![roles.clone()]
                } else {
                    vec![WsPlan::one_consumer(4, None)]
                }
            };
            let after = checked(
                warp_specialize_each(&piped, &plan, 232_448)
                    .unwrap_or_else(|e| panic!("{what}: {e:?}")),
                &what,
            );
            let dkdv = dkdv_of(&after);
            assert_eq!(dkdv.grid[2].to_string(), "cdiv(2, 2)", "{what}");
            let top: Vec<Opcode> = dkdv.dfg.blocks[dkdv.body]
                .ops
                .iter()
                .map(|&o| dkdv.dfg.ops[o].opcode)
                .collect();
            assert!(top.contains(&Opcode::WarpSpecialize), "{what}: {top:?}");
            assert!(
                !top.contains(&Opcode::Load),
                "{what}: a tile load stayed before the partitions: {top:?}"
            );
            // Axes 0 and 1 may stay in the body; axis 2 is the consumer's own.
            let axis2_outside = dkdv.dfg.blocks[dkdv.body].ops.iter().any(|&o| {
                let d = &dkdv.dfg.ops[o];
                d.opcode == Opcode::ProgramId
                    && matches!(&d.lead, Some(kir_ir::Attr::Expr(e)) if e.as_int() == Some(2))
            });
            assert!(!axis2_outside, "{what}: axis 2 read outside the consumers");
            differential(&what, &before, &after, 20);
        }
    }
    // FlashAttention-3's split of grid axis 0 (`fa3`: two ping-pong consumers): around the
    // outer loop the consumers take two key blocks, each with its own key and value tiles,
    // sharing the q and do stages. Causal, their query ranges start at their own key blocks,
    // which around an outer loop is refused (the consumers walk the same loops).
    for causal in ["0", "1"] {
        let defs = [
            ("HEAD_DIM", "64"),
            ("BLOCK_KV", "16"),
            ("BLOCK_M", "16"),
            ("CAUSAL", causal),
        ];
        let what = format!("attention_bwd fa3 causal {causal}");
        let (before, piped) = spec_piped(&defs, 2, &what);
        let plans = |k: &kir_ir::Kernel| {
            if k.name == "attention_bwd_dkdv" {
                vec![WsPlan::FA3]
            } else {
                vec![WsPlan::one_consumer(4, None)]
            }
        };
        let ws = warp_specialize_each(&piped, &plans, 232_448);
        if causal == "1" {
            let err = format!("{:?}", ws.expect_err("causal bounds differ per key block"));
            assert!(
                err.contains("the loop bounds depend on it"),
                "{what}: {err}"
            );
            continue;
        }
        let after = checked(ws.unwrap_or_else(|e| panic!("{what}: {e:?}")), &what);
        differential(&what, &before, &after, 20);
    }
    let defs = [
        ("HEAD_DIM", "192"),
        ("BLOCK_KV", "64"),
        ("BLOCK_M", "16"),
        ("VARLEN", "1"),
    ];
    let (before, piped) = spec_piped(&defs, 2, "varlen");
    let roles = WsPlan::roles(4, None);
    let err = warp_specialize_each(&piped, &|_| vec![roles.clone()], 232_448)
        .expect_err("masked key and value loads refuse two consumers");
    assert!(
        format!("{err:?}").contains("would stage its own copy"),
        "{err:?}"
    );
    let plans = |_: &kir_ir::Kernel| vec![roles.clone(), WsPlan::one_consumer(4, None)];
    let after = checked(
        warp_specialize_each(&piped, &plans, 232_448).expect("one consumer"),
        "varlen",
    );
    let dkdv = dkdv_of(&after);
    assert_eq!(
        dkdv.grid[2].as_int(),
        Some(2),
        "one consumer keeps the grid"
    );
    differential("varlen, one consumer", &before, &after, 4);
}

#[test]
fn warp_specialize_on_compiles_every_attention_backward_kernel_with_its_own_warps() {
    let src = kir_compiler::internal::oplib::builtin("attention_bwd").expect("attention_bwd");
    let shapes = bwd_shapes([1, 16, 16384, 128]);
    for causal in ["0", "1"] {
        let flags = Flags {
            warp_specialize: Some(true),
            ..Flags::default()
        };
        let d = vec![("CAUSAL".to_string(), causal.to_string())];
        let plan = CompilePlan::resolve_for(src, &d, Target::Sm90a, Emit::Ptx, flags, &shapes)
            .expect("a plan");
        // The 128-key row applies (--warp-specialize sets no tile, warps or stages).
        assert!(
            plan.config.report.contains("BLOCK_KV=128"),
            "{}",
            plan.config.report
        );
        let c = pipeline::compile(src, &plan).unwrap_or_else(|e| panic!("causal {causal}: {e}"));
        let warps: Vec<(String, u32)> = c
            .meta
            .as_ref()
            .and_then(|m| m["kernels"].as_array().cloned())
            .expect("META kernels")
            .iter()
            .map(|k| {
                (
                    k["name"].as_str().unwrap_or("").to_string(),
                    k["block"][0].as_u64().unwrap_or(0) as u32 / 32,
                )
            })
            .collect();
        // Producer warpgroup + consumer: dK/dV 4 + 8, dQ 4 + 8 (its 128-row programs); the
        // preprocess keeps its block.
        for (name, want) in [("attention_bwd_dkdv", 12), ("attention_bwd_dq", 12)] {
            let got = warps.iter().find(|(n, _)| n == name).map(|(_, w)| *w);
            assert_eq!(got, Some(want), "causal {causal} {name}: {warps:?}");
        }
        assert_eq!(
            c.text.matches("setmaxnreg.inc").count(),
            2,
            "causal {causal}"
        );
        kir_backends::nvrtc::ptxas(&c.text, "sm_90a").unwrap_or_else(|e| panic!("{e}"));
    }
}

/// attention_bwd at d256 (16-bit, no mask or soft cap) is warp-specialized by default on sm_90a,
/// causal or not (compiler/src/configs/attention_rows.rs: both kernels hold one block per SM
/// for their shared memory, so the producer's warps cost no occupancy): its dK/dV and dQ
/// kernels each get a producer warpgroup, with and without shapes; a mask keeps the op's
/// tiles, unspecialized.
#[test]
fn the_d256_backward_default_is_warp_specialized() {
    let src = kir_compiler::internal::oplib::builtin("attention_bwd").expect("attention_bwd");
    let shapes = bwd_shapes([4, 8, 4096, 256]);
    for (extra, with_shapes, want) in [
        (None, false, 2),
        (None, true, 2),
        (Some(("CAUSAL", "1")), true, 2),
        (Some(("CAUSAL", "1")), false, 2),
        (Some(("DTYPE", "f16")), false, 2),
        (Some(("MASK", "1")), false, 0),
    ] {
        let mut d = vec![("HEAD_DIM".to_string(), "256".to_string())];
        d.extend(extra.map(|(n, v)| (n.to_string(), v.to_string())));
        let shp: &[(String, Vec<usize>)] = if with_shapes { &shapes } else { &[] };
        let plan =
            CompilePlan::resolve_for(src, &d, Target::Sm90a, Emit::Ptx, Flags::default(), shp)
                .expect("a plan");
        let c = pipeline::compile(src, &plan).unwrap_or_else(|e| panic!("{d:?}: {e}"));
        assert_eq!(
            c.text.matches("setmaxnreg.inc").count(),
            want,
            "{d:?}: {}",
            plan.config.report
        );
    }
}

/// The shapes of attention_bwd's `[B, H, S, D]` tensors (q, k, v, o, do) for a plan by shape.
fn bwd_shapes(bhsd: [usize; 4]) -> Vec<(String, Vec<usize>)> {
    ["q", "k", "v", "o", "do"]
        .iter()
        .map(|n| (n.to_string(), bhsd.to_vec()))
        .collect()
}

/// attention_bwd specialized with `defs`, and the same module pipelined into `stages`-deep
/// cp.async rings (the input `warp_specialize` takes).
fn spec_piped(defs: &[(&str, &str)], stages: usize, what: &str) -> (Module, Module) {
    let cfg = PipelineConfig {
        smem_budget: 232_448,
        stages: Some(stages),
        hold_carried_dots: false,
        tma_rings: false,
    };
    let before = spec("attention_bwd", defs);
    let piped = pipelining(&before, &cfg).unwrap_or_else(|e| panic!("{what}: {e:?}"));
    (before, piped)
}

/// The dK/dV kernel of an attention_bwd module.
fn dkdv_of(m: &Module) -> &kir_ir::Kernel {
    m.kernels
        .values()
        .find(|k| k.name == "attention_bwd_dkdv")
        .expect("the dK/dV kernel")
}
