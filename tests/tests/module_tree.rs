//! Keeps the library crates kir-compiler (compiler/src: the driver, the plan, the search, the
//! pass manager, the passes, the e-graph) and kir-ir (ir/src: the IR, its text format, the
//! verifier, the editing toolkit) free of import cycles between files, and every file of them
//! documented with a `//!` module doc. (The PTX backend's layers are checked by
//! backends/src/ptx/layers_test.rs.)
//!
//! A file depends on another when its code outside `#[cfg(test)]` items names a path into it:
//! a `use` line (`use super::types::Piped;`, `use crate::egraph::analysis::TileGraph;`, groups
//! `{a, b::c}` included) or a qualified path in the code (`super::rules_sched::check(b, d)`, or
//! `child::f()` in a file that declares `mod child;`). A path depends on the deepest file module
//! it names: `super::X` for an item X of the parent depends on the parent's `mod.rs`. Declaring a
//! child module (`mod child;`) is not a dependency. The files must form a DAG: a shared type goes
//! to a leaf file (a `types.rs`) that both sides import, never back into the file that declares
//! them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The trees checked: (crate source directory, subdirectory), relative to the workspace root.
/// An empty subdirectory is the whole library crate.
const TREES: &[(&str, &str)] = &[("compiler/src", ""), ("ir/src", "")];

/// One source file: its crate, its module path in that crate and its text.
struct File {
    krate: String,
    module: Vec<String>,
    rel: String,
    text: String,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn files() -> Vec<File> {
    let root = workspace();
    let mut out = vec![];
    for (krate, sub) in TREES {
        let src = root.join(krate);
        let mut paths = vec![];
        rust_files(&src.join(sub), &mut paths);
        assert!(!paths.is_empty(), "no files under {krate}/{sub}");
        for p in paths {
            let rel = p.strip_prefix(&src).expect("under the crate source");
            let mut module: Vec<String> = rel
                .with_extension("")
                .iter()
                .map(|c| c.to_string_lossy().into_owned())
                .collect();
            if module.last().is_some_and(|m| m == "mod") {
                module.pop();
            }
            out.push(File {
                krate: krate.to_string(),
                module,
                rel: p
                    .strip_prefix(&root)
                    .expect("in the workspace")
                    .display()
                    .to_string(),
                text: std::fs::read_to_string(&p).expect("a readable source file"),
            });
        }
    }
    out
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Sep,
    Open,
    Close,
    Comma,
    Semi,
    Star,
    Pound,
    Other,
}

/// The tokens of `src` that matter for paths; comments, strings and char literals dropped.
fn tokens(src: &str) -> Vec<Tok> {
    let c: Vec<char> = src.chars().collect();
    let mut out = vec![];
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && c.get(i + 1) == Some(&'*') {
            i += 2;
            while i + 1 < c.len() && !(c[i] == '*' && c[i + 1] == '/') {
                i += 1;
            }
            i += 2;
        } else if ch == 'r' && matches!(c.get(i + 1), Some('#') | Some('"')) && {
            let mut j = i + 1;
            while c.get(j) == Some(&'#') {
                j += 1;
            }
            c.get(j) == Some(&'"')
        } {
            // A raw string: r"…" or r#"…"#.
            let mut hashes = 0;
            i += 1;
            while c[i] == '#' {
                hashes += 1;
                i += 1;
            }
            i += 1;
            loop {
                if i >= c.len() {
                    break;
                }
                if c[i] == '"' && (0..hashes).all(|h| c.get(i + 1 + h) == Some(&'#')) {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
            out.push(Tok::Other);
        } else if ch == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push(Tok::Other);
        } else if ch == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if c.get(i + 1) == Some(&'\\') {
                i += 3;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
            out.push(Tok::Other);
        } else if ch.is_alphanumeric() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push(Tok::Ident(c[start..i].iter().collect()));
        } else {
            if ch == ':' && c.get(i + 1) == Some(&':') {
                out.push(Tok::Sep);
                i += 1;
            } else {
                out.push(match ch {
                    '{' => Tok::Open,
                    '}' => Tok::Close,
                    ',' => Tok::Comma,
                    ';' => Tok::Semi,
                    '*' => Tok::Star,
                    '#' => Tok::Pound,
                    c if c.is_whitespace() => {
                        i += 1;
                        continue;
                    }
                    _ => Tok::Other,
                });
            }
            i += 1;
        }
    }
    out
}

/// `toks` without the items under `#[cfg(test)]`.
fn without_tests(toks: Vec<Tok>) -> Vec<Tok> {
    let attr = [
        Tok::Pound,
        Tok::Other,
        Tok::Ident("cfg".into()),
        Tok::Other,
        Tok::Ident("test".into()),
        Tok::Other,
        Tok::Other,
    ];
    let mut out = vec![];
    let mut i = 0;
    while i < toks.len() {
        if toks[i..].starts_with(&attr) {
            // Skip the item: up to its `;`, or through its braces.
            i += attr.len();
            let mut depth = 0;
            while i < toks.len() {
                match toks[i] {
                    Tok::Semi if depth == 0 => break,
                    Tok::Open => depth += 1,
                    Tok::Close => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            i += 1;
        } else {
            out.push(toks[i].clone());
            i += 1;
        }
    }
    out
}

/// The child modules `toks` declares (`mod x;`).
fn children(toks: &[Tok]) -> BTreeSet<String> {
    toks.windows(3)
        .filter_map(|w| match w {
            [Tok::Ident(m), Tok::Ident(name), Tok::Semi] if m == "mod" => Some(name.clone()),
            _ => None,
        })
        .collect()
}

/// Reads a path tree starting at `toks[i]` (an identifier); returns every full path it names
/// (a group `{a, b::c}` gives one per member) and the index after it.
fn read_path(toks: &[Tok], mut i: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix;
    loop {
        match toks.get(i) {
            Some(Tok::Ident(s)) => {
                if s != "self" || path.is_empty() {
                    path.push(s.clone());
                }
                i += 1;
            }
            Some(Tok::Star) => {
                i += 1;
                break;
            }
            Some(Tok::Open) => {
                i += 1;
                loop {
                    match toks.get(i) {
                        Some(Tok::Close) => {
                            i += 1;
                            break;
                        }
                        Some(Tok::Comma) => i += 1,
                        Some(Tok::Ident(_)) | Some(Tok::Star) | Some(Tok::Open) => {
                            i = read_path(toks, i, path.clone(), out);
                            // `x as y`
                            if toks.get(i) == Some(&Tok::Ident("as".into())) {
                                i += 2;
                            }
                        }
                        _ => return i,
                    }
                }
                return i;
            }
            _ => break,
        }
        if toks.get(i) == Some(&Tok::Sep) {
            i += 1;
        } else {
            break;
        }
    }
    out.push(path);
    i
}

/// Every path file `f` names that starts at `crate`, `self`, `super` or a child it declares,
/// made absolute within its crate.
fn paths(f: &File) -> Vec<Vec<String>> {
    let toks = without_tests(tokens(&f.text));
    let kids = children(&toks);
    let mut out = vec![];
    let mut i = 0;
    while i < toks.len() {
        let starts = match &toks[i] {
            Tok::Ident(s) => {
                let after_sep = i > 0 && toks[i - 1] == Tok::Sep;
                let before_sep = toks.get(i + 1) == Some(&Tok::Sep);
                // `pub(in crate::a::b)` names a scope, not a dependency.
                let visibility =
                    i > 1 && toks[i - 1] == Tok::Ident("in".into()) && toks[i - 2] == Tok::Other;
                !after_sep
                    && !visibility
                    && before_sep
                    && (s == "crate" || s == "super" || s == "self" || kids.contains(s))
            }
            _ => false,
        };
        if !starts {
            i += 1;
            continue;
        }
        let mut found = vec![];
        i = read_path(&toks, i, vec![], &mut found);
        for p in found {
            let mut abs: Vec<String> = match p[0].as_str() {
                "crate" => vec![],
                _ => f.module.clone(),
            };
            let mut rest = &p[..];
            if rest[0] == "crate" || rest[0] == "self" {
                rest = &rest[1..];
            }
            while rest.first().is_some_and(|s| s == "super") {
                abs.pop();
                rest = &rest[1..];
            }
            abs.extend(rest.iter().cloned());
            out.push(abs);
        }
    }
    out
}

/// The file dependency graph: for each file (by index), the files it depends on.
fn graph(files: &[File]) -> Vec<BTreeSet<usize>> {
    let index: BTreeMap<(&str, &[String]), usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| ((f.krate.as_str(), f.module.as_slice()), i))
        .collect();
    files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let mut deps = BTreeSet::new();
            for p in paths(f) {
                // The deepest file module the path names.
                let target = (0..=p.len())
                    .rev()
                    .find_map(|n| index.get(&(f.krate.as_str(), &p[..n])).copied());
                if let Some(t) = target.filter(|&t| t != i) {
                    deps.insert(t);
                }
            }
            deps
        })
        .collect()
}

/// A cycle of the graph, as file indices, if there is one.
fn cycle(g: &[BTreeSet<usize>]) -> Option<Vec<usize>> {
    // 0 = unvisited, 1 = on the stack, 2 = done.
    fn visit(
        n: usize,
        g: &[BTreeSet<usize>],
        state: &mut [u8],
        stack: &mut Vec<usize>,
    ) -> Option<Vec<usize>> {
        state[n] = 1;
        stack.push(n);
        for &m in &g[n] {
            if state[m] == 1 {
                let at = stack.iter().position(|&x| x == m).expect("on the stack");
                let mut c = stack[at..].to_vec();
                c.push(m);
                return Some(c);
            }
            if state[m] == 0 {
                if let Some(c) = visit(m, g, state, stack) {
                    return Some(c);
                }
            }
        }
        stack.pop();
        state[n] = 2;
        None
    }
    let mut state = vec![0; g.len()];
    (0..g.len()).find_map(|n| {
        if state[n] == 0 {
            visit(n, g, &mut state, &mut vec![])
        } else {
            None
        }
    })
}

#[test]
fn no_import_cycle_between_files() {
    let files = files();
    let g = graph(&files);
    if let Some(c) = cycle(&g) {
        let names: Vec<&str> = c.iter().map(|&i| files[i].rel.as_str()).collect();
        panic!("import cycle: {}", names.join(" -> "));
    }
}

#[test]
fn the_checker_sees_dependencies() {
    // The checker itself: a use line, a group, a qualified path and a child's path are edges.
    let f = |module: &[&str], text: &str| File {
        krate: "c".into(),
        module: module.iter().map(|s| s.to_string()).collect(),
        rel: module.join("/"),
        text: text.into(),
    };
    let files = vec![
        f(&["p"], "mod a;\nmod b;\nfn f() { a::g(); }\n"),
        f(&["p", "a"], "use super::{b::{self, X}, Y};\n"),
        f(
            &["p", "b"],
            "pub(in crate::p) fn h() { crate::p::a::g(); }\n#[cfg(test)]\nmod tests { use super::super::*; }\n",
        ),
    ];
    let g = graph(&files);
    assert_eq!(g[0], BTreeSet::from([1]));
    assert_eq!(g[1], BTreeSet::from([0, 2]));
    assert_eq!(g[2], BTreeSet::from([1]));
    assert_eq!(cycle(&g).map(|c| c.len()), Some(3), "p -> a -> p");
}

#[test]
fn every_file_has_a_module_doc() {
    for f in files() {
        assert!(
            f.text.starts_with("//!"),
            "{} does not start with a `//!` module doc",
            f.rel
        );
    }
}
