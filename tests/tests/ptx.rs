//! The PTX backend in CI: every op × representative specializations × every target is compiled
//! and assembled with the pinned `ptxas` (13.0); any spill fails; the `ptxas -v` report of the
//! hot kernels and one golden PTX per op per target (sm_80 only for the big kernels, whose other
//! targets tests/tests/ptx_checks.rs checks with check lines) are snapshotted. Needs
//! `KIR_PTXAS` (set by scripts/test.sh) and fails loudly without it.

use kir_backends::ptx::PtxOptions;
use kir_backends::Target;
use kir_compiler::internal::compile::{compile, compile_stage, Emit, Stage};
use std::process::Command;

/// Assembles `ptx` for `target` with `ptxas -v`; returns the report lines, or panics with the log.
fn assemble(name: &str, ptx: &str, target: Target) -> String {
    let dir = std::env::temp_dir().join(format!("kir-ptx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    // Tests run in parallel threads: every assembly gets its own file names.
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let file = dir.join(format!("{name}.{n}.{}.ptx", target.name()));
    std::fs::write(&file, ptx).expect("write ptx");
    let out = Command::new(kir_tests::pinned_ptxas())
        .arg(format!("-arch={}", target.name()))
        .arg("-v")
        .arg(&file)
        .arg("-o")
        .arg(dir.join(format!("{name}.{n}.{}.cubin", target.name())))
        .output()
        .expect("run ptxas");
    let log =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "ptxas -arch={} failed for {name}:\n{log}",
        target.name()
    );
    assert!(
        !log.contains("warning"),
        "ptxas warned for {name} on {}:\n{log}",
        target.name()
    );
    log
}

/// Every kernel of a `ptxas -v` log reports 0 spill bytes (and the log has spill lines at all, so
/// a change in ptxas's wording cannot make the check pass vacuously).
fn assert_no_spills(log: &str, what: &str) {
    let spills: Vec<&str> = log.lines().filter(|l| l.contains("spill")).collect();
    assert!(
        !spills.is_empty(),
        "{what}: ptxas -v printed no spill line:\n{log}"
    );
    for line in spills {
        assert!(
            line.contains(" 0 bytes spill stores") && line.contains(" 0 bytes spill loads"),
            "{what} spills: {line}"
        );
    }
}

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

/// The compilation, or `None` when it failed because a kernel needs more shared memory than
/// `target` lets a block use (the error must name the target's own limit); any other error
/// fails the test.
fn or_over_limit(
    r: Result<
        kir_compiler::internal::compile::Compiled,
        kir_compiler::internal::compile::CompileError,
    >,
    target: Target,
    what: &str,
) -> Option<kir_compiler::internal::compile::Compiled> {
    match r {
        Ok(c) => Some(c),
        Err(e) => {
            let limit = format!("more than the {} a block may use", target.smem_per_block());
            assert!(e.to_string().contains(&limit), "{what}: {e}");
            None
        }
    }
}

fn defs(d: &[(&str, &str)]) -> Vec<(String, String)> {
    d.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
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

/// The fastest attention tile on the H200 (`--warps 4`, BLOCK_M = 128, BLOCK_N = 64 at d = 128:
/// two 16-row fragments per warp, at the 255-register limit) assembles without spills on
/// sm_90a, causal or not, with every option named in the symbol and the block in META.
#[test]
fn four_warp_attention_tile_does_not_spill_on_sm90a() {
    let src = kir_compiler::internal::oplib::builtin("attention_fwd").expect("built-in op");
    let opts = PtxOptions {
        warps: Some(4),
        ..Default::default()
    };
    for causal in ["0", "1"] {
        let d = defs(&[
            ("DTYPE", "bf16"),
            ("HEAD_DIM", "128"),
            ("CAUSAL", causal),
            ("BLOCK_M", "128"),
            ("BLOCK_N", "64"),
        ]);
        let out = compile_stage(
            src,
            &d,
            None,
            Target::Sm90a,
            Emit::Ptx,
            Stage::Output,
            &opts,
        )
        .expect("compile");
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

/// The lines of the unrolled ring loop (from its `$L_pfor` label to its `$L_endpfor` label).
fn ring_loop(ptx: &str) -> Vec<&str> {
    ptx.lines()
        .skip_while(|l| !l.starts_with("$L_pfor"))
        .take_while(|l| !l.starts_with("$L_endpfor"))
        .collect()
}

/// Software pipelining lives in the IR: the `pipelining` pass builds the ring and the backend
/// lowers it to cp.async on every target, as its own ring used to — the body unrolled once per
/// stage with constant stage offsets, each copy waiting with `cp.async.wait_group S − 2` (the
/// wait hoisted over the refill, which the IR issues first) and passing one `bar.sync` that both
/// publishes the stage and orders the previous iteration's reads before the refill, then one
/// copy group. The default ring has 2 stages (4 for sm_90a's default GEMM configuration);
/// `--stages N` asks for N (1: none).
#[test]
fn pipelined_loops_lower_to_a_cp_async_ring_on_every_target() {
    for (op, d) in [
        ("gemm", vec![("DTYPE", "bf16")]),
        ("attention_fwd", vec![("DTYPE", "bf16"), ("CAUSAL", "1")]),
        (
            "gemm",
            vec![
                ("DTYPE", "bf16"),
                ("TRANS_B", "1"),
                ("BLOCK_M", "128"),
                ("BLOCK_N", "256"),
                ("BLOCK_K", "64"),
            ],
        ),
    ] {
        let src = kir_compiler::internal::oplib::builtin(op).expect("built-in op");
        for target in Target::ALL {
            for stages in [None, Some(1), Some(3), Some(4)] {
                let what = format!("{op} {d:?} on {} with stages {stages:?}", target.name());
                // The unspecialized ring (sm_90a's GEMM default is warp-specialized instead:
                // tests/tests/ptx_ws.rs).
                let opts = PtxOptions {
                    warps: None,
                    stages,
                    warp_specialize: Some(false),
                    persistent: None,
                    overlap: None,
                };
                let out = compile_stage(
                    src,
                    &defs(&d),
                    None,
                    target,
                    Emit::Ptx,
                    Stage::Output,
                    &opts,
                );
                let out = match out {
                    // Deeper rings than sm_80's 163 KB or sm_120a's 99 KB hold (48 KB per stage
                    // of the 128x256x64 GEMM tiles, 32 KB of attention's K and V) name the bytes.
                    Err(e)
                        if stages >= Some(3)
                            && matches!(target, Target::Sm80 | Target::Sm120a)
                            && e.to_string().contains("bytes of shared memory") =>
                    {
                        continue
                    }
                    r => r.unwrap_or_else(|e| panic!("{what}: {e}")),
                };
                // sm_90a's default GEMM configuration (compiler/src/configs.rs) asks for 4.
                let default = if op == "gemm" && d.len() == 1 && target == Target::Sm90a {
                    4
                } else {
                    kir_backends::ptx::PIPELINE_STAGES
                };
                let s = stages.unwrap_or(default);
                let ring = ring_loop(&out.text);
                let count =
                    |lines: &[&str], pat: &str| lines.iter().filter(|l| l.contains(pat)).count();
                let allocs = out
                    .module
                    .kernels
                    .values()
                    .flat_map(|k| k.dfg.ops.values())
                    .filter(|o| o.opcode == kir_ir::Opcode::SmemAlloc)
                    .count();
                if s == 1 {
                    assert!(ring.is_empty() && allocs == 0, "{what}: no ring");
                    continue;
                }
                if stages.is_none() && allocs == 0 {
                    // The default ring did not fit the target: the search went shallower,
                    // because two stages are over the target's shared memory.
                    let two = PtxOptions {
                        stages: Some(2),
                        ..opts
                    };
                    let r =
                        compile_stage(src, &defs(&d), None, target, Emit::Ptx, Stage::Output, &two);
                    assert!(
                        or_over_limit(r, target, &what).is_none(),
                        "{what}: 2 stages fit"
                    );
                    continue;
                }
                assert!(allocs > 0, "{what}: the pass built no ring");
                if out.text.contains("cp.async.bulk.tensor") {
                    // sm_90a's causal attention ring is a TMA ring (its key range a row-prefix
                    // mask, zeroed in shared memory after the copy: backends/src/ptx/tma_rows.rs).
                    assert!(
                        op == "attention_fwd" && target == Target::Sm90a,
                        "{what}: a TMA ring"
                    );
                    assert!(
                        out.text.contains("$L_zrow_"),
                        "{what}: the key range is zeroed"
                    );
                    continue;
                }
                // The block-wide barrier (named barriers 1.. order the ping-pong of two
                // warpgroups, see backends/src/ptx/pingpong.rs).
                assert_eq!(
                    count(&ring, "bar.sync 0"),
                    s,
                    "{what}: one bar.sync 0 per iteration"
                );
                assert_eq!(
                    count(&ring, "cp.async.commit_group"),
                    s,
                    "{what}: one group per iteration"
                );
                // sm_90a holds the stages of a wgmma-shaped GEMM dot one iteration longer when
                // the ring has 3 or more (copies S − 2 ahead, the dot left in flight).
                let held = target == Target::Sm90a
                    && op == "gemm"
                    && s >= 3
                    && (d.len() > 1 || stages.is_none());
                let ahead = s - 1 - usize::from(held);
                assert_eq!(
                    count(&ring, &format!("cp.async.wait_group {};", ahead - 1)),
                    s,
                    "{what}"
                );
                assert_eq!(
                    count(&ring, "wgmma.wait_group.sync.aligned 1"),
                    if held { s } else { 0 },
                    "{what}: wgmma groups in flight"
                );
                assert_eq!(count(&ring, "cp.async.wait_group"), s, "{what}");
                assert!(
                    count(&ring, "cp.async.cg.shared.global") > 0,
                    "{what}: cp.async copies"
                );
                // The S − 1 prologue groups (after the last wait of a tile loaded before them).
                let before: Vec<&str> = out
                    .text
                    .lines()
                    .take_while(|l| !l.starts_with("$L_pfor"))
                    .collect();
                let from = before
                    .iter()
                    .rposition(|l| l.contains("wait_group"))
                    .map_or(0, |i| i + 1);
                assert_eq!(
                    count(&before[from..], "cp.async.commit_group"),
                    ahead,
                    "{what}: prologue"
                );
                if s == 2 || s == 3 {
                    let log = assemble(op, &out.text, target);
                    assert_no_spills(&log, &what);
                }
            }
        }
    }
}

/// A default ring that does not fit the target's shared memory gets shallower, down to plain
/// loops (the 128x256x128 GEMM tiles need 192 KB for 2 stages: sm_90a holds them, sm_80 does
/// not; sm_120a's 99 KB do not hold even the plain loop's 102,400 bytes, an error naming the
/// limit); an explicit depth that does not fit is an error naming the bytes.
#[test]
fn a_default_ring_that_does_not_fit_gets_shallower() {
    let src = kir_compiler::internal::oplib::builtin("gemm").expect("built-in op");
    let d = defs(&[
        ("DTYPE", "bf16"),
        ("BLOCK_M", "128"),
        ("BLOCK_N", "256"),
        ("BLOCK_K", "128"),
    ]);
    for target in Target::ALL {
        let r = compile(src, &d, None, target, Emit::Ptx);
        let Some(out) = or_over_limit(r, target, target.name()) else {
            assert_eq!(target, Target::Sm120a);
            continue;
        };
        let fits = matches!(target, Target::Sm90a | Target::Sm100a);
        assert_eq!(!ring_loop(&out.text).is_empty(), fits, "{}", target.name());
        let opts = PtxOptions {
            stages: Some(2),
            ..Default::default()
        };
        let r = compile_stage(src, &d, None, target, Emit::Ptx, Stage::Output, &opts);
        match r {
            Ok(_) => assert!(fits, "{}", target.name()),
            Err(e) => {
                let msg = e.to_string();
                assert!(
                    !fits && msg.contains("bytes of shared memory"),
                    "{}: {msg}",
                    target.name()
                );
            }
        }
    }
}

/// Scheduled IR written by hand: a single-partition ring whose stage reads feed an elementwise
/// op (read into registers) assembles on every target without spills; the ops the scheduling
/// passes never emit for PTX (mbarriers, warp specialization) and a stage index the backend
/// cannot know at compile time are errors naming the op and the target (mbarriers and
/// warp specialization lower on targets with TMA, tensor copies only into wgmma's layout).
#[test]
fn hand_scheduled_ir_lowers_or_names_what_it_cannot() {
    let ring = include_str!("../in/sched/ring_plain.kir");
    for target in Target::ALL {
        let out = compile(ring, &[], None, target, Emit::Ptx).expect("ring_plain");
        assert_eq!(
            ring_loop(&out.text)
                .iter()
                .filter(|l| l.contains("bar.sync"))
                .count(),
            2
        );
        let log = assemble("ring_plain", &out.text, target);
        assert_no_spills(&log, &format!("ring_plain on {}", target.name()));
        let ws = include_str!("../in/sched/ring_ws.kir");
        let msg = compile(ws, &[], None, target, Emit::Ptx)
            .err()
            .expect("ring_ws")
            .to_string();
        // Targets with TMA lower the mbarriers (tma.rs) and the partitions (ws.rs), and stop at
        // a tensor copy into a stage that wgmma does not read (TMA writes only its layout).
        let first = if target.has_mbarrier_tx() {
            "`async_copy`"
        } else {
            "`mbar_alloc`"
        };
        assert!(msg.contains(first) && msg.contains(target.name()), "{msg}");
    }
    let dynamic = ring.replace(
        "%sn = select %at_end, %zero, %s1 : i32",
        "%sn = rem %s1, %r : i32",
    );
    assert_ne!(dynamic, ring);
    let msg = compile(&dynamic, &[], None, Target::Sm90a, Emit::Ptx)
        .err()
        .expect("dynamic stage")
        .to_string();
    assert!(
        msg.contains("stage index") && msg.contains("sm_90a"),
        "{msg}"
    );
}
