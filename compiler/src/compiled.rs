//! What a compilation produces and how it fails ([`Compiled`], [`CompileError`], [`Emit`],
//! [`Stage`]), the kernel-symbol suffix of a specialization, and the PTX size limit: a leaf
//! module under the plan, the search and the driver ([`crate::pipeline::compile`]).
//! [`crate::compile`] re-exports these with its shorthands.

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
    /// The candidate schedules the search left before the one lowered, and why.
    pub tried: Vec<String>,
    /// How fusion was decided, when the program had something to fuse: the two estimates
    /// of the cost model (`crate::cost`) and the one taken, or the flag that chose.
    pub fusion: Option<String>,
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

/// The instructions of each `.entry` of `ptx` by symbol, read back from the text: its lines
/// ending in `;` that are not directives (`.reg`, `.shared`, ...). For tools and tests that hold
/// only the text; the compiler itself counts from the backend's instruction list
/// (`PtxModule::instructions`), and tests/tests/ptx_instruction_count.rs checks the two agree.
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
pub(crate) fn check_ptx_size(
    m: &Module,
    target: Target,
    out: &kir_backends::backend::Lowered,
) -> Result<(), CompileError> {
    for (kernel, &count) in out.kernels.iter().zip(&out.instructions) {
        if count <= MAX_PTX_INSTRUCTIONS {
            continue;
        }
        let name = kernel.kernel.as_str();
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
