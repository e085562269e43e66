//! `--message-format json`: diagnostics as one JSON object per line on stderr, and the results
//! of `check`, `ops` and `bench` as JSON on stdout, each checked against what the human format
//! of the same command says (docs/cli.md, "Machine-readable output").

mod common;
use common::{kirc, s, scratch, stderr, stdout};
use serde_json::Value;

/// Every line of `text` as a JSON object.
fn objects(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// Runs `args` in both formats; both fail with exit 2, and each JSON diagnostic's `rendered`
/// put together is the human stderr. Returns the diagnostics.
fn diagnostics(args: &[&str]) -> Vec<Value> {
    let human = kirc(args);
    let mut j = args.to_vec();
    j.extend(["--message-format", "json"]);
    let json = kirc(&j);
    assert_eq!(human.status.code(), Some(2), "{}", stderr(&human));
    assert_eq!(json.status.code(), Some(2), "{}", stderr(&json));
    assert!(stdout(&json).is_empty());
    let ds = objects(&stderr(&json));
    assert!(!ds.is_empty());
    let rendered: String = ds.iter().map(|d| d["rendered"].as_str().unwrap()).collect();
    assert_eq!(rendered, stderr(&human));
    for d in &ds {
        assert_eq!(d["type"], "diagnostic");
        assert_eq!(d["severity"], "error");
        for key in ["message", "note", "file", "line", "column", "end"] {
            assert!(d.get(key).is_some(), "{key} missing: {d}");
        }
    }
    ds
}

/// `(line, column)` from the start of a human diagnostic `file:line:col: error: ...`.
fn place(rendered: &str, file: &str) -> (u64, u64) {
    let rest = rendered.strip_prefix(&format!("{file}:")).unwrap();
    let mut it = rest.split(':');
    let line = it.next().unwrap().parse().unwrap();
    let col = it.next().unwrap().parse().unwrap();
    (line, col)
}

/// The number of carets under the source line of a human diagnostic: the span's width.
fn carets(rendered: &str) -> u64 {
    rendered.lines().nth(2).unwrap().matches('^').count() as u64
}

#[test]
fn located_errors_carry_their_place_and_span() {
    let d = scratch("json", "located");
    let f = d.join("three.kir");
    // The verifier reports all three errors; they come in source order.
    let src = "module m\nkernel @k() grid [1, 1, 1] {\n  %a = const 0 : i32\n  %b = exp %a : \
               i32\n  %c = exp %a : f32\n}\n";
    std::fs::write(&f, src).unwrap();
    let ds = diagnostics(&["check", s(&f)]);
    assert_eq!(ds.len(), 3, "{ds:?}");
    let mut lines = Vec::new();
    for d in &ds {
        assert_eq!(d["file"], s(&f));
        let rendered = d["rendered"].as_str().unwrap();
        let (line, col) = place(rendered, s(&f));
        assert_eq!(
            (d["line"].as_u64(), d["column"].as_u64()),
            (Some(line), Some(col))
        );
        // The span is the whole op, on one line: from `%` to the line's end.
        let text = src.lines().nth(line as usize - 1).unwrap();
        assert_eq!(col as usize, text.find('%').unwrap() + 1);
        assert_eq!(d["end"]["line"], line);
        assert_eq!(d["end"]["column"].as_u64(), Some(col + carets(rendered)));
        assert_eq!(d["end"]["column"].as_u64(), Some(text.len() as u64 + 1));
        assert!(d["note"].is_null());
        lines.push(line);
    }
    assert_eq!(lines, [4, 5, 5]);
    // In a built-in op: an error with no place first, then the located ones in source order.
    let ds = diagnostics(&[
        "check",
        "attention_fwd",
        "-D",
        "CAUSAL=3",
        "-D",
        "NOPE=1",
        "-D",
        "HEAD_DIM=100",
    ]);
    assert_eq!(ds.len(), 3, "{ds:?}");
    assert!(ds[0]["line"].is_null());
    assert!(ds[0]["message"].as_str().unwrap().contains("NOPE"));
    for (d, name) in ds[1..].iter().zip(["HEAD_DIM", "CAUSAL"]) {
        assert_eq!(d["file"], "attention_fwd.kir");
        let rendered = d["rendered"].as_str().unwrap();
        let (line, col) = place(rendered, "attention_fwd.kir");
        assert_eq!(
            (d["line"].as_u64(), d["column"].as_u64()),
            (Some(line), Some(col))
        );
        assert_eq!(d["end"]["column"].as_u64(), Some(col + carets(rendered)));
        assert!(d["message"].as_str().unwrap().contains(name));
    }
}

#[test]
fn errors_without_a_place_have_null_places() {
    let ds = diagnostics(&["check", "attention_fwd", "-D", "HEADDIM=1"]);
    assert_eq!(ds.len(), 1);
    assert_eq!(ds[0]["file"], "attention_fwd.kir");
    assert!(ds[0]["line"].is_null() && ds[0]["column"].is_null() && ds[0]["end"].is_null());
    assert!(ds[0]["note"].as_str().unwrap().contains("HEAD_DIM"));
    assert_eq!(
        ds[0]["message"],
        "-D HEADDIM: unknown constant `HEADDIM`; did you mean `HEAD_DIM`?"
    );
    let ds = diagnostics(&["compile", "gemm", "--target", "sm_99", "-o", "-"]);
    assert!(ds[0]["file"].is_null() && ds[0]["line"].is_null());
    assert!(ds[0]["message"]
        .as_str()
        .unwrap()
        .starts_with("unknown target `sm_99`"));
    assert!(ds[0]["note"].is_null());
}

#[test]
fn usage_errors_are_json_too() {
    for args in [
        &[
            "check",
            "gemm",
            "--no-such-flag",
            "--message-format",
            "json",
        ][..],
        &["--message-format=json", "frobnicate"][..],
    ] {
        let o = kirc(args);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let ds = objects(&stderr(&o));
        assert_eq!(ds.len(), 1, "{}", stderr(&o));
        assert!(ds[0]["rendered"].as_str().unwrap().starts_with("error: "));
        assert!(!ds[0]["message"].as_str().unwrap().starts_with("error: "));
        assert!(ds[0]["file"].is_null());
    }
    let o = kirc(&["check", "gemm", "--message-format", "yaml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("possible values: human, json"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn check_results() {
    for (op, kernels) in [("rmsnorm_bwd", 2), ("attention_fwd", 1)] {
        let o = kirc(&["check", op, "--message-format", "json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v = objects(&stdout(&o));
        assert_eq!(v.len(), 1);
        assert_eq!(v[0]["type"], "check");
        assert_eq!(v[0]["module"], op);
        let names = v[0]["kernels"].as_array().unwrap();
        assert_eq!(names.len(), kernels);
        let human = stdout(&kirc(&["check", op]));
        let n = if kernels == 1 { "kernel" } else { "kernels" };
        assert_eq!(human, format!("ok: {op} ({kernels} {n})\n"));
        // The names are the output's kernels, as the specialized text declares them.
        let dump = stdout(&kirc(&["check", op, "--dump-after", "mask_split"]));
        for k in names {
            assert!(
                dump.contains(&format!("kernel @{}(", k.as_str().unwrap())),
                "{k}"
            );
        }
    }
    let human = stdout(&kirc(&["check", "gemm", "--dump-after", "specialize"]));
    let o = kirc(&[
        "check",
        "gemm",
        "--dump-after",
        "specialize",
        "--message-format",
        "json",
    ]);
    let v = objects(&stdout(&o));
    assert_eq!(
        (v[0]["type"].as_str(), v[0]["pass"].as_str()),
        (Some("dump"), Some("specialize"))
    );
    assert_eq!(v[0]["ir"].as_str(), Some(human.as_str()));
}

#[test]
fn ops_results() {
    let human = stdout(&kirc(&["ops"]));
    let o = kirc(&["ops", "--message-format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = objects(&stdout(&o));
    assert_eq!(v.len(), human.lines().count());
    for (obj, line) in v.iter().zip(human.lines()) {
        let (name, summary) = line.split_once(' ').unwrap();
        assert_eq!(obj["type"], "op");
        assert_eq!(obj["name"], name);
        assert_eq!(obj["summary"], summary.trim());
    }
    for op in ["attention_fwd", "gemm", "layernorm_bwd"] {
        let human = stdout(&kirc(&["ops", op]));
        let v = objects(&stdout(&kirc(&["ops", op, "--message-format", "json"])));
        assert_eq!(v.len(), 1);
        assert_eq!(v[0]["name"], op);
        let consts = v[0]["constants"].as_array().unwrap();
        let lines: Vec<&str> = human.lines().skip(2).collect();
        assert_eq!(consts.len(), lines.len());
        for (c, line) in consts.iter().zip(lines) {
            // Rebuild the human line from the object.
            let kind = match c["kind"].as_str().unwrap() {
                "int" => {
                    assert!(c["values"].is_null());
                    "int".to_string()
                }
                "enum" => {
                    let vs: Vec<&str> = c["values"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|x| x.as_str().unwrap())
                        .collect();
                    format!("{{{}}}", vs.join(", "))
                }
                k => panic!("kind {k}"),
            };
            let mut want = format!(
                "  {}: {kind} = {}",
                c["name"].as_str().unwrap(),
                c["default"].as_str().unwrap()
            );
            if let Some(t) = c["tune"].as_array() {
                let vs: Vec<String> = t.iter().map(|x| x.as_i64().unwrap().to_string()).collect();
                want += &format!("  tune {{{}}}", vs.join(", "));
            }
            if let Some(w) = c["where"].as_str() {
                want += &format!("  where {w}");
            }
            assert_eq!(line, want);
        }
    }
}

#[test]
fn bench_without_a_gpu_fails_in_json() {
    // Without the CUDA runtime built in, or without a driver, bench is an error (exit 2) that
    // comes as JSON; with a GPU present its result is one `bench` object.
    let o = kirc(&[
        "bench",
        "rmsnorm_fwd",
        "--shape",
        "x=4x64",
        "--shape",
        "w=64",
        "--arg",
        "eps=1e-6",
        "--iters",
        "3",
        "--warmup",
        "1",
        "--message-format",
        "json",
    ]);
    match o.status.code() {
        Some(0) => {
            let v = objects(&stdout(&o));
            assert_eq!(v.len(), 1);
            assert_eq!(v[0]["type"], "bench");
            assert_eq!(v[0]["dims"]["R"], 4);
            assert!(v[0]["median_ms"].as_f64().unwrap() > 0.0);
        }
        code => {
            assert_eq!(code, Some(2), "{}", stderr(&o));
            let ds = objects(&stderr(&o));
            assert_eq!(ds.len(), 1, "{}", stderr(&o));
            assert_eq!(ds[0]["type"], "diagnostic");
        }
    }
}
