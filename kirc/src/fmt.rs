//! `kirc fmt FILE... [--check | --write]`: print a module in canonical form, check that files
//! already are (`--check`), or rewrite them in place (`--write`).
//!
//! `--write` parses every file first: if any does not parse, its errors are reported and no
//! file is touched. Then each file whose text is not canonical is replaced atomically (a
//! temporary file renamed onto it, keeping its permissions; a symbolic link is followed), all
//! or nothing (compiler/src/outfile.rs), and its path printed as `formatted PATH`; a file
//! already canonical is left alone, not even rewritten. Built-in ops are not files and cannot
//! be written.

use crate::common::{self, CliError, Source};
use kir_ir::text;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `kirc fmt`.
#[derive(clap::Args)]
pub struct Args {
    /// .kir files, or names of built-in ops (see `kirc ops`); printing takes exactly one.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<String>,
    /// Print nothing; exit 1 if a file is not in canonical form, 0 if all are.
    #[arg(long, conflicts_with = "write")]
    check: bool,
    /// Rewrite each file that is not in canonical form in place, and print its path.
    #[arg(long)]
    write: bool,
}

/// Runs `kirc fmt`.
pub fn main(a: Args) -> Result<ExitCode, CliError> {
    if a.write {
        return write(&a.files);
    }
    if a.check {
        let mut code = ExitCode::SUCCESS;
        for f in &a.files {
            let (src, canonical) = canonical(f)?;
            if canonical != src.text {
                note_difference(&src, &canonical, f);
                code = ExitCode::from(1);
            }
        }
        return Ok(code);
    }
    let [file] = &a.files[..] else {
        return Err(CliError::Plain(format!(
            "kirc fmt prints one module; {} files were given (add --check or --write for several)",
            a.files.len()
        )));
    };
    let (_, canonical) = canonical(file)?;
    common::out(&canonical)?;
    Ok(ExitCode::SUCCESS)
}

/// The source of `file` and its canonical text.
fn canonical(file: &str) -> Result<(Source, String), CliError> {
    let src = common::load(file)?;
    let m = text::parse(&src.text).map_err(|d| CliError::located(&src, d))?;
    let canonical = text::print(&m);
    Ok((src, canonical))
}

/// Says on stderr where `src` first differs from its canonical text.
fn note_difference(src: &Source, canonical: &str, file: &str) {
    let line = src
        .text
        .lines()
        .zip(canonical.lines())
        .position(|(x, y)| x != y)
        .unwrap_or_else(|| src.text.lines().count().min(canonical.lines().count()))
        + 1;
    common::note(&format!(
        "{}: not in canonical form (first difference at line {line}); run `kirc fmt {file}` to \
         see it, or `kirc fmt --write {file}` to rewrite it\n",
        src.name
    ));
}

/// `--write`: every file parsed, then the ones that change replaced together.
fn write(files: &[String]) -> Result<ExitCode, CliError> {
    let mut changed: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    let mut report = String::new();
    for f in files {
        if !Path::new(f).exists() {
            let op = f.strip_suffix(".kir").unwrap_or(f);
            return Err(CliError::Plain(
                match kir_compiler::internal::oplib::builtin(op) {
                    Some(_) => format!("{f}: a built-in op, not a file (--write rewrites files)"),
                    None => format!("{f}: no such file"),
                },
            ));
        }
        let (src, canonical) = canonical(f)?;
        if canonical != src.text && !changed.iter().any(|(p, _)| p == Path::new(f)) {
            report += &format!("formatted {f}\n");
            changed.push((PathBuf::from(f), canonical.into_bytes()));
        }
    }
    if changed.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    // All or nothing: every file staged, the report written, then the files replaced.
    let err = |e: kir_compiler::internal::outfile::OutputError| CliError::Plain(e.to_string());
    let staged = kir_compiler::internal::outfile::stage_replacements(changed).map_err(err)?;
    common::out(&report)?;
    staged.commit().map_err(err)?;
    Ok(ExitCode::SUCCESS)
}
