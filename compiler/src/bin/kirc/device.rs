//! `--device cpu|cuda` for `kirc run` and `kirc bench`: compiling a module to PTX for the GPU
//! that is present and turning runtime errors into `kirc` errors (exit code 2).
//!
//! Built without the cargo feature `cuda`, `--device cuda` and `kirc bench` fail with an error
//! that says how to build them.

use crate::common::CliError;
#[cfg(feature = "cuda")]
use crate::common::Source;
#[cfg(feature = "cuda")]
use kir_backends::runtime::{self, Gpu, RuntimeError};
#[cfg(feature = "cuda")]
#[cfg(feature = "cuda")]
use kir_compiler::compile::{Compiled, Emit};
#[cfg(feature = "cuda")]
use kir_ir::Diagnostic;

/// Where `kirc run` runs a module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Device {
    /// The CPU interpreter.
    Cpu,
    /// The GPU: the module's PTX, launched by the CUDA runtime.
    Cuda,
}

/// The error of `--device cuda` in a `kirc` built without the runtime.
#[cfg(not(feature = "cuda"))]
pub fn not_built(what: &str) -> CliError {
    CliError::Plain(format!(
        "{what} needs the CUDA runtime, and this kirc was built without it: build with \
         `cargo build --release --features cuda -p kir-compiler` (no CUDA installation is \
         needed to build; the driver is loaded at run time)"
    ))
}

/// A runtime error as a `kirc` error: binding errors point at the source like the
/// interpreter's, the others are plain.
#[cfg(feature = "cuda")]
pub fn runtime_error(src: &Source, e: RuntimeError) -> CliError {
    match e {
        RuntimeError::Bind(e) => {
            let message = match &e.kernel {
                Some(k) if !e.message.contains(k.as_str()) => {
                    format!("in kernel @{k}: {}", e.message)
                }
                _ => e.message.clone(),
            };
            match e.span {
                Some(span) => CliError::located(src, Diagnostic::new(span, message)),
                None => CliError::Plain(message),
            }
        }
        RuntimeError::NoDriver(m) | RuntimeError::Cuda(m) => CliError::Plain(m),
    }
}

/// Opens GPU 0 and reports it on stderr.
#[cfg(feature = "cuda")]
pub fn open_gpu(src: &Source) -> Result<Gpu, CliError> {
    let gpu = Gpu::open(0).map_err(|e| runtime_error(src, e))?;
    crate::common::note(&format!(
        "device: {} (sm_{}{})\n",
        gpu.name, gpu.capability.0, gpu.capability.1
    ));
    Ok(gpu)
}

/// The target named by `--target`, or the one matching `gpu`.
#[cfg(feature = "cuda")]
pub fn target_of(target: Option<&str>, gpu: &Gpu) -> Result<kir_backends::Target, CliError> {
    match target {
        Some(t) => crate::common::target(t),
        None => runtime::target_for(gpu.capability).ok_or_else(|| {
            CliError::Plain(format!(
                "the GPU has compute capability {}.{}, which no kir target covers; pass \
                 --target explicitly",
                gpu.capability.0, gpu.capability.1
            ))
        }),
    }
}

/// `kirc tune`'s measurements on a GPU: a candidate's check run through the runtime, and its
/// time as `kirc bench` takes it (random inputs filled on the device, CUDA events, the median
/// after warm-up).
#[cfg(feature = "cuda")]
pub struct GpuMeasure<'g> {
    pub gpu: &'g Gpu,
    pub warmup: usize,
    pub iters: usize,
    pub seed: u32,
}

#[cfg(feature = "cuda")]
impl kir_compiler::tune::Measure for GpuMeasure<'_> {
    fn run(
        &mut self,
        _: &kir_compiler::tune::Candidate,
        c: &Compiled,
        args: &std::collections::BTreeMap<String, kir_backends::interp::HostArg>,
    ) -> Result<std::collections::BTreeMap<String, kir_backends::interp::HostTensor>, String> {
        let meta = c.meta.as_ref().ok_or("a PTX compilation without META")?;
        runtime::run(self.gpu, &c.text, meta, &c.module, args).map_err(|e| e.to_string())
    }

    fn time(
        &mut self,
        _: &kir_compiler::tune::Candidate,
        c: &Compiled,
        shapes: &kir_compiler::tune::Shapes,
        scalars: &std::collections::BTreeMap<String, kir_backends::interp::HostArg>,
    ) -> Result<f64, String> {
        use kir_backends::interp::{HostArg, HostData, HostTensor};
        let meta = c.meta.as_ref().ok_or("a PTX compilation without META")?;
        let mut args = scalars.clone();
        let mut random = std::collections::BTreeSet::new();
        let params = c.module.entry_params().unwrap_or(&[]);
        for (name, shape) in shapes {
            let dtype = match params.iter().find(|p| &p.name == name).map(|p| &p.kind) {
                Some(kir_ir::ParamKind::Tensor(_, tt)) => {
                    tt.elem.known().unwrap_or(kir_ir::Dtype::F32)
                }
                _ => return Err(format!("the entry has no tensor param `{name}`")),
            };
            let t = HostTensor {
                dtype,
                shape: shape.clone(),
                data: HostData::F64(Vec::new()),
            };
            args.insert(name.clone(), HostArg::Tensor(t));
            random.insert(name.clone());
        }
        let s = |e: RuntimeError| e.to_string();
        let mut p = runtime::Program::load(self.gpu, &c.text, meta, &c.module).map_err(s)?;
        let mut b = p.bind(&args, &random, self.seed).map_err(s)?;
        let t = runtime::bench(&p, &mut b, self.warmup, self.iters).map_err(s)?;
        Ok(t.median_ms)
    }
}

/// Compiles `src` to PTX with the lowering `flags` for `target` (by name), or for the target matching `gpu`.
#[cfg(feature = "cuda")]
pub fn compile_for(
    src: &Source,
    defines: &[(String, String)],
    kernel: Option<&str>,
    target: Option<&str>,
    flags: kir_compiler::plan::Flags,
    gpu: &Gpu,
) -> Result<Compiled, CliError> {
    let target = target_of(target, gpu)?;
    let plan =
        kir_compiler::plan::CompilePlan::resolve(&src.text, defines, target, Emit::Ptx, flags)
            .map_err(|e| crate::common::compile_error(src, e))?
            .with_kernel(kernel);
    kir_compiler::pipeline::compile(&src.text, &plan)
        .map_err(|e| crate::common::compile_error(src, e))
}

/// The META.json of a PTX compilation (always present for `Emit::Ptx`).
#[cfg(feature = "cuda")]
pub fn meta(c: &Compiled) -> Result<&serde_json::Value, CliError> {
    c.meta
        .as_ref()
        .ok_or_else(|| CliError::Plain("internal error: a PTX compilation without META".into()))
}
