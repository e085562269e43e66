//! Configurations by problem shape (compiler/src/plan.rs `CompilePlan::resolve_for`,
//! compiler/src/configs.rs, docs/configs.md): when the caller knows the shapes of the entry's
//! tensors (`kirc bench --shape`, `kirc run`'s inputs), the runtime dims they bind are features
//! the rows read. A GEMM with few rows (the problem's M, read from the output tensor's rows
//! dim, never from a name) takes the small-M rows on sm_90a (at most 32 rows with its operands
//! swapped, tests/tests/swap_operands.rs); unknown shapes keep the default row, and the
//! scheduled small-M kernels stay correct on the interpreter. Problems whose shapes select one
//! configuration share a plan identity, hence one kir cache entry (`CompilePlan::identity`).

use kir_backends::interp;
use kir_backends::Target;
use kir_compiler::internal::pipeline;
use kir_compiler::internal::plan::CompilePlan;
use kir_ir::Dtype;
use kir_tests::{compare, round, sm90a_plan as plan, t, tolerance, Rng};
use std::collections::BTreeMap;

fn gemm() -> &'static str {
    kir_compiler::internal::oplib::builtin("gemm").expect("gemm")
}

fn shapes(m: usize, n: usize, k: usize) -> Vec<(String, Vec<usize>)> {
    vec![("a".into(), vec![1, m, k]), ("b".into(), vec![1, k, n])]
}

#[test]
fn few_rows_take_the_small_m_rows() {
    for (m, want) in [
        (
            16,
            "BLOCK_M=16 (M tile), BLOCK_N=128 (N tile), BLOCK_K=64 (K tile)",
        ),
        (32, "BLOCK_M=32 (M tile), BLOCK_N=128 (N tile)"),
        (
            33,
            "BLOCK_M=64 (M tile), BLOCK_N=128 (N tile), BLOCK_K=64 (K tile)",
        ),
        (64, "BLOCK_M=64 (M tile), BLOCK_N=128 (N tile)"),
        (65, "BLOCK_M=128 (M tile), BLOCK_N=128 (N tile)"),
        (128, "BLOCK_M=128 (M tile), BLOCK_N=128 (N tile)"),
        (129, "BLOCK_M=128 (M tile), BLOCK_N=256 (N tile)"),
        (8192, "BLOCK_M=128 (M tile), BLOCK_N=256 (N tile)"),
    ] {
        let p = plan(gemm(), &[], &shapes(m, 14336, 4096));
        let r = &p.config.report;
        assert!(r.contains(want), "M = {m}: {want}\n{r}");
        assert!(r.contains(&format!("M = {m}")), "M = {m}: {r}");
        assert!(
            p.dims.contains(&("M".to_string(), m as u64)),
            "{:?}",
            p.dims
        );
    }
    // Unknown shapes: the default row, and no M in the report.
    let p = plan(gemm(), &[], &[]);
    assert!(
        p.config.report.contains("BLOCK_N=256"),
        "{}",
        p.config.report
    );
    assert!(!p.config.report.contains("M = "), "{}", p.config.report);
    assert!(p.dims.is_empty());
}

#[test]
fn one_wave_of_tiles_takes_a_grid_of_one_program_per_tile() {
    // The 128×256 tiles of the output, with the leading (batch) dims: at most the 132 SMs of
    // sm_90a and the grid is one program per tile; more, or unknown shapes, the persistent grid.
    let batched = |bt: usize, m: usize, n: usize, k: usize| -> Vec<(String, Vec<usize>)> {
        vec![("a".into(), vec![bt, m, k]), ("b".into(), vec![bt, k, n])]
    };
    for (bt, m, n, k, persistent) in [
        (1, 2048, 2048, 2048, false),  // 16 × 8 = 128 tiles
        (1, 1024, 4096, 4096, false),  // 8 × 16 = 128
        (1, 1100, 3000, 512, false),   // 9 × 12 = 108: ragged edges count
        (1, 2100, 2100, 512, true),    // 17 × 9 = 153
        (1, 4096, 4096, 4096, true),   // 512
        (2, 2048, 2048, 2048, true),   // 256
        (1, 8192, 8192, 8192, true),   // 2,048
        (1, 16384, 14336, 4096, true), // 7,168, N > 8,192
        (1, 4096, 128256, 4096, true), // 16,032, N > 8,192
    ] {
        let p = plan(gemm(), &[], &batched(bt, m, n, k));
        let r = &p.config.report;
        let tiles = bt * m.div_ceil(128) * n.div_ceil(256);
        let want_persistent = tiles > 132;
        assert_eq!(
            want_persistent, persistent,
            "the case's own count: {tiles} tiles"
        );
        assert_eq!(
            r.contains("persistent"),
            persistent,
            "{bt}×{m}×{n}×{k}: {r}"
        );
        assert!(r.contains("BLOCK_N=256 (N tile)"), "{r}");
        assert!(
            r.contains(&format!("output {bt}×{m}×{n}")),
            "the report names the output's shape: {r}"
        );
        assert_eq!(p.config.persistent, persistent, "{r}");
        // Clusters of two sharing B from 1,024 tiles on where N ≤ 8,192 (8192³ here); not
        // below, not on wider outputs (16384×14336×4096, 4096×128256×4096), nor without shapes.
        let cluster = tiles >= 1024 && n <= 8192;
        assert_eq!(p.config.cluster, cluster, "{r}");
        assert_eq!(r.contains("clusters of 2"), cluster, "{r}");
    }
    let p = plan(gemm(), &[], &[]);
    assert!(!p.config.cluster, "{}", p.config.report);
    assert!(p.config.persistent && p.config.report.contains("persistent"));
    assert!(!p.config.report.contains("output "), "{}", p.config.report);
}

#[test]
fn the_rows_dim_follows_the_declared_shape_not_the_argument_order() {
    // TRANS_A=1 declares a as [Bt, K, M]: M is the last extent of a, and the bound dims say
    // M = 16, which picks the one-warpgroup 64×128 row (the swapped rows need A not transposed).
    let d = vec![("TRANS_A".to_string(), "1".to_string())];
    let s = vec![
        ("a".into(), vec![1, 4096, 16]),
        ("b".into(), vec![1, 4096, 512]),
    ];
    let p = plan(gemm(), &d, &s);
    assert!(p.dims.contains(&("M".to_string(), 16)), "{:?}", p.dims);
    assert!(p.dims.contains(&("K".to_string(), 4096)), "{:?}", p.dims);
    assert!(
        p.config
            .report
            .contains("BLOCK_M=64 (M tile), BLOCK_N=128 (N tile)"),
        "{}",
        p.config.report
    );
    // A user's matmul (tests/in/user/matmul_leaky_relu.kir: c is [M, N]) with few rows.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/in/user/matmul_leaky_relu.kir");
    let src = std::fs::read_to_string(path).expect("user matmul");
    let s = vec![("a".into(), vec![40, 300]), ("b".into(), vec![300, 500])];
    let p = plan(&src, &[], &s);
    assert!(
        p.config.report.contains("BM=64 (M tile), BN=128 (N tile)"),
        "{}",
        p.config.report
    );
    assert!(p.config.report.contains("M = 40"), "{}", p.config.report);
    // A shape naming no param, or of another rank, binds nothing.
    let s = vec![("zz".into(), vec![4, 4]), ("a".into(), vec![16, 4096])];
    assert!(plan(gemm(), &[], &s).dims.is_empty());
}

#[test]
fn the_small_m_kernels_stay_correct() {
    let dt = Dtype::Bf16;
    let mut rng = Rng::fresh("small m gemm");
    for (m, n, k) in [(16, 300, 200), (29, 150, 70), (100, 257, 130)] {
        let p = plan(gemm(), &[], &shapes(m, n, k));
        let out = pipeline::compile(gemm(), &p).expect("compiles");
        assert!(out.text.contains("wgmma.mma_async"), "M = {m}: wgmma");
        let a = rng.tensor(m * k, 3.0, dt);
        let b = rng.tensor(k * n, 3.0, dt);
        let args: BTreeMap<String, interp::HostArg> = [
            ("a".to_string(), t(dt, &[1, m, k], a.clone())),
            ("b".to_string(), t(dt, &[1, k, n], b.clone())),
            ("alpha".to_string(), interp::HostArg::Scalar(1.5)),
        ]
        .into_iter()
        .collect();
        let res = interp::run(&out.module, &args).expect("runs");
        let c = res["c"].data.as_f64().expect("f64");
        let mut want = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k).map(|kk| a[i * k + kk] * b[kk * n + j]).sum();
                want[i * n + j] = round(dt, 1.5 * s);
            }
        }
        compare(&format!("gemm {m}x{n}x{k}"), c, &want, tolerance(dt));
    }
}

#[test]
fn short_sequences_take_the_unspecialized_attention_tile() {
    let src = kir_compiler::internal::oplib::builtin("attention_fwd").expect("attention_fwd");
    let qkv = |s: usize| -> Vec<(String, Vec<usize>)> {
        ["q", "k", "v"]
            .iter()
            .map(|n| (n.to_string(), vec![16, 16, s, 128]))
            .collect()
    };
    for (s, want, ws) in [
        (
            1024,
            "BLOCK_M=128 (query block), BLOCK_N=64 (key block)",
            false,
        ),
        (
            2048,
            "BLOCK_M=128 (query block), BLOCK_N=64 (key block)",
            false,
        ),
        (
            2049,
            "BLOCK_M=192 (query block), BLOCK_N=128 (key block)",
            true,
        ),
        (
            16384,
            "BLOCK_M=192 (query block), BLOCK_N=128 (key block)",
            true,
        ),
    ] {
        let p = plan(src, &[], &qkv(s));
        let r = &p.config.report;
        assert!(r.contains(want), "S = {s}: {want}\n{r}");
        assert!(r.contains(&format!("{s} queries")), "S = {s}: {r}");
        assert_eq!(r.contains("warp-specialized"), ws, "S = {s}: {r}");
        assert!(
            p.dims.contains(&("Sq".to_string(), s as u64)),
            "{:?}",
            p.dims
        );
    }
    // d256 without causal masking: FlashAttention-3's 128×80 tile, warp-specialized up to 4,096
    // queries and unspecialized beyond; d192 takes the same rows.
    for d in [256, 192] {
        let dims = |s: usize| -> Vec<(String, Vec<usize>)> {
            ["q", "k", "v"]
                .iter()
                .map(|n| (n.to_string(), vec![4, 8, s, d]))
                .collect()
        };
        let hd = vec![("HEAD_DIM".to_string(), d.to_string())];
        for (s, ws) in [(1024, true), (4096, true), (4097, false), (16384, false)] {
            let p = plan(src, &hd, &dims(s));
            let r = &p.config.report;
            assert!(
                r.contains("BLOCK_M=128 (query block), BLOCK_N=80 (key block)"),
                "d{d} S = {s}: {r}"
            );
            assert_eq!(r.contains("warp-specialized"), ws, "d{d} S = {s}: {r}");
            assert_eq!(p.config.warp_specialize, ws, "d{d} S = {s}: {r}");
        }
    }
    let d256 = |s: usize| -> Vec<(String, Vec<usize>)> {
        ["q", "k", "v"]
            .iter()
            .map(|n| (n.to_string(), vec![4, 8, s, 256]))
            .collect()
    };
    let hd = vec![("HEAD_DIM".to_string(), "256".to_string())];
    let mut masked = hd.clone();
    masked.push(("MASK".to_string(), "1".to_string()));
    let p = plan(src, &masked, &d256(1024));
    assert!(!p.config.warp_specialize, "{}", p.config.report);
    assert!(
        p.config.report.contains("BLOCK_N=64 (key block)"),
        "{}",
        p.config.report
    );
    // Unknown shapes and causal masks keep their rows.
    let p = plan(src, &[], &[]);
    assert!(
        p.config.report.contains("BLOCK_M=192"),
        "{}",
        p.config.report
    );
    // Causal d128 takes the warp-specialized 128×128 row at every length (1k too), and the
    // unspecialized one with an additive mask.
    let causal = vec![("CAUSAL".to_string(), "1".to_string())];
    let p = plan(src, &causal, &qkv(1024));
    assert!(
        p.config.report.contains("BLOCK_N=128 (key block)"),
        "{}",
        p.config.report
    );
    assert!(p.config.warp_specialize, "{}", p.config.report);
    let mut causal_masked = causal.clone();
    causal_masked.push(("MASK".to_string(), "1".to_string()));
    let p = plan(src, &causal_masked, &qkv(1024));
    assert!(
        p.config.report.contains("BLOCK_N=128 (key block)") && !p.config.warp_specialize,
        "{}",
        p.config.report
    );
}

#[test]
fn long_d128_backwards_take_128_key_dkdv_programs() {
    let src = kir_compiler::internal::oplib::builtin("attention_bwd").expect("attention_bwd");
    let bwd = |b: usize, s: usize, d: usize| -> Vec<(String, Vec<usize>)> {
        ["q", "k", "v", "o", "do"]
            .iter()
            .map(|n| (n.to_string(), vec![b, 16, s, d]))
            .collect()
    };
    let hd = |d: usize, more: &[(&str, &str)]| -> Vec<(String, String)> {
        let mut v = vec![("HEAD_DIM".to_string(), d.to_string())];
        v.extend(more.iter().map(|(k, x)| (k.to_string(), x.to_string())));
        v
    };
    // d128: 128 keys per dK/dV program from 8192 queries on, causal or not; 64 below.
    for (s, causal, kv) in [
        (1024, "0", 64),
        (4096, "0", 64),
        (8191, "0", 64),
        (8192, "0", 128),
        (16384, "0", 128),
        (16384, "1", 128),
    ] {
        let p = plan(src, &hd(128, &[("CAUSAL", causal)]), &bwd(1, s, 128));
        let r = &p.config.report;
        let want = format!("BLOCK_KV={kv} (dK/dV key block)");
        assert!(r.contains(&want), "S = {s} causal {causal}: {want}\n{r}");
        // dQ's own 128-row blocks over 128-key blocks, the dK/dV kernel's 64-query steps.
        assert!(
            r.contains("BLOCK_MQ=128 (query block), BLOCK_N=128 (key block)")
                && r.contains("BLOCK_M=64 (dK/dV query step)"),
            "{r}"
        );
        assert!(r.contains(&format!("{s} queries")), "S = {s}: {r}");
    }
    // Unknown shapes and other head dims keep the 64-key row.
    for (d, more, s) in [
        (128, vec![], None),
        (64, vec![], Some(16384)),
        (256, vec![], Some(16384)),
    ] {
        let shapes = s.map(|s| bwd(1, s, d)).unwrap_or_default();
        let p = plan(src, &hd(d, &more), &shapes);
        let r = &p.config.report;
        assert!(!r.contains("BLOCK_KV=128"), "d{d} {more:?} S {s:?}: {r}");
    }
    // A mask, or a window on the causal bound, takes 128 keys at any length (the 64-key
    // kernel spills with them); a window alone (no causal bound) keeps the 64-key row.
    for (more, s, kv) in [
        (vec![("MASK", "1")], Some(16384), 128),
        (vec![("MASK", "1")], None, 128),
        (vec![("WINDOW", "1"), ("CAUSAL", "1")], Some(1024), 128),
        (vec![("WINDOW", "1")], Some(1024), 64),
    ] {
        let shapes = s.map(|s| bwd(1, s, 128)).unwrap_or_default();
        let p = plan(src, &hd(128, &more), &shapes);
        let r = &p.config.report;
        let want = format!("BLOCK_KV={kv} (dK/dV key block)");
        assert!(r.contains(&want), "{more:?} S {s:?}: {want}\n{r}");
    }
}

#[test]
fn problems_of_one_configuration_share_a_cache_entry_and_others_do_not() {
    use kir_compiler::internal::cache::{self, Cache, Outcome};
    let dir = std::env::temp_dir().join(format!("kir-shape-identity-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let c = Cache::new(&dir);
    let src = gemm();
    let (m4k, m8k, m16) = (
        plan(src, &[], &shapes(4096, 8192, 4096)),
        plan(src, &[], &shapes(8192, 8192, 4096)),
        plan(src, &[], &shapes(16, 8192, 4096)),
    );
    // The plans differ in their dims (and the reports naming them), not in what they compile.
    assert_ne!(m4k.dims, m8k.dims);
    assert_eq!(m4k.identity(), m8k.identity());
    assert_ne!(m16.identity(), m8k.identity());
    let outcome = |p: &CompilePlan| cache::compile(src, p, Some(&c)).expect("compiles");
    let first = outcome(&m4k);
    assert!(
        matches!(first.outcome, Outcome::Stored(_)),
        "{:?}",
        first.outcome
    );
    let second = outcome(&m8k);
    assert!(
        matches!(second.outcome, Outcome::Hit(_)),
        "{:?}",
        second.outcome
    );
    let fresh = pipeline::compile(src, &m8k).expect("compiles");
    assert_eq!(second.compiled.text, fresh.text);
    // The few-rows plan takes its own tile: its own entry, its own code.
    let few = outcome(&m16);
    assert!(
        matches!(few.outcome, Outcome::Stored(_)),
        "{:?}",
        few.outcome
    );
    assert_ne!(few.compiled.text, second.compiled.text);
    assert_eq!(
        few.compiled.text,
        pipeline::compile(src, &m16).expect("compiles").text
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Built-in `op` with `defs`, planned for `shapes` on sm_90a, assembles with the pinned ptxas
/// without a spill or a performance-loss note (`kir_tests::ptxas::assemble`).
fn assembles_cleanly(
    op: &str,
    defs: &[(String, String)],
    shapes: &[(String, Vec<usize>)],
    what: &str,
) {
    let src = kir_compiler::internal::oplib::builtin(op).expect("a built-in op");
    let out =
        pipeline::compile(src, &plan(src, defs, shapes)).unwrap_or_else(|e| panic!("{what}: {e}"));
    let log = kir_tests::ptxas::assemble(op, &out.text, Target::Sm90a);
    kir_tests::ptxas::assert_no_spills(&log, what);
}

/// Every sm_90a GEMM row, reached by its shapes (and the default row without them), with every
/// epilogue, bf16 and f16, assembles with the pinned ptxas without a spill or a serialized
/// wgmma. The bias epilogue on the persistent 128×256 rows spilled 164–216 bytes while its
/// `[N]` vector was reloaded per column beside the accumulator
/// (backends/src/ptx/lower/row_reload.rs; call D3 in docs/benchmarks.md), and `C_IN = 1`
/// spilled up to 904 bytes there (its `[M, N]` tile beside the 128×256 accumulator) until a
/// kernel that loads a tile of the output's shape took its own 128×128 row (calls W1–W4).
#[test]
fn every_gemm_row_and_epilogue_assembles_without_spills() {
    let cases: [(&[(&str, &str)], &str); 15] = [
        (&[], "none"),
        (&[("EPILOGUE", "bias")], "bias"),
        (&[("EPILOGUE", "relu")], "relu"),
        (&[("EPILOGUE", "silu")], "silu"),
        (&[("EPILOGUE", "gelu")], "gelu"),
        (&[("EPILOGUE", "swiglu")], "swiglu"),
        (&[("C_IN", "1")], "c_in"),
        (&[("C_IN", "1"), ("EPILOGUE", "bias")], "c_in bias"),
        (&[("C_IN", "1"), ("EPILOGUE", "relu")], "c_in relu"),
        (&[("C_IN", "1"), ("EPILOGUE", "silu")], "c_in silu"),
        (&[("C_IN", "1"), ("EPILOGUE", "gelu")], "c_in gelu"),
        (&[("TRANS_A", "1")], "trans_a"),
        (&[("TRANS_A", "1"), ("TRANS_B", "1")], "trans_a trans_b"),
        (&[("TRANS_A", "1"), ("C_IN", "1")], "trans_a c_in"),
        (&[("TRANS_A", "1"), ("EPILOGUE", "bias")], "trans_a bias"),
    ];
    let problems: [Option<(usize, usize, usize)>; 7] = [
        None,
        Some((16, 14336, 4096)),
        Some((64, 14336, 4096)),
        Some((128, 14336, 4096)),
        Some((2048, 2048, 2048)),
        Some((4096, 4096, 4096)),
        Some((8192, 14336, 4096)),
    ];
    for dtype in ["bf16", "f16"] {
        for (defs, name) in cases {
            for problem in problems {
                let d: Vec<(String, String)> = [("DTYPE", dtype)]
                    .iter()
                    .chain(defs)
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .collect();
                let s = problem.map_or(vec![], |(m, n, k)| shapes(m, n, k));
                let what = format!("gemm {dtype} {name} at {problem:?}");
                assembles_cleanly("gemm", &d, &s, &what);
            }
        }
    }
}

/// The attention rows that the sequence length picks (the forward's short-sequence tiles, the
/// backward's 128-key dK/dV programs from 8,192 queries), at head dims 64, 128 and 256, causal
/// or not, bf16, assemble with the pinned ptxas without a spill or a serialized wgmma, as the
/// rows without shapes do (tests/tests/attention_spills.rs).
#[test]
fn attention_rows_by_sequence_length_assemble_without_spills() {
    for op in ["attention_fwd", "attention_bwd"] {
        for d in [64usize, 128, 256] {
            for causal in ["0", "1"] {
                for s in [1024usize, 4096, 16384] {
                    let names: &[&str] = if op == "attention_fwd" {
                        &["q", "k", "v"]
                    } else {
                        &["q", "k", "v", "o", "do"]
                    };
                    let shapes: Vec<(String, Vec<usize>)> = names
                        .iter()
                        .map(|n| (n.to_string(), vec![1, 16, s, d]))
                        .collect();
                    let defs = vec![
                        ("HEAD_DIM".to_string(), d.to_string()),
                        ("CAUSAL".to_string(), causal.to_string()),
                    ];
                    let what = format!("{op} d{d} causal {causal} S {s}");
                    assembles_cleanly(op, &defs, &shapes, &what);
                }
            }
        }
    }
}
