//! `kirc cache prebuild FILE|OP [-D NAME=VALUE]... [--shape NAME=AxBxC]... [--target T]...`:
//! compiles a module as `kirc bench` and `kirc run --device cuda` would (the same defines,
//! shapes and lowering flags give the same compile plan, hence the same PTX), assembles its PTX
//! with ptxas (the one `kir_backends::ptxas_path` finds: `$KIR_PTXAS`, else the `PATH`'s, a
//! toolkit's or a Python environment's) for each target's architecture, and
//! stores the compilation and the cubins in the kir cache (docs/cache.md). No GPU is needed: a
//! cubin is keyed by its PTX and architecture only, so one assembled here serves every GPU of
//! that architecture. A directory filled this way and shipped with kir (`KIR_CACHE_PREBUILT`,
//! or `kir-prebuilt` beside `kirc`) gives the built-in ops a first launch with no JIT.
//!
//! One line per target: `prebuilt MODULE for TARGET: N kernels, cubin B bytes (ptxas S s)`.
//! A module that does not compile, a missing ptxas or a failing one is an error (exit code 2);
//! so is a cache that is off.

use crate::common::{self, CliError};
use kir_backends::Target;
use kir_compiler::internal::cache::{self, Cache};
use kir_compiler::internal::compile::Emit;
use kir_compiler::internal::plan::CompilePlan;
use std::process::ExitCode;

/// Arguments of `kirc cache prebuild`.
#[derive(clap::Args)]
pub struct Args {
    /// A .kir file, or the name of a built-in op (see `kirc ops`).
    file: String,
    /// Override a specialization constant (repeatable; the last one of a name wins).
    #[arg(short = 'D', value_name = "NAME=VALUE", value_parser = common::parse_define)]
    defines: Vec<(String, String)>,
    /// The shape of a tensor param (repeatable), as `kirc bench --shape` gives it: shapes can
    /// choose the configuration, so give the ones the program will run with.
    #[arg(long = "shape", value_name = "NAME=AxBxC", value_parser = crate::bench::parse_shape)]
    shapes: Vec<(String, Vec<usize>)>,
    /// A target to assemble for (repeatable); default: sm_80, sm_90a, sm_100a and sm_120a.
    #[arg(long = "target", value_name = "TARGET")]
    targets: Vec<String>,
    #[command(flatten)]
    ptx: common::PtxFlags,
}

/// Runs `kirc cache prebuild`, storing into the cache directory `dir`.
pub fn main(a: Args, dir: std::path::PathBuf) -> Result<ExitCode, CliError> {
    let c = Cache::new(dir);
    let src = common::load(&a.file)?;
    let targets: Vec<Target> = if a.targets.is_empty() {
        Target::ALL.to_vec()
    } else {
        a.targets
            .iter()
            .map(|t| common::target(t))
            .collect::<Result<_, _>>()?
    };
    let exe = kir_backends::ptxas_path::ptxas_exe();
    for target in targets {
        let plan = CompilePlan::resolve_for(
            &src.text,
            &a.defines,
            target,
            Emit::Ptx,
            a.ptx.flags(None),
            &a.shapes,
        )
        .map_err(|e| common::compile_error(&src, e))?;
        let compiled = cache::compile(&src.text, &plan, Some(&c))
            .map_err(|e| common::compile_error(&src, e))?
            .compiled;
        let t0 = std::time::Instant::now();
        let (bin, _) = kir_backends::nvrtc::assemble(&exe, &compiled.text, target.name())
            .map_err(|e| CliError::Plain(format!("{} for {}: {e}", src.name, target.name())))?;
        let secs = t0.elapsed().as_secs_f64();
        c.store_cubin(&compiled.text, target.name(), &compiled.module.name, &bin)
            .map_err(|e| CliError::Plain(format!("the cubin was not stored: {e}")))?;
        common::out(&format!(
            "prebuilt {} for {}: {} kernel{}, cubin {} bytes (ptxas {secs:.2} s)\n",
            compiled.module.name,
            target.name(),
            compiled.module.kernels.len(),
            if compiled.module.kernels.len() == 1 {
                ""
            } else {
                "s"
            },
            bin.len()
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}
