//! `--device cpu|cuda` for `kirc run` and `kirc bench`: compiling a module to PTX for the GPU
//! that is present, loading it (through the on-disk cache, docs/cache.md: the compilation and
//! the cubin ptxas assembled from its PTX for this GPU's architecture, or one shipped in the
//! cache's prebuilt directory, so a second process, or a first one of a prebuilt op, neither
//! compiles nor JIT-compiles), and turning runtime errors into `kirc` errors (exit code 2).
//!
//! Built without the cargo feature `cuda`, `--device cuda` and `kirc bench` fail with an error
//! that says how to build them.

use crate::common::CliError;
#[cfg(feature = "cuda")]
use crate::common::Source;
#[cfg(feature = "cuda")]
use kir_backends::runtime::{self, Gpu, Program, RuntimeError};
#[cfg(feature = "cuda")]
use kir_compiler::internal::cache::{Cache, GpuId};
#[cfg(feature = "cuda")]
use kir_compiler::internal::compile::{Compiled, Emit};
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
         `cargo build --release -p kirc --features cuda` (no CUDA installation is \
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
impl kir_compiler::internal::tune::Measure for GpuMeasure<'_> {
    fn run(
        &mut self,
        _: &kir_compiler::internal::tune::Candidate,
        c: &Compiled,
        args: &std::collections::BTreeMap<String, kir_backends::interp::HostArg>,
    ) -> Result<std::collections::BTreeMap<String, kir_backends::interp::HostTensor>, String> {
        let meta = c.meta.as_ref().ok_or("a PTX compilation without META")?;
        runtime::run(self.gpu, &c.text, meta, &c.module, args).map_err(|e| e.to_string())
    }

    fn time(
        &mut self,
        _: &kir_compiler::internal::tune::Candidate,
        c: &Compiled,
        shapes: &kir_compiler::internal::tune::Shapes,
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

/// A compilation for the GPU, and the source its module's spans point into.
#[cfg(feature = "cuda")]
pub struct ForGpu {
    /// The compilation.
    pub compiled: Compiled,
    /// The source runtime errors are located in: the module's own on a miss, or on a cache hit
    /// the canonical text of the compiled module (which the stored module was parsed from).
    pub src: Source,
    /// Whether the compilation came from the kir cache.
    pub hit: bool,
    /// The target the PTX was compiled for.
    pub target: kir_backends::Target,
}

/// Compiles `src` to PTX with the lowering `flags` for `target` (by name), or for the target
/// matching `gpu`, through `cache` when given.
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
pub fn compile_for(
    src: &Source,
    defines: &[(String, String)],
    kernel: Option<&str>,
    target: Option<&str>,
    flags: kir_compiler::internal::plan::Flags,
    gpu: &Gpu,
    cache: Option<&Cache>,
    shapes: &[(String, Vec<usize>)],
) -> Result<ForGpu, CliError> {
    let target = target_of(target, gpu)?;
    let plan = kir_compiler::internal::plan::CompilePlan::resolve_for(
        &src.text,
        defines,
        target,
        Emit::Ptx,
        flags,
        shapes,
    )
    .map_err(|e| crate::common::compile_error(src, e))?
    .with_kernel(kernel);
    let c = kir_compiler::internal::cache::compile(&src.text, &plan, cache)
        .map_err(|e| crate::common::compile_error(src, e))?;
    let hit = matches!(c.outcome, kir_compiler::internal::cache::Outcome::Hit(_));
    let located = match c.outcome {
        kir_compiler::internal::cache::Outcome::Hit(_) => Source {
            name: format!("{} (as compiled, from the kir cache)", src.name),
            text: kir_ir::text::print(&c.compiled.module),
        },
        _ => Source {
            name: src.name.clone(),
            text: src.text.clone(),
        },
    };
    Ok(ForGpu {
        compiled: c.compiled,
        src: located,
        hit,
        target,
    })
}

/// The shape bucket of tensor shapes given by input name (`--shape a=…`): each extent as a
/// dim `a[i]`, rounded up to a power of two (`kir_compiler::internal::cache::ShapeBucket`). What
/// `kirc tune` stores its winner under and `kirc bench` looks it up by.
#[cfg(feature = "cuda")]
pub fn shape_bucket(shapes: &[(String, Vec<usize>)]) -> kir_compiler::internal::cache::ShapeBucket {
    let dims: Vec<(String, u64)> = shapes
        .iter()
        .flat_map(|(n, s)| {
            s.iter()
                .enumerate()
                .map(move |(i, &v)| (format!("{n}[{i}]"), v as u64))
        })
        .collect();
    kir_compiler::internal::cache::ShapeBucket::from_dims(&dims)
}

/// `defines` split into those of constants without a tune set (the specialization a tuned
/// configuration is kept for) and those of tunable constants (part of a configuration). A
/// source that does not parse keeps every define in the first list.
#[cfg(feature = "cuda")]
pub fn split_tunable(
    src: &str,
    defines: &[(String, String)],
) -> (Vec<(String, String)>, Vec<(String, String)>) {
    let tunable = |n: &str| {
        kir_ir::text::parse(src)
            .is_ok_and(|m| m.consts.iter().any(|c| c.name == n && c.tune.is_some()))
    };
    defines.iter().cloned().partition(|(n, _)| !tunable(n))
}

/// The cache's name for `gpu`.
#[cfg(feature = "cuda")]
pub fn gpu_id(gpu: &Gpu) -> GpuId {
    GpuId {
        name: gpu.name.clone(),
        capability: gpu.capability,
        driver: gpu.driver_version,
    }
}

/// Loads `c` on `gpu` through `cache` (`kir_compiler::internal::cache::load_program`: a cubin
/// of the cache or its prebuilt directory, else one ptxas assembles now, else the PTX through
/// the driver's JIT). Also says which image was loaded.
#[cfg(feature = "cuda")]
pub fn load<'g>(
    gpu: &'g Gpu,
    c: &ForGpu,
    cache: Option<&Cache>,
) -> Result<(Program<'g>, &'static str), CliError> {
    kir_compiler::internal::cache::load_program(gpu, &c.compiled, c.target, cache)
        .map(|(p, how)| (p, how.describe()))
        .map_err(|e| runtime_error(&c.src, e))
}

/// The shapes of the tensor arguments by name (given with `--arg` or `--shape`): what the
/// compile plan reads the problem's dims from.
#[cfg(feature = "cuda")]
pub fn tensor_shapes(
    args: &std::collections::BTreeMap<String, kir_backends::interp::HostArg>,
) -> Vec<(String, Vec<usize>)> {
    args.iter()
        .filter_map(|(n, a)| match a {
            kir_backends::interp::HostArg::Tensor(t) => Some((n.clone(), t.shape.clone())),
            _ => None,
        })
        .collect()
}
