//! `kirc compile --report`: the PTX backend's lowering decisions on stderr, or with
//! `--report=FILE` in a file, beside the PTX — one report per kernel in META's order, each dot
//! located at its op in the source; asking for it without PTX is a user error (exit code 2).

mod common;
use common::{kirc, stderr};

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

/// A module of several kernels gets one report per kernel, in META's order, and every dot is
/// located at its `dot` op in the source.
#[test]
fn one_report_per_kernel_located_in_the_source() {
    let dir = std::env::temp_dir().join(format!("kirc-report-bwd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (ptx, meta) = (dir.join("bwd.ptx"), dir.join("META.json"));
    let o = kirc(&[
        "compile",
        "attention_bwd",
        "--target",
        "sm_80",
        "-o",
        ptx.to_str().unwrap(),
        "--meta",
        meta.to_str().unwrap(),
        "--report",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let e = stderr(&o);
    let reported: Vec<&str> = e
        .lines()
        .filter_map(|l| l.strip_prefix("kernel "))
        .filter_map(|l| l.split(['(', ')']).nth(1))
        .collect();
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&meta).unwrap()).unwrap();
    let symbols: Vec<&str> = meta["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|k| k["symbol"].as_str())
        .collect();
    assert_eq!(reported, symbols, "{e}");
    let src = kir_compiler::internal::oplib::builtin("attention_bwd").expect("a built-in op");
    let lines: Vec<&str> = src.lines().collect();
    let mut dots = 0;
    for l in e.lines().filter(|l| l.trim_start().starts_with("dot #")) {
        let at = l.split(" at ").nth(1).and_then(|r| r.split(':').next());
        let line: usize = at.and_then(|n| n.parse().ok()).unwrap_or(0);
        assert!(
            line > 0 && lines[line - 1].contains(" dot "),
            "{l}: line {line} is not a dot"
        );
        assert!(l.contains("-> mma.sync"), "{l}");
        dots += 1;
    }
    assert_eq!(dots, 7, "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--dump-after layout` shows the layouts of the module the PTX backend lowers for the target:
/// sm_90a's configuration (a consumer of 12 warps, wgmma operands in the swizzled layout: the
/// query block read from the stage the producer fills), sm_80's own, and on both the row sum
/// the key loop keeps as quad partials.
#[test]
fn the_layout_dump_follows_the_target() {
    let dump = |t: &str| {
        let o = kirc(&[
            "compile",
            "attention_fwd",
            "--target",
            t,
            "--dump-after",
            "layout",
        ]);
        assert!(o.status.success(), "{t}: {}", stderr(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let hopper = dump("sm_90a");
    assert!(
        hopper.contains("mma-accumulator(12 warps along rows)"),
        "{hopper}"
    );
    assert!(hopper.contains("%qt = shared(128B-swizzled core matrices, wgmma operand)"));
    let ampere = dump("sm_80");
    assert!(
        ampere.contains("mma-accumulator(4 warps along rows)"),
        "{ampere}"
    );
    assert!(ampere.contains("%qt = shared(rows padded 16 B)"));
    assert!(!ampere.contains("core matrices"));
    // The online softmax's row sum stays quad partials through the key loop on both targets
    // (docs/backends.md, "Row sums kept as quad partials"): the block's sum and the loop say so.
    for d in [&hopper, &ampere] {
        assert!(d.contains("row sum: quad partials"), "{d}");
        assert!(
            d.contains("row sum: carried as quad partials, reduced over the quad after the loop"),
            "{d}"
        );
    }
}
