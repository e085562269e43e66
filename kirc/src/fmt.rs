//! `kirc fmt FILE [--check]`: print a module in canonical form, or check that it already is.

use crate::common::{self, CliError};
use kir_ir::text;
use std::process::ExitCode;

/// Arguments of `kirc fmt`.
#[derive(clap::Args)]
pub struct Args {
    /// A .kir file, or the name of a built-in op (see `kirc ops`).
    file: String,
    /// Print nothing; exit 1 if the file is not in canonical form, 0 if it is.
    #[arg(long)]
    check: bool,
}

/// Runs `kirc fmt`.
pub fn main(a: Args) -> Result<ExitCode, CliError> {
    let src = common::load(&a.file)?;
    let m = text::parse(&src.text).map_err(|d| CliError::located(&src, d))?;
    let canonical = text::print(&m);
    if !a.check {
        common::out(&canonical)?;
        return Ok(ExitCode::SUCCESS);
    }
    if canonical == src.text {
        return Ok(ExitCode::SUCCESS);
    }
    let line = src
        .text
        .lines()
        .zip(canonical.lines())
        .position(|(x, y)| x != y)
        .unwrap_or_else(|| src.text.lines().count().min(canonical.lines().count()))
        + 1;
    common::note(&format!(
        "{}: not in canonical form (first difference at line {line}); run `kirc fmt {}` to see it\n",
        src.name, a.file
    ));
    Ok(ExitCode::from(1))
}
