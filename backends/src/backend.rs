//! The [`Backend`] trait: what the compile driver asks of a code generator. The driver's
//! schedule search (kir-compiler's `plan` module) offers a backend one scheduled module after
//! another — a ring of fewer stages, cp.async instead of tensor copies, no warp specialization —
//! and asks [`Backend::accepts`] (a cheap structural check: can this backend lay the module out
//! at all?) and then [`Backend::lower`], which either produces code or rejects the candidate with
//! a [`Rejection`] the search can act on (the kernel needs more shared memory than the target has).
//! Any other failure is a [`LowerError::Failed`] and ends the search.
//!
//! Three backends implement it: [`PtxBackend`], [`CudaCBackend`] (the scalar parity backend,
//! which takes unscheduled modules only) and [`InterpBackend`] (the CPU interpreter: it runs
//! every IR level, so it accepts every module and produces no text).

use crate::meta::KernelMeta;
use crate::ptx::{self, PtxOptions, PtxReport};
use crate::target::Target;
use kir_ir::{Kernel, Module, Span};

/// Why a backend turned a candidate module down; the search tries the next candidate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// A tensor copy fills a buffer that the backend would not put in the layout tensor copies
    /// write (the PTX backend's wgmma core layout): the module should take cp.async rings.
    TensorCopyLayout,
    /// A kernel needs more shared memory than a block may use on the target.
    OverShared {
        /// The kernel's name.
        kernel: String,
        /// What the backend's error said (the bytes needed and the target's limit).
        message: String,
        /// The kernel's declaration.
        span: Option<Span>,
    },
}

impl Rejection {
    /// One line naming the reason (for `--report` and for errors when no candidate is left).
    pub fn describe(&self) -> String {
        match self {
            Rejection::TensorCopyLayout => {
                "a tensor copy fills a buffer the backend does not lay out for tensor copies"
                    .to_string()
            }
            Rejection::OverShared { message, .. } => message.clone(),
        }
    }
}

/// A backend's failure to lower a module.
#[derive(Clone, Debug, PartialEq)]
pub enum LowerError {
    /// The module does not fit the target; a smaller candidate may.
    Rejected(Rejection),
    /// Anything else: an op the backend does not lower, a bad configuration. Ends the search.
    Failed {
        /// What went wrong, naming the op or kernel and the target.
        message: String,
        /// The op or kernel, when known.
        span: Option<Span>,
    },
}

/// What a backend produced for a module.
#[derive(Clone, Debug, Default)]
pub struct Lowered {
    /// The code (PTX or CUDA C); empty for the interpreter.
    pub text: String,
    /// The PTX ISA version the code needs (the target's minimum for CUDA C).
    pub version: (u32, u32),
    /// Launch metadata of each kernel, in module order.
    pub kernels: Vec<KernelMeta>,
    /// The PTX backend's lowering decisions of each kernel (empty for the others).
    pub reports: Vec<PtxReport>,
    /// For PTX, the instruction count of each kernel's `.entry`, read from its instruction list
    /// (empty for the others).
    pub instructions: Vec<usize>,
}

/// A code generator the compile driver can drive. Implementations are deterministic: the same
/// module gives the same answer and the same text.
pub trait Backend {
    /// The name `META.json` records as `emit` (`ptx`, `cuda`) or `interp`.
    fn name(&self) -> &'static str;
    /// The target the code is for.
    fn target(&self) -> Target;
    /// Whether scheduled IR (rings, async copies, partitions) may be offered at all; the CUDA-C
    /// backend lowers unscheduled modules only.
    fn takes_scheduled_ir(&self) -> bool;
    /// A cheap structural check of a candidate module before lowering it.
    fn accepts(&self, m: &Module) -> Result<(), Rejection>;
    /// Lowers every kernel of `m`; kernel symbols are each kernel's name followed by `suffix`.
    fn lower(&self, m: &Module, suffix: &str) -> Result<Lowered, LowerError>;
}

/// The PTX backend with the caller's lowering options.
#[derive(Clone, Copy, Debug)]
pub struct PtxBackend {
    /// The target.
    pub target: Target,
    /// `--warps` and the options named in kernel symbols.
    pub opts: PtxOptions,
}

impl Backend for PtxBackend {
    fn name(&self) -> &'static str {
        "ptx"
    }

    fn target(&self) -> Target {
        self.target
    }

    fn takes_scheduled_ir(&self) -> bool {
        true
    }

    fn accepts(&self, m: &Module) -> Result<(), Rejection> {
        if ptx::tma_rings_lowerable(m, self.target, self.opts.warps) {
            Ok(())
        } else {
            Err(Rejection::TensorCopyLayout)
        }
    }

    /// Errors name the target: `… (target sm_90a)`.
    fn lower(&self, m: &Module, suffix: &str) -> Result<Lowered, LowerError> {
        let kernels: Vec<(&Kernel, &str, PtxOptions)> =
            m.kernels.values().map(|k| (k, suffix, self.opts)).collect();
        lower_ptx(&m.name, self.target, &kernels)
    }
}

/// Lowers `kernels` (each with its symbol suffix and lowering options) into one PTX module
/// named after module `name`: the module of a program whose kernels the compile driver
/// scheduled one by one, each with its own configuration. Errors name the target, as
/// [`PtxBackend::lower`]'s do.
pub fn lower_ptx(
    name: &str,
    target: Target,
    kernels: &[(&Kernel, &str, PtxOptions)],
) -> Result<Lowered, LowerError> {
    let named = |message: String| format!("{message} (target {})", target.name());
    match ptx::compile_kernels(name, target, kernels) {
        Ok(out) => Ok(Lowered {
            text: out.text,
            version: out.version,
            kernels: out.kernels,
            reports: out.reports,
            instructions: out.instructions,
        }),
        Err(e) if e.over_shared => Err(LowerError::Rejected(Rejection::OverShared {
            kernel: kernels
                .iter()
                .find(|(k, _, _)| Some(k.span) == e.span)
                .map_or_else(String::new, |(k, _, _)| k.name.clone()),
            message: named(e.message),
            span: e.span,
        })),
        Err(e) => Err(LowerError::Failed {
            message: named(e.message),
            span: e.span,
        }),
    }
}

/// The scalar CUDA-C parity backend.
#[derive(Clone, Copy, Debug)]
pub struct CudaCBackend {
    /// The target NVRTC compiles for.
    pub target: Target,
}

impl Backend for CudaCBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn target(&self) -> Target {
        self.target
    }

    fn takes_scheduled_ir(&self) -> bool {
        false
    }

    fn accepts(&self, _m: &Module) -> Result<(), Rejection> {
        Ok(())
    }

    fn lower(&self, m: &Module, suffix: &str) -> Result<Lowered, LowerError> {
        let cu = crate::cuda_c::lower(m, self.target, suffix).map_err(|e| LowerError::Failed {
            message: e.message,
            span: e.span,
        })?;
        Ok(Lowered {
            text: cu.source,
            version: self.target.min_ptx_version(),
            kernels: cu.kernels,
            reports: Vec::new(),
            instructions: Vec::new(),
        })
    }
}

/// The CPU interpreter as a judge of candidates: it executes every IR level, so it accepts every
/// module; lowering produces no text (the module itself is what runs).
#[derive(Clone, Copy, Debug)]
pub struct InterpBackend {
    /// The target whose scheduling the interpreter runs.
    pub target: Target,
}

impl Backend for InterpBackend {
    fn name(&self) -> &'static str {
        "interp"
    }

    fn target(&self) -> Target {
        self.target
    }

    fn takes_scheduled_ir(&self) -> bool {
        true
    }

    fn accepts(&self, _m: &Module) -> Result<(), Rejection> {
        Ok(())
    }

    fn lower(&self, _m: &Module, _suffix: &str) -> Result<Lowered, LowerError> {
        Ok(Lowered {
            version: self.target.min_ptx_version(),
            ..Lowered::default()
        })
    }
}
