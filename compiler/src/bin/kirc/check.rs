//! `kirc check FILE [-D NAME=VALUE]... [--dump-after PASS]`: run every pass of the pipeline,
//! verifying after each; print `ok: <module> (<n> kernels of the output)`, or the IR after a pass.

use crate::common::{self, CliError};
use kir_compiler::pipeline::{self, DumpError};
use std::process::ExitCode;

/// Arguments of `kirc check`.
#[derive(clap::Args)]
pub struct Args {
    /// A .kir file, or the name of a built-in op (see `kirc ops`).
    file: String,
    /// Override a specialization constant (repeatable; the last one of a name wins).
    #[arg(short = 'D', value_name = "NAME=VALUE", value_parser = common::parse_define)]
    defines: Vec<(String, String)>,
    /// Print the canonical IR right after this pass instead of `ok` (parse, specialize, egraph, fusion, mask_split).
    #[arg(long, value_name = "PASS")]
    dump_after: Option<String>,
}

/// Runs `kirc check`.
pub fn main(a: Args) -> Result<ExitCode, CliError> {
    let src = common::load(&a.file)?;
    if let Some(pass) = &a.dump_after {
        let text = pipeline::dump_after(&src.text, &a.defines, pass).map_err(|e| match e {
            DumpError::UnknownPass(_) => CliError::Plain(e.to_string()),
            DumpError::Failed(d) => CliError::located(&src, d),
        })?;
        print!("{text}");
        return Ok(ExitCode::SUCCESS);
    }
    let f = common::frontend(&src, &a.defines)?;
    let n = f.output.kernels.len();
    println!(
        "ok: {} ({n} kernel{})",
        f.output.name,
        if n == 1 { "" } else { "s" }
    );
    Ok(ExitCode::SUCCESS)
}
