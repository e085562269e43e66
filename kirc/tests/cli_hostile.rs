//! Regression tests of the second hostile review at the command line (items 11 to 16 of
//! docs/testing.md, "Reliability"; the library-level ones are in tests/tests/hostile.rs), each
//! rebuilt from its description:
//!
//! 11. write errors are user errors: a `--report` to a full or closed stderr (it panicked after
//!     writing the PTX), a stdout closed at start (`>&-`: exit 0 with nothing written) and help
//!     to a full stdout exit 2, and leave no output file; an output that does not go to stdout
//!     still works with stdout closed;
//! 12. number arguments and `.npy` values that overflow a float param's dtype are errors naming
//!     the param and the value (an integer 70000 for f16, f64 1e39 for f32);
//! 15. inputs are read up to a limit: `/dev/zero` as a source or an `.npy` is an error naming
//!     the limit (it grew without bound), and so is an `.npy` header declaring more data than
//!     the limit.

mod common;
use common::{kirc, s, scratch, stderr};
use kir_backends::interp::HostData;
use kir_compiler::internal::npy::{self, NpyDtype};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Exit code 2 with a message containing `want`.
fn user_error(o: &Output, want: &str) {
    assert_eq!(o.status.code(), Some(2), "{}", stderr(o));
    assert!(stderr(o).contains(want), "want `{want}` in:\n{}", stderr(o));
}

/// Runs kirc through `sh` with the redirection `redir` (e.g. `>&-`) in `dir`, with a time
/// limit: a command that does not end in time fails the test instead of hanging it.
fn kirc_redirected(dir: &Path, args: &[&str], redir: &str) -> Output {
    let mut child = Command::new("sh")
        .env("KIR_CACHE_DIR", "off")
        .arg("-c")
        .arg(format!("exec \"$0\" \"$@\" {redir}"))
        .arg(env!("CARGO_BIN_EXE_kirc"))
        .args(args)
        .env_remove("KIR_LOG")
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sh runs");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("kirc {args:?} {redir} did not end within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("kirc ends")
}

/// The names in `d`, sorted.
fn names(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn write_errors_are_user_errors_and_leave_no_file() {
    let d = scratch("hostile", "writes");
    // `--report` on a full stderr: the command fails (there is nowhere to say why) and the
    // PTX it staged is not put in place. It panicked (101) with g.ptx written.
    let o = kirc_redirected(
        &d,
        &["compile", "gemm", "--report", "-o", "g.ptx"],
        "2>/dev/full",
    );
    assert_eq!(o.status.code(), Some(2), "report to a full stderr");
    assert!(names(&d).is_empty(), "left {:?}", names(&d));
    // And on a closed one: the same.
    let o = kirc_redirected(&d, &["compile", "gemm", "--report", "-o", "g.ptx"], "2>&-");
    assert_eq!(o.status.code(), Some(2), "report to a closed stderr");
    assert!(names(&d).is_empty(), "left {:?}", names(&d));
    // A stdout closed at start is an error for output meant for it (exit 0 with nothing
    // written before), for a compile and for help.
    for args in [
        &["compile", "attention_fwd"][..],
        &["ops"],
        &["help"],
        &["--version"],
    ] {
        let o = kirc_redirected(&d, args, ">&-");
        user_error(&o, "standard output is closed");
    }
    // Help to a full stdout is an error like any other output (exit 0 before).
    let o = kirc_redirected(&d, &["help"], ">/dev/full");
    user_error(&o, "cannot write to standard output");
    let o = kirc_redirected(&d, &["compile", "--help"], ">/dev/full");
    user_error(&o, "cannot write to standard output");
    assert!(names(&d).is_empty(), "left {:?}", names(&d));
    // Output that does not go to stdout still works with stdout closed, and help to a
    // working stdout is still help.
    let o = kirc_redirected(&d, &["compile", "rmsnorm_fwd", "-o", "r.ptx"], ">&-");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(names(&d), vec!["r.ptx"]);
    let o = kirc(&["help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).contains("Usage: kirc"));
    // The report still reaches a working stderr, after the PTX is written.
    let o = kirc(&[
        "compile",
        "rmsnorm_fwd",
        "--report",
        "-o",
        s(&d.join("r2.ptx")),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("kernel rmsnorm_fwd"), "{}", stderr(&o));
}

/// A scalar f16 kernel: y = x + s.
const ADD_F16: &str = "module addk
kernel @k(x: in tensor<f16>[N], s: f16, y: out tensor<f16>[N]) grid [1, 1, 1] {
  %s = param s : f16
  %o = const 0 : i32
  %v = load x[%o] other 0.0 : tile<4xf16>
  %w = add %v, %s : tile<4xf16>
  store y[%o], %w guard
}
";

#[test]
fn float_overflow_in_arguments_and_npy_files_is_an_error() {
    let d = scratch("hostile", "overflow");
    let k = d.join("add.kir");
    std::fs::write(&k, ADD_F16).unwrap();
    let x = d.join("x.npy");
    let big = d.join("big.npy");
    let inf = d.join("inf.npy");
    // Random values in range, one of them f16's largest finite value.
    let mut vals = vec![65504.0];
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ std::process::id() as u64;
    for _ in 0..3 {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        vals.push(((state >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 2000.0);
    }
    npy::write(&x, NpyDtype::F64, &[4], &HostData::F64(vals.clone())).unwrap();
    npy::write(
        &big,
        NpyDtype::F64,
        &[4],
        &HostData::F64(vec![1.0, 1e39, 2.0, 3.0]),
    )
    .unwrap();
    npy::write(
        &inf,
        NpyDtype::F64,
        &[4],
        &HostData::F64(vec![f64::INFINITY; 4]),
    )
    .unwrap();
    let run = |xa: &Path, sv: &str, out: &str| {
        kirc(&[
            "run",
            s(&k),
            "--arg",
            &format!("x={}", s(xa)),
            "--arg",
            &format!("s={sv}"),
            "--out",
            s(&d.join(out)),
        ])
    };
    // An integer argument over f16's range became inf silently (1e5 was refused).
    user_error(
        &run(&x, "70000", "o1"),
        "scalar `s`: 70000 is out of range for f16",
    );
    user_error(&run(&x, "-65520", "o2"), "-65520 is out of range for f16");
    // f64 data that overflows the param's dtype.
    user_error(
        &run(&big, "1", "o3"),
        "element 1 of `x`: 1e39 is out of range for f16",
    );
    assert_eq!(names(&d), vec!["add.kir", "big.npy", "inf.npy", "x.npy"]);
    // In range: the f64 oracle of the rounded operands; an explicit infinity stays one.
    let o = run(&x, "-0.5", "ok");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let y = npy::read(&d.join("ok/y.npy")).unwrap();
    let HostData::F64(y) = y.data else {
        panic!("f32 output")
    };
    for (i, (&got, &v)) in y.iter().zip(&vals).enumerate() {
        let r = |x: f64| half::f16::from_f64(x).to_f64();
        let want = r(((r(v) - 0.5) as f32) as f64);
        assert_eq!(got, want, "y[{i}] of {v}");
    }
    let o = run(&inf, "1", "inf");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn inputs_are_read_up_to_a_limit() {
    let d = scratch("hostile", "limits");
    // An endless source, for every command that reads one (it grew without bound).
    for args in [
        &["check", "/dev/zero"][..],
        &["fmt", "/dev/zero"],
        &["compile", "/dev/zero", "-o", "x.ptx"],
        &["explain", "/dev/zero"],
        &["run", "/dev/zero", "--out", "o"],
    ] {
        let o = kirc_redirected(&d, args, "");
        user_error(&o, "larger than the limit of 8 MiB");
    }
    // A file one byte over the limit (sparse) is refused the same way; one under it is read.
    let f = d.join("big.kir");
    let file = std::fs::File::create(&f).unwrap();
    file.set_len(8 * 1024 * 1024 + 1).unwrap();
    user_error(&kirc(&["check", s(&f)]), "larger than the limit of 8 MiB");
    // `.npy` inputs: an endless one is not an .npy (its first bytes say so), a header that
    // declares more than the data limit is refused before any data is read, and a file longer
    // than its header says is still "too long".
    let k = d.join("add.kir");
    std::fs::write(&k, ADD_F16).unwrap();
    let run = |xa: &str| {
        kirc_redirected(
            &d,
            &[
                "run",
                s(&k),
                "--arg",
                &format!("x={xa}"),
                "--arg",
                "s=1",
                "--out",
                "o",
            ],
            "",
        )
    };
    user_error(&run("/dev/zero"), "not an .npy file");
    let header = "{'descr': '<f8', 'fortran_order': False, 'shape': (1099511627776,), }";
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(&[0u8; 64]);
    let huge = d.join("huge.npy");
    std::fs::write(&huge, &bytes).unwrap();
    user_error(&run(s(&huge)), "over the limit of 4 GiB for an .npy input");
    let mut long = npy::to_bytes(NpyDtype::F32, &[4], &HostData::F64(vec![1.0; 4]));
    long.extend_from_slice(&[0u8; 100]);
    let lf = d.join("long.npy");
    std::fs::write(&lf, &long).unwrap();
    user_error(&run(s(&lf)), "too long");
    let ok = d.join("ok.npy");
    npy::write(&ok, NpyDtype::F32, &[4], &HostData::F64(vec![1.0; 4])).unwrap();
    let o = run(s(&ok));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}
