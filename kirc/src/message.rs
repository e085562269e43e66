//! `--message-format human|json`: how kirc writes its diagnostics, and the results of `check`,
//! `ops` and `bench`. `human` (the default) is the text of the rest of this crate; `json` writes
//! one JSON object per line instead (JSON Lines), which a tool reads without parsing prose.
//!
//! A diagnostic (on stderr) is
//! `{"type": "diagnostic", "severity": "error", "message", "note", "file", "line", "column",
//! "end", "rendered"}`: `file` is the source the error belongs to (the path as given, or
//! `NAME.kir` for a built-in op) or null; `line` and `column` (from 1, the column in
//! characters) are where the error starts and `end` is `{"line", "column"}` just past its last
//! character, all null for an error with no place in a source; `rendered` is the text the human
//! format prints for it. The schema is documented in docs/cli.md, and exit codes are the same
//! in both formats (2 for an error).

use crate::common::CliError;
use kir_ir::{Diagnostic, Span};
use serde_json::{json, Value};

/// The values of `--message-format`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MessageFormat {
    /// Text for people: `file:line:col: error: ...`, the source line and a caret.
    #[default]
    Human,
    /// One JSON object per line.
    Json,
}

/// True when `args` (the command line, program name first) asks for `--message-format json`,
/// for the usage errors that stop parsing before the flag is read.
pub fn json_requested<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> bool {
    let args: Vec<&std::ffi::OsStr> = args.iter().map(AsRef::as_ref).collect();
    let mut last = None;
    for (i, a) in args.iter().enumerate().skip(1) {
        if *a == "--" {
            break;
        }
        if *a == "--message-format" {
            last = args.get(i + 1).map(|v| *v == "json");
        } else if let Some(v) = a.to_str().and_then(|a| a.strip_prefix("--message-format=")) {
            last = Some(v == "json");
        }
    }
    last == Some(true)
}

/// The lines (each ending in a newline) of `e` in `format`: its rendered text for
/// [`MessageFormat::Human`], one JSON diagnostic per error for [`MessageFormat::Json`] (located
/// errors in source order).
pub fn render_error(e: &CliError, format: MessageFormat) -> String {
    match format {
        MessageFormat::Human => e.render(),
        MessageFormat::Json => match e {
            CliError::BrokenPipe => String::new(),
            CliError::Plain(m) => line(&diagnostic(m, None, None, None, &e.render())),
            CliError::Located { file, src, diags } => {
                let mut ds: Vec<&Diagnostic> = diags.0.iter().collect();
                ds.sort_by_key(|d| d.span.start);
                ds.into_iter()
                    .map(|d| line(&located(file, src, d)))
                    .collect()
            }
        },
    }
}

/// A usage error of the command line (clap's), as one JSON diagnostic; `rendered` is clap's
/// text and `message` its first line without the `error: ` prefix.
pub fn usage_error(rendered: &str) -> String {
    let first = rendered.lines().next().unwrap_or("");
    let message = first.strip_prefix("error: ").unwrap_or(first);
    line(&diagnostic(message, None, None, None, rendered))
}

/// `v` on one line, with a newline.
pub fn line(v: &Value) -> String {
    format!("{v}\n")
}

/// The JSON diagnostic of `d`, an error in `src` (the source named `file`).
fn located(file: &str, src: &str, d: &Diagnostic) -> Value {
    let rendered = kir_compiler::internal::source::render(file, src, &d.clone().into());
    let source = kir_compiler::internal::source::Source {
        name: file.to_string(),
        text: src.to_string(),
    };
    let place = source.line_col(d.span).map(|start| {
        let end = source
            .line_col(Span::new(d.span.end as usize, d.span.end as usize))
            .unwrap_or(start);
        (start, end)
    });
    diagnostic(&d.message, d.note.as_deref(), Some(file), place, &rendered)
}

/// A diagnostic object with every field of the schema.
fn diagnostic(
    message: &str,
    note: Option<&str>,
    file: Option<&str>,
    place: Option<((usize, usize), (usize, usize))>,
    rendered: &str,
) -> Value {
    let (line, column, end) = match place {
        Some(((l, c), (el, ec))) => (json!(l), json!(c), json!({"line": el, "column": ec})),
        None => (Value::Null, Value::Null, Value::Null),
    };
    json!({
        "type": "diagnostic",
        "severity": "error",
        "message": message,
        "note": note,
        "file": file,
        "line": line,
        "column": column,
        "end": end,
        "rendered": rendered,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Vec<Value> {
        text.lines()
            .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
            .collect()
    }

    #[test]
    fn a_located_error_has_its_place_and_span_end() {
        let src = "module m\nconst X: int = 1 where X > 2\n".to_string();
        let start = src.find("X > 2").unwrap();
        let d = Diagnostic::new(Span::new(start, start + 5), "bad X").with_note("why");
        let e = CliError::Located {
            file: "m.kir".into(),
            src: src.clone(),
            diags: d.into(),
        };
        let v = parse(&render_error(&e, MessageFormat::Json));
        assert_eq!(v.len(), 1);
        let d = &v[0];
        assert_eq!(d["severity"], "error");
        assert_eq!(d["message"], "bad X");
        assert_eq!(d["note"], "why");
        assert_eq!(d["file"], "m.kir");
        assert_eq!(
            (d["line"].as_u64(), d["column"].as_u64()),
            (Some(2), Some(24))
        );
        assert_eq!(d["end"], json!({"line": 2, "column": 29}));
        assert_eq!(d["rendered"], e.render().as_str());
    }

    #[test]
    fn several_errors_come_in_source_order_and_unplaced_ones_have_null_places() {
        let src = "module m\nkernel @k() grid [1, 1, 1] {\n}\n".to_string();
        let at = src.find("@k").unwrap();
        let diags = kir_ir::Diagnostics(vec![
            Diagnostic::new(Span::new(at, at + 2), "second"),
            Diagnostic::new(Span::default(), "first, no place"),
        ]);
        let e = CliError::Located {
            file: "m.kir".into(),
            src,
            diags,
        };
        let v = parse(&render_error(&e, MessageFormat::Json));
        assert_eq!(v.len(), 2);
        assert_eq!(v[0]["message"], "first, no place");
        assert!(v[0]["line"].is_null() && v[0]["column"].is_null() && v[0]["end"].is_null());
        assert_eq!(v[0]["rendered"], "error: first, no place\n");
        assert_eq!(v[1]["message"], "second");
        assert_eq!(
            (v[1]["line"].as_u64(), v[1]["column"].as_u64()),
            (Some(2), Some(8))
        );
    }

    #[test]
    fn a_plain_error_has_no_file() {
        let e = CliError::Plain("no \"such\" thing".into());
        let v = parse(&render_error(&e, MessageFormat::Json));
        assert_eq!(v[0]["message"], "no \"such\" thing");
        assert!(v[0]["file"].is_null());
        assert_eq!(v[0]["rendered"], "error: no \"such\" thing\n");
        assert_eq!(render_error(&e, MessageFormat::Human), e.render());
    }

    #[test]
    fn the_flag_is_found_before_parsing() {
        let yes = |a: &[&str]| json_requested(a);
        assert!(yes(&["kirc", "check", "--message-format", "json"]));
        assert!(yes(&["kirc", "--message-format=json", "check"]));
        assert!(!yes(&[
            "kirc",
            "--message-format=json",
            "--message-format",
            "human"
        ]));
        assert!(!yes(&["kirc", "check", "--", "--message-format=json"]));
        assert!(!yes(&["kirc", "check"]));
    }
}
