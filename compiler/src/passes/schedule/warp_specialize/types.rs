//! The types `warp_specialize` shares between its files: the plan ([`WsPlan`]), a pipelined loop
//! the pass rewrites (`Piped`), how consumers split a grid axis (`Split`) and the pass's error
//! (`bad`).

use kir_ir::{Diagnostic, Expr, Kernel, Op, Span, Value};

/// A warp-specialization plan: partition sizes, register budgets and consumer arrangement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WsPlan {
    /// Short name (`fa3`, `2p6c`, `gemm`), shown in docs and errors.
    pub name: &'static str,
    pub producer_warps: u32,
    pub producer_regs: u32,
    pub consumers: u32,
    pub consumer_warps: u32,
    pub consumer_regs: u32,
    /// The grid axis whose tiles the consumers split (used when `consumers` > 1).
    pub split_axis: u32,
    /// Consumers take turns through ordering barriers (FA3's inter-warpgroup ping-pong).
    pub pingpong: bool,
}

impl WsPlan {
    /// FA3's plan: one producer warpgroup at 24 registers, two consumer warpgroups at 240 that
    /// split the query blocks (grid axis 0) and ping-pong.
    pub const FA3: WsPlan = WsPlan {
        name: "fa3",
        producer_warps: 4,
        producer_regs: 24,
        consumers: 2,
        consumer_warps: 4,
        consumer_regs: 240,
        split_axis: 0,
        pingpong: true,
    };
    /// Two producer warps and one consumer of six warps, one register budget (no setmaxnreg).
    pub const P2C6: WsPlan = WsPlan {
        name: "2p6c",
        producer_warps: 2,
        producer_regs: 168,
        consumers: 1,
        consumer_warps: 6,
        consumer_regs: 168,
        split_axis: 0,
        pingpong: false,
    };
    /// A GEMM mainloop: one producer warpgroup at 40 registers, one consumer warpgroup at 232.
    pub const GEMM: WsPlan = WsPlan {
        name: "gemm",
        producer_warps: 4,
        producer_regs: 40,
        consumers: 1,
        consumer_warps: 4,
        consumer_regs: 232,
        split_axis: 0,
        pingpong: false,
    };
    /// The PTX backend's plan on sm_90a: one producer warpgroup at 32 registers (its thread 0
    /// issues the tensor copies; without tensor maps every producer thread copies, and 24
    /// registers spilled a persistent GEMM's copy addresses) and the block's `warps` warps as
    /// one consumer at the budget left (at most `setmaxnreg`'s 256), so the consumer's code is
    /// the unspecialized kernel's. A 4-warp consumer gets 256: at 240 the d256 backward's
    /// consumer spilled 20 bytes with a causal window, key lengths and a KV offset
    /// (tests/tests/attention_spills.rs); 8-warp consumers get 232 from their pool. `max_regs`
    /// caps the consumer's budget below that (a configuration row's `consumer_regs`; rounded
    /// down to a multiple of 8, at least 24).
    pub fn one_consumer(warps: u32, max_regs: Option<u32>) -> WsPlan {
        WsPlan {
            name: "1c",
            producer_warps: 4,
            producer_regs: 32,
            consumers: 1,
            consumer_warps: warps,
            consumer_regs: consumer_budget(32, 1, warps, max_regs),
            split_axis: 0,
            pingpong: false,
        }
    }

    /// Two consumers of `warps` warps each that split grid axis 2, whose constant extent 2 gives
    /// one tile two programs with different roles over the same stages (attention_bwd's dK/dV
    /// kernel above head dim 128: dk's accumulator in one, dv's in the other), beside one
    /// producer warpgroup at 24 registers; no ping-pong turns (with them the d256 dK/dV kernel
    /// ran 2.14 ms against 1.96 on an H100, call Q1 of 2026-12-07). Each consumer takes what
    /// the block leaves it (240 registers for 4 warps), at most `max_regs`.
    pub fn roles(warps: u32, max_regs: Option<u32>) -> WsPlan {
        WsPlan {
            name: "roles",
            producer_warps: 4,
            producer_regs: 24,
            consumers: 2,
            consumer_warps: warps.max(1),
            consumer_regs: consumer_budget(24, 2, warps, max_regs),
            split_axis: 2,
            pingpong: false,
        }
    }

    /// Every named plan.
    pub const ALL: [WsPlan; 3] = [WsPlan::FA3, WsPlan::P2C6, WsPlan::GEMM];

    /// A named plan.
    pub fn from_name(s: &str) -> Option<WsPlan> {
        WsPlan::ALL.into_iter().find(|p| p.name == s)
    }
}

/// The registers per thread of each of `consumers` consumers of `warps` warps beside a producer
/// warpgroup at `producer_regs`: what the block starts with (its `.maxnreg`, ⌊65536 / threads
/// / 8⌋ · 8 per thread) less the producer's share, rounded down to a multiple of 8, at most
/// `setmaxnreg`'s 256 and at most `max_regs` (itself rounded down to a multiple of 8, at least
/// 24).
fn consumer_budget(producer_regs: u32, consumers: u32, warps: u32, max_regs: Option<u32>) -> u32 {
    let consumer_threads = consumers * warps.max(1) * 32;
    let threads = 4 * 32 + consumer_threads;
    let pool = 65536 / threads / 8 * 8 * threads;
    let left = (pool - 4 * 32 * producer_regs) / consumer_threads;
    (left / 8 * 8)
        .min(256)
        .min(max_regs.map_or(256, |r| (r / 8 * 8).max(24)))
}

/// One pipelined loop and the parts of it the pass rewrites.
pub(super) struct Piped {
    pub(super) op: Op,
    /// The prefetching `if` in the body, its iteration value and stage value.
    pub(super) prefetch: Op,
    pub(super) at: Value,
    pub(super) pf: Value,
    /// The carried stage index (block argument and its carried slot).
    pub(super) stage_arg: Value,
    pub(super) slot: usize,
    pub(super) stages: usize,
    pub(super) bytes: i64,
}

/// The error for a kernel the plan cannot split, saying why.
pub(super) fn bad(sp: Span, k: &Kernel, why: &str) -> Diagnostic {
    Diagnostic::new(sp, format!("cannot warp-specialize `@{}`: {why}", k.name))
}

/// How the consumers split grid axis `split_axis`: the `program_id` ops of that axis and the
/// axis's grid expression before the split (its tile count n). Consumer w of program p works on
/// tile p · C + w when that is below n.
pub(super) struct Split {
    pub(super) pid_ops: Vec<Op>,
    pub(super) tiles: Expr,
}
