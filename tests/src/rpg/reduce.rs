//! Delta reduction of a failing program text: remove what the failure does not need while the
//! failure persists (the predicate rejects texts that no longer parse or verify, since the
//! check fails those at a different stage).
//!
//! Steps, repeated until none makes progress or the budget of predicate calls is spent:
//! 1. whole regions (an op with `{ … }` through its closing brace);
//! 2. runs of lines, halving the run length down to single lines (ddmin);
//! 3. an op's result replaced by one of its operands everywhere (the op line then goes);
//! 4. a param removed with its launch bindings;
//! 5. a carried value of a `for` dropped (its uses take the initial value).
//!
//! The first line (`// rpg seed S`, which fixes the inputs) and the `module` line are kept. For
//! a ring with its plain twin only lines both share are removed, from both at once.

use super::rings::{split_twin, TWIN_MARK};

/// Reduction limits.
pub struct Limits {
    /// At most this many predicate calls.
    pub calls: usize,
}

impl Default for Limits {
    /// 4,000 calls.
    fn default() -> Limits {
        Limits { calls: 4000 }
    }
}

struct R<'a> {
    pred: &'a mut dyn FnMut(&str) -> bool,
    calls: usize,
    limit: usize,
}

impl R<'_> {
    fn test(&mut self, t: &str) -> bool {
        if self.calls >= self.limit {
            return false;
        }
        self.calls += 1;
        (self.pred)(t)
    }
}

fn join(lines: &[String]) -> String {
    let mut s = lines.join("\n");
    s.push('\n');
    s
}

/// Lines that must stay: the seed line and the module line.
fn pinned(l: &str) -> bool {
    l.starts_with("// rpg seed") || l.starts_with("module ") || l == TWIN_MARK
}

/// The index of the line closing the region opened at line `i` (which ends with `{`).
fn close_of(lines: &[String], i: usize) -> Option<usize> {
    let mut depth = 0i64;
    for (j, l) in lines.iter().enumerate().skip(i) {
        for c in l.chars() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
        }
        if depth == 0 {
            return Some(j);
        }
    }
    None
}

fn regions(r: &mut R, lines: &mut Vec<String>) -> bool {
    let mut progress = false;
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i].trim();
        let opens = l.ends_with('{')
            && !l.starts_with("kernel")
            && !l.starts_with("program")
            && !l.starts_with('}');
        if opens {
            if let Some(j) = close_of(lines, i) {
                // `} else {` closes one region and opens another: remove the whole op.
                let mut cand = lines.clone();
                cand.drain(i..=j);
                if r.test(&join(&cand)) {
                    *lines = cand;
                    progress = true;
                    continue;
                }
            }
        }
        i += 1;
    }
    progress
}

fn runs(r: &mut R, lines: &mut Vec<String>) -> bool {
    let mut progress = false;
    let mut n = (lines.len() / 2).max(1);
    loop {
        let mut i = 0;
        while i < lines.len() {
            let end = (i + n).min(lines.len());
            if lines[i..end].iter().any(|l| pinned(l)) {
                i += 1;
                continue;
            }
            let mut cand = lines.clone();
            cand.drain(i..end);
            if r.test(&join(&cand)) {
                *lines = cand;
                progress = true;
            } else {
                i += n;
            }
        }
        if n == 1 {
            break;
        }
        n /= 2;
    }
    progress
}

/// Replaces `%name` (whole token) by `with` in `s`.
fn subst(s: &str, name: &str, with: &str) -> String {
    let pat = format!("%{name}");
    let mut out = String::new();
    let mut rest = s;
    while let Some(p) = rest.find(&pat) {
        let after = &rest[p + pat.len()..];
        let boundary = !after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
        out.push_str(&rest[..p]);
        out.push_str(if boundary { with } else { &pat });
        rest = after;
    }
    out.push_str(rest);
    out
}

fn operands(l: &str) -> Vec<String> {
    let rhs = l.split_once('=').map_or("", |(_, r)| r);
    rhs.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '%'))
        .filter_map(|t| t.strip_prefix('%'))
        .map(|t| t.to_string())
        .collect()
}

fn forward(r: &mut R, lines: &mut Vec<String>) -> bool {
    let mut progress = false;
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i].trim().to_string();
        let res = l
            .strip_prefix('%')
            .and_then(|x| x.split_once(" = "))
            .map(|(n, _)| n.to_string())
            .filter(|n| !n.contains(','));
        let (Some(name), false) = (res, l.ends_with('{')) else {
            i += 1;
            continue;
        };
        let mut done = false;
        for o in operands(&l) {
            if o == name {
                continue;
            }
            let mut cand: Vec<String> = lines.clone();
            cand.remove(i);
            let cand: Vec<String> = cand
                .iter()
                .map(|x| subst(x, &name, &format!("%{o}")))
                .collect();
            if r.test(&join(&cand)) {
                *lines = cand;
                progress = true;
                done = true;
                break;
            }
        }
        if !done {
            i += 1;
        }
    }
    progress
}

/// A `for` header split into (indent, results, head `for %i = … step %s`, carried pairs
/// (arg, init), types, tail ` {`).
type ForHead = (
    String,
    Vec<String>,
    String,
    Vec<(String, String)>,
    Vec<String>,
);

fn parse_for(l: &str) -> Option<ForHead> {
    let ind: String = l.chars().take_while(|c| *c == ' ').collect();
    let t = l.trim();
    let (res, rest) = t.split_once(" = for ")?;
    let (head, rest) = rest.split_once(" iter(")?;
    let (pairs, rest) = rest.split_once(") : ")?;
    let tys = rest.strip_suffix(" {")?;
    let results: Vec<String> = res.split(", ").map(|x| x.to_string()).collect();
    let pairs: Vec<(String, String)> = pairs
        .split(", ")
        .filter_map(|p| p.split_once(" = "))
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let tys: Vec<String> = tys.split(", ").map(|x| x.to_string()).collect();
    (results.len() == pairs.len() && pairs.len() == tys.len())
        .then(|| (ind, results, format!("for {head}"), pairs, tys))
}

/// Drops one carried value of a `for`: its uses in the body and after the loop become the
/// initial value, and the yield loses that operand.
fn carried(r: &mut R, lines: &mut Vec<String>) -> bool {
    let mut progress = false;
    let mut i = 0;
    while i < lines.len() {
        let Some((ind, res, head, pairs, tys)) = parse_for(&lines[i]) else {
            i += 1;
            continue;
        };
        let Some(j) = close_of(lines, i) else {
            i += 1;
            continue;
        };
        let mut done = false;
        for k in 0..pairs.len() {
            let y = j - 1;
            let Some(ops) = lines[y].trim().strip_prefix("yield ") else {
                break;
            };
            let mut ops: Vec<&str> = ops.split(", ").collect();
            if ops.len() != pairs.len() {
                break;
            }
            ops.remove(k);
            let mut cand = lines.clone();
            let keep = |v: &[String]| -> Vec<String> {
                v.iter()
                    .enumerate()
                    .filter(|(x, _)| *x != k)
                    .map(|(_, s)| s.clone())
                    .collect()
            };
            let (res2, tys2) = (keep(&res), keep(&tys));
            let pairs2: Vec<String> = pairs
                .iter()
                .enumerate()
                .filter(|(x, _)| *x != k)
                .map(|(_, (a, b))| format!("{a} = {b}"))
                .collect();
            cand[i] = if pairs2.is_empty() {
                format!("{ind}{head} {{")
            } else {
                format!(
                    "{ind}{} = {head} iter({}) : {} {{",
                    res2.join(", "),
                    pairs2.join(", "),
                    tys2.join(", ")
                )
            };
            let yind: String = lines[y].chars().take_while(|c| *c == ' ').collect();
            if ops.is_empty() {
                cand.remove(y);
            } else {
                cand[y] = format!("{yind}yield {}", ops.join(", "));
            }
            let (arg, init) = (&pairs[k].0, &pairs[k].1);
            let result = res[k].trim_start_matches('%').to_string();
            let cand: Vec<String> = cand
                .iter()
                .map(|x| subst(x, arg.trim_start_matches('%'), init))
                .map(|x| subst(&x, &result, init))
                .collect();
            if r.test(&join(&cand)) {
                *lines = cand;
                progress = true;
                done = true;
                break;
            }
        }
        if !done {
            i += 1;
        }
    }
    progress
}

fn params(r: &mut R, lines: &mut Vec<String>) -> bool {
    let mut progress = false;
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i].trim().to_string();
        let is_param = l.ends_with(',')
            && l.contains(':')
            && !l.starts_with('%')
            && lines[i].starts_with("  ")
            && !lines[i].starts_with("    ");
        let Some(name) = is_param.then(|| l.split(':').next().unwrap_or("").trim().to_string())
        else {
            i += 1;
            continue;
        };
        let mut cand = lines.clone();
        cand.remove(i);
        let cand: Vec<String> = cand
            .iter()
            .map(|x| {
                if !x.trim_start().starts_with("launch @") {
                    return x.clone();
                }
                let (head, rest) = x.split_once('(').unwrap_or((x, ""));
                let inner = rest.trim_end_matches(')');
                let kept: Vec<&str> = inner
                    .split(", ")
                    .filter(|b| {
                        let p = b.split(" = ").next().unwrap_or("").trim();
                        p != name
                    })
                    .collect();
                format!("{head}({})", kept.join(", "))
            })
            .collect();
        if r.test(&join(&cand)) {
            *lines = cand;
            progress = true;
        } else {
            i += 1;
        }
    }
    progress
}

/// Reduces `text` while `still_fails` holds (see the module doc); returns the smallest text
/// found (`text` itself if nothing could go) and the number of predicate calls made.
pub fn reduce(
    text: &str,
    still_fails: &mut dyn FnMut(&str) -> bool,
    limits: &Limits,
) -> (String, usize) {
    let mut r = R {
        pred: still_fails,
        calls: 0,
        limit: limits.calls,
    };
    let (module, twin) = split_twin(text);
    if let Some(twin) = twin {
        return reduce_ring(&mut r, module, twin);
    }
    let mut lines: Vec<String> = module.lines().map(|l| l.to_string()).collect();
    loop {
        let mut p = regions(&mut r, &mut lines);
        p |= runs(&mut r, &mut lines);
        p |= forward(&mut r, &mut lines);
        p |= params(&mut r, &mut lines);
        p |= carried(&mut r, &mut lines);
        if !p || r.calls >= r.limit {
            break;
        }
    }
    (join(&lines), r.calls)
}

/// Rings: remove lines of the shared computation from the ring and its twin together.
fn reduce_ring(r: &mut R, module: &str, twin: &str) -> (String, usize) {
    let mut a: Vec<String> = module.lines().map(|l| l.to_string()).collect();
    let mut b: Vec<String> = twin.lines().map(|l| l.to_string()).collect();
    let both = |a: &[String], b: &[String]| format!("{}{TWIN_MARK}\n{}", join(a), join(b));
    loop {
        let mut progress = false;
        let mut i = 0;
        while i < a.len() {
            let key = a[i].trim().to_string();
            let shared = key.starts_with("%t") || key.starts_with("store ");
            let j = b.iter().position(|x| x.trim() == key);
            let (true, Some(j)) = (shared, j) else {
                i += 1;
                continue;
            };
            let (mut ca, mut cb) = (a.clone(), b.clone());
            ca.remove(i);
            cb.remove(j);
            if r.test(&both(&ca, &cb)) {
                a = ca;
                b = cb;
                progress = true;
            } else {
                i += 1;
            }
        }
        if !progress || r.calls >= r.limit {
            break;
        }
    }
    (both(&a, &b), r.calls)
}
