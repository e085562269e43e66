//! `kirc run` beyond the plain CPU run: `--device cuda` on a machine without a GPU (a clear
//! error, never a panic), and `--target`/`--ws`/`--dump-after` running the scheduled IR of a
//! target on the interpreter.

mod common;
use common::{kirc, s, scratch, stderr, stdout};
use kir_backends::interp::HostData;
use kir_compiler::internal::npy::{self, NpyDtype};
use std::path::Path;

/// `kirc run --device cuda` on a machine without a GPU is a clear error with exit code 2, never
/// a panic: either the CUDA driver is missing (a kirc built with `--features cuda`, as
/// scripts/test.sh builds it) or the runtime is not built in (`cargo test -p kirc` without the
/// feature). On a machine with a GPU the run succeeds and writes the outputs.
#[test]
fn run_on_cuda_without_a_gpu_is_a_clear_error() {
    let d = scratch("cli", "cuda");
    let (x, w) = (d.join("x.npy"), d.join("w.npy"));
    npy::write(&x, NpyDtype::F32, &[2, 8], &HostData::F64(vec![0.5; 16])).unwrap();
    npy::write(&w, NpyDtype::F32, &[8], &HostData::F64(vec![1.0; 8])).unwrap();
    let out = d.join("out");
    let (xa, wa) = (format!("x={}", s(&x)), format!("w={}", s(&w)));
    let args = [
        "run",
        "rmsnorm_fwd",
        "--arg",
        &xa,
        "--arg",
        &wa,
        "--arg",
        "eps=1e-5",
    ];
    let o = kirc(&[&args[..], &["--out", s(&out), "--device", "cuda"]].concat());
    let err = stderr(&o);
    if o.status.success() {
        eprintln!(
            "run_on_cuda_without_a_gpu_is_a_clear_error: a GPU is present; the run succeeded"
        );
        assert!(out.join("y.npy").exists() && out.join("rstd.npy").exists());
        return;
    }
    assert_eq!(o.status.code(), Some(2), "stderr: {err}");
    assert!(!err.contains("panicked"), "a panic: {err}");
    assert!(
        err.starts_with("error: no CUDA driver found")
            || err.starts_with("error: no CUDA device found")
            || err.starts_with(
                "error: --device cuda needs the CUDA runtime, and this kirc was built without it"
            ),
        "unclear error: {err}"
    );
    assert!(!out.exists(), "no output may be written on failure");
    // On the CPU, `--target` runs the scheduled IR for it (rmsnorm_fwd has no dot to
    // pipeline, so it is the plain kernel); `--ws` without `--target` is an error; `kirc
    // bench` fails like `--device cuda`.
    let o = kirc(&[&args[..], &["--out", s(&out), "--target", "sm_90a"]].concat());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(out.join("y.npy").exists());
    let o = kirc(&[&args[..], &["--out", s(&out), "--ws", "auto"]].concat());
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--ws needs --target"), "{}", stderr(&o));
    let o = kirc(&[
        "bench",
        "rmsnorm_fwd",
        "--shape",
        "x=4x8",
        "--shape",
        "w=8",
        "--arg",
        "eps=1e-5",
    ]);
    if !o.status.success() {
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    }
}

#[test]
fn scheduling_passes_dump_and_run_on_the_interpreter() {
    // Scheduling passes need a target; an unknown pass lists every pass.
    let o = kirc(&[
        "check",
        "attention_fwd",
        "-D",
        "CAUSAL=1",
        "--dump-after",
        "pipelining",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("add --target"), "{}", stderr(&o));
    let o = kirc(&["check", "attention_fwd", "--dump-after", "no_such_pass"]);
    assert_eq!(o.status.code(), Some(2));
    for p in [
        "parse",
        "specialize",
        "egraph",
        "fusion",
        "mask_split",
        "pipelining",
        "warp_specialize",
    ] {
        assert!(stderr(&o).contains(p), "{p}: {}", stderr(&o));
    }
    let o = kirc(&[
        "check",
        "attention_fwd",
        "-D",
        "CAUSAL=1",
        "--dump-after",
        "pipelining",
        "--target",
        "sm_80",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let ir = stdout(&o);
    assert!(
        ir.contains("smem_alloc : smem<3x64x128xbf16>") && ir.contains("async_wait pending 2"),
        "{ir}"
    );
    // sm_90a: a TMA ring, its copies keeping the key range as a row-prefix mask.
    let o = kirc(&[
        "check",
        "attention_fwd",
        "-D",
        "CAUSAL=1",
        "--dump-after",
        "pipelining",
        "--target",
        "sm_90a",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let ir = stdout(&o);
    assert!(
        ir.contains("mbar_alloc arrivals 1 : mbar<3>")
            && ir.contains("mask %ms_key_in other 0.0 bar"),
        "{ir}"
    );
    let o = kirc(&[
        "check",
        "attention_fwd",
        "-D",
        "CAUSAL=1",
        "--dump-after",
        "warp_specialize",
        "--target",
        "sm_90a",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let ir = stdout(&o);
    assert!(
        ir.contains("warp_specialize producer_warps") && ir.contains("} consumer(%wg) {"),
        "{ir}"
    );
    assert!(
        ir.contains("mbar_arrive") && ir.contains("tx 32768"),
        "{ir}"
    );
    // A plan that cannot split this kernel is a located error.
    let o = kirc(&[
        "check",
        "gemm",
        "--dump-after",
        "warp_specialize",
        "--target",
        "sm_90a",
        "--ws",
        "fa3",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("gemm.kir:") && stderr(&o).contains("grid axis 0"),
        "{}",
        stderr(&o)
    );
    // Too many stages for sm_120a's 99 KB: an error naming the bytes.
    let o = kirc(&[
        "check",
        "attention_fwd",
        "--dump-after",
        "pipelining",
        "--target",
        "sm_120a",
        "--stages",
        "4",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("131072 bytes of shared memory") && stderr(&o).contains("101376"),
        "{}",
        stderr(&o)
    );

    // The scheduled IR runs on the interpreter and writes the same bits as the plain kernel.
    let d = scratch("cli", "sched");
    let mut names = vec![];
    for (i, shape) in ["1x2x45x64", "1x2x45x64", "1x2x45x64"].iter().enumerate() {
        let p = d.join(format!("in{i}.npy"));
        let seed = (std::process::id() as u64 + i as u64).to_string();
        let o = kirc(&["randn", shape, "-o", s(&p), "--seed", &seed, "--scale", "2"]);
        assert!(o.status.success(), "{}", stderr(&o));
        names.push(p);
    }
    let run = |out: &Path, extra: &[&str]| {
        let (q, k, v) = (
            format!("q={}", s(&names[0])),
            format!("k={}", s(&names[1])),
            format!("v={}", s(&names[2])),
        );
        let mut a = vec![
            "run",
            "attention_fwd",
            "-D",
            "HEAD_DIM=64",
            "-D",
            "CAUSAL=1",
            "-D",
            "BLOCK_N=16",
            "--arg",
            &q,
            "--arg",
            &k,
            "--arg",
            &v,
            "--arg",
            "scale=0.125",
            "--out",
            s(out),
        ];
        a.extend_from_slice(extra);
        let o = kirc(&a);
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        (
            std::fs::read(out.join("o.npy")).unwrap(),
            std::fs::read(out.join("lse.npy")).unwrap(),
        )
    };
    let plain = run(&d.join("plain"), &[]);
    for extra in [
        &["--target", "sm_80"][..],
        &["--target", "sm_90a", "--ws", "auto", "--seed", "3"],
        &["--target", "sm_90a", "--ws", "fa3", "--seed", "5"],
        &["--target", "sm_90a", "--ws", "2p6c", "--seed", "11"],
    ] {
        assert!(
            run(&d.join("sched"), extra) == plain,
            "{extra:?}: outputs differ"
        );
    }
}

/// `kirc compile --ws PLAN` lowers the named plan for the PTX backend: attention_fwd under
/// `fa3` (two consumer warpgroups) writes PTX and META.json whose kernel symbol ends in
/// `_WSPLAN_fa3`, with the block of the producer and both consumers, and its report names the
/// consumers and their arenas; a target without the lowering, `--emit cuda`, `--warp-specialize`
/// beside it and an unknown plan are errors naming why.
#[test]
fn compile_with_a_named_ws_plan() {
    let d = scratch("cli", "ws_plan");
    let (ptx, meta) = (d.join("fa3.ptx"), d.join("fa3.json"));
    let base = [
        "compile",
        "attention_fwd",
        "-D",
        "HEAD_DIM=64",
        "--ws",
        "fa3",
    ];
    let o = kirc(&[&base[..], &["-o", s(&ptx), "--meta", s(&meta), "--report"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&ptx).expect("the PTX");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&meta).expect("META.json")).expect("json");
    let sym = json["kernels"][0]["symbol"].as_str().expect("a symbol");
    assert!(sym.ends_with("_WSPLAN_fa3"), "{sym}");
    assert!(text.contains(&format!(".visible .entry {sym}(")), "{sym}");
    assert_eq!(json["kernels"][0]["block"][0].as_u64(), Some(384));
    let report = stderr(&o);
    assert!(
        report.contains("2 consumers of 4 warps each")
            && report.contains("for each consumer's own"),
        "{report}"
    );
    for (extra, why) in [
        (&["--target", "sm_80"][..], "sm_80 has no such lowering"),
        (
            &["--emit", "cuda"][..],
            "--ws does not apply to --emit cuda",
        ),
        (&["--warp-specialize", "on"][..], "do not go together"),
    ] {
        let o = kirc(&[&base[..], extra].concat());
        assert_eq!(o.status.code(), Some(2), "{extra:?}");
        assert!(stderr(&o).contains(why), "{extra:?}: {}", stderr(&o));
    }
    let o = kirc(&["compile", "attention_fwd", "--ws", "fa4"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("unknown --ws plan `fa4`"),
        "{}",
        stderr(&o)
    );
}
