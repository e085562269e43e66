//! The per-kernel plan of the PTX backend: every lowering decision that is made before an
//! instruction is emitted — the block (warps, and why), the layout of every value, the shared
//! tiles that take wgmma's swizzled layout (and which operand tiles qualify), and the ping-pong
//! turns of wgmma dots. It is computed
//! once, from the kernel and the target alone, and is immutable: the emitter (`kernel.rs` and the
//! lowering modules) reads it, `kirc compile --dump-after layout` prints it (`layout::annotate`),
//! and the fast-path report (`report.rs`) states it.

use super::block::VEC;
use super::block::{block_policy, Block};
use super::layout::{self, grid_dims, Layout, Place};
use super::lazy_sum::{lazy_sums, LazySums};
use super::roles::{pingpong, ws_op, Turn};
use super::wgmma::core_tiles;
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
    pub pingpong: HashMap<Value, Turn>,
    /// The row sums a loop carries as quad partials, reduced where it ends.
    pub lazy: LazySums,
}

/// The plan of kernel `k` on `target`, with `warps` per block when the caller chooses them
/// (`--warps` or a per-target configuration), else the backend's policy.
pub fn plan(k: &Kernel, target: Target, warps: Option<u32>) -> KernelPlan {
    let (policy, why) = block_policy(k);
    let ws = ws_op(k).map(|(_, a)| a);
    let (blk, policy_why) = match (ws, warps) {
        // A warp-specialized kernel's code is the consumer's (ws.rs).
        (Some(a), _) => (
            a.consumer_block(),
            Some(match a.consumers {
                1 => format!(
                    "warp-specialized: {} producer warps, a consumer of {} warps ({} threads)",
                    a.producer_warps,
                    a.consumer_warps,
                    a.threads()
                ),
                n => format!(
                    "warp-specialized: {} producer warps, {n} consumers of {} warps each ({} \
                     threads)",
                    a.producer_warps,
                    a.consumer_warps,
                    a.threads()
                ),
            }),
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
    let places = layout::assign_for(k, blk, Some(target));
    KernelPlan {
        blk,
        policy_why,
        lazy: lazy_sums(k, &places, blk),
        places,
        core: core_tiles(k, blk, target),
        pingpong: pingpong(k, blk, target),
    }
}

/// A copy of module `m` (as the PTX backend receives it: specialized and scheduled) whose ops
/// carry a comment naming the layout of each tile they define, as the backend assigns them for
/// `target` with `warps[kernel name]` warps per block (a kernel not listed: the backend's
/// policy) — what `kirc compile --dump-after layout` prints. Shared tiles that wgmma reads are
/// shown in its swizzled layout, wgmma dots that take ping-pong turns their turn, and the row
/// sums a loop keeps as quad partials (and the loops that reduce them) say so.
pub fn annotate(
    m: &kir_ir::Module,
    target: crate::target::Target,
    warps: &HashMap<String, u32>,
) -> kir_ir::Module {
    let mut out = m.clone();
    for k in out.kernels.values_mut() {
        // The emitter's own plan, so the dump shows what the PTX uses.
        let KernelPlan {
            blk: b,
            places,
            core,
            pingpong,
            lazy,
            ..
        } = plan(k, target, warps.get(&k.name).copied());
        let names = kir_ir::text::printer::value_names(k);
        let mut notes: Vec<(kir_ir::Op, String)> = Vec::new();
        for (o, op) in k.dfg.ops.iter() {
            let parts: Vec<String> = op
                .results
                .iter()
                .filter(|r| !k.dfg.ty(**r).is_scalar() && !k.dfg.ty(**r).is_resource())
                .map(|r| {
                    let what = match places.get(r) {
                        Some(Place::Reg(Layout::Blocked)) => {
                            format!("blocked(vec {VEC}, {} threads)", b.threads)
                        }
                        Some(Place::Reg(Layout::RowMma)) => {
                            format!("mma-accumulator({} warps along rows)", b.warps)
                        }
                        Some(Place::Reg(Layout::Grid)) => {
                            let s = k.dfg.ty(*r).shape().unwrap_or_default();
                            let (wm, wn) = grid_dims(&s, b);
                            format!("mma-accumulator({wm}x{wn} warp grid)")
                        }
                        Some(Place::Shared) if core.contains(r) => {
                            "shared(128B-swizzled core matrices, wgmma operand)".to_string()
                        }
                        Some(Place::Shared) => "shared(rows padded 16 B)".to_string(),
                        Some(Place::Scalar) | None => "scalar".to_string(),
                    };
                    format!("%{} = {what}", names[*r])
                })
                .collect();
            if !parts.is_empty() {
                notes.push((o, format!("layout: {}", parts.join(", "))));
            }
            if op.results.iter().any(|r| lazy.partial.contains(r)) {
                notes.push((
                    o,
                    "row sum: quad partials (each thread's own columns; its loop reduces them \
                     over the quad where it ends)"
                        .to_string(),
                ));
            }
            if op.results.iter().any(|r| lazy.finish.contains(r)) {
                notes.push((
                    o,
                    "row sum: carried as quad partials, reduced over the quad after the loop"
                        .to_string(),
                ));
            }
            for t in op.results.iter().filter_map(|r| pingpong.get(r)) {
                notes.push((
                    o,
                    format!(
                        "ping-pong: turn {} of {} (the two warpgroups take this loop's wgmma \
                         dots in turns)",
                        t.index + 1,
                        t.count
                    ),
                ));
            }
        }
        for (o, n) in notes {
            k.dfg.ops[o].doc.push(n);
        }
    }
    out
}
