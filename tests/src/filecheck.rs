//! A small FileCheck-like matcher for check-line tests of generated code (tests/checks/*.check,
//! run by tests/tests/ptx_checks.rs).
//!
//! A spec is a list of lines; `//` starts a comment line, blank lines are ignored, and `{name}`
//! is replaced by the value of `name` in the variables given. Patterns are plain substrings
//! (no regular expressions) and match against one line of the text:
//!
//! - `CHECK: pat` — the first line after the previous match that contains `pat`.
//! - `CHECK-NEXT: pat` — the line right after the previous match contains `pat`.
//! - `CHECK-SAME: pat` — the line of the previous match contains `pat` too.
//! - `CHECK-NOT: pat` — no line between the previous match and the next `CHECK`/`CHECK-NEXT`
//!   match (or the end of the text) contains `pat`.
//! - `CHECK-COUNT-n: pat` — exactly `n` lines of the whole text contain `pat` (unlike LLVM's
//!   FileCheck, a total over the text, not `n` consecutive matches); the position is unchanged.
//!   `CHECK-COUNT-0` says a pattern appears nowhere.
//! - `TARGETS: …` and `PTXAS: …` lines belong to the test that reads the spec and are skipped.
//!
//! Any other directive is an error, so a misspelt one cannot pass silently.

/// Built-in ops whose PTX is too big for a full golden on every target (over 40 KB): their
/// golden PTX is kept for sm_80 only (tests/tests/ptx.rs), and the other targets are checked
/// with the check lines of `tests/checks/<op>.check` (tests/tests/ptx_checks.rs).
pub const PTX_CHECKED_OPS: [&str; 8] = [
    "attention_bwd",
    "attention_fwd",
    "gemm",
    "gemm_nf4",
    "layernorm_bwd",
    "layernorm_fwd",
    "rmsnorm_bwd",
    "rmsnorm_fwd",
];

/// The size, in bytes, under which a built-in op's PTX keeps a full golden on every target.
pub const FULL_GOLDEN_BYTES: usize = 40_000;

/// Checks `text` against `spec` with `{name}` replaced by the value of `name` from `vars`.
/// Returns every failure, each naming the directive and where the text was searched.
pub fn check(text: &str, spec: &str, vars: &[(&str, &str)]) -> Result<(), Vec<String>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut errors = Vec::new();
    // The next line to search, and CHECK-NOT patterns waiting for the next match.
    let mut pos = 0usize;
    let mut nots: Vec<(usize, String)> = Vec::new();
    let flush =
        |nots: &mut Vec<(usize, String)>, from: usize, upto: usize, errors: &mut Vec<String>| {
            for (at, pat) in nots.drain(..) {
                if let Some(i) = (from..upto).find(|&i| lines[i].contains(pat.as_str())) {
                    errors.push(format!(
                        "spec line {at}: CHECK-NOT: `{pat}` found on line {}: {}",
                        i + 1,
                        lines[i].trim()
                    ));
                }
            }
        };
    for (n, raw) in spec.lines().enumerate() {
        let at = n + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with("//") {
            continue;
        }
        let mut line = line.to_string();
        for (k, v) in vars {
            line = line.replace(&format!("{{{k}}}"), v);
        }
        let Some((directive, pat)) = line.split_once(": ") else {
            errors.push(format!("spec line {at}: no directive: {line}"));
            continue;
        };
        let pat = pat.to_string();
        match directive {
            "CHECK" => match (pos..lines.len()).find(|&i| lines[i].contains(pat.as_str())) {
                Some(i) => {
                    flush(&mut nots, pos, i, &mut errors);
                    pos = i + 1;
                }
                None => errors.push(format!(
                    "spec line {at}: CHECK: `{pat}` not found after line {pos}"
                )),
            },
            "CHECK-NEXT" => match lines.get(pos) {
                Some(l) if l.contains(pat.as_str()) => {
                    flush(&mut nots, pos, pos, &mut errors);
                    pos += 1;
                }
                other => errors.push(format!(
                    "spec line {at}: CHECK-NEXT: `{pat}` is not on line {}: {}",
                    pos + 1,
                    other.map_or("<end of text>", |l| l.trim())
                )),
            },
            "CHECK-SAME" => match pos.checked_sub(1).and_then(|i| lines.get(i)) {
                Some(l) if l.contains(pat.as_str()) => {}
                other => errors.push(format!(
                    "spec line {at}: CHECK-SAME: `{pat}` is not on line {pos}: {}",
                    other.map_or("<no previous match>", |l| l.trim())
                )),
            },
            "CHECK-NOT" => nots.push((at, pat)),
            "TARGETS" | "PTXAS" => {}
            d => match d.strip_prefix("CHECK-COUNT-").map(str::parse::<usize>) {
                Some(Ok(want)) => {
                    let got = lines.iter().filter(|l| l.contains(pat.as_str())).count();
                    if got != want {
                        errors.push(format!(
                            "spec line {at}: {d}: `{pat}` is on {got} lines, not {want}"
                        ));
                    }
                }
                _ => errors.push(format!("spec line {at}: unknown directive `{d}`")),
            },
        }
    }
    flush(&mut nots, pos, lines.len(), &mut errors);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// The values of the spec's `key:` lines (e.g. `TARGETS`), one string per line.
pub fn directives<'a>(spec: &'a str, key: &str) -> Vec<&'a str> {
    spec.lines()
        .filter_map(|l| l.trim().strip_prefix(key)?.strip_prefix(": "))
        .map(str::trim)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "a 1\nb\nc x\nb\nd\n";

    fn fails(spec: &str) -> Vec<String> {
        check(TEXT, spec, &[("v", "x")]).err().unwrap_or_default()
    }

    #[test]
    fn matches_in_order_with_variables() {
        let spec = "// comment\nCHECK: a\nCHECK-NEXT: b\nCHECK: c {v}\nCHECK-NOT: a\nCHECK: d\nCHECK-COUNT-2: b\nCHECK-COUNT-0: z\nTARGETS: sm_80";
        assert_eq!(check(TEXT, spec, &[("v", "x")]), Ok(()));
    }

    #[test]
    fn every_kind_of_failure_is_reported() {
        assert_eq!(fails("CHECK: d\nCHECK: a").len(), 1, "out of order");
        assert_eq!(fails("CHECK: a\nCHECK-NEXT: c").len(), 1, "not next");
        assert_eq!(
            fails("CHECK: a\nCHECK-NOT: c\nCHECK: d").len(),
            1,
            "not between"
        );
        assert_eq!(
            fails("CHECK: a\nCHECK-NOT: d").len(),
            1,
            "not before the end"
        );
        assert_eq!(fails("CHECK-COUNT-1: b").len(), 1, "count");
        assert!(fails("CHECK: a\nCHECK-SAME: a").is_empty(), "same line");
        assert_eq!(
            fails("CHECK: a\nCHECK-SAME: b").len(),
            1,
            "not on the same line"
        );
        assert_eq!(fails("CHECK-SAME: a").len(), 1, "no previous match");
        assert_eq!(fails("CHECK-COUNT-x: b").len(), 1, "bad count");
        assert_eq!(fails("CHEK: a").len(), 1, "unknown directive");
        assert_eq!(fails("CHECK a").len(), 1, "no directive");
        assert_eq!(
            fails("CHECK: {w}").len(),
            1,
            "unknown variable stays literal"
        );
    }

    #[test]
    fn directive_values() {
        let spec = "TARGETS: sm_90a sm_100a\nPTXAS: sm_90a k 10 0\nPTXAS: sm_100a k 12 0";
        assert_eq!(directives(spec, "TARGETS"), ["sm_90a sm_100a"]);
        assert_eq!(directives(spec, "PTXAS").len(), 2);
    }
}
