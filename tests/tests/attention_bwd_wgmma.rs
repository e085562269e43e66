//! attention_bwd's Hopper path and the register directive: on sm_90a the default dK/dV kernel
//! (key-major: sᵀ = k·qᵀ, dv += pᵀ·do, dpᵀ = v·doᵀ, dk += dsᵀ·q) and the dQ kernel take wgmma
//! for every dot, with the sm_90a attention-backward row, also where q and do each feed two
//! dots (once through a transpose) and where k and v are masked loads (VARLEN); a soft cap keeps
//! the op's tiles; the atomic mode's five dK/dV dots (dqᵀ = kᵀ·dSᵀ the fifth) take wgmma at
//! d64 and d128, and its bulk reductions' reads are waited for before the next writes and at
//! exit, not at the issue; the structure analysis reads the key-major kernel as dK/dV. And
//! `.minnctapersm N` appears on exactly the 4-warp kernels whose shared memory allows at most N
//! blocks of at most 256 threads together, on every op's defaults and every target. At d256
//! every dot takes wgmma too, with the dK/dV accumulators split between programs. And feature
//! specializations assemble with the pinned ptxas on every target, spill-free.

use kir_backends::ptx::report::DotPath;
use kir_backends::Target;
use kir_compiler::internal::compile::{compile, Emit};
use kir_compiler::internal::pipeline;
use kir_compiler::internal::plan::{CompilePlan, Flags};
use kir_tests::defs;

fn bwd_plan(d: &[(&str, &str)], target: Target) -> (CompilePlan, String) {
    let src = kir_compiler::internal::oplib::builtin("attention_bwd").expect("attention_bwd");
    let plan = CompilePlan::resolve(src, &defs(d), target, Emit::Ptx, Flags::default())
        .unwrap_or_else(|e| panic!("attention_bwd {d:?} on {target}: {e}"));
    (plan, src.to_string())
}

/// The dot paths of each kernel of attention_bwd at `d` on sm_90a, by kernel name.
fn dot_paths(d: &[(&str, &str)]) -> (Vec<(String, Vec<DotPath>)>, String) {
    let (plan, src) = bwd_plan(d, Target::Sm90a);
    let report = plan.config_report();
    let out = pipeline::compile(&src, &plan).unwrap_or_else(|e| panic!("{d:?}: {e}"));
    let paths = out
        .reports
        .iter()
        .map(|r| (r.kernel.clone(), r.dots.iter().map(|x| x.path).collect()))
        .collect();
    (paths, report)
}

/// The atomic mode's dK/dV kernel at head dim `d` on sm_90a: its PTX from the entry to its
/// `ret`.
fn atomic_dkdv_ptx(d: &str) -> String {
    let src = kir_compiler::internal::oplib::builtin("attention_bwd").expect("attention_bwd");
    let ptx = compile(
        src,
        &defs(&[("DETERMINISTIC", "0"), ("HEAD_DIM", d)]),
        None,
        Target::Sm90a,
        Emit::Ptx,
    )
    .unwrap_or_else(|e| panic!("d{d}: {e}"))
    .text;
    let at = ptx
        .find(".entry attention_bwd_dkdv")
        .expect("the dK/dV entry");
    let end = ptx[at..].find("\tret;").map(|e| at + e).expect("its ret");
    ptx[at..end].to_string()
}

#[test]
fn every_backward_dot_takes_wgmma_on_sm90a() {
    let cases: [&[(&str, &str)]; 8] = [
        &[],
        // Split dK/dV accumulators (grid z = 2), 256-column k and v copied in column groups.
        &[("HEAD_DIM", "256")],
        &[("HEAD_DIM", "256"), ("CAUSAL", "1"), ("VARLEN", "1")],
        &[("CAUSAL", "1")],
        &[("HEAD_DIM", "64")],
        &[("DTYPE", "f16"), ("HEAD_DIM", "64"), ("CAUSAL", "1")],
        // k and v are masked loads here (keys past the length are never read): wgmma A tiles
        // zero-filled in the core layout.
        &[("VARLEN", "1")],
        &[
            ("CAUSAL", "1"),
            ("KV_OFFSET", "1"),
            ("MASK", "1"),
            ("WINDOW", "1"),
        ],
    ];
    for d in cases {
        let (paths, report) = dot_paths(d);
        assert!(
            report.contains("sm_90a attention-backward row: ")
                && report.contains("BLOCK_M=64 (dK/dV query step)"),
            "{d:?}: {report}"
        );
        let dkdv = paths
            .iter()
            .find(|(k, _)| k == "attention_bwd_dkdv")
            .expect("dkdv");
        let dq = paths
            .iter()
            .find(|(k, _)| k == "attention_bwd_dq")
            .expect("dq");
        assert_eq!(dkdv.1, [DotPath::Wgmma; 4], "{d:?}: {paths:?}");
        assert_eq!(dq.1, [DotPath::Wgmma; 3], "{d:?}: {paths:?}");
    }
}

#[test]
fn the_atomic_modes_five_dots_take_wgmma_on_sm90a() {
    // DETERMINISTIC = 0: the dK/dV kernel's fifth dot is dqᵀ = kᵀ·dSᵀ, kᵀ an M-major A read
    // from the k tile and dSᵀ a register B stored into the core layout; its rows are the head
    // dim, so d64 runs 64 keys on 4 warps and d128 128 keys on 8 warps.
    for (d, kv, warps) in [
        ("64", "BLOCK_KV=64", "warps 4"),
        ("128", "BLOCK_KV=128", "warps 8"),
    ] {
        for extra in [&[][..], &[("CAUSAL", "1")][..], &[("VARLEN", "1")][..]] {
            let mut dd = vec![("DETERMINISTIC", "0"), ("HEAD_DIM", d)];
            dd.extend_from_slice(extra);
            let (paths, report) = dot_paths(&dd);
            assert!(
                report.contains(kv) && report.contains(warps),
                "{dd:?}: {report}"
            );
            let dkdv = paths
                .iter()
                .find(|(k, _)| k == "attention_bwd_dkdv")
                .expect("dkdv");
            assert_eq!(dkdv.1, [DotPath::Wgmma; 5], "{dd:?}: {paths:?}");
        }
    }
    // dqᵀ is added per query block by one bulk reduction where the target has TMA; sm_80 adds
    // it element by element.
    let src = kir_compiler::internal::oplib::builtin("attention_bwd").expect("attention_bwd");
    let bulk = "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32";
    for (target, want) in [(Target::Sm90a, true), (Target::Sm80, false)] {
        let ptx = compile(
            src,
            &defs(&[("DETERMINISTIC", "0")]),
            None,
            target,
            Emit::Ptx,
        )
        .unwrap_or_else(|e| panic!("{target}: {e}"))
        .text;
        assert_eq!(ptx.contains(bulk), want, "{target}");
        assert_eq!(
            ptx.contains("red.global.add.f32"),
            true,
            "{target}: the fallback path"
        );
    }
}

#[test]
fn the_bulk_reductions_read_is_waited_for_late() {
    // The thread that issues dqᵀ's bulk reduction waits for its shared region to be read only
    // before the barrier that precedes the region's next writes, and before the kernel returns
    // (the block's shared memory is released at exit), not right after the issue, where the
    // wait held its warp, and so its warpgroup's next wgmma, for the whole read.
    let issue = "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32";
    let wait = "cp.async.bulk.wait_group.read 0;";
    for d in ["64", "128"] {
        let body = atomic_dkdv_ptx(d);
        let lines: Vec<&str> = body.lines().collect();
        let issues: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].contains(issue))
            .collect();
        assert!(!issues.is_empty(), "d{d}: no bulk reduction");
        for &i in &issues {
            // From the issue to the end of the fast path: the commit, no wait.
            let tail = lines[i..]
                .iter()
                .take_while(|l| !l.contains("bra.uni $L_bulk_add_done"))
                .copied()
                .collect::<Vec<_>>();
            assert!(
                tail.iter()
                    .any(|l| l.contains("cp.async.bulk.commit_group"))
                    && !tail.iter().any(|l| l.contains(wait)),
                "d{d}: the issue at line {i} is waited for at once: {tail:?}"
            );
            // Before the staging writes: the wait, then the barrier, then only the stores'
            // addresses (no wgmma) up to the first store.
            let stores = lines[..i]
                .iter()
                .rposition(|l| l.contains("st.shared.v2.f32"))
                .expect("the staging stores");
            let first_store = lines[..=stores]
                .iter()
                .rposition(|l| !l.contains("st.shared.v2.f32"))
                .expect("the line before the stores");
            let bar = lines[..=first_store]
                .iter()
                .rposition(|l| l.contains("bar.sync"))
                .expect("a barrier before the stores");
            // The barrier may be a pair (one per warpgroup, each under its predicate).
            let bars = lines[..=bar]
                .iter()
                .rposition(|l| !l.contains("bar.sync"))
                .expect("the line before the barriers");
            assert!(
                lines[bars].contains(wait)
                    && !lines[bar..stores]
                        .iter()
                        .any(|l| l.contains("wgmma") || l.contains(issue)),
                "d{d}: {:?}",
                &lines[bars..=first_store]
            );
        }
        // And once after the last issue, before the kernel returns.
        let last = *issues.last().expect("an issue");
        let after_done = lines[last..]
            .iter()
            .position(|l| l.starts_with("$L_bulk_add_done"))
            .map(|p| last + p)
            .expect("the fast path's end");
        assert!(
            lines[after_done..].iter().any(|l| l.contains(wait)),
            "d{d}: no wait for the last bulk reduction before ret"
        );
    }
}

#[test]
fn each_warpgroup_adds_its_own_rows_of_dqt() {
    // With two warpgroups (d128's 8-warp dK/dV kernel) each stages and adds its own 64 rows of
    // dqᵀ between named barriers over its 128 threads, ids above the ping-pong's, and its first
    // thread issues the part's reduction: no block-wide barrier between the staging and the
    // issue. With one warpgroup (d64) the block does it between `bar.sync 0`s.
    let issue = "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32";
    for (d, split) in [("128", true), ("64", false)] {
        let body = atomic_dkdv_ptx(d);
        let lines: Vec<&str> = body.lines().collect();
        let i = lines
            .iter()
            .position(|l| l.contains(issue))
            .expect("a bulk reduction");
        // From the wait before the staging stores to the issue.
        let last_store = lines[..i]
            .iter()
            .rposition(|l| l.contains("st.shared.v2.f32"))
            .expect("the staging stores");
        let wait = lines[..last_store]
            .iter()
            .rposition(|l| l.contains("cp.async.bulk.wait_group.read 0;"))
            .expect("the wait before the staging");
        let window = &lines[wait..i];
        let block_bars = window.iter().filter(|l| l.contains("bar.sync 0;")).count();
        let group_bars = window
            .iter()
            .filter(|l| l.contains("bar.sync 6, 128;") || l.contains("bar.sync 7, 128;"))
            .count();
        // The issuing thread: each warpgroup's first (tid & 127 == 0) or the block's thread 0.
        let lead = lines[wait.saturating_sub(3)..wait]
            .iter()
            .any(|l| l.contains(", 127;"));
        if split {
            assert!(
                block_bars == 0 && group_bars == 4 && lead,
                "d{d}: {block_bars} block barriers, {group_bars} warpgroup barriers, per-warpgroup issuer {lead}: {window:#?}"
            );
            // Each warpgroup adds 64 rows of the padded 72-column f32 rows.
            let part = lines[last_store..i]
                .iter()
                .any(|l| l.contains("mul.lo.s32") && l.ends_with(", 64;"));
            assert!(
                part,
                "d{d}: no 64-row part size: {:#?}",
                &lines[last_store..=i]
            );
        } else {
            assert!(
                block_bars >= 2 && group_bars == 0 && !lead,
                "d{d}: {block_bars} block barriers, {group_bars} warpgroup barriers: {window:#?}"
            );
        }
    }
}

#[test]
fn a_soft_cap_keeps_the_op_tiles_and_a_shared_tile_falls_back_together() {
    // The cap's derivative is one more [keys, queries] tile: the 64-key kernel would spill.
    let (paths, report) = dot_paths(&[("SOFTCAP", "1")]);
    assert!(
        report.contains("no sm_90a attention-backward row matches")
            && report.contains("a soft cap"),
        "{report}"
    );
    // 32 keys on 4 warps: no dK/dV dot has wgmma's 64 rows, and q and do, which the 32-row
    // dots read too, stay in the padded layout for all of them.
    let dkdv = &paths
        .iter()
        .find(|(k, _)| k == "attention_bwd_dkdv")
        .expect("dkdv")
        .1;
    assert_eq!(dkdv, &[DotPath::MmaSync; 4], "{paths:?}");
    // f32 has no wgmma and no row: every dot on mma.sync's f32 fallback, not wgmma.
    let (paths, _) = dot_paths(&[("DTYPE", "f32")]);
    assert!(
        paths
            .iter()
            .all(|(_, p)| p.iter().all(|x| *x != DotPath::Wgmma)),
        "{paths:?}"
    );
}

#[test]
fn the_key_major_kernel_is_the_dkdv_kernel() {
    for target in Target::ALL {
        let (plan, _) = bwd_plan(&[("HEAD_DIM", "64")], target);
        let r = plan.config_report();
        assert!(
            r.contains("dK/dV and dQ loops") && r.contains("head dim 64"),
            "{target}: {r}"
        );
    }
}

/// `.minnctapersm N` is stated exactly when shared memory allows at most N blocks per SM of at
/// most 128 threads and N · threads ≤ 256, with N = ⌊(limit + 1 KB) / (shared + 1 KB)⌋ (not
/// warp-specialized).
#[test]
fn min_blocks_directive_follows_shared_memory() {
    let mut stated = 0;
    for (op, src) in kir_compiler::internal::oplib::builtins() {
        for target in Target::ALL {
            let Ok(out) = compile(src, &[], None, target, Emit::Ptx) else {
                continue;
            };
            let meta = out.meta.expect("meta");
            for k in meta["kernels"].as_array().expect("kernels") {
                let symbol = k["symbol"].as_str().expect("symbol");
                let shared = k["shared_bytes"].as_u64().expect("shared_bytes");
                let threads = k["block"][0].as_u64().expect("block");
                let start = out.text.find(&format!(".entry {symbol}(")).expect("entry");
                let head = &out.text[start..];
                let head = &head[..head.find('{').expect("body")];
                let ws = head.contains(".maxnreg");
                let n = (target.smem_per_block() + 1024) / (shared + 1024);
                let want = (!ws && shared > 0 && n >= 1 && threads <= 128 && n * threads <= 256)
                    .then(|| format!(".minnctapersm {n}\n"));
                match want {
                    Some(line) => {
                        assert!(head.contains(&line), "{op} {symbol} on {target}: {head}");
                        stated += 1;
                    }
                    None => assert!(
                        !head.contains(".minnctapersm"),
                        "{op} {symbol} on {target}: {head}"
                    ),
                }
            }
        }
    }
    // attention_bwd's dK/dV and dQ kernels on every target, attention_fwd on three.
    assert!(stated >= 8, "{stated}");
}

/// Feature specializations of every kind compile for every target and assemble with the pinned
/// ptxas without warnings (`KIR_PTXAS`, set by scripts/test.sh); those marked spill-free report
/// no spills. Since the dK/dV kernel is key-major all of them are, the mask's too (it spilled
/// 20 bytes on sm_90a at head dim 64 before; docs/ops.md), and d256's split accumulators.
#[test]
fn feature_ptx_assembles_on_every_target() {
    let ptxas = std::env::var("KIR_PTXAS").unwrap_or_else(|_| {
        panic!("KIR_PTXAS is not set: run ./scripts/test.sh (it installs the pinned ptxas)")
    });
    let all = [
        ("CAUSAL", "1"),
        ("VARLEN", "1"),
        ("KV_OFFSET", "1"),
        ("MASK", "1"),
        ("WINDOW", "1"),
        ("SOFTCAP", "1"),
    ];
    let specs: [(&[(&str, &str)], bool); 8] = [
        (&[("VARLEN", "1")], true),
        (
            &[("CAUSAL", "1"), ("KV_OFFSET", "1"), ("VARLEN", "1")],
            true,
        ),
        (
            &[("CAUSAL", "1"), ("WINDOW", "1"), ("DETERMINISTIC", "0")],
            true,
        ),
        (&[("SOFTCAP", "1"), ("HEAD_DIM", "64")], true),
        (&all, true),
        (&[("MASK", "1"), ("DTYPE", "f16"), ("HEAD_DIM", "64")], true),
        // d256: split dK/dV accumulators on sm_90a (a mask keeps the op's tiles there).
        (
            &[
                ("HEAD_DIM", "256"),
                ("CAUSAL", "1"),
                ("VARLEN", "1"),
                ("WINDOW", "1"),
            ],
            true,
        ),
        (
            &[("HEAD_DIM", "256"), ("MASK", "1"), ("DTYPE", "f16")],
            true,
        ),
    ];
    let src = kir_compiler::internal::oplib::builtin("attention_bwd").expect("attention_bwd");
    let dir = std::env::temp_dir().join(format!("kir-bwd-features-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut runs = 0;
    for (n, (d, spill_free)) in specs.iter().enumerate() {
        let defs: Vec<(String, String)> = d
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        for target in Target::ALL {
            let what = format!("attention_bwd {d:?} on {}", target.name());
            let out = compile(src, &defs, None, target, Emit::Ptx)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let file = dir.join(format!("bwd{n}.{}.ptx", target.name()));
            std::fs::write(&file, &out.text).expect("write ptx");
            let run = std::process::Command::new(&ptxas)
                .arg(format!("-arch={}", target.name()))
                .arg("-v")
                .arg(&file)
                .arg("-o")
                .arg(file.with_extension("cubin"))
                .output()
                .expect("run ptxas");
            let log = String::from_utf8_lossy(&run.stderr).to_string()
                + &String::from_utf8_lossy(&run.stdout);
            assert!(run.status.success(), "ptxas failed for {what}:\n{log}");
            assert!(!log.contains("warning"), "ptxas warned for {what}:\n{log}");
            let spills: Vec<&str> = log.lines().filter(|l| l.contains("spill")).collect();
            assert!(!spills.is_empty(), "{what}: no spill lines in:\n{log}");
            for line in spills.into_iter().filter(|_| *spill_free) {
                assert!(
                    line.contains(" 0 bytes spill stores") && line.contains(" 0 bytes spill loads"),
                    "{what} spills: {line}"
                );
            }
            runs += 1;
        }
    }
    assert_eq!(runs, specs.len() * Target::ALL.len());
}
