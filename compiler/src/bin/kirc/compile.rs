//! `kirc compile FILE [--kernel NAME] [-D NAME=VALUE]... --target T --emit ptx|cuda|ir -o OUT
//! [--meta META.json] [--report[=FILE]]`: compile a module and write the code, its launch
//! metadata, and (PTX) the backend's lowering decisions.

use crate::common::{self, CliError};
use kir_compiler::compile::{self, CompileError, Emit};
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
    /// Print the PTX backend's lowering decisions of each kernel (warps, the path of every dot
    /// and why a faster one was not taken, ring depths, rescale skips, ISA needs) to stderr,
    /// or with `--report=FILE` write them to FILE. Needs `--emit ptx`.
    #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true, default_missing_value = "-")]
    report: Option<String>,
    /// Accepted for old scripts and ignored: fusion is part of the pipeline, so the module
    /// lowered is always the fused one (unless `--stage` names an earlier pass).
    #[arg(long, hide = true)]
    fuse: bool,
    /// Lower the module right after this pass instead of the pipeline's output (specialize,
    /// egraph, fusion, mask_split) — for comparing what a pass changes in the generated code.
    #[arg(long, value_name = "PASS")]
    stage: Option<String>,
    #[command(flatten)]
    ptx: common::PtxFlags,
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
    if a.report.is_some() && (emit != Emit::Ptx || a.dump_after.is_some()) {
        return Err(CliError::Plain(
            "--report needs --emit ptx (and no --dump-after)".into(),
        ));
    }
    let src = common::load(&a.file)?;
    if let Some(pass) = &a.dump_after {
        let text = match pass.as_str() {
            "layout" => {
                let f = common::frontend(&src, &a.defines)?;
                let spec = kir_compiler::pipeline::entry_module(f.output, a.kernel.as_deref())
                    .map_err(CliError::Plain)?;
                kir_ir::text::print(&kir_backends::ptx::layout::annotate(&spec))
            }
            p => kir_compiler::pipeline::dump_after_with(
                &src.text,
                &a.defines,
                p,
                &kir_compiler::pipeline::ScheduleOptions {
                    target: Some(target),
                    // The ring depth PTX compilation asks for (`kirc compile` lowers this IR).
                    stages: a.ptx.stages.or(Some(kir_backends::ptx::PIPELINE_STAGES)),
                    warp_specialize: kir_compiler::pipeline::WsChoice::Off,
                },
            )
            .map_err(|e| match e {
                kir_compiler::pipeline::DumpError::UnknownPass(_) => {
                    CliError::Plain(format!("{e} (and `layout` for kirc compile)"))
                }
                kir_compiler::pipeline::DumpError::NeedsTarget(_) => CliError::Plain(e.to_string()),
                kir_compiler::pipeline::DumpError::Failed(d) => CliError::located(&src, d),
            })?,
        };
        write(&a.out, &text)?;
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
    let out = compile::compile_stage(
        &src.text,
        &a.defines,
        a.kernel.as_deref(),
        target,
        emit,
        stage,
        &a.ptx.options(),
    )
    .map_err(|e| match e {
        CompileError::Source(d) => CliError::located(&src, d),
        CompileError::Plain(m) => CliError::Plain(m),
    })?;
    write(&a.out, &out.text)?;
    if let Some(dest) = &a.report {
        let text: String = out
            .reports
            .iter()
            .map(|r| r.render(Some(&src.text)))
            .collect();
        if dest == "-" {
            eprint!("{text}");
        } else {
            write(dest, &text)?;
        }
    }
    if let Some(meta) = &a.meta {
        let json = out
            .meta
            .as_ref()
            .ok_or_else(|| CliError::Plain("--meta needs --emit ptx or cuda".into()))?;
        let text = serde_json::to_string_pretty(json)
            .map_err(|e| CliError::Plain(format!("{meta}: {e}")))?;
        write(meta, &(text + "\n"))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn write(path: &str, text: &str) -> Result<(), CliError> {
    if path == "-" {
        print!("{text}");
        return Ok(());
    }
    if let Some(dir) = std::path::Path::new(path)
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
    {
        std::fs::create_dir_all(dir)
            .map_err(|e| CliError::Plain(format!("{}: {e}", dir.display())))?;
    }
    std::fs::write(path, text).map_err(|e| CliError::Plain(format!("{path}: {e}")))
}
