//! Keeps the design documents' references true: every repository path and every Rust type name
//! that docs/architecture.md, docs/backends.md, docs/passes.md, docs/cache.md, docs/configs.md,
//! docs/tuning.md, docs/python.md, docs/cli.md, docs/api.md and docs/tutorial.md cite must exist, and one failure lists every missing item
//! of every document.
//!
//! What counts as a citation (simple rules, applied to the whole text, fenced blocks included):
//!
//! - **A source path**: a word that starts with one of the source directories (`ir/`,
//!   `backends/`, `compiler/`, `kirc/`, `tests/`, `docs/`, `scripts/`, `python/`, optionally
//!   after `./`), in prose, in backticks or in a fenced block. A shell command's `scripts/…`
//!   must exist; its output or scratch paths (`out/…`, `/tmp/…`) are not source paths and are
//!   not checked. Trailing sentence punctuation (`.`, `,`, `:`, `;`) is not part of the path; `*`
//!   and `?` match within one path segment, `{a,b}` lists alternatives (each must exist), a
//!   trailing `/` names a directory.
//! - **Any other path in backticks**: a backticked word of path characters that ends in `.rs`,
//!   `.md`, `.kir`, `.py`, `.sh` or `.toml` after a non-empty name (so `.kir`, an extension, and
//!   `kir-backends/cuda`, a cargo feature, are not paths). With a `/` it must exist relative to
//!   the repository root (so a script that lives outside the repository fails). A bare file name
//!   (`runner.rs`) must exist at the root or in the directory of the last path cited before it in
//!   the same section (a section ends at a line starting with `#`), as in "backends/src/interp/
//!   … `runner.rs`, `bind.rs`".
//! - **A type**: a backticked Rust path without spaces, generics or calls (`Frontend`,
//!   `kir_ir::Module`, `CompileError::Source`) whose segments include a CamelCase one (an upper
//!   case first letter and a lower case letter somewhere: `ALL` and `HEAD_DIM` are not). Each
//!   CamelCase segment must be defined in the Rust sources: after `struct`, `enum`, `trait`,
//!   `type` or `union`, as the first name of a type-defining macro call (`named_enum! { CmpPred
//!   { … } }`), or as a variant of an enum (`Pure`, `Source`).
//!
//! The source tree is read from disk (`target/` and hidden directories skipped).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const DOCS: &[&str] = &[
    "docs/architecture.md",
    "docs/backends.md",
    "docs/passes.md",
    "docs/cache.md",
    "docs/configs.md",
    "docs/tuning.md",
    "docs/python.md",
    "docs/cli.md",
    "docs/api.md",
    "docs/tutorial.md",
];
const SOURCE_DIRS: &[&str] = &[
    "ir", "backends", "compiler", "kirc", "tests", "docs", "scripts", "python",
];
const EXTENSIONS: &[&str] = &[".rs", ".md", ".kir", ".py", ".sh", ".toml"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every file and directory under the source directories, relative, `/`-separated.
struct Tree {
    files: BTreeSet<String>,
    dirs: BTreeSet<String>,
}

impl Tree {
    fn read(root: &Path) -> Tree {
        let mut t = Tree {
            files: BTreeSet::new(),
            dirs: BTreeSet::new(),
        };
        for d in SOURCE_DIRS {
            t.walk(root, d);
        }
        t
    }

    fn walk(&mut self, root: &Path, rel: &str) {
        let Ok(entries) = std::fs::read_dir(root.join(rel)) else {
            return;
        };
        self.dirs.insert(rel.to_string());
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name == "target" {
                continue;
            }
            let child = format!("{rel}/{name}");
            if e.file_type().map(|f| f.is_dir()).unwrap_or(false) {
                self.walk(root, &child);
            } else {
                self.files.insert(child);
            }
        }
    }

    fn is_dir(&self, p: &str) -> bool {
        self.dirs.contains(p.trim_end_matches('/'))
    }

    /// Whether `p` (a path, a glob or a brace list) names existing entries.
    fn exists(&self, p: &str) -> bool {
        let p = p.strip_prefix("./").unwrap_or(p);
        expand_braces(p).iter().all(|q| {
            let dir_only = q.ends_with('/');
            let q = q.trim_end_matches('/');
            if q.is_empty() {
                return false;
            }
            if q.contains('*') || q.contains('?') {
                self.dirs.iter().any(|d| glob(q, d))
                    || (!dir_only && self.files.iter().any(|f| glob(q, f)))
            } else {
                self.dirs.contains(q) || (!dir_only && self.files.contains(q))
            }
        })
    }

    /// The directory a cited path stands for, as the base of bare file names after it.
    fn base_of(&self, p: &str) -> String {
        let p = p.strip_prefix("./").unwrap_or(p).trim_end_matches('/');
        if self.is_dir(p) || p.contains('{') || p.contains('*') {
            match p.find(['{', '*']) {
                Some(i) => p[..i].rsplit_once('/').map_or("", |(d, _)| d).to_string(),
                None => p.to_string(),
            }
        } else {
            p.rsplit_once('/').map_or("", |(d, _)| d).to_string()
        }
    }
}

/// `a/{b,c}.rs` → `a/b.rs`, `a/c.rs` (one list after another); an unbalanced brace stays as written
/// (and then names nothing).
fn expand_braces(p: &str) -> Vec<String> {
    let Some(open) = p.find('{') else {
        return vec![p.to_string()];
    };
    let Some(close) = p[open..].find('}').map(|i| open + i) else {
        return vec![p.to_string()];
    };
    let (head, alts, tail) = (&p[..open], &p[open + 1..close], &p[close + 1..]);
    alts.split(',')
        .flat_map(|a| expand_braces(&format!("{head}{a}{tail}")))
        .collect()
}

/// `*` (any run of characters but `/`) and `?` (one character but `/`).
fn glob(pat: &str, s: &str) -> bool {
    fn go(p: &[u8], s: &[u8]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], s) || (!s.is_empty() && s[0] != b'/' && go(p, &s[1..])),
            (Some(b'?'), Some(&c)) => c != b'/' && go(&p[1..], &s[1..]),
            (Some(&a), Some(&b)) => a == b && go(&p[1..], &s[1..]),
            _ => false,
        }
    }
    go(pat.as_bytes(), s.as_bytes())
}

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_.-/*?{},".contains(c)
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// CamelCase: an upper case first letter and a lower case letter somewhere.
fn is_camel(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_uppercase()) && s.contains(|c: char| c.is_ascii_lowercase())
}

/// The type names the Rust sources define, with every enum's variants.
fn defined_names(root: &Path, tree: &Tree) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for f in tree
        .files
        .iter()
        .filter(|f| f.ends_with(".rs") && !f.starts_with("docs/"))
    {
        let src =
            strip_comments_and_strings(&std::fs::read_to_string(root.join(f)).unwrap_or_default());
        let words = words(&src);
        for (i, &(pos, w)) in words.iter().enumerate() {
            let next = words.get(i + 1).map(|&(_, n)| n);
            match w {
                "struct" | "enum" | "trait" | "type" | "union" => {
                    if let Some(n) = next {
                        names.insert(n.to_string());
                    }
                    if w == "enum" {
                        enum_variants(&src[pos..], &mut names);
                    }
                }
                _ => {
                    // A macro call whose first name opens a brace: `named_enum! { Name { … } }`.
                    let after = &src[pos + w.len()..];
                    if w != "macro_rules" && after.starts_with('!') {
                        if let Some(n) = macro_type_name(after[1..].trim_start()) {
                            names.insert(n.to_string());
                        }
                    }
                }
            }
        }
    }
    names
}

/// `src` with its comments and the contents of its string and char literals blanked (newlines
/// kept), so that words in prose or in strings ("the type Foo") define nothing.
fn strip_comments_and_strings(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for x in &mut out[from.min(b.len())..to.min(b.len())] {
            if *x != b'\n' {
                *x = b' ';
            }
        }
    };
    let ident_before = |i: usize| i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = src[i..].find('\n').map_or(b.len(), |n| i + n);
                blank(&mut out, i, end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let (mut depth, mut j) = (0, i);
                while j < b.len() {
                    if b[j..].starts_with(b"/*") {
                        depth += 1;
                        j += 2;
                    } else if b[j..].starts_with(b"*/") {
                        depth -= 1;
                        j += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        j += 1;
                    }
                }
                blank(&mut out, i, j);
                i = j;
            }
            // Raw strings: r"…", r#"…"#, br"…".
            b'r' if (!ident_before(i) || (b[i - 1] == b'b' && !ident_before(i - 1)))
                && matches!(b.get(i + 1), Some(b'"') | Some(b'#')) =>
            {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let body = i + 2 + hashes;
                let end = src[body..].find(&close).map_or(b.len(), |n| body + n);
                blank(&mut out, body, end);
                i = end + close.len();
            }
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                blank(&mut out, i + 1, j);
                i = j + 1;
            }
            // A char literal ('x', '→', '\n', '\u{..}'); a lifetime ('a) has no closing quote.
            b'\'' => {
                let len = if b.get(i + 1) == Some(&b'\\') {
                    src[i + 3..].find('\'').map(|n| n + 3)
                } else {
                    src[i + 1..].chars().next().map(|c| c.len_utf8() + 1)
                };
                match len {
                    Some(n) if b.get(i + n) == Some(&b'\'') => {
                        blank(&mut out, i + 1, i + n);
                        i += n + 1;
                    }
                    _ => i += 1,
                }
            }
            _ => i += 1,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The identifiers of `src` with their byte offsets.
fn words(src: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut it = src.char_indices().peekable();
    let mut prev = ' ';
    while let Some((i, c)) = it.next() {
        if is_ident_start(c) && !is_ident_char(prev) {
            let mut end = i + c.len_utf8();
            while let Some(&(j, d)) = it.peek() {
                if !is_ident_char(d) {
                    break;
                }
                end = j + d.len_utf8();
                it.next();
            }
            out.push((i, &src[i..end]));
            prev = 'a';
        } else {
            prev = c;
        }
    }
    out
}

/// Skips blank space, `//` comments and `#[…]` attributes.
fn skip_trivia(mut s: &str) -> &str {
    loop {
        let t = s.trim_start();
        if t.starts_with("//") {
            s = t.find('\n').map_or("", |i| &t[i..]);
        } else if t.starts_with("#[") {
            s = t.find(']').map_or("", |i| &t[i + 1..]);
        } else {
            return t;
        }
    }
}

fn macro_type_name(s: &str) -> Option<&str> {
    let body = skip_trivia(s.strip_prefix('{')?);
    let end = body.find(|c: char| !is_ident_char(c)).unwrap_or(body.len());
    let name = &body[..end];
    (is_camel(name) && body[end..].trim_start().starts_with('{')).then_some(name)
}

/// `s` starts at `enum`: adds the variants of its body (the names at the start of each item at
/// brace depth 0).
fn enum_variants(s: &str, names: &mut BTreeSet<String>) {
    let Some(open) = s.find(['{', ';']) else {
        return;
    };
    if s.as_bytes()[open] != b'{' {
        return;
    }
    let mut rest = &s[open + 1..];
    loop {
        rest = skip_trivia(rest);
        let end = rest.find(|c: char| !is_ident_char(c)).unwrap_or(rest.len());
        if end > 0 && rest.starts_with(|c: char| c.is_ascii_uppercase()) {
            names.insert(rest[..end].to_string());
        }
        // On to the comma that ends this item at depth 0, or the body's end.
        let mut depth = 0i32;
        let mut next = None;
        for (i, c) in rest.char_indices() {
            match c {
                '{' | '(' | '[' => depth += 1,
                '}' | ')' | ']' if depth == 0 => return,
                '}' | ')' | ']' => depth -= 1,
                ',' if depth == 0 => {
                    next = Some(i + 1);
                    break;
                }
                _ => {}
            }
        }
        match next {
            Some(i) => rest = &rest[i..],
            None => return,
        }
    }
}

enum Cite<'a> {
    Path(&'a str),
    Bare(&'a str),
    Type(&'a str),
}

/// The citations of one section, in text order, with their byte offsets in the section.
fn citations(sec: &str) -> Vec<(usize, Cite<'_>)> {
    let mut out = Vec::new();
    // Source paths anywhere.
    for d in SOURCE_DIRS {
        let pat = format!("{d}/");
        for (i, _) in sec.match_indices(&pat) {
            let mut start = i;
            if sec[..i].ends_with("./") {
                start = i - 2;
            }
            if sec[..start].chars().next_back().is_some_and(is_path_char) {
                continue;
            }
            let len = sec[i..]
                .find(|c: char| !is_path_char(c))
                .unwrap_or(sec.len() - i);
            let p = sec[i..i + len].trim_end_matches(['.', ',', ':', ';']);
            out.push((i, Cite::Path(p)));
        }
    }
    // Backticked spans, outside fenced blocks.
    let mut offset = 0;
    let mut fenced = false;
    for line in sec.split_inclusive('\n') {
        let here = offset;
        offset += line.len();
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut parts = line.split('`');
        let mut pos = here + parts.next().map_or(0, |p| p.len()) + 1;
        while let (Some(t), Some(after)) = (parts.next(), parts.next()) {
            let at = pos;
            pos += t.len() + 1 + after.len() + 1;
            let t = t.strip_prefix("./").unwrap_or(t);
            if !t.is_empty() && t.chars().all(is_path_char) {
                let ext = EXTENSIONS
                    .iter()
                    .any(|e| t.len() > e.len() && t.ends_with(e) && !t.starts_with('.'));
                let sourced = SOURCE_DIRS.iter().any(|d| t.starts_with(&format!("{d}/")));
                if ext && !t.contains('/') {
                    out.push((at, Cite::Bare(t)));
                } else if ext && !sourced {
                    out.push((at, Cite::Path(t)));
                }
            }
            let rust_path = t
                .split("::")
                .all(|s| s.starts_with(is_ident_start) && s.chars().all(is_ident_char));
            if rust_path && t.split("::").any(is_camel) {
                out.push((at, Cite::Type(t)));
            }
        }
    }
    out.sort_by_key(|&(i, _)| i);
    out
}

/// The missing items of one document, as `file:line: what`.
fn check_doc(doc: &str, tree: &Tree, names: &BTreeSet<String>) -> Vec<String> {
    let text = std::fs::read_to_string(root().join(doc)).unwrap_or_else(|e| panic!("{doc}: {e}"));
    check_text(doc, &text, tree, names)
}

fn check_text(doc: &str, text: &str, tree: &Tree, names: &BTreeSet<String>) -> Vec<String> {
    let mut missing = Vec::new();
    // Sections: split before every line that starts with `#`.
    let mut starts = vec![0];
    starts.extend(text.match_indices("\n#").map(|(i, _)| i + 1));
    starts.push(text.len());
    for w in starts.windows(2) {
        let sec = &text[w[0]..w[1]];
        let line_of = |i: usize| text[..w[0] + i].matches('\n').count() + 1;
        let mut base: Option<String> = None;
        for (i, c) in citations(sec) {
            match c {
                Cite::Path(p) => {
                    if tree.exists(p) {
                        base = Some(tree.base_of(p));
                    } else {
                        missing.push(format!("{doc}:{}: path `{p}` does not exist", line_of(i)));
                    }
                }
                Cite::Bare(f) => {
                    let in_base = base
                        .as_ref()
                        .is_some_and(|b| tree.exists(&format!("{b}/{f}")));
                    if !tree.exists(f) && !in_base {
                        let hint = base
                            .as_deref()
                            .map_or(String::new(), |b| format!(" (nor in {b}/)"));
                        missing.push(format!(
                            "{doc}:{}: file `{f}` is not at the repository root{hint}",
                            line_of(i)
                        ));
                    }
                }
                Cite::Type(t) => {
                    for seg in t.split("::").filter(|s| is_camel(s)) {
                        if !names.contains(seg) {
                            missing.push(format!(
                                "{doc}:{}: type `{seg}` (in `{t}`) is defined nowhere in the Rust sources",
                                line_of(i)
                            ));
                        }
                    }
                }
            }
        }
    }
    missing
}

#[test]
fn design_docs_cite_existing_paths_and_types() {
    let root = root();
    let tree = Tree::read(&root);
    let names = defined_names(&root, &tree);
    assert!(names.contains("Frontend") && names.contains("Pure") && names.contains("CmpPred"));
    let missing: Vec<String> = DOCS
        .iter()
        .flat_map(|d| check_doc(d, &tree, &names))
        .collect();
    assert!(
        missing.is_empty(),
        "{} stale reference(s) in the design docs:\n{}",
        missing.len(),
        missing.join("\n")
    );
}

#[test]
fn the_rules_catch_what_they_should() {
    let root = root();
    let tree = Tree::read(&root);
    let names = defined_names(&root, &tree);
    let kinds = |sec: &str| -> Vec<String> {
        citations(sec)
            .into_iter()
            .map(|(_, c)| match c {
                Cite::Path(p) => format!("path {p}"),
                Cite::Bare(f) => format!("bare {f}"),
                Cite::Type(t) => format!("type {t}"),
            })
            .collect()
    };
    assert_eq!(
        kinds("see ir/src/ops.rs. Also `./scripts/test.sh`, `runner.rs`, `.kir`, `kir-backends/cuda`, /tmp/x/docs/a, `gpu_chk/l4/run.sh`\n"),
        [
            "path ir/src/ops.rs",
            "path scripts/test.sh",
            "bare runner.rs",
            "path gpu_chk/l4/run.sh",
        ]
    );
    assert_eq!(
        kinds("`kir_ir::Module`, `Opcode::ALL`, `HEAD_DIM`, `Vec<u8>`, `CompileError::Source`\n"),
        [
            "type kir_ir::Module",
            "type Opcode::ALL",
            "type CompileError::Source"
        ]
    );
    assert!(tree.exists("compiler/src/passes/schedule/{persistent,dot_overlap}.rs"));
    assert!(!tree.exists("compiler/src/passes/schedule/{persistent,no_such_pass}.rs"));
    assert!(tree.exists("compiler/ops/*.kir") && !tree.exists("compiler/ops/*.nothing"));
    assert!(tree.exists("backends/src/interp/") && !tree.exists("ir/src/ops.rs/"));
    assert!(names.contains("Module") && !names.contains("NoSuchTypeAnywhere"));
    let stale =
        "# T\n\nbackends/src/interp/ holds `runner.rs` and `no_such.rs`; `NoSuchTypeAnywhere`.\n\
                 ## U\n\n`bind.rs` has no directory cited before it in its section.\n";
    assert_eq!(
        check_text("t.md", stale, &tree, &names),
        [
            "t.md:3: file `no_such.rs` is not at the repository root (nor in backends/src/interp/)",
            "t.md:3: type `NoSuchTypeAnywhere` (in `NoSuchTypeAnywhere`) is defined nowhere in the Rust sources",
            "t.md:6: file `bind.rs` is not at the repository root",
        ]
    );
}
