//! The options the pipeline runs with and the values it hands between its stages, in a leaf
//! module that the pass manager ([`crate::pass`]), the plan, the search and the driver
//! ([`crate::pipeline`]) all build on: the `-D` overrides ([`Defines`]), what the scheduling
//! passes are asked for ([`ScheduleOptions`], built only by `crate::plan`), the front end's
//! modules ([`Frontend`]) and why a dump failed ([`DumpError`]).

use crate::passes;
use kir_ir::{Diagnostics, Module};

/// `-D NAME=VALUE` overrides, in command-line order (the last one of a name wins).
pub type Defines = [(String, String)];

/// What the front end produces.
#[derive(Clone, Debug, PartialEq)]
pub struct Frontend {
    /// The module as parsed (constants, `static_if`s and conditional params still present).
    pub generic: Module,
    /// The module after specialization: no constants, all dtypes known.
    pub specialized: Module,
    /// The specialized module after e-graph rewriting (`egraph` pass).
    pub optimized: Module,
    /// The optimized module after kernel-graph fusion (`fusion` pass); equal to `optimized`
    /// for modules without a program or without fusible patterns.
    pub fused: Module,
    /// The fused module after mask-block splitting (`mask_split` pass), the last pass: what
    /// `kirc run`, `kirc compile`, `kirc bench` and the backends consume.
    pub output: Module,
}

/// Whether the `fusion` pass's rewrites are lowered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fusion {
    /// Lower the fused program where the cost model (`crate::cost`) estimates it faster on the
    /// target than the unfused one, both as the schedule search would lower them; the fused
    /// program where there is no target to cost for (the interpreter without `--target`).
    #[default]
    Auto,
    /// Lower the fused program wherever the pass applies (`--fuse`).
    On,
    /// Skip the `fusion` pass (`--no-fuse`).
    Off,
}

/// Whether and how `warp_specialize` runs.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum WsChoice {
    /// It does not run (a compilation asks for it through its plan: the per-target
    /// configuration or `--warp-specialize on`).
    #[default]
    Off,
    /// The target's plans in order of preference ([`ws_plans`]); the first that applies.
    Auto,
    /// This plan, or its error.
    Plan(passes::WsPlan),
    /// The PTX backend's plan for each kernel (`WsPlan::one_consumer`): a producer warpgroup and
    /// the kernel's own block (the warps the backend's block policy gives it) as one consumer,
    /// so each kernel of a program keeps its own warps (attention_bwd's dK/dV kernel 8 for its
    /// 128-key rows, its dQ kernel 4); a kernel the pass cannot split is its error. With
    /// `max_regs`, each consumer thread takes at most that many. With `roles`, a kernel whose
    /// grid has the constant extent 2 along axis 2 (two programs of one tile that take
    /// different roles over the same stages: attention_bwd's dk and dv at head dims above 128)
    /// runs them as two consumers of one block instead (`WsPlan::roles`).
    PerKernel { max_regs: Option<u32>, roles: bool },
}

/// What the scheduling passes may use and are asked for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScheduleOptions {
    /// The target whose shared-memory budget bounds the rings; `None` skips scheduling.
    pub target: Option<kir_backends::Target>,
    /// Pipeline stages requested (`--stages`); `None` lets the pass choose.
    pub stages: Option<usize>,
    /// Warp specialization after pipelining.
    pub warp_specialize: WsChoice,
    /// Keep cp.async rings where the target could take TMA rings (the compile driver's choice
    /// when the backend would not lay the ring's buffers out for tensor copies).
    pub no_tma_rings: bool,
    /// Make kernels persistent over this many programs (`persistent` pass) before pipelining;
    /// `None` leaves grids as they are.
    pub persistent: Option<u32>,
    /// With `persistent`: the tiles walked in groups of this many rows of the grid's axis 1
    /// (the configuration's group, for a kernel that orders its tiles in no groups of its own);
    /// `None`: in grid order.
    pub tile_group: Option<u32>,
    /// Pair each TMA ring loop's fresh stage dot with the previous block's accumulating dot
    /// (`dot_overlap`), after pipelining or, in a warp-specialized kernel, in its consumer.
    pub overlap: bool,
    /// Compute each dot loop's accumulator transposed (`swap_operands`), first of the
    /// scheduling passes.
    pub swap_operands: bool,
    /// Pair the programs of a persistent warp-specialized kernel into clusters of two that
    /// share their copies (`cluster`), last of the scheduling passes: `None` leaves kernels
    /// alone, `Some(false)` applies it where a kernel qualifies, `Some(true)` also makes a
    /// module none of whose kernels qualifies an error.
    pub cluster: Option<bool>,
    /// With `persistent`: the grid's last tiles shared out by K iterations (`stream_k`, before
    /// `persistent`, which takes the kernels it leaves): `None` runs no such pass, `Some(false)`
    /// applies it where a kernel qualifies, `Some(true)` makes a module with no kernel that
    /// qualifies an error.
    pub stream_k: Option<bool>,
}

/// The warp-specialization plans of a target, most preferred first: FA3's two ping-pong consumer
/// warpgroups with `setmaxnreg` budgets, then one producer and one consumer warpgroup, where
/// the target has an asynchronous warpgroup MMA and `setmaxnreg` (sm_90a, sm_100a); two
/// producer warps and six consumer warps (one budget) elsewhere.
pub fn ws_plans(t: kir_backends::Target) -> Vec<passes::WsPlan> {
    if t.has_async_mma() && t.has_setmaxnreg() {
        vec![passes::WsPlan::FA3, passes::WsPlan::GEMM]
    } else {
        vec![passes::WsPlan::P2C6]
    }
}

/// Why a dump (`crate::pipeline::dump_after`) produced no text.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum DumpError {
    /// The pass name is not a registered pass; the second field lists the registered ones.
    #[error("unknown pass `{0}` (passes: {1})")]
    UnknownPass(String, String),
    /// A scheduling pass was asked for without a target.
    #[error("pass `{0}` schedules for a target: add --target (sm_80, sm_90a, sm_100a or sm_120a)")]
    NeedsTarget(String),
    /// The input failed before or in the pass.
    #[error("{0}")]
    Failed(Diagnostics),
}
