//! `kirc compile FILE [--kernel NAME] [-D NAME=VALUE]... --target T --emit ptx|cuda|ir -o OUT
//! [--meta META.json] [--lowered FILE] [--report[=FILE]] [--ws PLAN] [--no-cache]`: compile a module and
//! write the code, its launch metadata, the module that was lowered, and (PTX) the backend's
//! lowering decisions.
//!
//! The compilation goes through the on-disk cache (docs/cache.md) unless `--no-cache` is given
//! or the cache is off: a hit writes the stored output, byte for byte what compiling writes.
//! The report's last line says what the cache did: `cache: hit KEY`, `cache: stored KEY` or
//! `cache: off`. `--dump-after` never uses the cache (it shows the passes as they run).
//!
//! The output paths and the flag combination are checked before anything is compiled, and the
//! outputs are written all or nothing (compiler/src/outfile.rs): a failed compile, an unwritable
//! `--meta` or `--report` file or a closed stdout leaves no new file.

use crate::common::{self, CliError};
use kir_compiler::internal::compile::{self, Emit};
use kir_compiler::internal::outfile::{self, Staged};
use kir_compiler::internal::plan::CompilePlan;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `kirc compile`.
#[derive(clap::Args)]
pub struct Args {
    /// A .kir file, or the name of a built-in op (see `kirc ops`).
    file: String,
    /// Compile only this kernel of the module, as the entry.
    #[arg(long)]
    kernel: Option<String>,
    /// Override a specialization constant (repeatable; the last one of a name wins).
    #[arg(short = 'D', value_name = "NAME=VALUE", value_parser = common::parse_define)]
    defines: Vec<(String, String)>,
    /// The shape of a tensor param (repeatable), as `kirc bench --shape` gives it: shapes can
    /// choose the configuration (a GEMM with few rows), so the code is what `kirc bench` and
    /// `kirc run` compile for those shapes.
    #[arg(long = "shape", value_name = "NAME=AxBxC", value_parser = crate::bench::parse_shape)]
    shapes: Vec<(String, Vec<usize>)>,
    /// Target architecture: sm_80, sm_90a, sm_100a or sm_120a.
    #[arg(long, default_value = "sm_90a")]
    target: String,
    /// What to emit: ptx, cuda or ir.
    #[arg(long, default_value = "ptx")]
    emit: String,
    /// Output file (`-` for stdout).
    #[arg(short = 'o', value_name = "OUT", default_value = "-")]
    out: String,
    /// Write the launch metadata JSON here.
    #[arg(long, value_name = "META.json")]
    meta: Option<String>,
    /// Write the module that was lowered here: its canonical IR text, after the scheduling
    /// passes (with the code and META.json, what `kir.Kernel.from_ptx` loads to launch the
    /// code from files). Needs `--emit ptx` or `cuda`.
    #[arg(long, value_name = "FILE")]
    lowered: Option<String>,
    /// Print the PTX backend's lowering decisions of each kernel (warps, the path of every dot
    /// and why a faster one was not taken, ring depths, rescale skips, ISA needs) to stderr,
    /// or with `--report=FILE` write them to FILE. Needs `--emit ptx`.
    #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true, default_missing_value = "-")]
    report: Option<String>,
    /// Lower the module right after this pass instead of the pipeline's output (specialize,
    /// egraph, fusion, mask_split) — for comparing what a pass changes in the generated code.
    #[arg(long, value_name = "PASS")]
    stage: Option<String>,
    #[command(flatten)]
    ptx: common::PtxFlags,
    /// Warp-specialize with this plan for the PTX backend (auto, fa3, gemm, 2p6c; docs/passes.md
    /// describes them) instead of the configuration's warp roles: an error where the plan does
    /// not apply; kernel symbols end in `_WSPLAN_<plan>`.
    #[arg(long, value_name = "PLAN")]
    ws: Option<String>,
    /// Compile without the on-disk cache (neither read nor written).
    #[arg(long)]
    no_cache: bool,
    /// Print the IR right after a pass instead of compiling: parse, specialize, egraph, fusion,
    /// mask_split, or layout (the PTX backend's layout assignment of the pipeline's output,
    /// shown as a comment on each op).
    #[arg(long, value_name = "PASS")]
    dump_after: Option<String>,
}

/// Runs `kirc compile`.
pub fn main(a: Args) -> Result<ExitCode, CliError> {
    let target = common::target(&a.target)?;
    let emit = Emit::from_name(&a.emit)
        .ok_or_else(|| CliError::Plain(format!("unknown --emit `{}` (ptx, cuda, ir)", a.emit)))?;
    check_args(&a, emit)?;
    let src = common::load(&a.file)?;
    if let Some(pass) = &a.dump_after {
        let text = match pass.as_str() {
            "layout" => {
                // What the PTX backend lowers for this target: its configuration, the scheduled
                // module and the warps each kernel got.
                let out = kir_compiler::internal::pipeline::compile(
                    &src.text,
                    &plan(&a, &src, target, Emit::Ptx)?,
                )
                .map_err(|e| common::compile_error(&src, e))?;
                let warps = out
                    .reports
                    .iter()
                    .map(|r| (r.kernel.clone(), r.warps))
                    .collect();
                kir_ir::text::print(&kir_backends::ptx::layout::annotate(
                    &out.module,
                    target,
                    &warps,
                ))
            }
            p => common::dump_lowered(&src, &plan(&a, &src, target, emit)?, p)?,
        };
        write(&a.out, &text, Vec::new(), None)?;
        return Ok(ExitCode::SUCCESS);
    }
    let stage = match &a.stage {
        None => compile::Stage::Output,
        Some(p) => compile::Stage::from_pass(p).ok_or_else(|| {
            CliError::Plain(format!(
                "--stage {p}: not a pass whose output can be lowered (specialize, egraph, fusion, mask_split)"
            ))
        })?,
    };
    let cache = common::cache(a.no_cache);
    let plan = plan(&a, &src, target, emit)?.with_stage(stage);
    let cached = kir_compiler::internal::cache::compile(&src.text, &plan, cache.as_ref())
        .map_err(|e| common::compile_error(&src, e))?;
    let out = &cached.compiled;
    let meta = match (&a.meta, &out.meta) {
        (Some(path), Some(json)) => {
            let text = serde_json::to_string_pretty(json)
                .map_err(|e| CliError::Plain(format!("{path}: {e}")))?;
            Some((PathBuf::from(path), text + "\n"))
        }
        (Some(_), None) => return Err(CliError::Plain("--meta needs --emit ptx or cuda".into())),
        (None, _) => None,
    };
    let lowered = a
        .lowered
        .as_ref()
        .map(|path| (PathBuf::from(path), kir_ir::text::print(&out.module)));
    let report = a.report.as_ref().map(|dest| {
        let mut text = cached.report.clone();
        // The schedule search's candidates that the backend did not take, and why.
        for t in &out.tried {
            text += &format!("schedule search: passed over {t}\n");
        }
        // Which configuration row applied and why, or why none did (compiler/src/configs.rs).
        let config = plan.config_report();
        if !config.is_empty() {
            text += &config;
            text.push('\n');
        }
        if let Some(f) = &out.fusion {
            text += &format!("fusion: {f}\n");
        }
        text += &format!("{}\n", cached.outcome.line());
        (dest.clone(), text)
    });
    let report_file = report
        .as_ref()
        .filter(|(d, _)| d != "-")
        .map(|(d, t)| (PathBuf::from(d), t.clone()));
    // A report on stderr is written before the files are put in place: if stderr fails, the
    // command fails and leaves no file.
    let report_stderr = report.filter(|(d, _)| d == "-").map(|(_, t)| t);
    write(
        &a.out,
        &out.text,
        meta.into_iter().chain(lowered).chain(report_file).collect(),
        report_stderr.as_deref(),
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Checks, before anything is compiled or written, the flag combination and every output path:
/// `--meta` needs `--emit ptx|cuda` and is not a directory, `--report` needs `--emit ptx`, `-o`,
/// `--meta` and a `--report` file are different files, `--stage` and `--meta` not with
/// `--dump-after` (the lowering flags are checked by the compile plan).
fn check_args(a: &Args, emit: Emit) -> Result<(), CliError> {
    let plain = |m: &str| Err(CliError::Plain(m.to_string()));
    if a.report.is_some() && (emit != Emit::Ptx || a.dump_after.is_some()) {
        return plain("--report needs --emit ptx (and no --dump-after)");
    }
    if a.dump_after.is_some() {
        if a.meta.is_some() {
            return plain("--meta does not go with --dump-after (a dump has no launch metadata)");
        }
        if a.lowered.is_some() {
            return plain("--lowered does not go with --dump-after (a dump lowers nothing)");
        }
        if a.stage.is_some() {
            return plain(
                "--stage does not go with --dump-after (--dump-after names the pass to show)",
            );
        }
    } else {
        if a.meta.is_some() && emit == Emit::Ir {
            return plain("--meta needs --emit ptx or cuda (--emit ir has no launch metadata)");
        }
        if a.lowered.is_some() && emit == Emit::Ir {
            return plain("--lowered needs --emit ptx or cuda (--emit ir is the module itself)");
        }
    }
    let mut paths: Vec<(&str, &Path)> = Vec::new();
    if a.out != "-" {
        paths.push(("-o", Path::new(&a.out)));
    }
    if let Some(m) = &a.meta {
        if m == "-" {
            return plain("--meta needs a file name (`-`, standard output, is only for -o)");
        }
        paths.push(("--meta", Path::new(m)));
    }
    if let Some(m) = &a.lowered {
        if m == "-" {
            return plain("--lowered needs a file name (`-`, standard output, is only for -o)");
        }
        paths.push(("--lowered", Path::new(m)));
    }
    if let Some(r) = a.report.as_deref().filter(|r| *r != "-") {
        paths.push(("--report", Path::new(r)));
    }
    outfile::check_paths(&paths).map_err(|e| CliError::Plain(e.to_string()))
}

/// The compile plan of the arguments (flags validated, the configuration resolved).
fn plan(
    a: &Args,
    src: &common::Source,
    target: kir_backends::Target,
    emit: Emit,
) -> Result<CompilePlan, CliError> {
    let flags = kir_compiler::internal::plan::Flags {
        ws_ptx: common::ws_ptx(a.ws.as_deref())?,
        ..a.ptx.flags(None)
    };
    Ok(
        CompilePlan::resolve_for(&src.text, &a.defines, target, emit, flags, &a.shapes)
            .map_err(|e| common::compile_error(src, e))?
            .with_kernel(a.kernel.as_deref()),
    )
}

/// Writes the code to `out` (a file, or stdout for `-`) and the other files (metadata, report)
/// to theirs, all or nothing: the files are staged, stdout (and a report for stderr) is
/// written, and only then are the files put in place.
fn write(
    out: &str,
    text: &str,
    others: Vec<(PathBuf, String)>,
    report_stderr: Option<&str>,
) -> Result<(), CliError> {
    let mut files = Vec::new();
    if out != "-" {
        files.push((PathBuf::from(out), text.as_bytes().to_vec()));
    }
    for (path, body) in others {
        files.push((path, body.into_bytes()));
    }
    let staged = Staged::write(files).map_err(|e| CliError::Plain(e.to_string()))?;
    if out == "-" {
        common::out(text)?;
    }
    if let Some(r) = report_stderr {
        common::err_out(r, "the report")?;
    }
    staged.commit().map_err(|e| CliError::Plain(e.to_string()))
}
