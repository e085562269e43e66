//! The PTX backend in CI: every op × representative specializations × every target is compiled
//! and assembled with the pinned `ptxas` (13.0); any spill fails; the `ptxas -v` report of the
//! hot kernels and one golden PTX per op per target (sm_80 only for the big kernels, whose other
//! targets tests/tests/ptx_checks.rs checks with check lines) are snapshotted; the 128×64
//! attention tile's first tensor copies come before its query tile's copy. Needs
//! `KIR_PTXAS` (set by scripts/test.sh) and fails loudly without it.

use kir_backends::ptx::PtxOptions;
use kir_backends::Target;
use kir_compiler::internal::compile::{compile, compile_stage, Emit, Stage};
use kir_tests::defs;
use kir_tests::ptxas::{assemble, assert_no_spills, or_over_limit};

/// (op, defines) pairs covering every op and its main switches.
fn cases() -> Vec<(&'static str, Vec<(&'static str, &'static str)>)> {
    vec![
        (
            "attention_fwd",
            vec![("DTYPE", "bf16"), ("HEAD_DIM", "64"), ("CAUSAL", "1")],
        ),
        (
            "attention_fwd",
            vec![("DTYPE", "bf16"), ("HEAD_DIM", "128"), ("CAUSAL", "0")],
        ),
        (
            "attention_fwd",
            vec![
                ("DTYPE", "f16"),
                ("HEAD_DIM", "128"),
                ("CAUSAL", "1"),
                ("BLOCK_M", "128"),
            ],
        ),
        (
            "attention_fwd",
            vec![("DTYPE", "bf16"), ("HEAD_DIM", "256"), ("CAUSAL", "1")],
        ),
        (
            "attention_fwd",
            vec![("DTYPE", "f32"), ("HEAD_DIM", "80"), ("CAUSAL", "0")],
        ),
        // attention_bwd at its defaults (32 keys per dK/dV program), causal and not, and at head
        // dims 64 and 256.
        ("attention_bwd", vec![]),
        ("attention_bwd", vec![("CAUSAL", "1")]),
        ("attention_bwd", vec![("HEAD_DIM", "64")]),
        ("attention_bwd", vec![("HEAD_DIM", "256"), ("CAUSAL", "1")]),
        ("gemm", vec![("DTYPE", "bf16")]),
        (
            "gemm",
            vec![("DTYPE", "f16"), ("TRANS_B", "1"), ("EPILOGUE", "swiglu")],
        ),
        (
            "gemm",
            vec![
                ("DTYPE", "bf16"),
                ("TRANS_A", "1"),
                ("EPILOGUE", "bias"),
                ("BLOCK_M", "128"),
                ("BLOCK_N", "128"),
            ],
        ),
        (
            "gemm",
            vec![("DTYPE", "f32"), ("C_IN", "1"), ("EPILOGUE", "gelu")],
        ),
        (
            "gemm",
            vec![
                ("DTYPE", "f32"),
                ("BF16_COMPUTE", "1"),
                ("EPILOGUE", "relu"),
            ],
        ),
        ("rmsnorm_fwd", vec![("DTYPE", "bf16")]),
        ("rmsnorm_fwd", vec![("DTYPE", "f32"), ("BLOCK", "4096")]),
        ("rmsnorm_bwd", vec![("DTYPE", "bf16")]),
        ("layernorm_fwd", vec![("DTYPE", "f16")]),
        ("layernorm_bwd", vec![("DTYPE", "bf16")]),
        ("swiglu", vec![("DTYPE", "bf16")]),
        ("gemm_nf4", vec![("DTYPE", "bf16")]),
        (
            "gemm_nf4",
            vec![("DTYPE", "f32"), ("TRANSPOSE", "1"), ("GATE_UP", "1")],
        ),
        ("gemm_nf4", vec![("DTYPE", "bf16"), ("GATE_UP", "1")]),
        ("gemm_nf4", vec![("DTYPE", "bf16"), ("TRANSPOSE", "1")]),
    ]
}

#[test]
fn every_op_assembles_for_every_target_without_spills() {
    let mut runs = 0;
    for (op, d) in cases() {
        let src = kir_compiler::internal::oplib::builtin(op).expect("built-in op");
        for target in Target::ALL {
            // Defaults that fit no ring depth have their tiles shrunk until they fit
            // (attention_bwd at head dim 256 on sm_120a's 99 KB): every case compiles.
            let what = format!("{op} {d:?} on {}", target.name());
            let out = compile(src, &defs(&d), None, target, Emit::Ptx)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let (maj, min) = target.min_ptx_version();
            let version = out
                .text
                .lines()
                .find(|l| l.starts_with(".version"))
                .expect(".version line")
                .to_string();
            let v: Vec<u32> = version
                .trim_start_matches(".version ")
                .split('.')
                .filter_map(|x| x.parse().ok())
                .collect();
            assert!(
                v.len() == 2 && (v[0], v[1]) >= (maj, min) && (v[0], v[1]) <= (9, 0),
                "{op}: bad {version}"
            );
            let log = assemble(op, &out.text, target);
            assert_no_spills(&log, &format!("{op} {d:?} on {}", target.name()));
            runs += 1;
        }
    }
    assert!(runs >= 70, "expected the whole matrix to run, ran {runs}");
}

/// attention_fwd in bf16 at d128 on sm_90a with the 128×64 tile (causal `causal`) and `opts`.
fn attention_128x64(causal: &str, opts: &PtxOptions) -> kir_compiler::internal::compiled::Compiled {
    let src = kir_compiler::internal::oplib::builtin("attention_fwd").expect("built-in op");
    let d = defs(&[
        ("DTYPE", "bf16"),
        ("HEAD_DIM", "128"),
        ("CAUSAL", causal),
        ("BLOCK_M", "128"),
        ("BLOCK_N", "64"),
    ]);
    compile_stage(src, &d, None, Target::Sm90a, Emit::Ptx, Stage::Output, opts)
        .unwrap_or_else(|e| panic!("causal {causal}: {e}"))
}

/// The fastest attention tile on the H200 (`--warps 4`, BLOCK_M = 128, BLOCK_N = 64 at d = 128:
/// two 16-row fragments per warp, at the 255-register limit) assembles without spills on
/// sm_90a, causal or not, with every option named in the symbol and the block in META.
#[test]
fn four_warp_attention_tile_does_not_spill_on_sm90a() {
    let opts = PtxOptions {
        warps: Some(4),
        ..Default::default()
    };
    for causal in ["0", "1"] {
        let out = attention_128x64(causal, &opts);
        let meta = out.meta.expect("meta");
        let k = &meta["kernels"][0];
        assert_eq!(k["block"][0], 128, "4 warps");
        assert!(k["symbol"]
            .as_str()
            .is_some_and(|s| s.ends_with("_WARPS_4")));
        let log = assemble("attention_fwd_w4", &out.text, Target::Sm90a);
        assert_no_spills(&log, &format!("causal {causal}"));
    }
}

/// A TMA ring's prologue goes as early as its operands allow (compiler/src/passes/schedule/
/// pipelining/mod.rs): in sm_90a's unspecialized attention_fwd (the S <= 2k row's 128x64 tile on
/// 8 warps, causal or not) the first tensor copies of K and V are issued before the query
/// tile's copy, whose wait and block barrier would otherwise hold them back (call J1 on an
/// H100: 583-585 TFLOP/s against 571 at B 16, S 1k), and before the loop's first wait.
#[test]
fn a_tma_rings_first_copies_go_before_the_query_tiles_load() {
    let opts = PtxOptions {
        warps: Some(8),
        warp_specialize: Some(false),
        ..Default::default()
    };
    for causal in ["0", "1"] {
        let out = attention_128x64(causal, &opts);
        let line = |pat: &str| {
            out.text
                .lines()
                .position(|l| l.contains(pat))
                .unwrap_or_else(|| panic!("causal {causal}: no `{pat}` in the PTX"))
        };
        let tma = line("cp.async.bulk.tensor");
        let q = line("cp.async.cg.shared.global");
        let wait = line("mbarrier.try_wait");
        assert!(
            tma < q && tma < wait,
            "causal {causal}: first tensor copy at line {tma}, the query copy at {q}, the first wait at {wait}"
        );
    }
}

/// A GEMM with K blocks of 64 or more uses wgmma on sm_90a — with B K-major (TRANS_B = 1) or
/// N-major (the plain layout, wgmma's transposed B) — with 128B-swizzled operand tiles, an
/// async-proxy fence and a 1024-byte aligned shared base, and assembles without spills; every
/// other target keeps mma.sync for the same specialization.
#[test]
fn gemm_uses_wgmma_on_sm90a_only() {
    let src = kir_compiler::internal::oplib::builtin("gemm").expect("built-in op");
    for (trans_b, bk) in [("1", "64"), ("1", "128"), ("0", "64"), ("0", "128")] {
        let d = defs(&[
            ("DTYPE", "bf16"),
            ("TRANS_B", trans_b),
            ("BLOCK_M", "128"),
            ("BLOCK_N", "256"),
            ("BLOCK_K", bk),
        ]);
        for target in Target::ALL {
            let what = format!("TRANS_B {trans_b} BLOCK_K {bk} on {}", target.name());
            // The 128x256x128 tile needs more than sm_120a's 99 KB even without a ring.
            let Some(out) = or_over_limit(compile(src, &d, None, target, Emit::Ptx), target, &what)
            else {
                assert!(target == Target::Sm120a && bk == "128", "{what}");
                continue;
            };
            let wgmma = out
                .text
                .contains("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16");
            assert_eq!(wgmma, target == Target::Sm90a, "{what}");
            if wgmma {
                assert!(out.text.contains("fence.proxy.async.shared::cta"), "{what}");
                assert!(
                    out.text
                        .contains(".extern .shared .align 1024 .b8 kir_smem[];"),
                    "{what}"
                );
                // The transposed-B flag is the last immediate of every wgmma.
                let flag = if trans_b == "1" { ", 0, 0;" } else { ", 0, 1;" };
                assert!(
                    out.text
                        .lines()
                        .filter(|l| l.contains("wgmma.mma_async"))
                        .all(|l| l.trim_end().ends_with(flag)),
                    "{what}"
                );
            } else {
                assert!(out.text.contains("mma.sync.aligned.m16n8k16"), "{what}");
            }
            let log = assemble("gemm_wgmma", &out.text, target);
            assert_no_spills(&log, &what);
        }
    }
    // K blocks of 32 do not fill a 128-byte swizzle row: mma.sync on sm_90a too.
    let d = defs(&[
        ("DTYPE", "bf16"),
        ("TRANS_B", "1"),
        ("BLOCK_M", "128"),
        ("BLOCK_N", "128"),
        ("BLOCK_K", "32"),
    ]);
    let out = compile(src, &d, None, Target::Sm90a, Emit::Ptx).expect("compile");
    assert!(!out.text.contains("wgmma") && out.text.contains("mma.sync"));
}

/// Registers, shared memory and spills of the hot kernels on sm_90a (ptxas 13.0.88 is pinned, so
/// the report is stable; a change here is a performance change to review).
#[test]
fn ptxas_report_of_hot_kernels() {
    let hot: &[(&str, &[(&str, &str)])] = &[
        (
            "attention_fwd",
            &[("DTYPE", "bf16"), ("HEAD_DIM", "128"), ("CAUSAL", "1")],
        ),
        // Two blocks per SM need 128 registers or fewer (docs/history/benchmarks-log.md, "Causal d64 at two blocks per SM").
        (
            "attention_fwd",
            &[("DTYPE", "bf16"), ("HEAD_DIM", "64"), ("CAUSAL", "1")],
        ),
        (
            "attention_fwd",
            &[
                ("DTYPE", "bf16"),
                ("HEAD_DIM", "64"),
                ("CAUSAL", "0"),
                ("BLOCK_M", "128"),
            ],
        ),
        ("gemm", &[("DTYPE", "bf16")]),
        ("rmsnorm_fwd", &[("DTYPE", "bf16")]),
        ("rmsnorm_bwd", &[("DTYPE", "bf16")]),
    ];
    let mut report = String::new();
    for (op, d) in hot {
        let src = kir_compiler::internal::oplib::builtin(op).expect("built-in op");
        let out = compile(src, &defs(d), None, Target::Sm90a, Emit::Ptx).expect("compile");
        let log = assemble(op, &out.text, Target::Sm90a);
        report += &format!("== {op} {d:?}\n");
        for line in log
            .lines()
            .filter(|l| l.contains("Used") || l.contains("spill") || l.contains("Compiling entry"))
        {
            report += line.trim_start_matches("ptxas info    : ");
            report.push('\n');
        }
        let meta = out.meta.expect("meta");
        for k in meta["kernels"].as_array().into_iter().flatten() {
            report += &format!("block {} shared_bytes {}\n", k["block"], k["shared_bytes"]);
        }
    }
    insta::assert_snapshot!("ptxas_report_sm_90a", report);
}

/// One golden PTX per op per target (defaults of each op); the big kernels
/// (`kir_tests::filecheck::PTX_CHECKED_OPS`) keep sm_80's only, and tests/tests/ptx_checks.rs
/// checks their other targets with check lines.
#[test]
fn golden_ptx() {
    for (op, src) in kir_compiler::internal::oplib::builtins() {
        for target in Target::ALL {
            if kir_tests::filecheck::PTX_CHECKED_OPS.contains(&op) && target != Target::Sm80 {
                continue;
            }
            let out =
                compile(src, &[], None, target, Emit::Ptx).unwrap_or_else(|e| panic!("{op}: {e}"));
            insta::assert_snapshot!(format!("ptx__{op}__{}", target.name()), out.text);
        }
    }
}
