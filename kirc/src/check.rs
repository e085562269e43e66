//! `kirc check FILE [-D NAME=VALUE]... [--dump-after PASS]`: run every pass of the pipeline,
//! verifying after each; print `ok: <module> (<n> kernels of the output)`, or the IR after a pass.
//! With `--message-format json` the result is one object: `{"type": "check", "module",
//! "kernels": [names]}`, or `{"type": "dump", "pass", "ir"}` for `--dump-after` (docs/cli.md).

use crate::common::{self, CliError};
use crate::message::{self, MessageFormat};
use kir_compiler::internal::pipeline::{self, DumpError};
use std::process::ExitCode;

/// Arguments of `kirc check`.
#[derive(clap::Args)]
pub struct Args {
    /// A .kir file, or the name of a built-in op (see `kirc ops`).
    file: String,
    /// Override a specialization constant (repeatable; the last one of a name wins).
    #[arg(short = 'D', value_name = "NAME=VALUE", value_parser = common::parse_define)]
    defines: Vec<(String, String)>,
    /// Print the canonical IR right after this pass instead of `ok` (parse, specialize, egraph,
    /// fusion, mask_split, and with --target the scheduling passes: swap_operands, persistent,
    /// pipelining, warp_specialize, dot_overlap, cluster).
    #[arg(long, value_name = "PASS")]
    dump_after: Option<String>,
    /// The target the scheduling passes schedule for (its shared-memory budget): sm_80, sm_90a,
    /// sm_100a or sm_120a.
    #[arg(long, value_name = "T")]
    target: Option<String>,
    /// Pipeline stages for the `pipelining` pass instead of its choice.
    #[arg(long, value_name = "N")]
    stages: Option<usize>,
    /// The warp-specialization plan for `--dump-after warp_specialize` (fa3, gemm, 2p6c or auto,
    /// the default: the target's plans in order, the first that applies); with `--dump-after
    /// dot_overlap`, the overlap then rotates the plan's consumer loops.
    #[arg(long, value_name = "PLAN")]
    ws: Option<String>,
    /// The program count of the `persistent` pass (default with `--dump-after persistent`: the
    /// target's SM count; otherwise the pass does not run).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=65535))]
    persistent: Option<u32>,
}

/// Runs `kirc check`.
pub fn main(a: Args, format: MessageFormat) -> Result<ExitCode, CliError> {
    let src = common::load(&a.file)?;
    let target = a.target.as_deref().map(common::target).transpose()?;
    if target.is_none() && (a.stages.is_some() || a.ws.is_some() || a.persistent.is_some()) {
        return Err(CliError::Plain(
            "--stages, --ws and --persistent choose how the scheduling passes schedule for a \
             target: add --target"
                .into(),
        ));
    }
    let ws = common::ws_choice(a.ws.as_deref())?;
    if let Some(t) = target {
        let flags = kir_compiler::internal::plan::Flags {
            stages: a.stages,
            persistent: a.persistent,
            ws_plan: (ws != pipeline::WsChoice::Off).then(|| ws.clone()),
            ..Default::default()
        };
        flags
            .validate(t, kir_compiler::internal::compile::Emit::Ptx)
            .map_err(CliError::Plain)?;
    }
    if let Some(pass) = &a.dump_after {
        let opts = kir_compiler::internal::plan::explore(target, pass, a.stages, ws, a.persistent);
        let text =
            pipeline::dump_after_with(&src.text, &a.defines, pass, &opts).map_err(|e| match e {
                DumpError::UnknownPass(..) | DumpError::NeedsTarget(_) => {
                    CliError::Plain(e.to_string())
                }
                DumpError::Failed(d) => CliError::located(&src, d),
            })?;
        let text = match format {
            MessageFormat::Human => text,
            MessageFormat::Json => {
                message::line(&serde_json::json!({"type": "dump", "pass": pass, "ir": text}))
            }
        };
        common::out(&text)?;
        return Ok(ExitCode::SUCCESS);
    }
    let f = common::frontend(&src, &a.defines)?;
    let n = f.output.kernels.len();
    let text = match format {
        MessageFormat::Human => format!(
            "ok: {} ({n} kernel{})\n",
            f.output.name,
            if n == 1 { "" } else { "s" }
        ),
        MessageFormat::Json => {
            let kernels: Vec<&str> = f.output.kernels.values().map(|k| k.name.as_str()).collect();
            message::line(&serde_json::json!({
                "type": "check",
                "module": f.output.name,
                "kernels": kernels,
            }))
        }
    };
    common::out(&text)?;
    Ok(ExitCode::SUCCESS)
}
