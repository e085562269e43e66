//! The compile driver: front end, then (for PTX) the scheduling passes, then a backend,
//! producing code text plus launch metadata. This is what `kirc compile`, `kirc run --device
//! cuda`, `kirc bench` and frameworks call. The CUDA-C backend (the parity backend) takes the
//! unscheduled module.

use crate::passes::const_values;
use crate::pipeline;
use kir_backends::ptx::{PtxOptions, PIPELINE_STAGES};
use kir_backends::Target;
use kir_ir::{Diagnostics, EvalVal, Module};

/// The most PTX instructions one kernel may have: 100,000. Tiles are unrolled per thread, so a
/// large tile on few warps (or a deep ring) can produce megabytes of PTX that ptxas takes
/// minutes and gigabytes to assemble; over this limit compilation stops with an error naming
/// the kernel, the count and the limit. The largest kernels of the op library at their
/// defaults have about 25,000.
pub const MAX_PTX_INSTRUCTIONS: usize = 100_000;

/// What to emit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Emit {
    /// The IR of the lowered stage (canonical text).
    Ir,
    /// PTX for the target.
    Ptx,
    /// Scalar FP32 CUDA C.
    Cuda,
}

impl Emit {
    /// Parses `ir`, `ptx` or `cuda`.
    pub fn from_name(s: &str) -> Option<Emit> {
        match s {
            "ir" => Some(Emit::Ir),
            "ptx" => Some(Emit::Ptx),
            "cuda" => Some(Emit::Cuda),
            _ => None,
        }
    }
}

/// The output of a compilation.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// PTX, CUDA C or IR text.
    pub text: String,
    /// META.json (absent for `Emit::Ir`).
    pub meta: Option<serde_json::Value>,
    /// The module that was lowered (the pipeline's output unless another stage was asked for).
    pub module: Module,
    /// For PTX, the lowering decisions of each kernel, in META's kernel order (empty for IR
    /// and CUDA C).
    pub reports: Vec<kir_backends::ptx::PtxReport>,
}

/// Why compilation failed.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// Errors located in the source (parse, verify, specialize, or a backend naming an op).
    #[error("{0}")]
    Source(Diagnostics),
    /// An error with no source location (e.g. a target a backend does not support).
    #[error("{0}")]
    Plain(String),
}

/// The suffix that encodes a specialization in kernel symbols: `_DTYPE_bf16_HEAD_DIM_128`, one
/// `_NAME_value` per constant in declaration order (negative values as `m5`).
pub fn specialization_suffix(values: &[(String, EvalVal)]) -> String {
    let mut s = String::new();
    for (n, v) in values {
        let v = v.to_string().replace('-', "m");
        s.push_str(&format!("_{n}_{v}"));
    }
    s
}

/// Compiles `src` with `defines` for `target`, emitting `emit`; with `kernel`, only that kernel
/// of the module (as the entry).
pub fn compile(
    src: &str,
    defines: &pipeline::Defines,
    kernel: Option<&str>,
    target: Target,
    emit: Emit,
) -> Result<Compiled, CompileError> {
    compile_stage(
        src,
        defines,
        kernel,
        target,
        emit,
        Stage::Output,
        &PtxOptions::default(),
    )
}

/// Which module of the pipeline a compilation lowers: the output of the last pass (the default
/// everywhere), or an earlier one for comparisons (`kirc compile --stage PASS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// After `specialize` (no e-graph rewrites, no fusion, no mask splitting).
    Specialized,
    /// After `egraph`.
    Optimized,
    /// After `fusion`.
    Fused,
    /// After the last pass (`mask_split`): what the backends and `kirc run` consume.
    Output,
}

impl Stage {
    /// The stage after the pass of that name (`specialize`, `egraph`, `fusion`, `mask_split`).
    pub fn from_pass(name: &str) -> Option<Stage> {
        match name {
            "specialize" => Some(Stage::Specialized),
            "egraph" => Some(Stage::Optimized),
            "fusion" => Some(Stage::Fused),
            "mask_split" => Some(Stage::Output),
            _ => None,
        }
    }
}

/// Like [`compile`], lowering the module of `stage` with PTX lowering options `opts` (options
/// that were set are named in the kernel symbols; for `Emit::Ir` they only keep a per-target
/// configuration from applying). Options set for `Emit::Cuda`, which has no warps or pipeline
/// stages, are an error rather than silently ignored.
pub fn compile_stage(
    src: &str,
    defines: &pipeline::Defines,
    kernel: Option<&str>,
    target: Target,
    emit: Emit,
    stage: Stage,
    opts: &PtxOptions,
) -> Result<Compiled, CompileError> {
    if emit == Emit::Cuda && (opts.warps.is_some() || opts.stages.is_some()) {
        return Err(CompileError::Plain(
            "--warps and --stages do not apply to CUDA C (the parity backend has no warps or \
             pipeline stages)"
                .into(),
        ));
    }
    if emit == Emit::Cuda && opts.overlap.is_some() {
        return Err(CompileError::Plain(
            "--overlap does not apply to CUDA C (the parity backend issues no asynchronous              matrix instructions)"
                .into(),
        ));
    }
    let (defines, opts, hints) = &with_target_config(src, defines, target, emit, opts);
    let f = pipeline::run_observed(src, defines, &mut |_, _| {}).map_err(CompileError::Source)?;
    let generic = f.generic;
    let spec = match stage {
        Stage::Specialized => f.specialized,
        Stage::Optimized => f.optimized,
        Stage::Fused => f.fused,
        Stage::Output => f.output,
    };
    let spec = pipeline::entry_module(spec, kernel).map_err(CompileError::Plain)?;
    let values = const_values(&generic, defines).map_err(CompileError::Source)?;
    let suffix = specialization_suffix(&values);
    match emit {
        Emit::Ir => Ok(Compiled {
            text: kir_ir::text::print(&spec),
            meta: None,
            module: spec,
            reports: Vec::new(),
        }),
        Emit::Ptx => {
            let suffix = format!("{suffix}{}", opts.suffix());
            let (scheduled, out) = lower_ptx(&spec, target, &suffix, opts, *hints)?;
            let meta = kir_backends::meta::module_meta(
                &scheduled,
                target,
                "ptx",
                out.version,
                &out.kernels,
            );
            Ok(Compiled {
                text: out.text,
                meta: Some(meta),
                module: scheduled,
                reports: out.reports,
            })
        }
        Emit::Cuda => compile_cuda(spec, target, &suffix),
    }
}

/// The defines and PTX options of a compilation after the per-target default configuration
/// ([`crate::configs`]) of a built-in op: PTX and IR emission for `target` take the row's tile
/// constants and warps when the user chose none of them; CUDA C keeps the op's own defaults.
/// Sources that do not parse or specialize come back unchanged (the pipeline reports them).
/// The third value is the row's preferred ring depth (not an explicit `--stages`: a ring that does
/// not fit gets fewer stages).
fn with_target_config(
    src: &str,
    defines: &pipeline::Defines,
    target: Target,
    emit: Emit,
    opts: &PtxOptions,
) -> (Vec<(String, String)>, PtxOptions, ConfigHints) {
    let unchanged = (defines.to_vec(), *opts, ConfigHints::default());
    if emit == Emit::Cuda {
        return unchanged;
    }
    let Ok(generic) = kir_ir::text::parse(src) else {
        return unchanged;
    };
    if crate::oplib::builtin(&generic.name) != Some(src) {
        return unchanged;
    }
    let Ok(values) = const_values(&generic, defines) else {
        return unchanged;
    };
    let cfg = crate::configs::target_config(
        &generic.name,
        target,
        &values,
        defines,
        opts.warps.is_some() || opts.stages.is_some(),
    );
    let mut out = defines.to_vec();
    out.extend(cfg.defines);
    let opts = PtxOptions {
        warps: opts.warps.or(cfg.warps),
        ..*opts
    };
    let hints = ConfigHints {
        stages: cfg.stages,
        warp_specialize: cfg.warp_specialize,
        persistent: cfg.persistent,
        overlap: cfg.overlap,
    };
    (out, opts, hints)
}

/// What a per-target configuration asks of the compile driver beyond tiles and warps.
#[derive(Clone, Copy, Debug, Default)]
struct ConfigHints {
    /// The ring depth to try first.
    stages: Option<usize>,
    /// Warp-specialize where the kernel qualifies (unless `--warp-specialize` says otherwise).
    warp_specialize: bool,
    /// Make the warp-specialized kernel persistent over the target's SM count (unless
    /// `--persistent` says otherwise).
    persistent: bool,
    /// Pair the TMA rings' q·kᵀ of block j with the p·v of block j − 1 (`dot_overlap`; unless
    /// `--overlap` says otherwise).
    overlap: bool,
}

/// The program count of a persistent grid: `--persistent N` (0: none), else the target's SM
/// count where the configuration asks for it.
fn persistent_programs(opts: &PtxOptions, target: Target, configured: bool) -> Option<u32> {
    match opts.persistent {
        Some(0) => None,
        Some(n) => Some(n),
        None => configured.then(|| target.sm_count()),
    }
}

/// PTX: the scheduling passes for `target` ([`pipeline::schedule_observed`]: `pipelining` with
/// a ring of `opts.stages` stages, none for 1), then the backend, which lowers the rings to
/// cp.async. The default depth is `stages_hint` (a per-target configuration's ring, see
/// [`crate::configs`]) or else the backend's [`PIPELINE_STAGES`] (2), not the pass's own
/// choice (the deepest of 2..=3 that fits), so the generated code does not change silently; a
/// default ring that does not fit the target's shared memory — in the pass's count, or in the
/// kernel's with the backend's padded rows and other shared tiles — gets one stage less, down
/// to no pipelining, as the backend's own ring did. An explicit depth that does not fit is an
/// error naming the bytes. With `--warp-specialize on`, or a configuration that asks for it
/// (`hints`, then falling back to this when the kernel does not qualify), the ring is
/// warp-specialized ([`lower_ptx_ws`]). Returns the scheduled module and its PTX.
fn lower_ptx(
    spec: &Module,
    target: Target,
    suffix: &str,
    opts: &PtxOptions,
    hints: ConfigHints,
) -> Result<(Module, kir_backends::ptx::PtxModule), CompileError> {
    opts.validate().map_err(CompileError::Plain)?;
    let stages_hint = hints.stages;
    match opts.warp_specialize {
        Some(true) => lower_ptx_ws(spec, target, suffix, opts, hints),
        // A configuration's choice: the unspecialized kernel where this one does not qualify.
        None if hints.warp_specialize => {
            lower_ptx_ws(spec, target, suffix, opts, hints).or_else(|_| {
                lower_ptx_one_role(spec, target, suffix, opts, stages_hint, hints.overlap)
            })
        }
        _ => lower_ptx_one_role(spec, target, suffix, opts, stages_hint, hints.overlap),
    }
}

/// [`lower_ptx`] with warp specialization: the `pipelining` pass's cp.async ring (at the depth
/// [`lower_ptx`] would choose), then `warp_specialize` with [`passes::WsPlan::one_consumer`]
/// of the block's warps (4 unless set), then the backend; any step's error is returned (the
/// caller asked for it).
fn lower_ptx_ws(
    spec: &Module,
    target: Target,
    suffix: &str,
    opts: &PtxOptions,
    hints: ConfigHints,
) -> Result<(Module, kir_backends::ptx::PtxModule), CompileError> {
    let stages = opts.stages.or(hints.stages).unwrap_or(PIPELINE_STAGES);
    let plan = crate::passes::WsPlan::one_consumer(opts.warps.unwrap_or(4));
    let sched = pipeline::ScheduleOptions {
        target: Some(target),
        stages: Some(stages),
        warp_specialize: pipeline::WsChoice::Plan(plan),
        no_tma_rings: true,
        persistent: persistent_programs(opts, target, hints.persistent),
        overlap: opts.overlap.unwrap_or(hints.overlap),
    };
    let m =
        pipeline::schedule_observed(spec, &sched, &mut |_, _| {}).map_err(CompileError::Source)?;
    let out = kir_backends::ptx::compile_module_with(&m, target, suffix, opts)
        .map_err(|e| ptx_error(e, target))?;
    check_ptx_size(&m, target, &out)?;
    Ok((m, out))
}

/// A backend error as the compile driver reports it (located when it has a span).
fn ptx_error(e: kir_backends::ptx::PtxError, target: Target) -> CompileError {
    match e.span {
        Some(span) => CompileError::Source(Diagnostics::from(kir_ir::Diagnostic::new(
            span,
            format!("{} (target {})", e.message, target.name()),
        ))),
        None => CompileError::Plain(format!("{} (target {})", e.message, target.name())),
    }
}

/// [`lower_ptx`] without warp specialization.
fn lower_ptx_one_role(
    spec: &Module,
    target: Target,
    suffix: &str,
    opts: &PtxOptions,
    stages_hint: Option<usize>,
    overlap_hint: bool,
) -> Result<(Module, kir_backends::ptx::PtxModule), CompileError> {
    let explicit = opts.stages.is_some();
    let mut stages = opts.stages.or(stages_hint).unwrap_or(PIPELINE_STAGES);
    // The paired overlap refills a stage one iteration later than the unrotated ring: it keeps
    // the prefetch distance with one more stage (fewer when they do not fit, below).
    if !explicit && opts.overlap.unwrap_or(overlap_hint) {
        stages = stages.max(PIPELINE_STAGES + 1);
    }
    loop {
        let schedule = |no_tma_rings| {
            let sched = pipeline::ScheduleOptions {
                target: Some(target),
                stages: Some(stages),
                no_tma_rings,
                persistent: persistent_programs(opts, target, false),
                overlap: opts.overlap.unwrap_or(overlap_hint) && !no_tma_rings,
                ..Default::default()
            };
            pipeline::schedule_observed(spec, &sched, &mut |_, _| {})
        };
        let scheduled = if stages >= 2 {
            // TMA rings where the backend lays their buffers out for tensor copies.
            match schedule(false) {
                Ok(m) if !kir_backends::ptx::tma_rings_lowerable(&m, target, opts.warps) => {
                    schedule(true)
                }
                r => r,
            }
        } else {
            Ok(spec.clone())
        };
        let m = match scheduled {
            Ok(m) => m,
            // The pass's only error for a depth of 2 or more: the ring does not fit.
            Err(d) if !explicit && d.0.iter().all(|e| e.message.contains("over the target's")) => {
                stages -= 1;
                continue;
            }
            Err(d) => return Err(CompileError::Source(d)),
        };
        match kir_backends::ptx::compile_module_with(&m, target, suffix, opts) {
            Ok(out) => {
                check_ptx_size(&m, target, &out)?;
                return Ok((m, out));
            }
            Err(e) if e.over_shared && !explicit && stages >= 2 => stages -= 1,
            Err(e) => return Err(ptx_error(e, target)),
        }
    }
}

/// The instructions of each `.entry` of `ptx` by symbol: its lines ending in `;` that are not
/// directives (`.reg`, `.shared`, ...).
pub fn ptx_instructions(ptx: &str) -> Vec<(String, usize)> {
    ptx.split(".visible .entry ")
        .skip(1)
        .map(|entry| {
            let symbol = entry.split('(').next().unwrap_or("").trim().to_string();
            let count = entry
                .lines()
                .map(str::trim)
                .filter(|l| l.ends_with(';') && !l.starts_with('.') && !l.starts_with("//"))
                .count();
            (symbol, count)
        })
        .collect()
}

/// [`MAX_PTX_INSTRUCTIONS`] for every kernel of `out`: an error at the kernel's declaration
/// naming its instruction count, the limit and the flags that shrink it.
fn check_ptx_size(
    m: &Module,
    target: Target,
    out: &kir_backends::ptx::PtxModule,
) -> Result<(), CompileError> {
    for (symbol, count) in ptx_instructions(&out.text) {
        if count <= MAX_PTX_INSTRUCTIONS {
            continue;
        }
        let name = out
            .kernels
            .iter()
            .find(|k| k.symbol == symbol)
            .map_or(symbol.as_str(), |k| k.kernel.as_str());
        let message = format!(
            "kernel `{name}` unrolls to {count} PTX instructions on {}, over the limit of \
             {MAX_PTX_INSTRUCTIONS} per kernel (tiles are unrolled per thread: use more --warps, \
             fewer --stages or smaller tiles)",
            target.name()
        );
        return Err(match m.kernel(name) {
            Some((_, k)) => {
                CompileError::Source(Diagnostics::from(kir_ir::Diagnostic::new(k.span, message)))
            }
            None => CompileError::Plain(message),
        });
    }
    Ok(())
}

/// The CUDA-C backend: one `.cu` for the whole module, and META.json with `emit: "cuda"`.
fn compile_cuda(spec: Module, target: Target, suffix: &str) -> Result<Compiled, CompileError> {
    let cu = kir_backends::cuda_c::lower(&spec, target, suffix).map_err(|e| match e.span {
        Some(span) => {
            CompileError::Source(Diagnostics(vec![kir_ir::Diagnostic::new(span, e.message)]))
        }
        None => CompileError::Plain(e.message),
    })?;
    let meta = kir_backends::meta::module_meta(
        &spec,
        target,
        "cuda",
        target.min_ptx_version(),
        &cu.kernels,
    );
    Ok(Compiled {
        text: cu.source,
        meta: Some(meta),
        module: spec,
        reports: Vec::new(),
    })
}
