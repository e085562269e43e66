//! The per-kernel plan of the PTX backend: every lowering decision that is made before an
//! instruction is emitted — the block (warps, and why), the layout of every value, the shared
//! tiles that take wgmma's swizzled layout (and which operand tiles qualify), and the ping-pong
//! turns of wgmma dots. It is computed
//! once, from the kernel and the target alone, and is immutable: the emitter (`kernel.rs` and the
//! lowering modules) reads it, `kirc compile --dump-after layout` prints it (`layout::annotate`),
//! and the fast-path report (`report.rs`) states it.

use super::layout::{self, Block, Place};
use crate::target::Target;
use kir_ir::{Kernel, OpData, Opcode, Value};
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
        core: core_tiles(k, blk, target),
        pingpong: super::pingpong::plan(k, blk, target),
    }
}

/// An operand tile a wgmma can read: a `load` (copied into shared memory where it is used),
/// or a `smem_read` of a stage buffer whose every read reaches a dot the same way (the buffer
/// then holds the core layout for every stage).
pub(super) fn tile_source(k: &Kernel, o: &OpData) -> bool {
    match o.opcode {
        Opcode::Load => true,
        // Every read of the buffer must reach a dot the same way this one does (`dot_overlap`
        // reads K's stages twice: its peeled first dot and its `dot_async`).
        Opcode::SmemRead => o.operands.first().is_some_and(|&buf| {
            let role = |x: &OpData| x.results.first().and_then(|&r| dot_role(k, r));
            let mine = role(o);
            mine.is_some()
                && k.dfg
                    .ops
                    .values()
                    .filter(|x| x.opcode == Opcode::SmemRead && x.operands.first() == Some(&buf))
                    .all(|x| role(x) == mine && k.dfg.ty(x.results[0]) == k.dfg.ty(o.results[0]))
        }),
        _ => false,
    }
}

/// How a stage read `v` reaches a dot: (through a `transpose`, operand index), when its one use
/// is a dot or `dot_async` operand, directly or through one single-use `transpose`.
fn dot_role(k: &Kernel, v: Value) -> Option<(bool, usize)> {
    let single_use = |v: Value| {
        let mut uses =
            k.dfg.ops.values().filter(|o| {
                o.operands.contains(&v) || o.attr("mask") == Some(&kir_ir::Attr::Value(v))
            });
        let first = uses.next();
        if uses.next().is_some() {
            return None;
        }
        first
    };
    // An A operand that several dots read alike (`dot_overlap`'s peeled dot and its
    // `dot_async` on q read once in a warp-specialized consumer).
    let users: Vec<&OpData> = k
        .dfg
        .ops
        .values()
        .filter(|o| o.uses().contains(&v))
        .collect();
    if users.len() > 1
        && users.iter().all(|u| {
            matches!(u.opcode, Opcode::Dot | Opcode::DotAsync)
                && u.operands.first() == Some(&v)
                && u.uses().iter().filter(|&&x| x == v).count() == 1
        })
    {
        return Some((false, 0));
    }
    let u = single_use(v)?;
    match u.opcode {
        Opcode::Dot | Opcode::DotAsync => {
            let i = u.operands.iter().position(|&x| x == v)?;
            (i < 2).then_some((false, i))
        }
        Opcode::Transpose => {
            let t = *u.results.first()?;
            let d = single_use(t)?;
            let i = d.operands.iter().position(|&x| x == t)?;
            (matches!(d.opcode, Opcode::Dot | Opcode::DotAsync) && i < 2).then_some((true, i))
        }
        _ => None,
    }
}

/// A load without a mask, or a stage read whose buffer only unmasked copies fill.
pub(super) fn unmasked(k: &Kernel, o: &OpData) -> bool {
    match o.opcode {
        Opcode::SmemRead => k.dfg.ops.values().all(|x| {
            x.opcode != Opcode::AsyncCopy
                || x.operands.first() != o.operands.first()
                || x.attr("mask").is_none()
        }),
        _ => o.attr("mask").is_none(),
    }
}

/// The operand tiles of every wgmma-eligible dot of `k` and the stage buffers they are read
/// from (all use the core layout).
pub fn core_tiles(k: &Kernel, b: Block, target: Target) -> HashSet<Value> {
    let mut out: HashSet<Value> = k
        .dfg
        .ops
        .values()
        .filter_map(|o| super::wgmma::wgmma_dot(k, o, b, target))
        .flat_map(|w| w.a.into_iter().chain([w.b]))
        .collect();
    let bufs: Vec<Value> = out
        .iter()
        .filter_map(|&v| match k.dfg.values.get(v)?.def {
            kir_ir::ValueDef::Result(o, _) => Some(&k.dfg.ops[o]),
            kir_ir::ValueDef::Arg(..) => None,
        })
        .filter(|o| o.opcode == Opcode::SmemRead)
        .filter_map(|o| o.operands.first().copied())
        .collect();
    out.extend(bufs);
    out
}
