//! Robustness: mutate every valid `.kir` file in the repository (token deletions, swaps,
//! duplications, insertions and truncations, long operator chains of up to 40,000 terms, and
//! huge literals replacing numbers; ≥ 10,000 cases) and show that the parser, the verifier and
//! specialization never panic or overflow the stack — each mutant is accepted or gets errors —
//! and that one mutant in 16 that passes the front end also compiles to PTX and CUDA C or gets
//! a clean error.

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

/// Literals at and past the limits of every numeric type and of the tile limits.
const HUGE: &[&str] = &[
    "9223372036854775807",
    "9223372036854775808",
    "99999999999999999999999",
    "4294967296",
    "2147483648",
    "65536",
    "16777217",
    "1e999",
    "1e39",
    "-1e400",
    "1.8e308",
    "70000.0",
    "3.4028236e38",
    "(-9223372036854775807 - 1)",
];

/// A flat chain `a op a op … op a` of `n` terms with one operator.
fn long_chain(rng: &mut Rng) -> String {
    const OPS: [&str; 9] = ["+", "-", "*", "/", "%", "&&", "||", "==", "<"];
    let op = OPS[rng.range(0, OPS.len())];
    // Mostly far past the parser's nesting limit, sometimes just below it.
    let n = match rng.range(0, 4) {
        0 => rng.range(2, kir_ir::text::parser::MAX_DEPTH),
        _ => rng.range(kir_ir::text::parser::MAX_DEPTH, 40_000),
    };
    let term = ["1", "2", "BLOCK", "x"][rng.range(0, 4)];
    format!("({})", vec![term; n].join(&format!(" {op} ")))
}

fn check(src: &str, backends: bool) {
    let Ok(m) = kir_ir::text::parse(src) else {
        return;
    };
    let _ = kir_ir::verifier::verify(&m);
    let _ = kir_ir::text::print(&m);
    if let Ok((_, spec)) = kir_compiler::internal::pipeline::frontend(src, &[]) {
        let _ = kir_ir::text::print(&spec);
        if backends {
            use kir_compiler::internal::compile::{compile, Emit};
            for emit in [Emit::Ptx, Emit::Cuda] {
                let _ = compile(src, &[], None, kir_backends::Target::Sm80, emit);
            }
        }
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
        // Replacement texts (chains, huge literals) and the token they replace, applied after
        // the other mutations.
        let mut owned: Vec<String> = Vec::new();
        let mut replaced: Vec<usize> = Vec::new();
        let n_mut = 1 + rng.range(0, 3);
        for _ in 0..n_mut {
            if toks.is_empty() {
                break;
            }
            let i = rng.range(0, toks.len());
            match rng.range(0, 7) {
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
                4 => toks.truncate(i),
                // A number (or anything, when there is none after i) becomes a long chain or
                // a huge literal.
                k => {
                    let at = (i..toks.len())
                        .find(|&j| toks[j].bytes().all(|c| c.is_ascii_digit()))
                        .unwrap_or(i);
                    owned.push(if k == 5 {
                        long_chain(&mut rng)
                    } else {
                        HUGE[rng.range(0, HUGE.len())].to_string()
                    });
                    replaced.push(at);
                }
            }
        }
        for (&at, text) in replaced.iter().zip(&owned) {
            if at < toks.len() {
                toks[at] = text;
            }
        }
        let mutant: String = toks.concat();
        let backends = case % 16 == 0;
        let r = catch_unwind(AssertUnwindSafe(|| check(&mutant, backends)));
        assert!(r.is_ok(), "panic on mutant {case}:\n{mutant}");
        if kir_ir::text::parse(&mutant).is_ok() {
            accepted += 1;
        }
    }
    eprintln!("{cases} mutants, {accepted} parsed");
}
