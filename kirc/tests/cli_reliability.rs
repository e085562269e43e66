//! Regression tests of the reliability review at the command line, numbered as in
//! docs/testing.md ("Reliability") and each rebuilt from its description: the crashing inputs
//! exit with code 2 and a located error (never 101 or 134); a closed stdout ends
//! `kirc` quietly with 141 and a full one is an error (item 4); a failed command leaves no new
//! file and no two outputs share a path (item 5); i64 values pass through `.npy` files and
//! `--arg` exactly (item 7); number arguments out of range and PTX-only flags with CUDA C
//! are errors (item 10). The library-level checks are in tests/tests/reliability.rs.

mod common;
use common::{kirc, s, scratch, stderr};
use kir_backends::interp::HostData;
use kir_compiler::internal::npy::{self, NpyDtype};
use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Every entry under `d` (hidden ones included), relative and sorted.
fn listing(d: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![d.to_path_buf()];
    while let Some(p) = stack.pop() {
        for e in std::fs::read_dir(&p).unwrap() {
            let path = e.unwrap().path();
            out.push(path.strip_prefix(d).unwrap().display().to_string());
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Exit code 2 with a message containing `want`.
fn user_error(o: &Output, want: &str) {
    assert_eq!(o.status.code(), Some(2), "{}", stderr(o));
    assert!(stderr(o).contains(want), "want `{want}` in:\n{}", stderr(o));
}

/// Runs kirc with stdout to a pipe that is closed after `keep` bytes were read.
fn closed_pipe(args: &[&str], keep: usize) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kirc"))
        .env("KIR_CACHE_DIR", "off")
        .env_remove("KIR_LOG")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kirc runs");
    let mut out = child.stdout.take().unwrap();
    let mut buf = vec![0u8; keep];
    out.read_exact(&mut buf).expect("the first bytes");
    drop(out);
    child.wait_with_output().expect("kirc ends")
}

/// Runs kirc with stdout on /dev/full.
fn full_stdout(args: &[&str]) -> Output {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    Command::new(env!("CARGO_BIN_EXE_kirc"))
        .env("KIR_CACHE_DIR", "off")
        .env_remove("KIR_LOG")
        .args(args)
        .stdout(Stdio::from(full))
        .output()
        .expect("kirc runs")
}

#[test]
fn crashing_inputs_exit_2_with_a_located_error() {
    let d = scratch("rel", "crash");
    let kernel = "kernel @k(x: in tensor<f32>[N], y: out tensor<f32>[N]) grid [1, 1, 1] {
  %z = const 0 : i32
  %v = load x[%z] other 0.0 : f32
  store y[%z], %v
}
";
    let chain = vec!["1"; 30_000].join(" + ");
    let cases = [
        (
            "chain.kir",
            format!("module m\nconst A: int = {chain}\n{kernel}"),
            "nesting",
        ),
        (
            "cdiv.kir",
            format!("module m\nconst A: int = cdiv(-9223372036854775807 - 1, -1)\n{kernel}"),
            "overflow",
        ),
        (
            "tile.kir",
            format!(
                "module m\n{}",
                kernel
                    .replace("[N]", "[M, N]")
                    .replace("[%z]", "[%z, %z]")
                    .replace(
                        ": f32\n  store",
                        ": tile<4294967296 x 4294967296 x f32>\n  store"
                    )
                    .replace("%v\n}", "%v guard\n}")
            ),
            "limit",
        ),
        (
            "store.kir",
            format!(
                "module m\n{}",
                kernel.replace("store y[%z], %v", "store y[%z],")
            ),
            "expected a value",
        ),
        (
            "literal.kir",
            format!("module m\n{}", kernel.replace("other 0.0", "other 1e999")),
            "out of range",
        ),
    ];
    for (name, src, want) in cases {
        let f = d.join(name);
        std::fs::write(&f, src).unwrap();
        let out = d.join("out.ptx");
        for args in [
            vec!["check", s(&f)],
            vec!["compile", s(&f), "-o", s(&out)],
            vec!["compile", s(&f), "--emit", "cuda", "-o", s(&out)],
            vec!["explain", s(&f)],
        ] {
            let o = kirc(&args);
            user_error(&o, want);
            assert!(stderr(&o).contains(&format!("{name}:")), "{}", stderr(&o));
            assert!(!out.exists(), "{args:?} left {}", out.display());
        }
    }
    // fmt checks only the syntax: the syntax errors fail it, the others print.
    for (name, want) in [("chain.kir", "nesting"), ("store.kir", "expected a value")] {
        user_error(&kirc(&["fmt", s(&d.join(name))]), want);
    }
}

#[test]
fn a_closed_stdout_ends_quietly_and_a_full_one_is_an_error() {
    let d = scratch("rel", "stdout");
    // PTX of attention_bwd (770 KB) is far larger than a pipe's buffer, so kirc is still
    // writing (attention_fwd's, 58 KB since its TMA ring, fits in one).
    let meta = d.join("m.json");
    let o = closed_pipe(
        &["compile", "attention_bwd", "-o", "-", "--meta", s(&meta)],
        10,
    );
    assert_eq!(o.status.code(), Some(141), "{}", stderr(&o));
    assert_eq!(stderr(&o), "", "quiet");
    assert!(listing(&d).is_empty(), "left {:?}", listing(&d));
    // A module whose canonical text is larger than a pipe's buffer, for fmt.
    let ops: String = (0..4000)
        .map(|i| format!("  %c{i} = const {i} : i32\n"))
        .collect();
    let big = d.join("big.kir");
    std::fs::write(
        &big,
        format!("module big\nkernel @k(y: out tensor<i32>[1]) grid [1, 1, 1] {{\n{ops}  %z = const 0 : i32\n  store y[%z], %c1\n}}\n"),
    )
    .unwrap();
    let o = closed_pipe(&["fmt", s(&big)], 10);
    assert_eq!(o.status.code(), Some(141), "{}", stderr(&o));
    assert_eq!(stderr(&o), "");
    // A full stdout is an error (exit 2, said on stderr), and leaves no output file.
    let o = full_stdout(&["fmt", "rmsnorm_fwd"]);
    user_error(&o, "cannot write to standard output");
    let o = full_stdout(&["compile", "rmsnorm_fwd", "-o", "-", "--meta", s(&meta)]);
    user_error(&o, "No space left");
    let x = d.join("x.npy");
    let w = d.join("w.npy");
    npy::write(&x, NpyDtype::F32, &[2, 8], &HostData::F64(vec![0.5; 16])).unwrap();
    npy::write(&w, NpyDtype::F32, &[8], &HostData::F64(vec![1.0; 8])).unwrap();
    let out = d.join("out");
    let run = [
        "run",
        "rmsnorm_fwd",
        "--arg",
        &format!("x={}", s(&x)),
        "--arg",
        &format!("w={}", s(&w)),
        "--arg",
        "eps=1e-6",
        "--out",
        s(&out),
    ];
    // It wrote rstd.npy, then panicked on the report, leaving half of the outputs.
    user_error(&full_stdout(&run), "cannot write to standard output");
    assert_eq!(listing(&d), vec!["big.kir", "w.npy", "x.npy"]);
    let o = kirc(&run);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        listing(&out),
        vec!["rstd.npy", "y.npy"],
        "no temporary file is left"
    );
}

#[test]
fn failed_commands_leave_no_new_file() {
    let d = scratch("rel", "partial");
    let p = |n: &str| d.join(n);
    // --meta with --emit ir wrote a.ir, then failed.
    let o = kirc(&[
        "compile",
        "rmsnorm_fwd",
        "--emit",
        "ir",
        "-o",
        s(&p("a.ir")),
        "--meta",
        s(&p("m.json")),
    ]);
    user_error(&o, "--meta needs --emit ptx or cuda");
    // --meta naming a directory wrote b.ptx, then failed.
    std::fs::create_dir(p("dir")).unwrap();
    let o = kirc(&[
        "compile",
        "rmsnorm_fwd",
        "-o",
        s(&p("b.ptx")),
        "--meta",
        s(&p("dir")),
    ]);
    user_error(&o, "names a directory");
    // -o X --meta X overwrote the PTX with the metadata.
    for meta in ["x.ptx", "./x.ptx", "dir/../x.ptx"] {
        let o = kirc(&[
            "compile",
            "rmsnorm_fwd",
            "-o",
            s(&p("x.ptx")),
            "--meta",
            s(&d.join(meta)),
        ]);
        user_error(&o, "name the same file");
    }
    // A failed compile creates no folder for its output.
    let o = kirc(&[
        "compile",
        "rmsnorm_fwd",
        "-D",
        "BLOCK=0",
        "-o",
        s(&p("new/dir/c.ptx")),
    ]);
    user_error(&o, "BLOCK");
    // run --out DIR where one output cannot be written left the others behind.
    let x = p("x.npy");
    let w = p("w.npy");
    npy::write(&x, NpyDtype::F32, &[2, 8], &HostData::F64(vec![0.5; 16])).unwrap();
    npy::write(&w, NpyDtype::F32, &[8], &HostData::F64(vec![1.0; 8])).unwrap();
    std::fs::create_dir_all(p("out/y.npy")).unwrap();
    let args = |out: &Path, eps: &str| {
        [
            "run".to_string(),
            "rmsnorm_fwd".into(),
            "--arg".into(),
            format!("x={}", s(&x)),
            "--arg".into(),
            format!("w={}", s(&w)),
            "--arg".into(),
            format!("eps={eps}"),
            "--out".into(),
            s(out).into(),
        ]
    };
    let run = |out: &Path, eps: &str| {
        let a = args(out, eps);
        kirc(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    user_error(&run(&p("out"), "1e-6"), "y.npy");
    user_error(&run(&p("x.npy"), "1e-6"), "not a directory");
    user_error(
        &kirc(&["randn", "4", "-o", s(&p("dir"))]),
        "names a directory",
    );
    // Number arguments out of range, which silently became infinite.
    user_error(&run(&p("o2"), "1e400"), "`1e400` is out of range");
    user_error(&run(&p("o2"), "1e39"), "out of range for f32");
    assert_eq!(
        listing(&d),
        vec!["dir", "out", "out/y.npy", "w.npy", "x.npy"],
        "no new file"
    );
    // A successful compile writes both outputs, creating folders, and nothing else.
    let o = kirc(&[
        "compile",
        "rmsnorm_fwd",
        "-o",
        s(&p("k/c.ptx")),
        "--meta",
        s(&p("k/m/m.json")),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(listing(&p("k")), vec!["c.ptx", "m", "m/m.json"]);
}

#[test]
fn ptx_only_flags_with_cuda_c_are_errors() {
    let d = scratch("rel", "flags");
    let out = d.join("k.cu");
    for args in [
        vec!["--emit", "cuda", "--stages", "3"],
        vec!["--emit", "cuda", "--warps", "4"],
        vec!["--emit", "cuda", "--stream-k", "on"],
    ] {
        let mut a = vec!["compile", "rmsnorm_fwd", "-o", s(&out)];
        a.extend(args);
        user_error(&kirc(&a), "does not apply to --emit cuda");
    }
    user_error(
        &kirc(&[
            "compile",
            "rmsnorm_fwd",
            "--dump-after",
            "egraph",
            "--meta",
            s(&d.join("m")),
        ]),
        "--meta does not go with --dump-after",
    );
    // A stream-K tail needs a persistent grid, and a kernel whose K loop is a sum of dots:
    // each refusal names why, the second at the kernel's line with a caret.
    user_error(
        &kirc(&[
            "compile",
            "gemm",
            "--stream-k",
            "on",
            "--persistent",
            "off",
            "-o",
            s(&out),
        ]),
        "--stream-k on shares out the last wave of a persistent grid",
    );
    let o = kirc(&[
        "compile",
        "attention_fwd",
        "--stream-k",
        "on",
        "-o",
        s(&out),
    ]);
    user_error(&o, "attention_fwd.kir:");
    let e = stderr(&o);
    assert!(
        e.contains("`@attention_fwd` cannot share out its last tiles by K iterations")
            && e.contains('^'),
        "{e}"
    );
    assert!(listing(&d).is_empty());
}

#[test]
fn i64_values_pass_exactly_through_npy_and_arguments() {
    let d = scratch("rel", "i64");
    let src = d.join("copy64.kir");
    std::fs::write(
        &src,
        "module copy64
kernel @copy64(x: in tensor<i64>[N], y: out tensor<i64>[N], z: out tensor<i64>[N], s: i64) grid [1, 1, 1] {
  %zero = const 0 : i32
  %v = load x[%zero] other 0 : tile<4 x i64>
  store y[%zero], %v guard
  %s = param s : i64
  %sv = splat %s : tile<4 x i64>
  %p = mul %v, %sv : tile<4 x i64>
  store z[%zero], %p guard
}
",
    )
    .unwrap();
    let xs = vec![(1i64 << 53) + 1, i64::MAX, i64::MIN, 10_000_000_000_000_009];
    let x = d.join("x.npy");
    npy::write(&x, NpyDtype::I64, &[4], &HostData::I64(xs.clone())).unwrap();
    for sv in [1i64, i64::MAX, -3] {
        let out = d.join(format!("out{sv}"));
        let o = kirc(&[
            "run",
            s(&src),
            "--arg",
            &format!("x={}", s(&x)),
            "--arg",
            &format!("s={sv}"),
            "--out",
            s(&out),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let y = npy::read(&out.join("y.npy")).unwrap();
        assert_eq!(
            (y.dtype, y.data),
            (NpyDtype::I64, HostData::I64(xs.clone()))
        );
        let z = npy::read(&out.join("z.npy")).unwrap();
        let want: Vec<i64> = xs.iter().map(|v| v.wrapping_mul(sv)).collect();
        assert_eq!(z.data, HostData::I64(want), "s = {sv}");
    }
    // One past i64::MAX is named as given, not as a rounded float.
    let o = kirc(&[
        "run",
        s(&src),
        "--arg",
        &format!("x={}", s(&x)),
        "--arg",
        "s=9223372036854775808",
        "--out",
        s(&d.join("o")),
    ]);
    user_error(&o, "`9223372036854775808` is out of the range of i64");
}
