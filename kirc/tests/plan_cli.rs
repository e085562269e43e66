//! The compile plan through `kirc`: every command validates the lowering flags the same way
//! (one `CompilePlan`), and `kirc run --target T --dump-after PASS` shows exactly the module
//! that `kirc compile --dump-after PASS` shows and PTX lowers.

mod common;
use common::{kirc, s, scratch, stderr, stdout};

/// Random rmsnorm_fwd inputs (`x`: 5×40, `w`: 40) in `dir`.
fn rms_inputs(dir: &std::path::Path) -> (String, String) {
    let x = dir.join("x.npy");
    let w = dir.join("w.npy");
    let seed = format!("{}", std::process::id());
    for (p, shape) in [(&x, "5x40"), (&w, "40")] {
        let o = kirc(&["randn", shape, "-o", s(p), "--seed", &seed, "--scale", "3"]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    (format!("x={}", s(&x)), format!("w={}", s(&w)))
}

#[test]
fn run_and_compile_dump_the_same_scheduled_module() {
    for (op, pass, defs) in [
        ("attention_fwd", "pipelining", &[][..]),
        ("attention_fwd", "warp_specialize", &[][..]),
        ("attention_fwd", "pipelining", &["-D", "CAUSAL=1"][..]),
        ("gemm", "persistent", &[][..]),
        ("gemm", "warp_specialize", &[][..]),
        ("gemm", "pipelining", &["-D", "EPILOGUE=swiglu"][..]),
    ] {
        let mut run = vec!["run", op, "--target", "sm_90a", "--dump-after", pass];
        run.extend_from_slice(defs);
        let mut compile = vec!["compile", op, "--target", "sm_90a", "--dump-after", pass];
        compile.extend_from_slice(defs);
        let (r, c) = (kirc(&run), kirc(&compile));
        assert!(r.status.success(), "{op} {pass}: {}", stderr(&r));
        assert!(c.status.success(), "{op} {pass}: {}", stderr(&c));
        let (r, c) = (stdout(&r), stdout(&c));
        assert!(r.contains("kernel @"), "{op} {pass}: {r}");
        assert_eq!(r, c, "{op} {pass}: run and compile dump different modules");
    }
    // The configuration's choices show: d128 attention and GEMM are warp-specialized on sm_90a.
    let o = stdout(&kirc(&[
        "run",
        "gemm",
        "--target",
        "sm_90a",
        "--dump-after",
        "warp_specialize",
    ]));
    assert!(o.contains("warp_specialize"), "{o}");
}

#[test]
fn a_pass_that_did_not_run_is_an_error_not_an_empty_dump() {
    // rmsnorm_fwd has no dot loop: nothing is warp-specialized.
    let o = kirc(&[
        "compile",
        "rmsnorm_fwd",
        "--target",
        "sm_90a",
        "--dump-after",
        "warp_specialize",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("does not run"), "{}", stderr(&o));
}

#[test]
fn flags_are_validated_alike_by_run_and_compile() {
    let dir = scratch("plan", "flags");
    let (x, w) = rms_inputs(&dir);
    let out = dir.join("out");
    let run = |extra: &[&str]| {
        let mut a = vec![
            "run",
            "rmsnorm_fwd",
            "--arg",
            &x,
            "--arg",
            &w,
            "--arg",
            "eps=1e-5",
            "--out",
            s(&out),
        ];
        a.extend_from_slice(extra);
        kirc(&a)
    };
    // Out of range: an error from run as from compile, naming the flag.
    for bad in [&["--warps", "3"][..], &["--stages", "1000"][..]] {
        let mut with_target = bad.to_vec();
        with_target.extend_from_slice(&["--target", "sm_90a"]);
        for o in [run(&with_target), {
            let mut c = vec!["compile", "rmsnorm_fwd", "-o", "-"];
            c.extend_from_slice(bad);
            kirc(&c)
        }] {
            assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
            assert!(stderr(&o).contains(bad[0]), "{bad:?}: {}", stderr(&o));
        }
    }
    // Lowering flags on the interpreter without a target schedule nothing: an error.
    let o = run(&["--warps", "4", "--stages", "3"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--target"), "{}", stderr(&o));
    // `--stages 1` means no ring, on the interpreter as in compile.
    let o = run(&["--target", "sm_90a", "--stages", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(out.join("y.npy").exists());
    // --warp-specialize on where nothing qualifies names why, on both.
    let o = kirc(&[
        "compile",
        "rmsnorm_fwd",
        "--warp-specialize",
        "on",
        "-o",
        "-",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no pipelined loop"), "{}", stderr(&o));
    assert!(stdout(&o).is_empty());
    let o = run(&["--target", "sm_90a", "--warp-specialize", "on"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no pipelined loop"), "{}", stderr(&o));
    // --warp-specialize on where the kernels' dots take mma.sync (a soft cap leaves
    // attention_bwd's sm_90a row, so its op tiles of 32 rows): an error at the copy naming why,
    // not the backend's words about a copy it cannot lower.
    let o = kirc(&[
        "compile",
        "attention_bwd",
        "-D",
        "SOFTCAP=1",
        "--warp-specialize",
        "on",
        "-o",
        "-",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(": error: warp specialization copies this tile")
            && err.contains("attention_bwd.kir:")
            && err.contains("take mma.sync")
            && !err.contains("does not lower"),
        "{err}"
    );
    assert!(stdout(&o).is_empty());
    // --overlap on where the target has no wgmma and TMA: an error, not another stage count.
    for t in ["sm_80", "sm_100a", "sm_120a"] {
        let o = kirc(&[
            "compile",
            "attention_fwd",
            "--target",
            t,
            "--overlap",
            "on",
            "-o",
            "-",
        ]);
        assert_eq!(o.status.code(), Some(2), "{t}: {}", stderr(&o));
        assert!(stderr(&o).contains("--overlap on"), "{t}: {}", stderr(&o));
    }
    // Lowering flags with --emit cuda: an error naming the flag.
    for flag in [&["--warp-specialize", "on"][..], &["--persistent", "8"][..]] {
        let mut c = vec!["compile", "gemm", "--emit", "cuda", "-o", "-"];
        c.extend_from_slice(flag);
        let o = kirc(&c);
        assert_eq!(o.status.code(), Some(2), "{flag:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(flag[0]), "{flag:?}: {}", stderr(&o));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fusion_flags_choose_the_program_on_compile_and_run() {
    let prog = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/in/fusion/gate_up_swiglu.kir"
    );
    // --no-fuse: the fusion pass does not run, so it has nothing to dump; with --fuse it does.
    let base = ["--target", "sm_90a", "--dump-after", "fusion"];
    for cmd in ["compile", "run"] {
        let mut args = vec![cmd, prog, "--no-fuse"];
        args.extend_from_slice(&base);
        let o = kirc(&args);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {}", stderr(&o));
        assert!(stderr(&o).contains("does not run"), "{cmd}: {}", stderr(&o));
        let mut args = vec![cmd, prog, "--fuse"];
        args.extend_from_slice(&base);
        let o = kirc(&args);
        assert!(o.status.success(), "{cmd}: {}", stderr(&o));
        assert!(
            stdout(&o).contains("kernel @gate_proj_up_proj_swiglu"),
            "{cmd}: {}",
            stdout(&o)
        );
    }
    let o = kirc(&["compile", prog, "--fuse", "--no-fuse"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // The report states the decision.
    let dir = scratch("plan_cli", "fusion_flags");
    let out = dir.join("p.ptx");
    let o = kirc(&[
        "compile",
        prog,
        "--target",
        "sm_80",
        "-o",
        s(&out),
        "--report",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("\nfusion: "), "{}", stderr(&o));
}

#[test]
fn the_layout_dump_shows_the_ping_pong_plan() {
    // d64 attention on sm_90a: two warpgroups, both dots of the key loop on wgmma, in turns.
    let o = kirc(&[
        "compile",
        "attention_fwd",
        "-D",
        "HEAD_DIM=64",
        "--target",
        "sm_90a",
        "--dump-after",
        "layout",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    for turn in ["ping-pong: turn 1 of 2", "ping-pong: turn 2 of 2"] {
        assert_eq!(text.matches(turn).count(), 1, "{turn}:\n{text}");
    }
    // On sm_80 there is no wgmma, so no turns.
    let o = kirc(&[
        "compile",
        "attention_fwd",
        "-D",
        "HEAD_DIM=64",
        "--target",
        "sm_80",
        "--dump-after",
        "layout",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stdout(&o).contains("ping-pong"), "{}", stdout(&o));
}

/// `kirc compile --shape` chooses the configuration that `kirc bench` chooses for those shapes:
/// a GEMM of 16 rows on sm_90a has its operands swapped (the few rows as wgmma's N), which
/// `--swap-operands off` turns off; the flag does not go with `--emit cuda`.
#[test]
fn shapes_and_swap_operands_on_the_command_line() {
    let d = scratch("plan", "swap");
    let (ptx, report) = (d.join("g.ptx"), d.join("g.report"));
    let shapes = ["--shape", "a=1x16x4096", "--shape", "b=1x4096x14336"];
    let compile = |extra: &[&str]| {
        let mut args = vec![
            "compile",
            "gemm",
            "--target",
            "sm_90a",
            "--no-cache",
            "-o",
            s(&ptx),
        ];
        let rep = format!("--report={}", s(&report));
        args.push(&rep);
        args.extend_from_slice(&shapes);
        args.extend_from_slice(extra);
        let o = kirc(&args);
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        (
            std::fs::read_to_string(&ptx).expect("ptx"),
            std::fs::read_to_string(&report).expect("report"),
        )
    };
    let (text, rep) = compile(&[]);
    assert!(
        rep.contains("operands swapped") && rep.contains("M = 16"),
        "{rep}"
    );
    assert!(
        text.contains("wgmma.mma_async.sync.aligned.m64n16k16"),
        "the few rows are N"
    );
    let (text, rep) = compile(&["--swap-operands", "off"]);
    assert!(rep.contains("BLOCK_M=16 (M tile)"), "{rep}");
    assert!(!text.contains("m64n16k16"), "not swapped");
    let o = kirc(&["compile", "gemm", "--emit", "cuda", "--swap-operands", "on"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--swap-operands does not apply to --emit cuda"),
        "{}",
        stderr(&o)
    );
    let _ = std::fs::remove_dir_all(&d);
}
