//! `kirc ops [NAME]`: list the built-in ops (compiler/ops/*.kir) with their one-line summaries,
//! or one op's specialization constants: kind, default, tune set and `where`, as declared.
//! With `--message-format json`: one object per op (`{"type": "op", "name", "summary"}`), or
//! for one op that object with `"constants"`, each `{"name", "kind": "int"|"enum", "values"
//! (an enum's, else null), "default", "tune" (the tune set, else null), "where" (else null),
//! "doc"}` (docs/cli.md).

use crate::common::{self, CliError};
use crate::message::{self, MessageFormat};
use kir_compiler::internal::oplib;
use kir_ir::ConstKind;
use serde_json::json;
use std::fmt::Write;
use std::process::ExitCode;

/// Arguments of `kirc ops`.
#[derive(clap::Args)]
pub struct Args {
    /// Show this op's constants (defaults, `tune {…}` sets for `kirc tune`, conditions).
    name: Option<String>,
}

/// An op's summary line without its leading `NAME:`.
fn summary<'a>(name: &str, src: &'a str) -> &'a str {
    let summary = oplib::summary(src);
    summary
        .strip_prefix(&format!("{name}:"))
        .unwrap_or(summary)
        .trim()
}

/// Runs `kirc ops`.
pub fn main(a: Args, format: MessageFormat) -> Result<ExitCode, CliError> {
    if let Some(name) = &a.name {
        return constants(name, format);
    }
    let width = oplib::builtins().map(|(n, _)| n.len()).max().unwrap_or(0);
    let mut text = String::new();
    for (name, src) in oplib::builtins() {
        let summary = summary(name, src);
        match format {
            MessageFormat::Human => {
                let _ = writeln!(text, "{name:width$}  {summary}");
            }
            MessageFormat::Json => {
                text += &message::line(&json!({"type": "op", "name": name, "summary": summary}))
            }
        }
    }
    common::out(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// `kirc ops NAME`: the op's summary and one line per constant.
fn constants(name: &str, format: MessageFormat) -> Result<ExitCode, CliError> {
    let Some(src) = oplib::builtin(name) else {
        let names: Vec<&str> = oplib::builtins().map(|(n, _)| n).collect();
        return Err(CliError::Plain(format!(
            "no built-in op `{name}`{} (the built-in ops: {})",
            kir_compiler::internal::suggest::did_you_mean(name, names.iter().copied()),
            names.join(", ")
        )));
    };
    let m = kir_ir::text::parse(src).map_err(|d| {
        CliError::located(
            &common::Source {
                name: format!("{name}.kir"),
                text: src.to_string(),
            },
            d,
        )
    })?;
    if format == MessageFormat::Json {
        let consts: Vec<serde_json::Value> = m
            .consts
            .iter()
            .map(|c| {
                let (kind, values) = match &c.kind {
                    ConstKind::Int => ("int", None),
                    ConstKind::Enum(v) => ("enum", Some(v)),
                };
                json!({
                    "name": c.name,
                    "kind": kind,
                    "values": values,
                    "default": c.default.to_string(),
                    "tune": c.tune.as_ref().map(|t| &t.values),
                    "where": c.require.as_ref().map(ToString::to_string),
                    "doc": c.doc.join("\n"),
                })
            })
            .collect();
        let v = json!({
            "type": "op",
            "name": name,
            "summary": summary(name, src),
            "constants": consts,
        });
        common::out(&message::line(&v))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut text = format!("{}\nconstants:\n", oplib::summary(src));
    for c in &m.consts {
        let kind = match &c.kind {
            ConstKind::Int => "int".to_string(),
            ConstKind::Enum(v) => format!("{{{}}}", v.join(", ")),
        };
        let _ = write!(text, "  {}: {kind} = {}", c.name, c.default);
        if let Some(t) = &c.tune {
            let vs: Vec<String> = t.values.iter().map(i64::to_string).collect();
            let _ = write!(text, "  tune {{{}}}", vs.join(", "));
        }
        if let Some(w) = &c.require {
            let _ = write!(text, "  where {w}");
        }
        text.push('\n');
    }
    common::out(&text)?;
    Ok(ExitCode::SUCCESS)
}
