//! The PTX backend's layering, checked from its source: every file under `src/ptx` imports only
//! its own layer or the ones below it (`emit` < `plan` < `lower` < the root `mod.rs`), no files
//! import each other in a cycle (inside `lower/` too: the concerns lower nested regions through
//! `lower/region.rs`, not by importing the dispatcher), and no instruction text is built with
//! `format!` outside `emit/`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, as a path relative to `root` with `/` separators.
fn files(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read src/ptx")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files(root, &p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let rel = p.strip_prefix(root).expect("under root");
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// The module path of a file (`lower/ctx.rs` → [lower, ctx]; `lower/mod.rs` → [lower]).
fn module_of(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file.split('/').map(str::to_string).collect();
    let last = parts.pop().unwrap_or_default();
    if last != "mod.rs" {
        parts.push(last.trim_end_matches(".rs").to_string());
    }
    parts
}

/// The layer of a file: 0 `emit/`, 1 `plan/`, 2 `lower/`, 3 the root.
fn layer(file: &str) -> usize {
    match file.split('/').next() {
        Some("emit") => 0,
        Some("plan") => 1,
        Some("lower") => 2,
        _ => 3,
    }
}

/// The code of a file without its tests and comments.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or("");
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a file names through `super::` or `crate::ptx::` (group imports expanded), as
/// module paths from the `ptx` root.
fn referenced(file: &str, code: &str) -> Vec<Vec<String>> {
    let here = module_of(file);
    // A non-mod file's `super` is its directory; a mod.rs's `super` is the parent directory.
    let dir: Vec<String> = if file.ends_with("mod.rs") {
        here[..here.len().saturating_sub(1)].to_vec()
    } else {
        here[..here.len() - 1].to_vec()
    };
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let (mut base, skip) = if rest.starts_with("crate::ptx::") {
            (Vec::new(), "crate::ptx::".len())
        } else if rest.starts_with("super::")
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'))
        {
            let mut base = dir.clone();
            let mut skip = "super::".len();
            while code[i + skip..].starts_with("super::") {
                base.pop();
                skip += "super::".len();
            }
            (base, skip)
        } else {
            i += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        let tail = &code[i + skip..];
        let mut j = 0;
        let tb = tail.as_bytes();
        let mut seg = String::new();
        loop {
            if j < tb.len() && (tb[j].is_ascii_alphanumeric() || tb[j] == b'_') {
                seg.push(tb[j] as char);
                j += 1;
            } else if tail[j..].starts_with("::") && !seg.is_empty() {
                base.push(std::mem::take(&mut seg));
                j += 2;
            } else {
                break;
            }
        }
        if !seg.is_empty() {
            base.push(seg);
            out.push(base);
        } else if tail[j..].starts_with('{') {
            let end = tail[j..].find('}').map_or(tail.len(), |e| j + e);
            for item in tail[j + 1..end].split(',') {
                let mut p = base.clone();
                p.extend(
                    item.trim()
                        .split("::")
                        .filter(|s| !s.is_empty() && *s != "self" && !s.contains(' '))
                        .map(str::to_string),
                );
                out.push(p);
            }
        } else {
            out.push(base);
        }
        i += skip + j.max(1);
    }
    out
}

/// The file-level import graph of `src/ptx`: file → the files it names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ptx");
    let mut all = Vec::new();
    files(&root, &root, &mut all);
    let modules: BTreeMap<Vec<String>, String> =
        all.iter().map(|f| (module_of(f), f.clone())).collect();
    let mut g = BTreeMap::new();
    for f in &all {
        if f == "layers_test.rs" {
            continue;
        }
        let text = std::fs::read_to_string(root.join(f)).expect("read file");
        let mut to = BTreeSet::new();
        for path in referenced(f, &code(&text)) {
            // The longest prefix of the path that is a file's module.
            let target = (0..=path.len())
                .rev()
                .find_map(|n| modules.get(&path[..n]))
                .expect("the root module always matches");
            if target != f {
                to.insert(target.clone());
            }
        }
        g.insert(f.clone(), to);
    }
    g
}

/// The strongly connected components of `g` with more than one file (Tarjan).
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.g.get(v).into_iter().flatten() {
            if !t.index.contains_key(w.as_str()) {
                visit(t, w);
                let lw = t.low[w.as_str()];
                let lv = t.low[v];
                t.low.insert(v, lv.min(lw));
            } else if t.on.contains(w.as_str()) {
                let iw = t.index[w.as_str()];
                let lv = t.low[v];
                t.low.insert(v, lv.min(iw));
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = BTreeSet::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn imports_go_only_downward() {
    let g = graph();
    assert!(g.contains_key("emit/inst.rs") && g.contains_key("lower/ctx.rs"));
    let upward: Vec<String> = g
        .iter()
        .flat_map(|(f, to)| {
            to.iter()
                .filter(|t| layer(t) > layer(f))
                .map(move |t| format!("{f} -> {t}"))
        })
        .collect();
    assert!(upward.is_empty(), "upward imports: {upward:#?}");
}

#[test]
fn no_import_cycles() {
    let g = graph();
    let comps = cycles(&g);
    assert!(
        comps.is_empty(),
        "files that import each other in a cycle: {comps:#?}"
    );
    // The check sees a cycle where there is one.
    let mut looped = g.clone();
    looped
        .entry("lower/ctx.rs".to_string())
        .or_default()
        .insert("lower/kernel.rs".to_string());
    assert!(!cycles(&looped).is_empty());
}

/// A string literal that starts like a PTX instruction: an optional guard, then an opcode with
/// at least one `.modifier`, then a space (`"ld.global.b32 {r}, [{a}]"`).
fn looks_like_instruction(lit: &str) -> bool {
    let s = lit
        .strip_prefix('@')
        .map_or(lit, |r| r.split_once(' ').map_or("", |(_, after)| after));
    let Some((head, _)) = s.split_once(' ') else {
        return false;
    };
    let mut parts = head.split('.');
    let op = parts.next().unwrap_or("");
    let word = |w: &str| !w.is_empty() && w.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    let mods: Vec<&str> = parts.collect();
    op.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
        && word(op)
        && !mods.is_empty()
        && mods
            .iter()
            .all(|m| m.split("::").all(|w| word(w) || w.starts_with('{')))
}

#[test]
fn instruction_text_only_in_emit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ptx");
    let mut all = Vec::new();
    files(&root, &root, &mut all);
    let mut bad = Vec::new();
    for f in all
        .iter()
        .filter(|f| layer(f) != 0 && *f != "layers_test.rs")
    {
        let text = std::fs::read_to_string(root.join(f)).expect("read file");
        let code = code(&text);
        for (n, piece) in code.split("format!(").enumerate().skip(1) {
            let lit = piece
                .trim_start()
                .strip_prefix('"')
                .and_then(|s| s.split('"').next())
                .unwrap_or("");
            if looks_like_instruction(lit) {
                bad.push(format!("{f}: format! #{n}: {lit:?}"));
            }
        }
        if code.contains("ins(format!") || code.contains(".ins(\"") {
            bad.push(format!("{f}: instruction text passed to the builder"));
        }
    }
    assert!(bad.is_empty(), "instruction text outside emit/: {bad:#?}");
    assert!(looks_like_instruction("ld.global.b32 {r}, [{a}]"));
    assert!(looks_like_instruction(
        "@{p} mbarrier.init.shared::cta.b64 [{a}], 1"
    ));
    assert!(!looks_like_instruction("mma.sync: {why}"));
    assert!(!looks_like_instruction(".param .u64 {pname}"));
}
