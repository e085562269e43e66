//! docs/tutorial.md, run as written, so that it cannot go stale.
//!
//! - Every `sh` block of the tutorial runs in order, from the repository root, under
//!   `bash -eo pipefail` with the `kirc` of these tests first on `PATH`, `KIR_CACHE_DIR=off` and
//!   `/tmp/xent` replaced by a fresh scratch directory. Its standard output and error (merged)
//!   must match the `text` block that follows it: line for line, a line `...` matching any
//!   number of lines.
//! - The files step 3 writes (the logits, the labels and the interpreter's loss and lse) are
//!   read back and checked against a float64 oracle written here, and the deliberate mistake of
//!   step 2 is checked directly: exit code 2, `file:50:5: error:`, the source line and a caret.
//! - The kernel excerpts of step 1 (the unlabelled blocks) are lines of
//!   docs/tutorial/softmax_xent.kir, in order.
//! - The kernel runs through `kirc run` on fresh random inputs per case (`KIR_TEST_SEED` replays
//!   one): every dtype, ragged R and V around and far past BLOCK, rows shifted by up to ±100,
//!   rows that start with −inf chunks and one that is −inf everywhere, ignored and out-of-range
//!   labels, and stale output files in the way; the oracle is the same float64 one, on the
//!   inputs rounded to the dtype with the `half` crate.

mod common;
#[path = "tutorial/support.rs"]
mod support;

use common::{kirc, s, scratch, stderr};
use std::path::{Path, PathBuf};
use std::process::Command;
use support::{check_outputs, read_f32, read_i32, round_to, write_f32, write_i32, xent, Rng};

/// The repository root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

const KERNEL: &str = "docs/tutorial/softmax_xent.kir";

/// One fenced block of the tutorial: its info string, its text and the line it starts on.
struct Block {
    lang: String,
    text: String,
    line: usize,
}

/// The fenced blocks of a Markdown text, in order. A fence may be indented (a block inside a
/// list item); its lines lose the fence's indentation.
fn blocks(md: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<(Block, usize)> = None;
    for (i, line) in md.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match (&mut open, trimmed.strip_prefix("```")) {
            (None, Some(info)) => {
                let b = Block {
                    lang: info.trim().to_string(),
                    text: String::new(),
                    line: i + 1,
                };
                open = Some((b, indent));
            }
            (Some(_), Some("")) => out.push(open.take().expect("an open block").0),
            (Some((b, ind)), _) => {
                b.text
                    .push_str(line.get(*ind..).unwrap_or("").trim_end_matches('\r'));
                b.text.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(
        open.is_none(),
        "docs/tutorial.md: a fenced block is never closed"
    );
    out
}

/// Whether `got` matches `want` line for line, a `want` line `...` matching any lines.
fn matches(want: &[&str], got: &[&str]) -> bool {
    match want.split_first() {
        None => got.is_empty(),
        Some((&"...", rest)) => (0..=got.len()).any(|k| matches(rest, &got[k..])),
        Some((w, rest)) => got.first() == Some(w) && matches(rest, &got[1..]),
    }
}

/// Runs one `sh` block as the tutorial's reader would, with `/tmp/xent` at `dir`.
fn run_block(block: &str, dir: &Path) -> (bool, String) {
    let bin = Path::new(env!("CARGO_BIN_EXE_kirc"));
    let path = format!(
        "{}:{}",
        bin.parent().expect("kirc's directory").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let script = format!("exec 2>&1\n{}", block.replace("/tmp/xent", s(dir)));
    let o = Command::new("bash")
        .args(["-eo", "pipefail", "-c", &script])
        .current_dir(root())
        .env("PATH", path)
        .env("KIR_CACHE_DIR", "off")
        .env_remove("KIR_LOG")
        .output()
        .expect("bash runs");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

#[test]
fn every_sh_block_prints_what_the_tutorial_shows() {
    let md = std::fs::read_to_string(root().join("docs/tutorial.md")).expect("docs/tutorial.md");
    let bs = blocks(&md);
    let dir = scratch("tutorial", "blocks");
    let mut ran = 0;
    for (i, b) in bs.iter().enumerate() {
        if b.lang != "sh" {
            continue;
        }
        let want = match bs.get(i + 1) {
            Some(t) if t.lang == "text" => t.text.replace("/tmp/xent", s(&dir)),
            _ => panic!(
                "docs/tutorial.md:{}: an sh block without its text block",
                b.line
            ),
        };
        let (ok, got) = run_block(&b.text, &dir);
        let want_lines: Vec<&str> = want.lines().collect();
        let got_lines: Vec<&str> = got.lines().collect();
        assert!(
            ok && matches(&want_lines, &got_lines),
            "docs/tutorial.md:{}: the block {}\n{}\nprinted:\n{got}\nthe tutorial shows:\n{want}",
            b.line,
            if ok {
                "ran, but its output differs"
            } else {
                "FAILED"
            },
            b.text
        );
        ran += 1;
    }
    assert!(ran >= 6, "only {ran} sh blocks in docs/tutorial.md");

    // Step 3's files: the interpreter's results against the f64 oracle.
    let (lshape, logits) = read_f32(&dir.join("logits.npy"));
    let (yshape, labels) = read_i32(&dir.join("labels.npy"));
    let (r, v) = (lshape[0], lshape[1]);
    assert_eq!((lshape.len(), yshape), (2, vec![r]));
    assert_eq!((r, v), (37, 50257), "step 3's shapes");
    let x: Vec<f64> = logits.iter().map(|&a| f64::from(a)).collect();
    assert!(
        x.iter().any(|a| a.abs() > 8.0),
        "step 3's logits have magnitudes above 1"
    );
    let (loss, lse) = xent(&x, &labels, r, v, -100);
    let out = dir.join("out");
    let (_, got_loss) = read_f32(&out.join("loss.npy"));
    let (_, got_lse) = read_f32(&out.join("lse.npy"));
    check_outputs("step 3", &got_loss, &got_lse, &loss, &lse);

    // Step 2's mistake, directly: located, with the line and a caret, exit code 2.
    let broken = dir.join("broken.kir");
    let o = kirc(&["check", s(&broken)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    let lines: Vec<&str> = e.lines().collect();
    assert!(
        lines[0].starts_with(&format!(
            "{}:50:5: error: `add` operands differ",
            s(&broken)
        )),
        "{e}"
    );
    assert!(
        lines[1].contains("%sn = add %sa, %e") && lines[2].trim_start().starts_with("| "),
        "{e}"
    );
    assert!(lines[2].ends_with(&"^".repeat(33)), "{e}");
}

#[test]
fn the_kernel_excerpts_are_the_kernel() {
    let md = std::fs::read_to_string(root().join("docs/tutorial.md")).expect("docs/tutorial.md");
    let kernel = std::fs::read_to_string(root().join(KERNEL)).expect("the kernel");
    let lines: Vec<&str> = kernel.lines().collect();
    let mut excerpts = 0;
    for b in blocks(&md) {
        // The unlabelled blocks that quote IR (the formulas and the Python output do not).
        let quotes_ir = b.text.contains('%') || b.text.contains("module ");
        if !b.lang.is_empty() || !quotes_ir {
            continue;
        }
        // Each excerpt line (but `...`) is a kernel line, after the previous one.
        let mut at = 0;
        for l in b.text.lines().filter(|l| l.trim() != "...") {
            match lines[at..].iter().position(|k| *k == l) {
                Some(p) => at += p + 1,
                None => panic!(
                    "docs/tutorial.md:{}: `{l}` is not a line of {KERNEL} after line {at}",
                    b.line
                ),
            }
        }
        excerpts += 1;
    }
    assert!(excerpts >= 5, "only {excerpts} kernel excerpts");
}

/// One random case: `kirc run` of the kernel against the f64 oracle.
fn case(rng: &mut Rng, dir: &Path, dtype: &str, r: usize, v: usize, block: Option<usize>) {
    let mut x = vec![0f32; r * v];
    let mut labels = vec![0i32; r];
    for row in 0..r {
        let shift = rng.uniform(-100.0, 100.0);
        let scale = rng.uniform(1.5, 6.0);
        for j in 0..v {
            x[row * v + j] = (shift + scale * rng.normal()) as f32;
        }
        labels[row] = match rng.below(8) {
            0 => -100,
            1 => [-1, -99, -101, i32::MIN][rng.below(4)],
            2 => v as i32 + rng.below(3) as i32,
            _ => rng.below(v) as i32,
        };
    }
    // Masked classes: a leading run of −inf (whole chunks and more) in row 0, all of row 1.
    if r > 1 && v > 1 {
        let lead = 1 + rng.below(v - 1);
        x[..lead].fill(f32::NEG_INFINITY);
        x[v..2 * v].fill(f32::NEG_INFINITY);
        if labels[0] >= 0 && (labels[0] as usize) < v {
            labels[0] = (lead + rng.below(v - lead)) as i32;
        }
    }
    let what = format!("{dtype} R={r} V={v} BLOCK={block:?}");
    let (xp, yp, out) = (dir.join("x.npy"), dir.join("y.npy"), dir.join("out"));
    write_f32(&xp, &[r, v], &x);
    write_i32(&yp, &[r], &labels);
    // Stale outputs in the way: the run must replace them.
    std::fs::create_dir_all(&out).expect("out dir");
    write_f32(&out.join("loss.npy"), &[r], &vec![1.0; r]);
    write_f32(&out.join("lse.npy"), &[r], &vec![1.0; r]);
    let xa = format!("logits={}", s(&xp));
    let ya = format!("labels={}", s(&yp));
    let dt = format!("DTYPE={dtype}");
    let bl = block.map(|b| format!("BLOCK={b}"));
    let mut args = vec![
        "run",
        KERNEL,
        "-D",
        &dt,
        "--arg",
        &xa,
        "--arg",
        &ya,
        "--out",
        s(&out),
    ];
    if let Some(b) = &bl {
        args.extend(["-D", b]);
    }
    let o = Command::new(env!("CARGO_BIN_EXE_kirc"))
        .current_dir(root())
        .env("KIR_CACHE_DIR", "off")
        .env_remove("KIR_LOG")
        .args(&args)
        .output()
        .expect("kirc runs");
    assert!(o.status.success(), "{what}: {}", stderr(&o));
    let xr: Vec<f64> = x.iter().map(|&a| round_to(a, dtype)).collect();
    let (loss, lse) = xent(&xr, &labels, r, v, -100);
    let (ls, got_loss) = read_f32(&out.join("loss.npy"));
    let (es, got_lse) = read_f32(&out.join("lse.npy"));
    assert_eq!((ls, es), (vec![r], vec![r]), "{what}");
    check_outputs(&what, &got_loss, &got_lse, &loss, &lse);
}

#[test]
fn the_kernel_matches_the_f64_oracle_on_random_ragged_inputs() {
    let seed = std::env::var("KIR_TEST_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(support::fresh_seed);
    eprintln!("tutorial: KIR_TEST_SEED={seed}");
    let mut rng = Rng::new(seed);
    let dir = scratch("tutorial", "random");
    let shapes: &[(usize, usize, Option<usize>)] = &[
        (1, 1, None),
        (3, 5, None),
        (5, 2047, None),
        (4, 2048, None),
        (7, 2049, None),
        (9, 5000, Some(512)),
        (6, 777, Some(1)),
        (13, 9000, Some(4096)),
        (3, 50257, None),
    ];
    for dtype in ["f32", "f16", "bf16"] {
        for &(r, v, block) in shapes {
            case(&mut rng, &dir, dtype, r, v, block);
        }
    }
}
