//! The per-kernel plan of the PTX backend: every lowering decision that is made before an
//! instruction is emitted — the block (warps, and why), the layout of every value, the shared
//! tiles that take wgmma's swizzled layout, and the ping-pong turns of wgmma dots. It is computed
//! once, from the kernel and the target alone, and is immutable: the emitter (`kernel.rs` and the
//! lowering modules) reads it, `kirc compile --dump-after layout` prints it (`layout::annotate`),
//! and the fast-path report (`report.rs`) states it.

use super::layout::{self, Block, Place};
use crate::target::Target;
use kir_ir::{Kernel, Value};
use std::collections::{HashMap, HashSet};

/// The decisions for one kernel on one target (see the module doc).
#[derive(Clone, Debug)]
pub struct KernelPlan {
    /// Threads and warps per block.
    pub blk: Block,
    /// Why the block has its warps: the policy's reason, or `None` when the caller gave them.
    pub policy_why: Option<String>,
    /// Where every value lives (registers in a layout, shared memory, scalar).
    pub places: HashMap<Value, Place>,
    /// Tiles and stage buffers in wgmma's 128B-swizzled core-matrix layout.
    pub core: HashSet<Value>,
    /// The ping-pong turn of each wgmma dot that takes turns, by result.
    pub pingpong: HashMap<Value, super::pingpong::Turn>,
}

/// The plan of kernel `k` on `target`, with `warps` per block when the caller chooses them
/// (`--warps` or a per-target configuration), else the backend's policy.
pub fn plan(k: &Kernel, target: Target, warps: Option<u32>) -> KernelPlan {
    let (policy, why) = super::kernel::block_policy(k);
    let ws = super::ws::ws_op(k).map(|(_, a)| a);
    let (blk, policy_why) = match (ws, warps) {
        // A warp-specialized kernel's code is the consumer's (ws.rs).
        (Some(a), _) => (
            a.consumer_block(),
            Some(format!(
                "warp-specialized: {} producer warps, a consumer of {} warps ({} threads)",
                a.producer_warps,
                a.consumer_warps,
                a.threads()
            )),
        ),
        (None, Some(w)) => (
            Block {
                threads: w * 32,
                warps: w,
            },
            None,
        ),
        (None, None) => (policy, Some(why)),
    };
    KernelPlan {
        blk,
        policy_why,
        places: layout::assign_for(k, blk, Some(target)),
        core: super::wgmma::core_tiles(k, blk, target),
        pingpong: super::pingpong::plan(k, blk, target),
    }
}
