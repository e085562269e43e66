//! `kirc compile --report`: the PTX backend's lowering decisions on stderr, or with
//! `--report=FILE` in a file, beside the PTX; asking for it without PTX is a user error
//! (exit code 2).

use std::process::{Command, Output};

fn kirc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kirc"))
        .args(args)
        .output()
        .expect("kirc runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const GEMM: [&str; 11] = [
    "compile",
    "gemm",
    "-D",
    "TRANS_B=1",
    "-D",
    "BLOCK_M=128",
    "-D",
    "BLOCK_N=256",
    "-D",
    "BLOCK_K=64",
    "--report",
];

#[test]
fn report_on_stderr_and_in_a_file() {
    let dir = std::env::temp_dir().join(format!("kirc-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ptx = dir.join("gemm.ptx");
    let mut args = GEMM.to_vec();
    args.extend(["--target", "sm_90a", "-o", ptx.to_str().unwrap()]);
    let o = kirc(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.starts_with("kernel gemm (gemm_"), "{e}");
    assert!(e.contains("warps: 8 (policy: "), "{e}");
    assert!(e.contains(": 128x256x64 bf16 -> wgmma"), "{e}");
    assert!(e.contains("2 stages of 128x64 bf16"), "{e}");
    assert!(std::fs::read_to_string(&ptx)
        .unwrap()
        .contains("wgmma.mma_async"));

    let file = dir.join("report.txt");
    let flag = format!("--report={}", file.display());
    let mut args = GEMM[..10].to_vec();
    args.extend([
        flag.as_str(),
        "--target",
        "sm_80",
        "-o",
        ptx.to_str().unwrap(),
    ]);
    let o = kirc(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    let r = std::fs::read_to_string(&file).unwrap();
    assert!(r.contains("-> mma.sync"), "{r}");
    assert!(r.contains("not wgmma: target sm_80 has no wgmma"), "{r}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn report_needs_ptx() {
    let o = kirc(&["compile", "gemm", "--emit", "cuda", "-o", "-", "--report"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--report needs --emit ptx"),
        "{}",
        stderr(&o)
    );
}
