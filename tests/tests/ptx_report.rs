//! The PTX backend's fast-path report (`PtxReport`, returned beside the PTX and printed by
//! `kirc compile --report`): which path every dot took and why a faster one was declined, the
//! warps and where they came from, ring depths, rescale skips, and the ISA needs — checked
//! against the PTX itself, so the report cannot drift from what was emitted. Needs no tools.

use kir_backends::ptx::report::{DotPath, PtxReport, WarpsFrom};
use kir_backends::ptx::PtxOptions;
use kir_backends::{Feature, Target};
use kir_compiler::internal::compile::{compile_stage, Compiled, Emit, Stage};
use kir_tests::defs;

fn build(op: &str, d: &[(&str, &str)], target: Target, opts: &PtxOptions) -> Compiled {
    let src = kir_compiler::internal::oplib::builtin(op).expect("built-in op");
    compile_stage(src, &defs(d), None, target, Emit::Ptx, Stage::Output, opts)
        .unwrap_or_else(|e| panic!("{op} {d:?} on {target}: {e}"))
}

fn only(c: &Compiled) -> &PtxReport {
    assert_eq!(c.reports.len(), 1, "one kernel");
    &c.reports[0]
}

/// The tuned GEMM tile of docs/history/benchmarks-log.md (K-major B, 128×256×64, 8 warps).
const WGMMA_GEMM: &[(&str, &str)] = &[
    ("DTYPE", "bf16"),
    ("TRANS_B", "1"),
    ("BLOCK_M", "128"),
    ("BLOCK_N", "256"),
    ("BLOCK_K", "64"),
];

#[test]
fn gemm_dot_path_per_target() {
    for target in Target::ALL {
        let c = build("gemm", WGMMA_GEMM, target, &PtxOptions::default());
        let r = only(&c);
        assert_eq!(r.target, target);
        assert_eq!(r.dots.len(), 1, "{r}");
        let d = &r.dots[0];
        assert_eq!((d.m, d.n, d.k), (128, 256, 64), "{r}");
        assert_eq!(r.warps, 8);
        assert!(
            matches!(&r.warps_from, WarpsFrom::Policy(p) if p.contains("128-row")),
            "{r}"
        );
        if target == Target::Sm90a {
            assert_eq!(d.path, DotPath::Wgmma, "{r}");
            assert!(d.declined.is_empty(), "{r}");
            assert!(r.features.contains(&Feature::Wgmma), "{r}");
            assert!(r.rings.iter().all(|g| g.swizzled), "{r}");
        } else {
            assert_eq!(d.path, DotPath::MmaSync, "{r}");
            assert_eq!(
                d.declined,
                [format!("wgmma: target {target} has no wgmma")],
                "{r}"
            );
            assert!(r.features.is_empty(), "{r}");
        }
        // Two rings (A and B tiles) of the default depth, one copy of the body per stage;
        // sm_120a's 99 KB do not hold two stages of the tile (48 KB each, plus the epilogue's
        // scratch), so the schedule search keeps the plain loop there.
        if target == Target::Sm120a {
            assert!(r.rings.is_empty(), "{r}");
            assert_eq!(d.emitted, 1, "{r}");
        } else {
            assert_eq!(r.rings.len(), 2, "{r}");
            assert!(r.rings.iter().all(|g| g.stages == 2), "{r}");
            assert_eq!(d.emitted, 2, "{r}");
        }
        assert_eq!(d.acc_regs, 128 * 256 / 256, "{r}");
        assert!(r.render(None).contains(match target {
            Target::Sm90a => "-> wgmma",
            _ => "not wgmma: target",
        }));
    }
}

#[test]
fn declined_reasons_name_the_condition() {
    let none = PtxOptions::default();
    // K blocks of 32 do not fill a 128-byte swizzle row.
    let mut d = WGMMA_GEMM.to_vec();
    d[4] = ("BLOCK_K", "32");
    let c = build("gemm", &d, Target::Sm90a, &none);
    let r = only(&c);
    assert_eq!(r.dots[0].path, DotPath::MmaSync, "{r}");
    assert!(
        r.dots[0].declined[0].contains("K = 32 is not a multiple of 64"),
        "{r}"
    );
    // Four warps: M = 128 is two fragments per warp, not wgmma's one.
    let four = PtxOptions {
        warps: Some(4),
        ..Default::default()
    };
    let c = build("gemm", WGMMA_GEMM, Target::Sm90a, &four);
    let r = only(&c);
    assert_eq!((r.warps, &r.warps_from), (4, &WarpsFrom::Option), "{r}");
    assert!(
        r.dots[0].declined[0].contains("M = 128 is not 16·warps = 64"),
        "{r}"
    );
    // f32 operands: no tensor-core path at all.
    let c = build("gemm", &[("DTYPE", "f32")], Target::Sm90a, &none);
    let r = only(&c);
    let dot = &r.dots[0];
    assert_eq!(dot.path, DotPath::Fma, "{r}");
    assert_eq!(dot.declined.len(), 2, "{r}");
    assert!(
        dot.declined[0].starts_with("wgmma: operands are not both bf16"),
        "{r}"
    );
    assert!(
        dot.declined[1].starts_with("mma.sync: operands are f32"),
        "{r}"
    );
    // Attention on sm_90a: both dots take wgmma (QKᵀ from shared memory, P·V with P from
    // registers); so do all three of attention_bwd's dQ kernel at its default 64-key blocks.
    // With 32-key blocks dQ += dS·K has K = 32, and S = Q·Kᵀ, which reads the same K tile,
    // keeps mma.sync with it, the reason in operand-form terms.
    let c = build("attention_fwd", &[], Target::Sm90a, &none);
    let r = only(&c);
    assert_eq!(r.dots.len(), 2, "{r}");
    assert_eq!(r.dots_on(DotPath::Wgmma).count(), 2, "{r}");
    let dq_paths = |d: &[(&str, &str)]| {
        let c = build("attention_bwd", d, Target::Sm90a, &none);
        let dq = c
            .reports
            .into_iter()
            .find(|r| r.kernel == "attention_bwd_dq")
            .expect("dq");
        let paths: Vec<DotPath> = dq.dots.iter().map(|d| d.path).collect();
        (paths, dq)
    };
    let (paths, dq) = dq_paths(&[]);
    assert_eq!(paths, [DotPath::Wgmma; 3], "{dq}");
    let (paths, dq) = dq_paths(&[("BLOCK_N", "32")]);
    assert_eq!(
        paths,
        [DotPath::MmaSync, DotPath::Wgmma, DotPath::MmaSync],
        "{dq}"
    );
    assert!(
        dq.dots[0].declined[0].contains("operands are not in a form")
            && dq.dots[0].declined[0].contains("every dot that reads a shared operand tile"),
        "{dq}"
    );
    assert!(
        dq.dots[2].declined[0].contains("K = 32 is not a multiple of 64"),
        "{dq}"
    );
}

#[test]
fn warps_rings_and_rescales() {
    let none = PtxOptions::default();
    // Attention: the online softmax's correction is skipped when the maximum did not move; the
    // final normalization is not a loop-carried tile.
    let c = build("attention_fwd", &[], Target::Sm80, &none);
    let r = only(&c);
    assert!(r.rescales.iter().any(|s| s.skipped), "{r}");
    assert!(
        r.rescales
            .iter()
            .filter(|s| !s.skipped)
            .all(|s| s.why_not.is_some_and(|w| w.contains("loop"))),
        "{r}"
    );
    assert!(
        r.rings.iter().all(|g| g.stages == 2) && r.rings.len() == 2,
        "{r}"
    );
    // A deeper ring is reported as built.
    let three = PtxOptions {
        stages: Some(3),
        ..Default::default()
    };
    let c = build("attention_fwd", &[], Target::Sm80, &three);
    let r = only(&c);
    assert!(r.rings.iter().all(|g| g.stages == 3), "{r}");
    assert_eq!(r.dots[0].emitted, 3, "{r}");
    // No dot: the blocked layout's policy, no rings, no tensor-core families.
    let c = build("rmsnorm_fwd", &[("DTYPE", "bf16")], Target::Sm90a, &none);
    let r = only(&c);
    assert!(r.dots.is_empty() && r.rings.is_empty(), "{r}");
    assert!(
        matches!(&r.warps_from, WarpsFrom::Policy(p) if p.starts_with("no dot")),
        "{r}"
    );
    assert!(r.shared_bytes > 0 && r.acc_regs == 0, "{r}");
    // One report per kernel, in META's order.
    let c = build("attention_bwd", &[], Target::Sm90a, &none);
    let meta = c.meta.as_ref().expect("meta");
    let names: Vec<&str> = c.reports.iter().map(|r| r.symbol.as_str()).collect();
    let metas: Vec<&str> = meta["kernels"]
        .as_array()
        .expect("kernels")
        .iter()
        .filter_map(|k| k["symbol"].as_str())
        .collect();
    assert_eq!(names, metas);
}

/// Three warpgroups (`--warps 12`, FlashAttention-3's 192-row d64 tile): each warpgroup owns 64
/// rows, so both attention dots keep wgmma, with and without warp specialization (a producer
/// warpgroup on top: 16 warps in the block).
#[test]
fn three_warpgroups_keep_wgmma() {
    let d = [
        ("DTYPE", "bf16"),
        ("HEAD_DIM", "64"),
        ("BLOCK_M", "192"),
        ("BLOCK_N", "128"),
    ];
    for ws in [false, true] {
        let o = PtxOptions {
            warps: Some(12),
            warp_specialize: Some(ws),
            ..Default::default()
        };
        let c = build("attention_fwd", &d, Target::Sm90a, &o);
        let r = only(&c);
        assert_eq!(r.warps, 12, "{r}");
        assert_eq!(r.dots_on(DotPath::Wgmma).count(), 2, "ws {ws}: {r}");
        let ptx = &c.text;
        let threads = if ws { "512" } else { "384" };
        assert!(ptx.contains(&format!(".maxntid {threads}")), "ws {ws}");
        assert_eq!(ptx.contains("setmaxnreg"), ws);
    }
}

/// The families and version the report gives follow the PTX: every family that appears in the
/// text was stated by the code that emitted it, and `.version` is the highest of the target's
/// minimum and every kernel's need.
#[test]
fn stated_requirements_match_the_ptx() {
    let families: &[(&str, &str)] = &[
        // Copy groups (the tensor copies, `cp.async.bulk.tensor`, are their own family).
        ("cp.async.cg", "cp.async"),
        ("cp.async.ca", "cp.async"),
        ("cp.async.commit_group", "cp.async"),
        ("ldmatrix.", "ldmatrix"),
        ("mma.sync.", "mma.sync.m16n8k16"),
        ("cvt.f32.bf16", "cvt.f32.bf16"),
        ("x2.f32 ", "cvt.rn.bf16|f16x2|bf16x2.f32"),
        ("cvt.rn.bf16.f32", "cvt.rn.bf16|f16x2|bf16x2.f32"),
        (".NaN.", "max|min.NaN"),
        ("tanh.approx", "tanh.approx"),
        ("vote.sync", "vote.sync"),
        ("shfl.sync", "shfl.sync"),
        ("red.global.add.noftz.bf16", "red.add.noftz.bf16"),
        ("fence.proxy.async", "fence.proxy.async"),
        ("wgmma.", "wgmma"),
    ];
    let cases: &[(&str, &[(&str, &str)])] = &[
        ("attention_fwd", &[]),
        ("attention_fwd", &[("DTYPE", "f16"), ("SOFTCAP", "1")]),
        ("attention_bwd", &[]),
        ("gemm", WGMMA_GEMM),
        ("gemm", &[("DTYPE", "f32"), ("EPILOGUE", "gelu")]),
        ("layernorm_bwd", &[("DTYPE", "bf16")]),
        ("rmsnorm_bwd", &[("DTYPE", "bf16")]),
        ("swiglu", &[("DTYPE", "bf16")]),
        ("gemm_nf4", &[("DTYPE", "bf16")]),
    ];
    for (op, d) in cases {
        for target in Target::ALL {
            let c = build(op, d, target, &PtxOptions::default());
            let stated: Vec<&str> = c.reports.iter().flat_map(|r| r.families.clone()).collect();
            for (needle, family) in families {
                if c.text.contains(needle) {
                    assert!(
                        stated.contains(family),
                        "{op} {d:?} on {target}: `{needle}` emitted but {family} not stated"
                    );
                }
            }
            let need = c
                .reports
                .iter()
                .map(|r| r.ptx_version)
                .fold(target.min_ptx_version(), |a, b| a.max(b));
            let line = format!(".version {}.{}\n", need.0, need.1);
            assert!(c.text.contains(&line), "{op} {d:?} on {target}: {line}");
        }
    }
}

/// META.json lists each kernel's launch requirements, specialized (constant parts folded), so a
/// launcher other than kir's can refuse what the interpreter refuses: attention_fwd's GQA ratio
/// and its positive scale; a kernel without requirements lists none.
#[test]
fn meta_lists_each_kernels_requirements() {
    let none = PtxOptions::default();
    let c = build("attention_fwd", &[("DTYPE", "bf16")], Target::Sm90a, &none);
    let meta = c.meta.as_ref().expect("meta");
    let req: Vec<&str> = meta["kernels"][0]["requires"]
        .as_array()
        .expect("requires")
        .iter()
        .filter_map(|r| r.as_str())
        .collect();
    assert_eq!(req, ["Hq % Hkv == 0", "scale > 0.0"], "{meta}");
    assert!(meta["requires_grammar"].as_str().is_some());
    let c = build("rmsnorm_fwd", &[("DTYPE", "bf16")], Target::Sm90a, &none);
    let meta = c.meta.as_ref().expect("meta");
    assert_eq!(meta["kernels"][0]["requires"], serde_json::json!([]));
}
