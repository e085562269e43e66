//! `kirc run FILE [--kernel NAME] [-D NAME=VALUE]... --arg NAME=PATH.npy|NUMBER ... --out DIR
//! [--device cpu|cuda] [--target T] [--ws PLAN] [--seed N] [--no-cache]`: runs a module's entry (its program,
//! its single kernel, or the kernel `--kernel` names) on the CPU interpreter (`--device cpu`, the
//! default; with `--target`, the scheduled IR for that target under scheduler seed `--seed`,
//! with `--ws` under that warp-specialization plan) or on the GPU (`--device cuda`: its PTX
//! through the CUDA runtime, for `--target` or the target of the GPU present, with `--ws` the
//! PTX backend's lowering of that plan; through the on-disk cache of docs/cache.md unless
//! `--no-cache`) and writes every `out`/`inout` tensor to `DIR/NAME.npy` (the fixed
//! contract of the CLI). Both devices take the same arguments and write the same files.
//!
//! Inputs: each tensor param takes a C-order `.npy`; its shape binds the symbolic dims and its
//! values are converted to the param's dtype with round-to-nearest-even by the interpreter.
//! Outputs: float dtypes are written as `<f4` (holding exactly the kernel dtype's values),
//! i32/i64 as themselves (i64 exactly: it never passes through f64), u8 and i1 as `|u1`.
//! Every output path is checked before the run, and the outputs are written all or nothing: each
//! to a temporary file first, renamed into place only when all of them and the report on stdout
//! were written (compiler/src/outfile.rs).
//!
//! A number given to `--arg` is an exact integer when it has no fraction or exponent (an i64
//! param takes every i64 value), else a float, which must be finite unless written `inf` or `nan`.

use crate::common::{self, CliError, Source};
use crate::device::{self, Device};
use kir_backends::interp::{self, HostArg, HostTensor, RunOptions};
use kir_compiler::internal::compile::Emit;
use kir_compiler::internal::npy::{self, NpyDtype};
use kir_compiler::internal::outfile::{self, Staged};
use kir_compiler::internal::pipeline;
use kir_compiler::internal::plan::CompilePlan;
use kir_ir::{Access, Diagnostic, Dtype, Module, ParamKind, Span};
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
    #[arg(long, value_name = "DIR", required_unless_present = "dump_after")]
    out: Option<PathBuf>,
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
    /// Warp-specialize with this plan (auto, fa3, gemm, 2p6c). With `--target` on the CPU: the
    /// interpreter runs the plan's scheduled IR; with `--device cuda`: the PTX backend lowers
    /// it (as `kirc compile --ws` does).
    #[arg(long, value_name = "PLAN")]
    ws: Option<String>,
    /// The interpreter's scheduler seed for scheduled IR (one interleaving of partitions and
    /// copy completions per seed; default 0).
    #[arg(long, value_name = "N", default_value_t = 0)]
    seed: u64,
    #[command(flatten)]
    ptx: common::PtxFlags,
    /// With `--device cuda`: compile and load without the on-disk cache (docs/cache.md).
    #[arg(long)]
    no_cache: bool,
    /// With `--target`: print the IR right after this pass of the compilation for that target
    /// (the same module `kirc compile --dump-after PASS` shows and PTX lowers) instead of
    /// running.
    #[arg(long, value_name = "PASS", requires = "target")]
    dump_after: Option<String>,
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
        match number(value) {
            Some(Ok(x)) => {
                out.insert(name.clone(), x);
                continue;
            }
            Some(Err(m)) => {
                errs.push(Diagnostic::new(
                    p.span,
                    format!("--arg {name}={value}: {m}"),
                ));
                continue;
            }
            None => {}
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

/// A number argument: an exact integer ([`HostArg::Int`]) when the text is one, else a float
/// ([`HostArg::Scalar`]). `None` when the text is not a number (a path); `Some(Err)` for a float
/// that overflows f64 (`1e400`), which would silently become infinite.
fn number(text: &str) -> Option<Result<HostArg, String>> {
    let t = text.trim();
    match t.parse::<i64>() {
        // `-0` keeps its sign as a float.
        Ok(0) if t.starts_with('-') => return Some(Ok(HostArg::Scalar(-0.0))),
        Ok(i) => return Some(Ok(HostArg::Int(i))),
        Err(_) => {}
    }
    let x = t.parse::<f64>().ok()?;
    let spelled_inf = t
        .trim_start_matches(['+', '-'])
        .to_ascii_lowercase()
        .starts_with("inf");
    if x.is_infinite() && !spelled_inf {
        return Some(Err(format!(
            "`{t}` is out of range (the largest finite number is {:e}; write `inf` for infinity)",
            f64::MAX
        )));
    }
    if x.fract() == 0.0 && x.abs() >= 9.007_199_254_740_992e15 && !t.contains(['e', 'E', '.']) {
        // An integer too large for i64: say so rather than rounding it.
        return Some(Err(format!("`{t}` is out of the range of i64")));
    }
    Some(Ok(HostArg::Scalar(x)))
}

/// The names of the entry's `out` and `inout` tensors: the files `kirc run` writes.
fn output_names(m: &Module) -> Vec<String> {
    m.entry_params()
        .unwrap_or(&[])
        .iter()
        .filter(|p| matches!(p.kind, ParamKind::Tensor(Access::Out | Access::InOut, _)))
        .map(|p| p.name.clone())
        .collect()
}

/// Checks `DIR` and every `DIR/NAME.npy` before the run: `DIR` is a directory or can be made one,
/// and no output is a directory.
fn check_outputs(dir: &Path, names: &[String]) -> Result<(), CliError> {
    if dir.exists() && !dir.is_dir() {
        return Err(CliError::Plain(format!(
            "--out {}: not a directory",
            dir.display()
        )));
    }
    let paths: Vec<PathBuf> = names.iter().map(|n| dir.join(format!("{n}.npy"))).collect();
    let flagged: Vec<(&str, &Path)> = paths.iter().map(|p| ("--out", p.as_path())).collect();
    outfile::check_paths(&flagged).map_err(|e| CliError::Plain(e.to_string()))
}

/// True when a kernel of `m` has a `print` op (whose lines go to standard error, where the
/// progress line would mix with them).
fn prints(m: &Module) -> bool {
    m.kernels.values().any(|k| {
        k.dfg
            .ops
            .values()
            .any(|o| o.opcode == kir_ir::Opcode::Print)
    })
}

/// Runs the entry on the CPU interpreter, with the progress line of [`crate::progress`] on a
/// terminal unless the module prints.
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
    let result = if prints(m) {
        interp::run_with(m, args, &opts)
    } else {
        crate::progress::observe(|p| interp::run_observed(m, args, &opts, p))
    };
    result.map_err(|e| {
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
    let cache = common::cache(a.no_cache);
    let flags = kir_compiler::internal::plan::Flags {
        ws_ptx: common::ws_ptx(a.ws.as_deref())?,
        ..a.ptx.flags(None)
    };
    let c = device::compile_for(
        src,
        &a.defines,
        a.kernel.as_deref(),
        a.target.as_deref(),
        flags,
        &gpu,
        cache.as_ref(),
        &device::tensor_shapes(args),
    )?;
    let (mut p, _) = device::load(&gpu, &c, cache.as_ref())?;
    let rt = |e| device::runtime_error(&c.src, e);
    let mut b = p
        .bind(args, &std::collections::BTreeSet::new(), 0)
        .map_err(rt)?;
    p.launch(&mut b).map_err(rt)?;
    p.outputs(&b).map_err(rt)
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

/// The compile plan of `--target` on the CPU: the scheduled module the PTX backend would lower
/// (or, with `--ws`, the interpreter's plan), from the same resolution as `kirc compile`.
fn cpu_plan(a: &Args, src: &Source, target: &str) -> Result<CompilePlan, CliError> {
    let ws =
        a.ws.as_deref()
            .map(|w| common::ws_choice(Some(w)))
            .transpose()?;
    let plan = CompilePlan::resolve(
        &src.text,
        &a.defines,
        common::target(target)?,
        Emit::Ptx,
        a.ptx.flags(ws),
    )
    .map_err(|e| common::compile_error(src, e))?;
    Ok(plan.with_kernel(a.kernel.as_deref()))
}

/// Runs `kirc run`.
pub fn main(a: Args) -> Result<ExitCode, CliError> {
    let src = common::load(&a.file)?;
    if let (Some(pass), Some(t)) = (&a.dump_after, &a.target) {
        let text = common::dump_lowered(&src, &cpu_plan(&a, &src, t)?, pass)?;
        common::out(&text)?;
        return Ok(ExitCode::SUCCESS);
    }
    let Some(out_dir) = &a.out else {
        return Err(CliError::Plain("--out DIR is needed to run".into()));
    };
    if a.device == Device::Cpu && a.target.is_none() {
        if a.ws.is_some() {
            return Err(CliError::Plain(
                "--ws needs --target (the scheduling passes schedule for a target)".into(),
            ));
        }
        if a.ptx.any() {
            return Err(CliError::Plain(
                "--warps, --stages, --warp-specialize, --persistent and --overlap choose how a \
                 kernel is scheduled and lowered for a target: add --target (the interpreter \
                 then runs the scheduled module) or --device cuda"
                    .into(),
            ));
        }
    }
    let f = common::frontend_with(&src, &a.defines, a.ptx.fusion())?;
    let m = entry_module(f.output, a.kernel.as_deref())?;
    check_outputs(out_dir, &output_names(&m))?;
    let args = host_args(&src, &m, &a.args)?;
    let outputs = match a.device {
        Device::Cpu => {
            let m = match a.target.as_deref() {
                None => m,
                Some(t) => {
                    pipeline::compile(&src.text, &cpu_plan(&a, &src, t)?)
                        .map_err(|e| common::compile_error(&src, e))?
                        .module
                }
            };
            run_cpu(&src, &m, &args, a.sequential, a.seed)?
        }
        Device::Cuda => run_cuda(&src, &a, &args)?,
    };
    let mut files = Vec::new();
    let mut report = String::new();
    for (name, t) in &outputs {
        let path = out_dir.join(format!("{name}.npy"));
        let dtype = NpyDtype::for_output(t.dtype);
        report += &format!(
            "wrote {} ({} {:?}, as {dtype})\n",
            path.display(),
            t.dtype,
            t.shape
        );
        files.push((path, npy::to_bytes(dtype, &t.shape, &t.data)));
    }
    // All or nothing: every file staged, the report written, then the files put in place.
    let staged = Staged::write(files).map_err(|e| CliError::Plain(e.to_string()))?;
    common::out(&report)?;
    staged
        .commit()
        .map_err(|e| CliError::Plain(e.to_string()))?;
    Ok(ExitCode::SUCCESS)
}
