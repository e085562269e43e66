//! `kirc run FILE [--kernel NAME] [-D NAME=VALUE]... --arg NAME=PATH.npy|NUMBER ... --out DIR
//! [--device cpu|cuda] [--target T] [--ws PLAN] [--seed N]`: runs a module's entry (its program,
//! its single kernel, or the kernel `--kernel` names) on the CPU interpreter (`--device cpu`, the
//! default; with `--target`, the scheduled IR for that target under scheduler seed `--seed`) or
//! on the GPU (`--device cuda`: its PTX through the CUDA runtime, for `--target` or the target
//! of the GPU present) and writes every `out`/`inout` tensor to `DIR/NAME.npy` (the fixed
//! contract of the CLI). Both devices take the same arguments and write the same files.
//!
//! Inputs: each tensor param takes a C-order `.npy`; its shape binds the symbolic dims and its
//! values are converted to the param's dtype with round-to-nearest-even by the interpreter.
//! Outputs: float dtypes are written as `<f4` (holding exactly the kernel dtype's values),
//! i32/i64 as themselves, u8 and i1 as `|u1`.

use crate::common::{self, CliError, Source};
use crate::device::{self, Device};
use kir_backends::interp::{self, HostArg, HostTensor, RunOptions};
use kir_compiler::npy::{self, NpyDtype};
use kir_compiler::pipeline;
use kir_ir::{Diagnostic, Dtype, Module, ParamKind, Span};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `kirc run`.
#[derive(clap::Args)]
pub struct Args {
    /// A .kir file, or the name of a built-in op (see `kirc ops`).
    file: String,
    /// Run this kernel of the module alone, as the entry (instead of the program).
    #[arg(long, value_name = "NAME")]
    kernel: Option<String>,
    /// Override a specialization constant (repeatable; the last one of a name wins).
    #[arg(short = 'D', value_name = "NAME=VALUE", value_parser = common::parse_define)]
    defines: Vec<(String, String)>,
    /// An entry argument: a .npy file for a tensor param, a number for a scalar param.
    #[arg(long = "arg", value_name = "NAME=PATH.npy|NUMBER", value_parser = parse_arg)]
    args: Vec<(String, String)>,
    /// Directory for the outputs, one NAME.npy per out/inout tensor (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Run program instances one after another instead of in parallel (same results; cpu only).
    #[arg(long)]
    sequential: bool,
    /// Where to run: the CPU interpreter, or the GPU through the CUDA runtime.
    #[arg(long, value_enum, default_value = "cpu")]
    device: Device,
    /// The PTX target for `--device cuda` (sm_80, sm_90a, sm_100a, sm_120a); default: the GPU's.
    /// On the CPU: run the scheduled IR for this target (the `pipelining` pass, and with `--ws`
    /// warp specialization) under the interpreter's protocol checks.
    #[arg(long, value_name = "TARGET")]
    target: Option<String>,
    /// With `--target` on the CPU: warp-specialize with this plan (auto, fa3, gemm, 2p6c).
    #[arg(long, value_name = "PLAN")]
    ws: Option<String>,
    /// The interpreter's scheduler seed for scheduled IR (one interleaving of partitions and
    /// copy completions per seed; default 0).
    #[arg(long, value_name = "N", default_value_t = 0)]
    seed: u64,
    #[command(flatten)]
    ptx: common::PtxFlags,
}

/// Parses `NAME=VALUE` (the argument of `--arg`).
pub fn parse_arg(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((n, v)) if common::is_name(n) && !v.is_empty() => Ok((n.to_string(), v.to_string())),
        _ => Err(format!("expected NAME=PATH.npy or NAME=NUMBER (e.g. --arg q=q.npy --arg scale=0.125), found `{s}`")),
    }
}

/// The module whose entry runs: the pipeline's output, or just the kernel `--kernel` names.
fn entry_module(m: Module, kernel: Option<&str>) -> Result<Module, CliError> {
    pipeline::entry_module(m, kernel).map_err(CliError::Plain)
}

/// Turns the `--arg`s into interpreter arguments, reading `.npy` files for tensor params.
pub fn host_args(
    src: &Source,
    m: &Module,
    args: &[(String, String)],
) -> Result<BTreeMap<String, HostArg>, CliError> {
    let params = m.entry_params().unwrap_or(&[]);
    let entry_span = match &m.program {
        Some(p) => p.span,
        None => m
            .kernels
            .values()
            .next()
            .map_or(Span::default(), |k| k.span),
    };
    let mut out = BTreeMap::new();
    let mut errs = Vec::new();
    for (name, value) in args {
        if out.contains_key(name) {
            return Err(CliError::Plain(format!("--arg {name} is given twice")));
        }
        let Some(p) = params.iter().find(|p| &p.name == name) else {
            let names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
            errs.push(
                Diagnostic::new(
                    entry_span,
                    format!("--arg {name}: the entry has no param `{name}`"),
                )
                .with_note(format!("the entry params are: {}", names.join(", "))),
            );
            continue;
        };
        if let Ok(x) = value.trim().parse::<f64>() {
            out.insert(name.clone(), HostArg::Scalar(x));
            continue;
        }
        match &p.kind {
            ParamKind::Scalar(e) => errs.push(Diagnostic::new(
                p.span,
                format!("--arg {name}={value}: `{name}` is a scalar param of type {e}; expected a number"),
            )),
            ParamKind::Tensor(_, tt) => match npy::read(Path::new(value)) {
                Ok(a) => {
                    let dtype = tt.elem.known().unwrap_or(Dtype::F32);
                    out.insert(name.clone(), HostArg::Tensor(HostTensor { dtype, shape: a.shape, data: a.data }));
                }
                Err(e) => errs.push(Diagnostic::new(p.span, format!("--arg {name}: {e}"))),
            },
        }
    }
    if errs.is_empty() {
        Ok(out)
    } else {
        Err(CliError::located(src, kir_ir::Diagnostics(errs)))
    }
}

/// The `.npy` element type an output of `dtype` is written as.
fn out_dtype(dtype: Dtype) -> NpyDtype {
    match dtype {
        Dtype::F32 | Dtype::F16 | Dtype::Bf16 => NpyDtype::F32,
        Dtype::I32 => NpyDtype::I32,
        Dtype::I64 => NpyDtype::I64,
        Dtype::U8 | Dtype::I1 => NpyDtype::U8,
    }
}

/// Runs the entry on the CPU interpreter.
fn run_cpu(
    src: &Source,
    m: &Module,
    args: &BTreeMap<String, HostArg>,
    sequential: bool,
    seed: u64,
) -> Result<BTreeMap<String, HostTensor>, CliError> {
    let opts = RunOptions {
        parallel: !sequential,
        seed,
    };
    interp::run_with(m, args, &opts).map_err(|e| {
        let message = match &e.kernel {
            Some(k) if !e.message.contains(k.as_str()) => format!("in kernel @{k}: {}", e.message),
            _ => e.message.clone(),
        };
        match e.span {
            Some(span) => CliError::located(src, Diagnostic::new(span, message)),
            None => CliError::Plain(message),
        }
    })
}

/// Runs the entry on the GPU: PTX for `--target` (or the GPU's), launched from its META.
#[cfg(feature = "cuda")]
fn run_cuda(
    src: &Source,
    a: &Args,
    args: &BTreeMap<String, HostArg>,
) -> Result<BTreeMap<String, HostTensor>, CliError> {
    let gpu = device::open_gpu(src)?;
    let c = device::compile_for(
        src,
        &a.defines,
        a.kernel.as_deref(),
        a.target.as_deref(),
        &a.ptx.options(),
        &gpu,
    )?;
    kir_backends::runtime::run(&gpu, &c.text, device::meta(&c)?, &c.module, args)
        .map_err(|e| device::runtime_error(src, e))
}

/// `--device cuda` in a kirc built without the runtime: an error saying how to build it.
#[cfg(not(feature = "cuda"))]
fn run_cuda(
    _src: &Source,
    _a: &Args,
    _args: &BTreeMap<String, HostArg>,
) -> Result<BTreeMap<String, HostTensor>, CliError> {
    Err(device::not_built("--device cuda"))
}

/// Runs `kirc run`.
pub fn main(a: Args) -> Result<ExitCode, CliError> {
    let src = common::load(&a.file)?;
    let f = common::frontend(&src, &a.defines)?;
    let m = entry_module(f.output, a.kernel.as_deref())?;
    let args = host_args(&src, &m, &a.args)?;
    let outputs = match a.device {
        Device::Cpu => {
            let m = match a.target.as_deref() {
                None if a.ws.is_some() => {
                    return Err(CliError::Plain(
                        "--ws needs --target (the scheduling passes schedule for a target)".into(),
                    ))
                }
                None => m,
                Some(t) => {
                    let opts = pipeline::ScheduleOptions {
                        target: Some(common::target(t)?),
                        stages: a.ptx.stages,
                        warp_specialize: common::ws_choice(a.ws.as_deref())?,
                    };
                    pipeline::schedule_observed(&m, &opts, &mut |_, _| {})
                        .map_err(|d| CliError::located(&src, d))?
                }
            };
            run_cpu(&src, &m, &args, a.sequential, a.seed)?
        }
        Device::Cuda => run_cuda(&src, &a, &args)?,
    };
    std::fs::create_dir_all(&a.out)
        .map_err(|e| CliError::Plain(format!("{}: {e}", a.out.display())))?;
    for (name, t) in &outputs {
        let path = a.out.join(format!("{name}.npy"));
        let dtype = out_dtype(t.dtype);
        npy::write(&path, dtype, &t.shape, &t.data).map_err(|e| CliError::Plain(e.to_string()))?;
        println!(
            "wrote {} ({} {:?}, as {dtype})",
            path.display(),
            t.dtype,
            t.shape
        );
    }
    Ok(ExitCode::SUCCESS)
}
