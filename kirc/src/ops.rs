//! `kirc ops [NAME]`: list the built-in ops (compiler/ops/*.kir) with their one-line summaries,
//! or one op's specialization constants: kind, default, tune set and `where`, as declared.

use crate::common::{self, CliError};
use kir_compiler::internal::oplib;
use kir_ir::ConstKind;
use std::fmt::Write;
use std::process::ExitCode;

/// Arguments of `kirc ops`.
#[derive(clap::Args)]
pub struct Args {
    /// Show this op's constants (defaults, `tune {…}` sets for `kirc tune`, conditions).
    name: Option<String>,
}

/// Runs `kirc ops`.
pub fn main(a: Args) -> Result<ExitCode, CliError> {
    if let Some(name) = &a.name {
        return constants(name);
    }
    let width = oplib::builtins().map(|(n, _)| n.len()).max().unwrap_or(0);
    let mut text = String::new();
    for (name, src) in oplib::builtins() {
        let summary = oplib::summary(src);
        let summary = summary
            .strip_prefix(&format!("{name}:"))
            .unwrap_or(summary)
            .trim();
        let _ = writeln!(text, "{name:width$}  {summary}");
    }
    common::out(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// `kirc ops NAME`: the op's summary and one line per constant.
fn constants(name: &str) -> Result<ExitCode, CliError> {
    let Some(src) = oplib::builtin(name) else {
        let names: Vec<&str> = oplib::builtins().map(|(n, _)| n).collect();
        return Err(CliError::Plain(format!(
            "no built-in op `{name}` (the built-in ops: {})",
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
