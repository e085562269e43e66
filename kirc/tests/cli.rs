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
