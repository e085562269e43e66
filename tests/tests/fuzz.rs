//! Robustness: mutate every valid `.kir` file in the repository (token deletions, swaps,
//! duplications, insertions and truncations; ≥ 10,000 cases) and show that the parser, the
//! verifier and specialization never panic — each mutant is accepted or gets errors.

use kir_tests::{kir_files, Rng};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Splits text into tokens (runs of word characters, or single other characters), keeping
/// whitespace as separate pieces so mutants stay readable.
fn tokens(src: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let b = src.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let word =
            |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'%' || c == b'@' || c == b'.';
        let start = i;
        if word(b[i]) {
            while i < b.len() && word(b[i]) {
                i += 1;
            }
        } else if b[i].is_ascii_whitespace() {
            while i < b.len() && b[i].is_ascii_whitespace() {
                i += 1;
            }
        } else {
            i += src[i..].chars().next().map_or(1, |c| c.len_utf8());
        }
        out.push(&src[start..i]);
    }
    out
}

const INSERTS: &[&str] = &[
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "<",
    ">",
    ",",
    ":",
    "=",
    "-",
    "%v0",
    "%x",
    "@k",
    "0",
    "-1",
    "99999999999",
    "tile",
    "x",
    "yield",
    "for",
    "if",
    "static_if",
    "load",
    "dot",
    "f32",
    "i1",
    "inf",
    "nan",
    "//",
    "\n",
    "kernel",
    "program",
    "const",
    "launch",
    "cdiv(",
    "1.5e308",
    "é",
];

fn check(src: &str) {
    let Ok(m) = kir_ir::text::parse(src) else {
        return;
    };
    let _ = kir_ir::verifier::verify(&m);
    let _ = kir_ir::text::print(&m);
    if let Ok((_, spec)) = kir_compiler::pipeline::frontend(src, &[]) {
        let _ = kir_ir::text::print(&spec);
    }
}

#[test]
fn mutated_files_never_panic() {
    let files: Vec<String> = kir_files()
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .filter(|s| kir_ir::text::parse(s).is_ok())
        .collect();
    assert!(!files.is_empty());
    let mut rng = Rng::fresh("fuzz");
    let cases = 12_000;
    let mut accepted = 0;
    for case in 0..cases {
        let src = &files[case % files.len()];
        let mut toks = tokens(src);
        let n_mut = 1 + rng.range(0, 3);
        for _ in 0..n_mut {
            if toks.is_empty() {
                break;
            }
            let i = rng.range(0, toks.len());
            match rng.range(0, 5) {
                0 => {
                    let len = rng.range(1, 4).min(toks.len() - i);
                    toks.drain(i..i + len);
                }
                1 => {
                    let j = rng.range(0, toks.len());
                    toks.swap(i, j);
                }
                2 => {
                    let t = toks[i];
                    toks.insert(i, t);
                }
                3 => toks.insert(i, INSERTS[rng.range(0, INSERTS.len())]),
                _ => toks.truncate(i),
            }
        }
        let mutant: String = toks.concat();
        let r = catch_unwind(AssertUnwindSafe(|| check(&mutant)));
        assert!(r.is_ok(), "panic on mutant {case}:\n{mutant}");
        if kir_ir::text::parse(&mutant).is_ok() {
            accepted += 1;
        }
    }
    eprintln!("{cases} mutants, {accepted} parsed");
}
