//! The `kirc` command line: exit codes (0 ok, 1 only for `fmt --check`, 2 for user errors),
//! located error messages, built-in op lookup, and `run` end to end against f64 oracles.

mod common;
use common::{kirc, s, scratch, stderr, stdout};
use kir_backends::interp::HostData;
use kir_compiler::internal::npy::{self, NpyDtype};

/// Reading f64 data in tests.
trait F64s {
    fn f64s(&self) -> &[f64];
}

impl F64s for HostData {
    fn f64s(&self) -> &[f64] {
        self.as_f64().expect("f64 data")
    }
}
use std::path::Path;

#[test]
fn help_and_ops() {
    for sub in ["check", "fmt", "run", "bench", "randn", "ops"] {
        let o = kirc(&[sub, "--help"]);
        assert!(
            o.status.success() && stdout(&o).contains("Usage: kirc"),
            "{sub}: {}",
            stderr(&o)
        );
    }
    let o = kirc(&["ops"]);
    let out = stdout(&o);
    for op in ["attention_fwd", "gemm", "rmsnorm_bwd", "rmsnorm_fwd"] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(op) && l.len() > op.len() + 5),
            "{out}"
        );
    }
}

#[test]
fn check_builtins_and_specialization_errors() {
    let o = kirc(&["check", "attention_fwd", "-D", "HEAD_DIM=64", "-DCAUSAL=1"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "ok: attention_fwd (1 kernel)\n");
    let o = kirc(&["check", "rmsnorm_bwd"]);
    assert_eq!(
        stdout(&o),
        "ok: rmsnorm_bwd (2 kernels)\n",
        "{}",
        stderr(&o)
    );

    let o = kirc(&["check", "attention_fwd", "-D", "HEAD_DIM=100"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.starts_with("attention_fwd.kir:") && e.contains(": error: constant `HEAD_DIM` = 100"),
        "{e}"
    );
    assert!(e.contains(" | const HEAD_DIM") && e.contains('^'), "{e}");

    let o = kirc(&["check", "attention_fwd", "-D", "NOPE=1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).starts_with("error: -D NOPE: unknown constant")
            && stderr(&o).contains("HEAD_DIM"),
        "{}",
        stderr(&o)
    );

    let o = kirc(&["check", "attention_fwd", "-D", "HEAD_DIM"]);
    assert_eq!(o.status.code(), Some(2), "bad -D syntax");
    assert!(stderr(&o).contains("NAME=VALUE"), "{}", stderr(&o));

    let o = kirc(&["check", "/no/such/file.kir"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).starts_with("error: /no/such/file.kir: no such file"),
        "{}",
        stderr(&o)
    );

    let o = kirc(&[
        "check",
        "attention_fwd",
        "--dump-after",
        "specialize",
        "-D",
        "DTYPE=f16",
    ]);
    assert!(
        o.status.success() && stdout(&o).contains("tile<64x128xf16>"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        kirc(&["check", "gemm", "--dump-after", "nope"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn fmt_and_fmt_check() {
    let d = scratch("cli", "fmt");
    let canonical = stdout(&kirc(&["fmt", "rmsnorm_fwd"]));
    assert!(canonical.contains("module rmsnorm_fwd"));
    let good = d.join("good.kir");
    std::fs::write(&good, &canonical).unwrap();
    let o = kirc(&["fmt", "--check", s(&good)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let bad = d.join("bad.kir");
    std::fs::write(
        &bad,
        canonical.replace("  %g = program_id 0 : i32", "  %g   =  program_id 0: i32"),
    )
    .unwrap();
    let o = kirc(&["fmt", "--check", s(&bad)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("not in canonical form"),
        "{}",
        stderr(&o)
    );
    assert_eq!(stdout(&kirc(&["fmt", s(&bad)])), canonical);
    let broken = d.join("broken.kir");
    std::fs::write(
        &broken,
        "module m\n\nkernel @k() grid [1, 1, 1] {\n  %x = frobnicate : i32\n}\n",
    )
    .unwrap();
    let o = kirc(&["fmt", s(&broken)]);
    assert_eq!(o.status.code(), Some(2));
    let want = format!("{}:4:8: error: unknown op `frobnicate`", s(&broken));
    assert!(stderr(&o).starts_with(&want), "{}", stderr(&o));
}

#[test]
fn randn_is_deterministic() {
    let d = scratch("cli", "randn");
    let (a, b, c) = (d.join("a.npy"), d.join("sub/b.npy"), d.join("c.npy"));
    assert!(kirc(&["randn", "2x3,4", "-o", s(&a), "--seed", "7"])
        .status
        .success());
    assert!(kirc(&["randn", "2x3x4", "-o", s(&b), "--seed", "7"])
        .status
        .success());
    assert!(kirc(&["randn", "2x3x4", "-o", s(&c), "--seed", "8"])
        .status
        .success());
    let (ra, rb, rc) = (
        npy::read(&a).unwrap(),
        npy::read(&b).unwrap(),
        npy::read(&c).unwrap(),
    );
    assert_eq!(ra, rb);
    assert_ne!(ra.data.f64s(), rc.data.f64s());
    assert_eq!((ra.dtype, ra.shape.clone()), (NpyDtype::F32, vec![2, 3, 4]));
    let i = d.join("i.npy");
    assert!(kirc(&[
        "randn",
        "1000",
        "-o",
        s(&i),
        "--dtype",
        "i32",
        "--low",
        "-3",
        "--high",
        "4"
    ])
    .status
    .success());
    let ri = npy::read(&i).unwrap();
    assert_eq!(ri.dtype, NpyDtype::I32);
    assert!(ri
        .data
        .f64s()
        .iter()
        .all(|&x| (-3.0..4.0).contains(&x) && x.fract() == 0.0));
    assert!(ri.data.f64s().contains(&-3.0) && ri.data.f64s().contains(&3.0));
    assert_eq!(kirc(&["randn", "2xx3", "-o", s(&i)]).status.code(), Some(2));
    assert_eq!(
        kirc(&["randn", "2", "-o", s(&i), "--dtype", "c64"])
            .status
            .code(),
        Some(2)
    );
}

/// f64 RMSNorm oracle: y = x / sqrt(mean(x²) + eps) · w, rstd per row.
fn rmsnorm(x: &[f64], w: &[f64], n: usize, eps: f64) -> (Vec<f64>, Vec<f64>) {
    let (mut y, mut rstd) = (vec![], vec![]);
    for row in x.chunks(n) {
        let r = 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / n as f64 + eps).sqrt();
        rstd.push(r);
        y.extend(row.iter().zip(w).map(|(v, w)| v * r * w));
    }
    (y, rstd)
}

#[test]
fn run_rmsnorm_matches_oracle() {
    let d = scratch("cli", "run");
    let (x, w, out) = (d.join("x.npy"), d.join("w.npy"), d.join("out"));
    assert!(kirc(&["randn", "5x300", "-o", s(&x), "--seed", "1"])
        .status
        .success());
    assert!(
        kirc(&["randn", "300", "-o", s(&w), "--seed", "2", "--dtype", "f64"])
            .status
            .success()
    );
    let xa = format!("x={}", s(&x));
    let wa = format!("w={}", s(&w));
    let o = kirc(&[
        "run",
        "rmsnorm_fwd",
        "-D",
        "DTYPE=f32",
        "-D",
        "BLOCK=128",
        "--arg",
        &xa,
        "--arg",
        &wa,
        "--arg",
        "eps=1e-6",
        "--out",
        s(&out),
        "--sequential",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let y = npy::read(&out.join("y.npy")).unwrap();
    let rstd = npy::read(&out.join("rstd.npy")).unwrap();
    assert_eq!(
        (y.dtype, y.shape.clone(), rstd.shape.clone()),
        (NpyDtype::F32, vec![5, 300], vec![5])
    );
    // w was f64 on disk: the interpreter rounds it to f32 (the param dtype) first.
    let wv: Vec<f64> = npy::read(&w)
        .unwrap()
        .data
        .f64s()
        .iter()
        .map(|&v| v as f32 as f64)
        .collect();
    let (ey, er) = rmsnorm(npy::read(&x).unwrap().data.f64s(), &wv, 300, 1e-6);
    for (a, b) in y
        .data
        .f64s()
        .iter()
        .zip(&ey)
        .chain(rstd.data.f64s().iter().zip(&er))
    {
        assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
    }
    // bf16 outputs are written as f32 holding bf16 values.
    let o = kirc(&[
        "run",
        "rmsnorm_fwd",
        "--arg",
        &xa,
        "--arg",
        &wa,
        "--arg",
        "eps=1e-6",
        "--out",
        s(&out),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let y = npy::read(&out.join("y.npy")).unwrap();
    assert!(
        y.data
            .f64s()
            .iter()
            .all(|&v| (v as f32).to_bits() & 0xffff == 0),
        "values must be bf16"
    );
}

#[test]
fn run_integer_outputs_and_kernel_selection() {
    let d = scratch("cli", "ints");
    let src = d.join("ints.kir");
    std::fs::write(
        &src,
        "module ints

kernel @copy(x: in tensor<i32>[N], y: out tensor<i32>[N], pos: out tensor<i1>[N]) grid [1, 1, 1] {
  %t = load x[0] other 0 : tile<16xi32>
  store y[0], %t guard
  %z = const 0 : tile<16xi32>
  %c = cmp gt %t, %z : tile<16xi1>
  store pos[0], %c guard
}

kernel @other(x: in tensor<i32>[N], y: out tensor<i32>[N]) grid [1, 1, 1] {
  %t = load x[0] other 0 : tile<16xi32>
  %n = neg %t : tile<16xi32>
  store y[0], %n guard
}

program(x: in tensor<i32>[N], y: out tensor<i32>[N], pos: out tensor<i1>[N]) {
  launch @copy(x, y, pos)
}
",
    )
    .unwrap();
    let x = d.join("x.npy");
    assert!(kirc(&[
        "randn",
        "10",
        "-o",
        s(&x),
        "--dtype",
        "i32",
        "--low",
        "-5",
        "--high",
        "5"
    ])
    .status
    .success());
    let xa = format!("x={}", s(&x));
    let out = d.join("out");
    let o = kirc(&["run", s(&src), "--arg", &xa, "--out", s(&out)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let (xv, y, pos) = (
        npy::read(&x).unwrap(),
        npy::read(&out.join("y.npy")).unwrap(),
        npy::read(&out.join("pos.npy")).unwrap(),
    );
    assert_eq!((y.dtype, pos.dtype), (NpyDtype::I32, NpyDtype::U8));
    assert_eq!(y.data.f64s(), xv.data.f64s());
    assert_eq!(
        pos.data.f64s(),
        xv.data
            .f64s()
            .iter()
            .map(|&v| (v > 0.0) as u8 as f64)
            .collect::<Vec<_>>()
    );
    // --kernel runs one kernel alone, with its own params as the entry.
    let out2 = d.join("out2");
    let o = kirc(&[
        "run",
        s(&src),
        "--kernel",
        "other",
        "--arg",
        &xa,
        "--out",
        s(&out2),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let y = npy::read(&out2.join("y.npy")).unwrap();
    assert_eq!(
        y.data.f64s(),
        xv.data.f64s().iter().map(|&v| -v).collect::<Vec<_>>()
    );
    assert!(!out2.join("pos.npy").exists());
    let o = kirc(&[
        "run",
        s(&src),
        "--kernel",
        "nope",
        "--arg",
        &xa,
        "--out",
        s(&out),
    ]);
    assert!(
        o.status.code() == Some(2) && stderr(&o).contains("copy, other"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn run_argument_errors_are_located() {
    let d = scratch("cli", "argerr");
    let out = d.join("out");
    let q = d.join("q.npy");
    let kv = d.join("kv.npy");
    assert!(kirc(&["randn", "1x3x8x64", "-o", s(&q)]).status.success());
    assert!(kirc(&["randn", "1x2x8x64", "-o", s(&kv)]).status.success());
    let (qa, ka, va) = (
        format!("q={}", s(&q)),
        format!("k={}", s(&kv)),
        format!("v={}", s(&kv)),
    );
    let base = [
        "run",
        "attention_fwd",
        "-D",
        "HEAD_DIM=64",
        "--out",
        s(&out),
    ];
    let run = |extra: &[&str]| kirc(&[&base[..], extra].concat());

    let o = run(&["--arg", &qa, "--arg", &ka, "--arg", "scale=0.125"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("attention_fwd.kir:") && stderr(&o).contains("missing argument `v`"),
        "{}",
        stderr(&o)
    );

    let o = run(&[
        "--arg",
        &qa,
        "--arg",
        &ka,
        "--arg",
        &va,
        "--arg",
        "scale=0.125",
        "--arg",
        "bogus=1",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("no param `bogus`") && stderr(&o).contains("q, k, v, o, lse, scale"),
        "{}",
        stderr(&o)
    );

    let o = run(&[
        "--arg",
        &qa,
        "--arg",
        &ka,
        "--arg",
        &va,
        "--arg",
        "scale=half",
    ]);
    assert!(
        o.status.code() == Some(2) && stderr(&o).contains("expected a number"),
        "{}",
        stderr(&o)
    );

    let garbage = d.join("garbage.npy");
    std::fs::write(&garbage, b"\x93NUMPY\x01\x00\x40\x00{'descr': '<f4'").unwrap();
    let o = run(&[
        "--arg",
        &format!("q={}", s(&garbage)),
        "--arg",
        &ka,
        "--arg",
        &va,
        "--arg",
        "scale=1",
    ]);
    assert!(
        o.status.code() == Some(2) && stderr(&o).contains("truncated header"),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("|   q: in tensor"),
        "located at the param: {}",
        stderr(&o)
    );

    // Hq = 3 is not a multiple of Hkv = 2: the interpreter's `requires` check, with its span.
    let o = run(&[
        "--arg",
        &qa,
        "--arg",
        &ka,
        "--arg",
        &va,
        "--arg",
        "scale=0.125",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).starts_with("attention_fwd.kir:") && stderr(&o).contains("Hq % Hkv == 0"),
        "{}",
        stderr(&o)
    );

    assert_eq!(
        run(&["--arg", "q"]).status.code(),
        Some(2),
        "bad --arg syntax"
    );
}

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
