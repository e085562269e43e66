//! Per-target default configurations (compiler/src/configs.rs): with no tile flags, a built-in
//! op compiled for sm_90a takes the table's tile constants, warps and ring depth; other targets,
//! the CUDA-C backend and user tile choices keep the op's own defaults, and a user's copy of an
//! op gets the op's row (rows follow the kernel's structure: tests/tests/structure_configs.rs). The chosen configuration shows in the kernel symbol and in META.json.

use kir_backends::ptx::PtxOptions;
use kir_backends::Target;
use kir_compiler::internal::compile::{compile_stage, Emit, Stage};
use kir_compiler::internal::oplib::builtin;
use kir_tests::defs;

/// The kernel symbols and PTX of `src` compiled for `target` with `d` and `opts`.
fn ptx(src: &str, d: &[(&str, &str)], target: Target, opts: PtxOptions) -> (Vec<String>, String) {
    let out = compile_stage(src, &defs(d), None, target, Emit::Ptx, Stage::Output, &opts)
        .unwrap_or_else(|e| panic!("compile failed: {e}"));
    let meta = out.meta.expect("PTX has META.json");
    let syms = meta["kernels"]
        .as_array()
        .expect("kernels")
        .iter()
        .map(|k| k["symbol"].as_str().expect("symbol").to_string())
        .collect();
    (syms, out.text)
}

fn op(name: &str) -> &'static str {
    builtin(name).unwrap_or_else(|| panic!("no built-in op {name}"))
}

#[test]
fn sm90a_attention_defaults_follow_the_table() {
    let src = op("attention_fwd");
    let cases = [
        // d128: warp-specialized, three consumer warpgroups on 192×128.
        (vec![], "BLOCK_M_192_BLOCK_N_128_GROUP_H_1_WARPS_12"),
        // Causal d128: 128×128, a producer warpgroup and two consumer warpgroups.
        (
            vec![("CAUSAL", "1")],
            "BLOCK_M_128_BLOCK_N_128_GROUP_H_1_WARPS_8",
        ),
        // ... but unspecialized with an additive mask (the consumers would spill).
        (
            vec![("CAUSAL", "1"), ("MASK", "1")],
            "BLOCK_M_128_BLOCK_N_128_GROUP_H_1_WARPS_8",
        ),
        // d256: FlashAttention-3's 128×80 tile (unspecialized at an unknown length; causal
        // masking warp-specialized).
        (
            vec![("HEAD_DIM", "256")],
            "BLOCK_M_128_BLOCK_N_80_GROUP_H_1_WARPS_8",
        ),
        (
            vec![("HEAD_DIM", "256"), ("CAUSAL", "1")],
            "BLOCK_M_128_BLOCK_N_80_GROUP_H_1_WARPS_8",
        ),
        // With an additive mask the causal d256 consumers would spill: 128×64 unspecialized.
        (
            vec![("HEAD_DIM", "256"), ("CAUSAL", "1"), ("MASK", "1")],
            "BLOCK_M_128_BLOCK_N_64_GROUP_H_1_WARPS_8",
        ),
        (
            vec![("DTYPE", "f16")],
            "BLOCK_M_192_BLOCK_N_128_GROUP_H_1_WARPS_12",
        ),
        // An additive mask keeps the unspecialized d128 tile (the specialized one spills).
        (
            vec![("MASK", "1")],
            "BLOCK_M_128_BLOCK_N_64_GROUP_H_1_WARPS_8",
        ),
        // d64: 128×128 on two warpgroups, causal too; f32 has no wgmma row.
        (
            vec![("HEAD_DIM", "64")],
            "BLOCK_M_128_BLOCK_N_128_GROUP_H_1_WARPS_8",
        ),
        (
            vec![("HEAD_DIM", "64"), ("CAUSAL", "1")],
            "BLOCK_M_128_BLOCK_N_128_GROUP_H_2_WARPS_8",
        ),
        (vec![("DTYPE", "f32")], "BLOCK_M_64_BLOCK_N_64_GROUP_H_1"),
    ];
    for (d, want) in cases {
        let (syms, text) = ptx(src, &d, Target::Sm90a, PtxOptions::default());
        assert!(
            syms[0].ends_with(want),
            "{d:?}: symbol {} should end with {want}",
            syms[0]
        );
        let causal = d.contains(&("CAUSAL", "1"));
        let masked = d.contains(&("MASK", "1"));
        let d64 = d.contains(&("HEAD_DIM", "64"));
        if want.contains("WARPS_8") && causal && !masked && !d64 {
            // A producer warpgroup beside the two consumer warpgroups.
            assert!(text.contains(".maxntid 384, 1, 1"), "{d:?}: 12 warps");
            assert!(
                text.contains("setmaxnreg.inc"),
                "{d:?}: consumers' registers"
            );
        } else if want.contains("WARPS_8") {
            assert!(text.contains(".maxntid 256, 1, 1"), "{d:?}: 8 warps");
        }
        if want.contains("WARPS_8") {
            assert!(text.contains("wgmma.mma_async"), "{d:?}: wgmma");
            assert!(
                text.contains("bar.arrive 1, 256"),
                "{d:?}: ping-pong barriers"
            );
        }
        if want.contains("WARPS_12") {
            // A producer warpgroup and the 12 consumer warps; every Hopper mechanism present.
            assert!(text.contains(".maxntid 512, 1, 1"), "{d:?}: 16 warps");
            for want in [
                "setmaxnreg.dec.sync.aligned.u32 32;",
                "setmaxnreg.inc.sync.aligned.u32 160;",
                "wgmma.mma_async",
                "cp.async.bulk.tensor",
                "mbarrier.try_wait.parity",
            ] {
                assert!(text.contains(want), "{d:?}: no `{want}`");
            }
        }
    }
}

#[test]
fn sm90a_d256_backward_walks_80_key_dq_blocks_only_without_causal_masking() {
    let src = op("attention_bwd");
    for (causal, want) in [("0", "BLOCK_N_80_"), ("1", "BLOCK_N_64_")] {
        let d = [("HEAD_DIM", "256"), ("CAUSAL", causal)];
        let (syms, _) = ptx(src, &d, Target::Sm90a, PtxOptions::default());
        assert_eq!(syms.len(), 3, "{d:?}: {syms:?}");
        for s in &syms {
            assert!(s.contains(want) && s.contains("BLOCK_KV_64_"), "{d:?}: {s}");
        }
    }
}

#[test]
fn other_targets_and_user_choices_keep_the_op_defaults() {
    let src = op("attention_fwd");
    for t in [Target::Sm80, Target::Sm100a, Target::Sm120a] {
        let (syms, _) = ptx(src, &[], t, PtxOptions::default());
        assert!(
            syms[0].ends_with("BLOCK_M_64_BLOCK_N_64_GROUP_H_1"),
            "{}: {}",
            t.name(),
            syms[0]
        );
    }
    // Any tile constant, --warps or --stages from the user: no row at all.
    let (syms, _) = ptx(
        src,
        &[("BLOCK_N", "32")],
        Target::Sm90a,
        PtxOptions::default(),
    );
    assert!(
        syms[0].ends_with("BLOCK_M_64_BLOCK_N_32_GROUP_H_1"),
        "{}",
        syms[0]
    );
    let warps = PtxOptions {
        warps: Some(4),
        ..Default::default()
    };
    let (syms, _) = ptx(src, &[], Target::Sm90a, warps);
    assert!(
        syms[0].ends_with("BLOCK_M_64_BLOCK_N_64_GROUP_H_1_WARPS_4"),
        "{}",
        syms[0]
    );
    let stages = PtxOptions {
        stages: Some(2),
        ..Default::default()
    };
    let (syms, _) = ptx(src, &[], Target::Sm90a, stages);
    assert!(
        syms[0].ends_with("BLOCK_M_64_BLOCK_N_64_GROUP_H_1_STAGES_2"),
        "{}",
        syms[0]
    );
    // The CUDA-C parity backend keeps the op's tile (it stores tiles in shared memory).
    let cu = compile_stage(
        src,
        &[],
        None,
        Target::Sm90a,
        Emit::Cuda,
        Stage::Output,
        &PtxOptions::default(),
    )
    .expect("cuda");
    let meta = cu.meta.expect("meta");
    let sym = meta["kernels"][0]["symbol"].as_str().expect("symbol");
    assert!(sym.ends_with("BLOCK_M_64_BLOCK_N_64_GROUP_H_1"), "{sym}");
}

#[test]
fn a_user_copy_of_an_op_gets_the_same_row() {
    // Rows follow what a kernel is (compiler/src/structure/), not its source text or names.
    let src = op("attention_fwd").replace("// attention_fwd: flash", "// a user's copy: flash");
    let (syms, _) = ptx(&src, &[], Target::Sm90a, PtxOptions::default());
    assert!(
        syms[0].ends_with("BLOCK_M_192_BLOCK_N_128_GROUP_H_1_WARPS_12"),
        "{}",
        syms[0]
    );
}

#[test]
fn sm90a_gemm_default_is_the_wgmma_tile_with_a_deeper_ring() {
    let src = op("gemm");
    // The default: the 128x256x64 tile, warp-specialized (a producer warpgroup on tensor
    // copies, the 8 warps as its consumer; tests/tests/ptx_ws.rs checks the kernel).
    let (syms, text) = ptx(src, &[], Target::Sm90a, PtxOptions::default());
    assert!(
        syms[0].ends_with("BLOCK_M_128_BLOCK_N_256_BLOCK_K_64_GROUP_M_16_WARPS_8"),
        "{}",
        syms[0]
    );
    for want in [
        "wgmma.mma_async.sync.aligned.m64n256k16",
        "setmaxnreg.inc.sync.aligned.u32 232",
        "cp.async.bulk.tensor",
    ] {
        assert!(text.contains(want), "{want}");
    }
    // `--warp-specialize off`: the same tile on one role, a held cp.async ring.
    let off = PtxOptions {
        warp_specialize: Some(false),
        persistent: None,
        overlap: None,
        ..Default::default()
    };
    let (syms, text) = ptx(src, &[], Target::Sm90a, off);
    assert!(
        syms[0].ends_with("BLOCK_M_128_BLOCK_N_256_BLOCK_K_64_GROUP_M_16_WARPS_8_WS_0"),
        "{}",
        syms[0]
    );
    assert!(text.contains("wgmma.mma_async.sync.aligned.m64n256k16"));
    assert!(!text.contains("setmaxnreg"));
    // A held 4-stage ring (compiler/src/passes/schedule/pipelining/): four unrolled copies of the body,
    // copies two iterations ahead, and each wgmma group left running into the next iteration
    // (`wait_group 1`), the last one retired where the loop ends.
    let ring: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("$L_pfor"))
        .take_while(|l| !l.starts_with("$L_endpfor"))
        .collect();
    let n = |pat: &str| ring.iter().filter(|l| l.contains(pat)).count();
    assert_eq!(n("bar.sync 0"), 4, "one barrier per unrolled iteration");
    assert_eq!(
        n("cp.async.wait_group 1;"),
        4,
        "two copies ahead, one landed"
    );
    assert_eq!(
        n("wgmma.wait_group.sync.aligned 1"),
        4,
        "groups stay in flight"
    );
    assert_eq!(
        n("wgmma.wait_group.sync.aligned 0"),
        0,
        "no full wait in the loop"
    );
    let after: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("$L_endpfor"))
        .collect();
    assert!(
        after
            .get(1)
            .is_some_and(|l| l.contains("wgmma.wait_group.sync.aligned 0")),
        "the loop's exit retires the last group"
    );
    // bias needs more shared memory (its epilogue's layout change): the ring shrinks to fit
    // instead of failing, as an unset --stages does.
    let (syms, _) = ptx(
        src,
        &[("EPILOGUE", "bias")],
        Target::Sm90a,
        PtxOptions::default(),
    );
    assert!(
        syms[0].ends_with("BLOCK_K_64_GROUP_M_16_WARPS_8"),
        "{}",
        syms[0]
    );
    // swiglu (two dots sharing A) takes the two-accumulator row: 128×128 tiles in groups of 8
    // (tests/tests/gemm_variant_rows.rs checks its warp roles and results).
    let (syms, _) = ptx(
        src,
        &[("EPILOGUE", "swiglu")],
        Target::Sm90a,
        PtxOptions::default(),
    );
    assert!(
        syms[0].contains("BLOCK_M_128_BLOCK_N_128_BLOCK_K_64_GROUP_M_8"),
        "{}",
        syms[0]
    );
}

/// A row's `min_blocks` reaches the PTX as `.minnctapersm` on the kernels where the backend's
/// own shared-memory rule states nothing: attention_bwd at 16-bit d64 on sm_100a (the row that
/// keeps ptxas from capping its 4-warp kernels' registers) gets `.minnctapersm 2` on both 4-warp
/// kernels and none on the 16-warp preprocess (two such blocks would cap it at 64 registers),
/// with the same kernel symbols as on sm_80, which has no such row.
#[test]
fn a_rows_min_blocks_reaches_the_ptx() {
    let src = op("attention_bwd");
    let d = [("HEAD_DIM", "64")];
    let directive_after = |text: &str, threads: &str| -> Vec<Option<String>> {
        let lines: Vec<&str> = text.lines().collect();
        lines
            .iter()
            .enumerate()
            .filter(|(_, l)| l.starts_with(&format!(".maxntid {threads},")))
            .map(|(i, _)| {
                lines
                    .get(i + 1)
                    .filter(|n| n.starts_with(".minnctapersm"))
                    .map(|n| n.to_string())
            })
            .collect()
    };
    let (syms, text) = ptx(src, &d, Target::Sm100a, PtxOptions::default());
    let four_warps = directive_after(&text, "128");
    assert_eq!(
        four_warps.len(),
        2,
        "two 4-warp kernels on sm_100a: {syms:?}"
    );
    assert!(
        four_warps
            .iter()
            .all(|x| x.as_deref() == Some(".minnctapersm 2")),
        "sm_100a d64: {four_warps:?}"
    );
    assert_eq!(
        directive_after(&text, "512"),
        vec![None],
        "the preprocess states none"
    );
    let (syms80, _) = ptx(src, &d, Target::Sm80, PtxOptions::default());
    assert_eq!(syms, syms80, "the directive is not in the symbols");
    // A request that would cap registers below 255 (two blocks of 512 threads) is not stated.
    let asked = PtxOptions {
        min_blocks: Some(2),
        ..PtxOptions::default()
    };
    let (_, rms) = ptx(op("rmsnorm_fwd"), &[], Target::Sm80, asked);
    assert!(
        !rms.contains(".minnctapersm 2"),
        "rmsnorm_fwd's wide blocks:\n{rms}"
    );
}
