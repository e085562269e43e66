//! The `cluster` pass (compiler/src/passes/schedule/cluster.rs), on the CPU: a persistent,
//! warp-specialized GEMM in clusters of two gives outputs bit-identical to the same kernel
//! without clusters under 20 scheduler seeds, on ragged shapes whose tile count is odd (the last
//! pair's second program recomputes the last tile and stores nothing) and even, with tile orders
//! that pair tiles of one column (GROUP_M, or the persistent grid's own groups of rows) or of
//! one row; the PTX backend lowers it with a
//! cluster launch, multicast copies, remote arrivals and cluster barriers that ptxas accepts
//! (where the pinned ptxas is installed); and it is refused, with the reason, where a kernel
//! does not qualify or the target has no clusters.

use kir_compiler::internal::passes::{
    cluster, persistent, pipelining, warp_specialize_within, PipelineConfig, WsPlan,
};
use kir_ir::Opcode;
use kir_tests::sched_diff::{checked, count, differential, spec};

/// `name` with `defs`, persistent over `programs`, pipelined and warp-specialized with one
/// consumer of `warps` warps (the sm_90a GEMM schedule's shape, on cp.async rings).
fn scheduled(name: &str, defs: &[(&str, &str)], programs: u32, warps: u32) -> kir_ir::Module {
    scheduled_grouped(name, defs, programs, warps, None)
}

/// [`scheduled`] with the persistent grid's tiles walked in groups of `group` rows (the order
/// a kernel with no group constant of its own gets from its row).
fn scheduled_grouped(
    name: &str,
    defs: &[(&str, &str)],
    programs: u32,
    warps: u32,
    group: Option<u32>,
) -> kir_ir::Module {
    let cfg = PipelineConfig {
        smem_budget: 232_448,
        stages: Some(3),
        hold_carried_dots: false,
        tma_rings: false,
    };
    let p = persistent(&spec(name, defs), programs, group).expect("persistent");
    let piped = pipelining(&p, &cfg).expect("pipelining");
    warp_specialize_within(&piped, &WsPlan::one_consumer(warps, None), 232_448).expect("ws")
}

fn attr_count(m: &kir_ir::Module, op: Opcode, key: &str) -> usize {
    m.kernels
        .values()
        .flat_map(|k| k.dfg.ops.values())
        .filter(|o| o.opcode == op && o.attr(key).is_some())
        .count()
}

#[test]
fn clustered_gemm_matches_the_unclustered_kernel_under_20_seeds() {
    // The op's default inputs are ragged (tests/src/inputs.rs); 16×32 tiles give an odd or an
    // even tile count depending on the program count's pairing, and GROUP_M 2 pairs tiles of
    // one column (B shared), GROUP_M 1 of one row (A shared), GROUP_M 3 mixes both.
    for (defs, programs, group) in [
        (
            vec![("BLOCK_M", "16"), ("BLOCK_N", "32"), ("GROUP_M", "2")],
            4,
        ),
        (
            vec![("BLOCK_M", "16"), ("BLOCK_N", "32"), ("GROUP_M", "2")],
            2,
        ),
        (vec![("BLOCK_M", "32"), ("BLOCK_N", "16")], 6),
        (
            vec![("BLOCK_M", "16"), ("BLOCK_N", "16"), ("GROUP_M", "3")],
            4,
        ),
        (
            vec![("EPILOGUE", "bias"), ("BLOCK_M", "16"), ("GROUP_M", "2")],
            2,
        ),
        (vec![("C_IN", "1"), ("BLOCK_M", "16"), ("BLOCK_N", "32")], 4),
    ]
    .into_iter()
    .map(|(d, p)| (d, p, None))
    // The persistent grid's own groups of rows (GROUP_M 1: the kernel orders none itself), of
    // an even and an odd height.
    .chain([
        (vec![("BLOCK_M", "16"), ("BLOCK_N", "16")], 4, Some(2)),
        (vec![("BLOCK_M", "16"), ("BLOCK_N", "32")], 6, Some(3)),
    ]) {
        let what = format!("gemm {defs:?} persistent {programs} groups {group:?}");
        let before = scheduled_grouped("gemm", &defs, programs, 4, group);
        let after = checked(
            cluster(&before, true).unwrap_or_else(|e| panic!("{what}: {e:?}")),
            &what,
        );
        let text = kir_ir::text::print(&after);
        assert!(text.contains("cluster 2 {"), "{what}: no cluster\n{text}");
        // Both ring copies are shareable (their indices are the tile's); every release of a
        // stage reaches both programs.
        assert_eq!(
            attr_count(&after, Opcode::AsyncCopy, "multicast"),
            count(&after, Opcode::AsyncCopy),
            "{what}"
        );
        assert!(
            attr_count(&after, Opcode::MbarArrive, "cluster") > 0,
            "{what}"
        );
        // Every store is masked by the tile's liveness.
        assert_eq!(
            attr_count(&after, Opcode::Store, "mask"),
            count(&after, Opcode::Store),
            "{what}"
        );
        // The grid is even: a cluster's programs launch together.
        let g = after.kernels.values().next().expect("kernel").grid[0].to_string();
        assert!(g.starts_with("min(2 * cdiv("), "{what}: {g}");
        differential(&what, &before, &after, 20);
    }
}

#[test]
fn clustered_attention_matches_the_unclustered_kernel_under_20_seeds() {
    // Non-causal attention: tiles t and t xor 1 are neighbouring query blocks of one head when
    // the head's block count is even, so their key and value blocks are the same copies; else
    // the pair straddles two heads and shares nothing (the predicate is false at run time).
    for (defs, programs) in [
        (vec![("BLOCK_M", "16"), ("BLOCK_N", "16")], 4),
        (vec![("BLOCK_M", "32"), ("BLOCK_N", "16")], 2),
        (
            vec![("BLOCK_M", "16"), ("BLOCK_N", "32"), ("WINDOW", "0")],
            6,
        ),
    ] {
        let what = format!("attention_fwd {defs:?} persistent {programs}");
        let before = scheduled("attention_fwd", &defs, programs, 4);
        let after = checked(
            cluster(&before, true).unwrap_or_else(|e| panic!("{what}: {e:?}")),
            &what,
        );
        assert!(
            attr_count(&after, Opcode::AsyncCopy, "multicast") >= 2,
            "{what}"
        );
        differential(&what, &before, &after, 20);
    }
}

#[test]
fn kernels_that_cannot_share_are_refused_with_the_reason() {
    // Not warp-specialized.
    let plain = persistent(&spec("gemm", &[("BLOCK_M", "16")]), 4, None).expect("persistent");
    let e = format!("{:?}", cluster(&plain, true).expect_err("no partitions"));
    assert!(
        e.contains("cannot run in clusters of 2: it is not warp-specialized"),
        "{e}"
    );
    // An odd persistent grid cannot be split into pairs.
    let odd = scheduled("gemm", &[("BLOCK_M", "16")], 5, 4);
    let e = format!("{:?}", cluster(&odd, true).expect_err("odd grid"));
    assert!(e.contains("persistent grid of 5 programs is odd"), "{e}");
    // Without `strict` such kernels are left as they were.
    let same = cluster(&odd, false).expect("lenient");
    assert_eq!(kir_ir::text::print(&same), kir_ir::text::print(&odd));
    // Causal attention's key loop depends on the tile: the two programs would copy different
    // numbers of key blocks.
    let causal = scheduled("attention_fwd", &[("CAUSAL", "1")], 4, 4);
    let e = format!(
        "{:?}",
        cluster(&causal, true).expect_err("tile-dependent loop")
    );
    assert!(e.contains("depends on the tile"), "{e}");
}

#[test]
fn a_helper_kernel_beside_one_that_qualifies_is_left_alone_and_errors_name_each_kernel() {
    // A program's helper kernel (as stream-K's counter-zeroing kernel) never qualifies: with
    // `strict` the GEMM beside it still forms clusters and the helper stays as it was.
    let helper = kir_ir::text::parse(
        "module h\nkernel @zero_flags(flags: out tensor<i32>[8]) grid [1, 1, 1] {\n  \
         %z = const 0 : tile<8xi32>\n  store flags[0], %z guard\n}\n",
    )
    .expect("parses");
    let mut mixed = scheduled("gemm", &[("BLOCK_M", "16"), ("GROUP_M", "2")], 4, 4);
    let helper_kernel = helper.kernels.into_iter().next().expect("one kernel").1;
    mixed.kernels.push(helper_kernel.clone());
    let after = cluster(&mixed, true).expect("the GEMM qualifies");
    assert!(attr_count(&after, Opcode::AsyncCopy, "multicast") >= 2);
    let (_, z) = after.kernel("zero_flags").expect("the helper is kept");
    assert_eq!(z, &helper_kernel);
    // When none qualifies, the error names every kernel by its name, each with its reason.
    let mut none = persistent(&spec("gemm", &[("BLOCK_M", "16")]), 4, None).expect("persistent");
    let helper = kir_ir::text::parse(
        "module h\nkernel @zero_flags(flags: out tensor<i32>[8]) grid [1, 1, 1] {\n  \
         %z = const 0 : tile<8xi32>\n  store flags[0], %z guard\n}\n",
    )
    .expect("parses");
    none.kernels
        .push(helper.kernels.into_iter().next().expect("one kernel").1);
    let e = cluster(&none, true).expect_err("no kernel qualifies");
    let text = format!("{e:?}");
    assert_eq!(e.0.len(), 2, "{text}");
    assert!(
        text.contains("kernel `@gemm` cannot run in clusters of 2: it is not warp-specialized"),
        "{text}"
    );
    assert!(
        text.contains("kernel `@zero_flags` cannot run in clusters of 2"),
        "{text}"
    );
}

#[test]
fn a_failed_search_keeps_the_warp_specialized_candidate_s_reason() {
    // `--stream-k on --cluster on`: the GEMM row prefers warp specialization, whose stream-K
    // kernel orders its adds with semaphores (no clusters); the one-role fallback then fails as
    // "not warp-specialized". The error keeps both reasons.
    use kir_compiler::{Kernel, Target};
    let e = Kernel::op("gemm")
        .target(Target::Sm90a)
        .shape("a", &[1, 16384, 4096])
        .shape("b", &[1, 4096, 14336])
        .stream_k(true)
        .cluster(true)
        .cache(false)
        .compile()
        .expect_err("no kernel qualifies");
    let text = format!("{e:?}");
    assert!(text.contains("it is not warp-specialized"), "{text}");
    assert!(
        text.contains("the warp-specialized candidate (4 stages) was tried first")
            && text.contains("it orders its adds with semaphores"),
        "{text}"
    );
}

#[test]
fn the_verifier_keeps_cluster_keywords_inside_a_cluster() {
    let src = "module m\nkernel @k(x: in tensor<f32>[64, 64], y: out tensor<f32>[4]) grid [2, 1, 1] {\n  \
               %b = smem_alloc : smem<2x64x64xf32>\n  %m = mbar_alloc : mbar<2>\n  %e = mbar_alloc : mbar<2>\n  \
               warp_specialize producer_warps 1 producer_regs 40 consumers 1 consumer_warps 4 consumer_regs 232 {\n    \
               %z = const 0 : i32\n    %t = cmp eq %z, %z : i1\n    \
               async_copy x[%z, %z], %b, %z bar %m multicast %t\n    yield\n  } consumer(%w) {\n    \
               %z2 = const 0 : i32\n    mbar_arrive %e, %z2 cluster 2\n    yield\n  }\n  yield\n}\n";
    let m = kir_ir::text::parse(src).expect("parses");
    let e = format!(
        "{:?}",
        kir_ir::verifier::verify(&m).expect_err("no cluster")
    );
    assert!(
        e.contains("`multicast` of `async_copy` needs a cluster"),
        "{e}"
    );
    assert!(
        e.contains("`cluster` of `mbar_arrive` needs a cluster"),
        "{e}"
    );
    let ok = src.replace("consumer_regs 232 {", "consumer_regs 232 cluster 2 {");
    let m = kir_ir::text::parse(&ok).expect("parses");
    kir_ir::verifier::verify(&m).unwrap_or_else(|e| panic!("{e:?}"));
    let three = src.replace("consumer_regs 232 {", "consumer_regs 232 cluster 3 {");
    let m = kir_ir::text::parse(&three).expect("parses");
    let e = format!("{:?}", kir_ir::verifier::verify(&m).expect_err("3"));
    assert!(e.contains("must be a power of 2 in [1, 8], found 3"), "{e}");
}

#[test]
fn the_ptx_backend_lowers_a_clustered_gemm_that_ptxas_accepts() {
    use kir_backends::Target;
    use kir_compiler::internal::compiled::Emit;
    use kir_compiler::internal::plan::{CompilePlan, Flags};
    let src = kir_compiler::internal::oplib::builtin("gemm").expect("gemm");
    let defines = kir_tests::defs(&[
        ("BLOCK_M", "128"),
        ("BLOCK_N", "256"),
        ("BLOCK_K", "64"),
        ("GROUP_M", "16"),
    ]);
    let flags = |cluster| Flags {
        warps: Some(8),
        stages: Some(4),
        warp_specialize: Some(true),
        persistent: Some(132),
        cluster,
        ..Flags::default()
    };
    // Warp specialization, which the pass needs, is lowered on sm_90a.
    for target in [Target::Sm90a] {
        let compile = |cluster| {
            let plan = CompilePlan::resolve(src, &defines, target, Emit::Ptx, flags(cluster))
                .unwrap_or_else(|e| panic!("{e}"));
            kir_compiler::internal::pipeline::compile(src, &plan)
                .unwrap_or_else(|e| panic!("{}: {e}", target.name()))
                .text
        };
        let (plain, text) = (compile(None), compile(Some(true)));
        let name = format!("clustered gemm on {}", target.name());
        for want in [
            ".reqnctapercluster 2, 1, 1",
            "%cluster_ctarank;",
            "barrier.cluster.arrive.release;",
            "barrier.cluster.wait.acquire;",
            ".multicast::cluster",
            "mapa.shared::cluster.u32",
            "mbarrier.arrive.shared::cluster.b64",
            "st.global.v4.b32",
        ] {
            assert!(text.contains(want), "{name}: no `{want}`");
        }
        // No release at cluster scope in the mainloop: ptxas makes it a MEMBAR.ALL.GPU.
        assert!(!text.contains(".release.cluster.shared::cluster"), "{name}");
        for absent in [".reqnctapercluster", "multicast", "mapa", "barrier.cluster"] {
            assert!(
                !plain.contains(absent),
                "{name}: `{absent}` without clusters"
            );
        }
        // Two cluster barriers (after the barriers' set-up, before the exit); the 256-column B
        // tile is 4 boxes, 2 issued per CTA with multicast (the 64-column A tile is 1 box, local).
        assert_eq!(
            text.matches("barrier.cluster.wait.acquire;").count(),
            2,
            "{name}"
        );
        assert_eq!(text.matches(".multicast::cluster [").count(), 2, "{name}");
        let log = kir_tests::ptxas::assemble("cluster_gemm", &text, target);
        kir_tests::ptxas::assert_no_spills(&log, &name);
    }
    // A target without clusters refuses the flag, naming it.
    let only = Flags {
        cluster: Some(true),
        ..Flags::default()
    };
    let e = CompilePlan::resolve(src, &defines, Target::Sm80, Emit::Ptx, only)
        .expect_err("sm_80 has no clusters");
    assert!(e.to_string().contains("--cluster on needs clusters"), "{e}");
}

#[test]
fn an_odd_tile_count_gives_the_last_pair_a_spare_tile_that_stores_nothing() {
    use kir_backends::interp::{run_with, HostArg, RunOptions};
    use kir_tests::{sched_diff::bits, t, Rng};
    use std::collections::BTreeMap;
    // 16×32 tiles of a 1 × M × N output with 3 × 3 = 9 tiles (odd), on 4 programs: programs 0
    // and 1 walk tiles {0, 4, 8} and {1, 5, 9 (spare)}; 40 rows and 70 columns are ragged.
    let before = scheduled(
        "gemm",
        &[("BLOCK_M", "16"), ("BLOCK_N", "32"), ("GROUP_M", "3")],
        4,
        4,
    );
    let after = checked(cluster(&before, true).expect("cluster"), "odd");
    let (m, n, k) = (40usize, 70usize, 23usize);
    let mut rng = Rng::fresh("cluster odd tile count");
    let mut rand = |len: usize| (0..len).map(|_| 3.0 * rng.normal()).collect::<Vec<f64>>();
    let args: BTreeMap<String, HostArg> = [
        (
            "a".to_string(),
            t(kir_ir::Dtype::Bf16, &[1, m, k], rand(m * k)),
        ),
        (
            "b".to_string(),
            t(kir_ir::Dtype::Bf16, &[1, k, n], rand(k * n)),
        ),
        ("alpha".to_string(), HostArg::Scalar(1.25)),
    ]
    .into_iter()
    .collect();
    let want = run_with(&before, &args, &RunOptions::default()).expect("before");
    for seed in 0..20 {
        let opts = RunOptions {
            parallel: seed % 2 == 0,
            seed,
        };
        let got = run_with(&after, &args, &opts).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert!(bits(&want) == bits(&got), "seed {seed}: outputs differ");
    }
}

#[test]
fn the_library_takes_the_configuration_s_clusters_and_the_caller_s_choice() {
    use kir_compiler::{Kernel, Target};
    let big = |k: Kernel| {
        k.target(Target::Sm90a)
            .shape("a", &[1, 8192, 4096])
            .shape("b", &[1, 4096, 8192])
            .cache(false)
    };
    // 64 × 32 = 2,048 tiles of 128×256: the row's clusters.
    let by_row = big(Kernel::op("gemm")).compile().expect("compiles");
    assert!(
        by_row.configuration().contains("clusters of 2"),
        "{}",
        by_row.configuration()
    );
    assert!(by_row.code().contains(".reqnctapercluster 2, 1, 1"));
    // The grid the launcher computes is even (a cluster's CTAs launch together): 132 programs
    // here; 10 for an output of 3 × 3 tiles, whose ninth has a spare partner.
    let dims = |m: i64, n: i64| [("Bt", 1i64), ("M", m), ("N", n), ("K", 4096)];
    assert_eq!(
        by_row.meta().grid(&dims(8192, 8192)[..]).expect("grid"),
        [132, 1, 1]
    );
    let small = Kernel::op("gemm")
        .target(Target::Sm90a)
        .define("BLOCK_M", 128)
        .define("BLOCK_N", 256)
        .define("BLOCK_K", 64)
        .warps(8)
        .stages(4)
        .warp_specialize(true)
        .persistent(132)
        .cluster(true)
        .cache(false)
        .compile()
        .expect("compiles");
    assert_eq!(
        small.meta().grid(&dims(300, 700)[..]).expect("grid"),
        [10, 1, 1]
    );
    let off = big(Kernel::op("gemm"))
        .cluster(false)
        .compile()
        .expect("compiles");
    assert!(!off.code().contains(".reqnctapercluster"));
    // Without shapes: the general row, no clusters; asking for them on a kernel that is not
    // warp-specialized is an error naming why.
    let plain = Kernel::op("gemm")
        .target(Target::Sm90a)
        .cache(false)
        .compile()
        .expect("compiles");
    assert!(!plain.code().contains(".reqnctapercluster"));
    let e = Kernel::op("rmsnorm_fwd")
        .target(Target::Sm90a)
        .cluster(true)
        .cache(false)
        .compile()
        .expect_err("no partitions");
    assert!(e.to_string().contains("cannot run in clusters of 2"), "{e}");
}
