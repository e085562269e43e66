//! `kirc`: the kir command line. One file per subcommand; `common` holds source loading, `-D`
//! parsing and error reporting, `device` the GPU side of `run` and `bench` (feature `cuda`),
//! `log` the `KIR_LOG` logger.
//!
//! Exit codes: 0 on success, 2 on any user error (printed as `file:line:col: error: ...` with
//! the source line and a caret when the error has a location, else `error: ...`), 1 only when
//! `kirc fmt --check` finds a file that is not canonical, and 141 (quietly) when standard output
//! is closed before everything was written (`kirc … | head`). A command that fails leaves no
//! new output file (compiler/src/outfile.rs).

mod bench;
mod cache;
mod check;
mod common;
mod compile;
mod device;
mod explain;
mod fmt;
mod log;
mod ops;
mod randn;
mod run;
mod tune;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// kir kernel compiler: check, format and run tile-IR kernels.
#[derive(Parser)]
#[command(name = "kirc", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Parse, verify and specialize a module; print `ok: <module> (<n> kernels)`.
    Check(check::Args),
    /// Print a module in canonical form, or check that a file already is.
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
    /// List the built-in ops.
    Ops(ops::Args),
    /// The on-disk cache of compilations and cubins: print its directory, list or clear it.
    Cache(cache::Args),
    /// Search a module's tunable constants and lowering flags for the fastest on the GPU.
    Tune(tune::Args),
}

fn main() -> ExitCode {
    if let Err(e) = log::init() {
        common::note(&e.render());
        return ExitCode::from(2);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_exit(e),
    };
    let result = match cli.command {
        Command::Check(a) => check::main(a),
        Command::Fmt(a) => fmt::main(a),
        Command::Compile(a) => compile::main(a),
        Command::Explain(a) => explain::main(a),
        Command::Run(a) => run::main(a),
        Command::Bench(a) => bench::main(a),
        Command::Randn(a) => randn::main(a),
        Command::Ops(a) => ops::main(a),
        Command::Cache(a) => cache::main(a),
        Command::Tune(a) => tune::main(a),
    };
    match result {
        Ok(code) => code,
        Err(common::CliError::BrokenPipe) => ExitCode::from(common::BROKEN_PIPE_EXIT),
        Err(e) => {
            common::note(&e.render());
            ExitCode::from(2)
        }
    }
}

/// What clap stopped for: help and the version are output like any other, written through
/// [`common::out`] (so a full or closed stdout is an error, not a silent success); a usage
/// error goes to stderr with clap's exit code (2).
fn clap_exit(e: clap::Error) -> ExitCode {
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
    let _ = e.print();
    ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2))
}
