//! `kirc ops`: list the built-in ops (compiler/ops/*.kir) with their one-line summaries.

use crate::common::{self, CliError};
use kir_compiler::oplib;
use std::fmt::Write;
use std::process::ExitCode;

/// Arguments of `kirc ops` (none).
#[derive(clap::Args)]
pub struct Args {}

/// Runs `kirc ops`.
pub fn main(_: Args) -> Result<ExitCode, CliError> {
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
