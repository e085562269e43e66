//! The progress line of `kirc run` on the interpreter: on a terminal, a run over a second shows
//! `running: D/T programs (P%), S s`, redrawn in place and erased at the end; on a pipe nothing
//! is written. The terminal is a pseudo-terminal opened here (Linux), connected to kirc's
//! stderr only, so stdout is the same in both cases.
#![cfg(target_os = "linux")]

mod common;
use common::{s, scratch, stderr, stdout};
use std::fs::File;
use std::io::Read;
use std::os::fd::FromRawFd;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A new pseudo-terminal: (master, path of its slave).
fn pty() -> (File, String) {
    // SAFETY: plain libc calls on a descriptor this function owns; the name is copied out of
    // ptsname_r's buffer before use.
    unsafe {
        let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(fd >= 0, "posix_openpt");
        assert_eq!(libc::grantpt(fd), 0, "grantpt");
        assert_eq!(libc::unlockpt(fd), 0, "unlockpt");
        let mut buf = [0 as libc::c_char; 128];
        assert_eq!(
            libc::ptsname_r(fd, buf.as_mut_ptr(), buf.len()),
            0,
            "ptsname_r"
        );
        let name = std::ffi::CStr::from_ptr(buf.as_ptr())
            .to_string_lossy()
            .into_owned();
        (File::from_raw_fd(fd), name)
    }
}

/// `kirc run gemm` (f32, M×1024 by 1024×1024, one program at a time), with stderr on a
/// pseudo-terminal when `tty`, else piped. Returns the output (stderr: what the terminal got)
/// and how long the run took.
fn run_gemm(d: &Path, m: usize, tty: bool) -> (Output, Duration) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kirc"));
    cmd.env("KIR_CACHE_DIR", "off").env_remove("KIR_LOG").args([
        "run",
        "gemm",
        "-D",
        "DTYPE=f32",
        "--arg",
        &format!("a={}", s(&d.join(format!("a{m}.npy")))),
        "--arg",
        &format!("b={}", s(&d.join("b.npy"))),
        "--arg",
        "alpha=1.5",
        "--out",
        s(&d.join("out")),
        "--sequential",
    ]);
    let start = Instant::now();
    if !tty {
        let o = cmd.output().expect("kirc runs");
        return (o, start.elapsed());
    }
    let (mut master, slave) = pty();
    let slave = File::options().read(true).write(true).open(slave).unwrap();
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(slave))
        .spawn()
        .expect("kirc runs");
    // The command holds the slave too; the terminal ends only when no one does.
    drop(cmd);
    // Read the terminal while kirc runs (its buffer is small); it reads EIO once kirc, the
    // slave's last holder, has exited.
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        got
    });
    let mut o = child.wait_with_output().expect("kirc runs");
    let elapsed = start.elapsed();
    o.stderr = reader.join().unwrap();
    (o, elapsed)
}

#[test]
fn a_long_run_shows_progress_on_a_terminal_only() {
    let d = scratch("progress", "gemm");
    let kirc = |args: &[&str]| common::kirc(args);
    assert!(kirc(&[
        "randn",
        "1x1024x1024",
        "-o",
        s(&d.join("b.npy")),
        "--seed",
        "2"
    ])
    .status
    .success());
    // Grow the problem until a run takes well over the second the line waits for.
    let mut m = 2048;
    let (o, elapsed) = loop {
        let a = d.join(format!("a{m}.npy"));
        assert!(
            kirc(&["randn", &format!("1x{m}x1024"), "-o", s(&a), "--seed", "1"])
                .status
                .success()
        );
        let (o, elapsed) = run_gemm(&d, m, true);
        assert!(o.status.success(), "{}", stderr(&o));
        if elapsed > Duration::from_millis(1600) || m >= 32768 {
            break (o, elapsed);
        }
        m *= 2;
    };
    assert!(elapsed > Duration::from_millis(1600), "{elapsed:?}");
    let term = stderr(&o);
    // The grid: cdiv(1024, 64) × cdiv(M, 64) programs.
    let total = 16 * m.div_ceil(64);
    let erase = "\r\x1b[2K";
    let frames: Vec<&str> = term.split(erase).filter(|f| !f.is_empty()).collect();
    assert!(!frames.is_empty(), "{term:?}");
    let mut last_done = 0;
    for f in &frames {
        // `running: D/T programs (P%), S s`, with D growing and T the grid's size.
        let rest = f
            .strip_prefix("running: ")
            .unwrap_or_else(|| panic!("{f:?}"));
        let (done, rest) = rest.split_once('/').unwrap();
        let done: usize = done.parse().unwrap();
        let (t, rest) = rest.split_once(" programs (").unwrap();
        assert_eq!(t.parse::<usize>().unwrap(), total, "{f:?}");
        assert!(done >= last_done && done <= total, "{f:?}");
        last_done = done;
        let (pct, secs) = rest.split_once("%), ").unwrap();
        assert_eq!(pct.parse::<usize>().unwrap(), done * 100 / total, "{f:?}");
        let secs: f64 = secs.strip_suffix(" s").unwrap().parse().unwrap();
        assert!((0.9..=elapsed.as_secs_f64() + 0.1).contains(&secs), "{f:?}");
    }
    // The line is erased at the end: the terminal ends with the erase sequence.
    assert!(term.ends_with(erase), "{term:?}");
    assert_eq!(
        stdout(&o),
        format!(
            "wrote {} (f32 [1, {m}, 1024], as <f4)\n",
            s(&d.join("out/c.npy"))
        )
    );
    // The same run on a pipe: nothing on stderr, the same stdout.
    let (p, elapsed) = run_gemm(&d, m, false);
    assert!(p.status.success());
    assert!(elapsed > Duration::from_millis(1200), "{elapsed:?}");
    assert_eq!(stderr(&p), "");
    assert_eq!(stdout(&p), stdout(&o));
}
