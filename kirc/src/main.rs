//! `kirc`: the kir command line. One file per subcommand (`bench_report` holds what `bench`
//! reports); `common` holds source loading, `-D` parsing and error reporting, `message` the
//! JSON form of diagnostics and results (`--message-format json`), `progress` the progress line
//! of interpreter runs, `device` the GPU side of `run` and `bench` (feature `cuda`), `log` the
//! `KIR_LOG` logger.
//!
//! Exit codes: 0 on success, 2 on any user error (printed as `file:line:col: error: ...` with
//! the source line and a caret when the error has a location, else `error: ...`; one JSON
//! object per error with `--message-format json`), 1 only when `kirc fmt --check` finds a file
//! that is not canonical, and 141 (quietly) when standard output is closed before everything
//! was written (`kirc … | head`). A command that fails leaves no new output file
//! (compiler/src/outfile.rs).
//!
//! nvcc's `-arch=sm_90a` and `-arch sm_90a` are taken as `--target sm_90a` ([`nvcc_arch`]).

mod bench;
mod bench_report;
mod cache;
mod check;
mod common;
mod compile;
mod completions;
mod device;
mod explain;
mod fmt;
mod log;
mod message;
mod ops;
mod prebuild;
mod progress;
mod randn;
mod run;
mod tune;

use clap::{CommandFactory, Parser, Subcommand};
use message::MessageFormat;
use std::ffi::OsString;
use std::process::ExitCode;

/// `built in` or `not built in`: whether this kirc has the CUDA runtime.
#[cfg(feature = "cuda")]
macro_rules! cuda_runtime {
    () => {
        "built in"
    };
}

/// `built in` or `not built in`: whether this kirc has the CUDA runtime.
#[cfg(not(feature = "cuda"))]
macro_rules! cuda_runtime {
    () => {
        "not built in"
    };
}
/// What `kirc --version` prints after `kirc `: the crate's version, the commit it was built
/// from (kirc/build.rs) and whether the CUDA runtime (feature `cuda`) is built in.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("KIRC_COMMIT"),
    "; CUDA runtime: ",
    cuda_runtime!(),
    ")"
);

/// kir kernel compiler: check, format and run tile-IR kernels.
#[derive(Parser)]
#[command(name = "kirc", version = VERSION)]
struct Cli {
    /// How to write diagnostics, and the results of check, ops and bench: text, or one JSON
    /// object per line (docs/cli.md).
    #[arg(
        long,
        value_enum,
        global = true,
        default_value = "human",
        value_name = "FORMAT"
    )]
    message_format: MessageFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Parse, verify and specialize a module; print `ok: <module> (<n> kernels)`.
    Check(check::Args),
    /// Print a module in canonical form, check that files already are, or rewrite them.
    Fmt(fmt::Args),
    /// Compile a module (the pipeline's output) to PTX, CUDA C or IR, with launch metadata.
    Compile(compile::Args),
    /// Show what the e-graph phase did to each kernel: rules applied, cost before and after.
    Explain(explain::Args),
    /// Run a module (CPU interpreter, or GPU with --device cuda) with .npy inputs; write .npy outputs.
    Run(run::Args),
    /// Time a module on the GPU (CUDA events; median of many runs; TFLOP/s or TB/s).
    Bench(bench::Args),
    /// Write a deterministic pseudo-random array to an .npy file.
    Randn(randn::Args),
    /// List the built-in ops, or one op's constants: kind, default, allowed values.
    Ops(ops::Args),
    /// The on-disk cache of compilations and cubins: print its directory, list or clear it.
    Cache(cache::Args),
    /// Search a module's tunable constants and lowering flags for the fastest on the GPU.
    Tune(tune::Args),
    /// Print a shell completion script (bash, zsh, fish, powershell, elvish).
    Completions(completions::Args),
}

fn main() -> ExitCode {
    let args = nvcc_arch(std::env::args_os().collect());
    let json = message::json_requested(&args);
    if let Err(e) = log::init() {
        let format = if json {
            MessageFormat::Json
        } else {
            MessageFormat::Human
        };
        common::note(&message::render_error(&e, format));
        return ExitCode::from(2);
    }
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => return clap_exit(e, json),
    };
    let format = cli.message_format;
    let result = match cli.command {
        Command::Check(a) => check::main(a, format),
        Command::Fmt(a) => fmt::main(a),
        Command::Compile(a) => compile::main(a),
        Command::Explain(a) => explain::main(a),
        Command::Run(a) => run::main(a),
        Command::Bench(a) => bench::main(a, format),
        Command::Randn(a) => randn::main(a),
        Command::Ops(a) => ops::main(a, format),
        Command::Cache(a) => cache::main(a),
        Command::Tune(a) => tune::main(a),
        Command::Completions(a) => completions::main(a, Cli::command()),
    };
    match result {
        Ok(code) => code,
        Err(common::CliError::BrokenPipe) => ExitCode::from(common::BROKEN_PIPE_EXIT),
        Err(e) => {
            common::note(&message::render_error(&e, format));
            ExitCode::from(2)
        }
    }
}

/// The command line with nvcc's `-arch=T` and `-arch T` written as `--target T`. Only an
/// argument that is exactly `-arch` or starts with `-arch=` is rewritten, and none after a bare
/// `--`; the program name is left alone.
fn nvcc_arch(args: Vec<OsString>) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len() + 1);
    let mut rest = false;
    for (i, a) in args.into_iter().enumerate() {
        if i == 0 || rest {
            out.push(a);
            continue;
        }
        if a == "--" {
            rest = true;
            out.push(a);
        } else if a == "-arch" {
            out.push("--target".into());
        } else if let Some(t) = a.to_str().and_then(|s| s.strip_prefix("-arch=")) {
            out.push("--target".into());
            out.push(t.into());
        } else {
            out.push(a);
        }
    }
    out
}

/// What clap stopped for: help and the version are output like any other, written through
/// [`common::out`] (so a full or closed stdout is an error, not a silent success); a usage
/// error goes to stderr with clap's exit code (2), as one JSON diagnostic when `json`.
fn clap_exit(e: clap::Error, json: bool) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        return match common::out(&e.render().to_string()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(common::CliError::BrokenPipe) => ExitCode::from(common::BROKEN_PIPE_EXIT),
            Err(err) => {
                common::note(&err.render());
                ExitCode::from(2)
            }
        };
    }
    if json {
        common::note(&message::usage_error(&e.render().to_string()));
    } else {
        let _ = e.print();
    }
    ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite(args: &[&str]) -> Vec<String> {
        let v = args.iter().map(OsString::from).collect();
        nvcc_arch(v)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn arch_becomes_target() {
        assert_eq!(
            rewrite(&["kirc", "compile", "gemm", "-arch=sm_90a", "-o", "-"]),
            ["kirc", "compile", "gemm", "--target", "sm_90a", "-o", "-"]
        );
        assert_eq!(
            rewrite(&["kirc", "compile", "-arch", "sm_80", "gemm"]),
            ["kirc", "compile", "--target", "sm_80", "gemm"]
        );
        // Only that exact flag, and nothing after `--`.
        assert_eq!(
            rewrite(&["-arch", "run", "-archx", "--arch=1", "--", "-arch=sm_80"]),
            ["-arch", "run", "-archx", "--arch=1", "--", "-arch=sm_80"]
        );
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }
}
