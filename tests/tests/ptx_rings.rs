//! The scheduling passes' rings on the PTX backend: software pipelining built in the IR lowers
//! to a cp.async ring on every target (the body unrolled per stage, one barrier and one copy
//! group per stage, `--stages N`), a default ring that does not fit shared memory gets
//! shallower, and hand-written scheduled IR lowers or names what it cannot. Needs `KIR_PTXAS`
//! (set by scripts/test.sh) and fails loudly without it.

use kir_backends::ptx::PtxOptions;
use kir_backends::Target;
use kir_compiler::internal::compile::{compile, compile_stage, Emit, Stage};
use kir_tests::defs;
use kir_tests::ptxas::{assemble, assert_no_spills, or_over_limit};

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
                    min_blocks: None,
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
