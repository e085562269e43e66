//! The PTX backend: lowers a specialized module to PTX for sm_80, sm_90a, sm_100a and sm_120a.
//!
//! Today every target shares the Ampere-class path: mma.sync m16n8k16 for bf16/f16 dots (with
//! the accumulator layout kept in registers through the softmax, FlashAttention-2 style), FMA
//! for other dots, shared-memory tiles for dot operands, quad shuffles for row reductions, and
//! predication for masks and ragged edges (sm_90a adds wgmma for GEMM-like dots). Layouts are
//! decided by [`layout::assign`]. The backend is layered, each layer importing only the ones
//! below it: [`plan`] (immutable per-kernel facts: block, layouts, wgmma eligibility, warp
//! roles), `lower` (one module per concern: dispatch, control flow, memory, dots, reductions,
//! TMA rings, warp specialization; the scheduled IR's cp.async stage rings in `sched`), and
//! [`emit`] (typed instructions and the builder). The backend does not pipeline loops on its
//! own: the rings come from the IR.
//! Instructions state what they need ([`isa`]: PTX ISA version and target feature), from which
//! `.version` and the target check follow; each kernel's lowering decisions are returned as a
//! [`PtxReport`] ([`report`]).

pub mod emit;
#[cfg(test)]
mod layers_test;
mod lower;
pub mod plan;

pub use emit::isa;
pub use lower::report;
pub use lower::tma::tma_rings_lowerable;
pub use lower::PtxError;
pub use plan::THREADS;

/// Layout assignment ([`plan::layout`]) and the layout dump of `kirc compile --dump-after
/// layout` ([`annotate`]).
pub mod layout {
    pub use super::plan::annotate;
    pub use super::plan::layout::*;
}

use crate::abi::kernel_abi;
use crate::meta::KernelMeta;
use crate::target::Target;
use kir_ir::{Kernel, Module};
pub use report::PtxReport;

/// The software-pipelining ring depth the compile driver asks the `pipelining` pass for when
/// compiling to PTX (the backend itself lowers whatever rings the scheduled IR has): 2 (double
/// buffering) measured best on the H200 for attention and as good as 3–4 for GEMM
/// (docs/benchmarks.md); shallower rings are used when shared memory is short.
pub const PIPELINE_STAGES: usize = 2;

/// Lowering choices a caller may make instead of the backend's defaults (`kirc compile
/// --warps/--stages`, like Triton's `num_warps`/`num_stages`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PtxOptions {
    /// Warps per block (1, 2, or a multiple of 4 up to 32). `None`: the policy of [`kernel::block_policy`]. A dot
    /// whose rows are not a multiple of 16 per warp loses the mma path (FMA loops instead).
    pub warps: Option<u32>,
    /// Depth of the pipelining ring (1 to 8; 1 = no pipelining) that the compile driver asks the
    /// `pipelining` pass for before lowering. `None`: [`PIPELINE_STAGES`]. The backend lowers
    /// the rings of the module it is given and reads only the validation and the symbol suffix.
    pub stages: Option<usize>,
    /// Warp specialization (`--warp-specialize`): `Some(true)` asks the compile driver for a producer
    /// warpgroup and the block's warps as one consumer (an error when the kernel does not
    /// qualify), `Some(false)` for none, `None` for the per-target configuration's choice.
    pub warp_specialize: Option<bool>,
    /// Persistent grid (`--persistent`): `Some(n)` with n ≥ 1 asks the compile driver for the
    /// `persistent` pass over n programs, `Some(0)` for none, `None` for the per-target
    /// configuration's choice (its count is the target's [`crate::Target::sm_count`]).
    pub persistent: Option<u32>,
    /// Intra-warpgroup overlap (`--overlap`): `Some(true)` asks the compile driver for the
    /// `dot_overlap` pass on the TMA rings, or the consumer's rings when warp-specialized (each
    /// ring loop's q·kᵀ of block j and p·v of block j − 1 as `dot_async`s, the softmax under
    /// the p·v), `Some(false)` for none, `None` for the per-target configuration's choice.
    pub overlap: Option<bool>,
    /// Blocks per SM that ptxas must fit (`.minnctapersm N`) in a kernel without warp
    /// specialization where the backend's own rule states none and N · threads ≤ 256, so that
    /// ptxas may still take 255 registers a thread (kernel.rs, `min_blocks`): a per-target
    /// configuration's request where ptxas's own register cap spills (attention_bwd at d64 on
    /// sm_100a, at d96 on sm_90a and sm_100a). Not in the
    /// kernel's symbol: it changes no code, only ptxas's register budget. `None`: the rule alone.
    pub min_blocks: Option<u32>,
}

impl PtxOptions {
    /// Checks the ranges; the message names the offending option.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(w) = self.warps {
            if !(1..=32).contains(&w) || !(w.is_power_of_two() || w % 4 == 0) {
                return Err(format!(
                    "--warps {w}: warps per block must be 1, 2, or a multiple of 4, up to 32"
                ));
            }
        }
        if let Some(n) = self.min_blocks {
            if !(1..=32).contains(&n) {
                return Err(format!(
                    "min_blocks {n}: blocks per SM must be from 1 to 32"
                ));
            }
        }
        if let Some(s) = self.stages {
            if !(1..=16).contains(&s) {
                return Err(format!(
                    "--stages {s}: pipeline stages must be from 1 to 16"
                ));
            }
        }
        Ok(())
    }

    /// The kernel-symbol suffix naming the options that were set (empty for the defaults).
    pub fn suffix(&self) -> String {
        let mut s = String::new();
        if let Some(w) = self.warps {
            s.push_str(&format!("_WARPS_{w}"));
        }
        if let Some(st) = self.stages {
            s.push_str(&format!("_STAGES_{st}"));
        }
        if let Some(w) = self.warp_specialize {
            s.push_str(&format!("_WS_{}", u8::from(w)));
        }
        if let Some(n) = self.persistent {
            s.push_str(&format!("_PERSIST_{n}"));
        }
        if let Some(o) = self.overlap {
            s.push_str(&format!("_OVERLAP_{}", u8::from(o)));
        }
        s
    }
}

/// A compiled module: PTX text, the ISA version it declares, per-kernel metadata, and the
/// lowering decisions of each kernel (`reports[i]` describes `kernels[i]`).
#[derive(Clone, Debug)]
pub struct PtxModule {
    pub text: String,
    pub version: (u32, u32),
    pub kernels: Vec<KernelMeta>,
    pub reports: Vec<PtxReport>,
    /// `instructions[i]`: how many instructions the `.entry` of `kernels[i]` holds (counted from
    /// its instruction list, the final `ret` included: every line of the entry that ends in `;`
    /// and is neither a directive nor a comment).
    pub instructions: Vec<usize>,
}

/// Lowers every kernel of a specialized, verified module. Kernel symbols are the kernel name
/// followed by `suffix` (which encodes the specialization).
pub fn compile_module(m: &Module, target: Target, suffix: &str) -> Result<PtxModule, PtxError> {
    compile_module_with(m, target, suffix, &PtxOptions::default())
}

/// [`compile_module`] with explicit lowering options (validated first).
pub fn compile_module_with(
    m: &Module,
    target: Target,
    suffix: &str,
    opts: &PtxOptions,
) -> Result<PtxModule, PtxError> {
    let kernels: Vec<(&Kernel, &str, PtxOptions)> =
        m.kernels.values().map(|k| (k, suffix, *opts)).collect();
    compile_kernels(&m.name, target, &kernels)
}

/// Lowers `kernels` into one PTX module named after module `name`, each kernel with its own
/// symbol suffix and lowering options (validated first): the module of a program whose kernels
/// were scheduled one by one. The text is what [`compile_module_with`] gives when every
/// kernel has the same suffix and options.
pub fn compile_kernels(
    name: &str,
    target: Target,
    kernels: &[(&Kernel, &str, PtxOptions)],
) -> Result<PtxModule, PtxError> {
    let mut version = target.min_ptx_version();
    let mut smem_align = 16;
    let mut bodies = String::new();
    // Module-scope declarations of the kernels (print format strings), for the head.
    let mut decls = String::new();
    let mut vprintf = false;
    let mut metas = Vec::new();
    let mut reports = Vec::new();
    let mut instructions = Vec::new();
    for (k, suffix, opts) in kernels {
        opts.validate().map_err(PtxError::plain)?;
        let symbol = sanitize(&format!("{}{}", k.name, suffix));
        let abi = kernel_abi(k).map_err(|e| PtxError::at(k.span, e))?;
        let lowered =
            lower::kernel::lower_kernel(k, &abi, target, &symbol, opts.warps, opts.min_blocks)?;
        let limit = target.smem_per_block();
        if u64::from(lowered.shared_bytes) > limit {
            let mut e = PtxError::at(
                k.span,
                format!(
                    "kernel `{}` needs {} bytes of shared memory on {}, more than the {} a block may use; use smaller tiles (e.g. -D BLOCK_M/BLOCK_N) or fewer pipeline stages (--stages)",
                    k.name, lowered.shared_bytes, target.name(), limit
                ),
            );
            e.over_shared = true;
            return Err(e);
        }
        if let Some((feature, what, at)) = lowered.isa.missing_on(target) {
            return Err(PtxError::at(
                at.unwrap_or(k.span),
                format!(
                    "kernel `{}` needs `{what}`, which needs the {feature} feature: {} does not have it",
                    k.name,
                    target.name()
                ),
            ));
        }
        version = version.max(lowered.isa.version);
        smem_align = smem_align.max(lowered.smem_align);
        bodies.push('\n');
        bodies.push_str(&lowered.text);
        decls.push_str(&lowered.decls);
        vprintf |= lowered.calls_vprintf;
        metas.push(KernelMeta {
            kernel: k.name.clone(),
            symbol,
            abi,
            block: [lowered.threads, 1, 1],
            shared_bytes: lowered.shared_bytes,
            registers: None,
        });
        reports.push(lowered.report);
        instructions.push(lowered.instructions);
    }
    let mut text = format!(
        "//\n// Generated by kir for {} from module `{}`.\n//\n.version {}.{}\n.target {}\n.address_size 64\n\n.extern .shared .align {} .b8 kir_smem[];\n.const .align 4 .f32 kir_nf4[16] = {{{}}};\n",
        target.name(),
        name,
        version.0,
        version.1,
        target.name(),
        smem_align,
        kir_ir::NF4_TABLE.iter().map(|v| emit::f32_lit(*v).to_string()).collect::<Vec<_>>().join(", ")
    );
    // Every module-scope declaration precedes the first entry, so that a module cut into one
    // module per entry (runtime/kernels.rs, `split_entries`) keeps what each entry uses.
    if vprintf {
        text.push_str(lower::print::VPRINTF);
    }
    text.push_str(&decls);
    text.push_str(&bodies);
    Ok(PtxModule {
        text,
        version,
        kernels: metas,
        reports,
        instructions,
    })
}

/// Keeps `[A-Za-z0-9_]`, replacing anything else by `_`.
fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
