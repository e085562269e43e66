//! Warp roles planned before lowering: warp specialization's partitions (the attributes of a
//! `warp_specialize` op, [`ws_op`]) and the ping-pong turns of wgmma dots ([`pingpong`]; the
//! barriers that enforce them are in `lower/wgmma.rs`).

use super::block::Block;
use super::ir::lit;
use crate::target::Target;
use kir_ir::{Kernel, Op, OpData, Opcode, Value};
use std::collections::HashMap;

/// The named barrier of a warp-specialized consumer partition (`lower/ws.rs`; consumer i of
/// several takes this − i, `lower/consumers.rs`); ids 1.. are the ping-pong's
/// (`lower/wgmma.rs`), and per-warpgroup bulk reductions take ids between
/// (`lower/bulk_reduce.rs`).
pub const CONSUMER_BARRIER: u32 = 15;

/// The attributes of a `warp_specialize` op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WsAttrs {
    pub producer_warps: u32,
    pub producer_regs: u32,
    pub consumers: u32,
    pub consumer_warps: u32,
    pub consumer_regs: u32,
    /// CTAs per cluster along the grid's first axis (1: no cluster).
    pub cluster: u32,
}

impl WsAttrs {
    /// Threads of the launch: the producer's and every consumer's.
    pub fn threads(&self) -> u32 {
        (self.producer_warps + self.consumers * self.consumer_warps) * 32
    }

    /// The block one consumer's code is planned for.
    pub fn consumer_block(&self) -> Block {
        Block {
            threads: self.consumer_warps * 32,
            warps: self.consumer_warps,
        }
    }

    /// The register count at entry: the register file shared evenly, in multiples of 8.
    pub fn entry_regs(&self) -> u32 {
        (65536 / self.threads() / 8 * 8).min(255 / 8 * 8)
    }
}

fn int_attr(op: &OpData, name: &str) -> Option<u32> {
    lit(op.attr(name)).map(|x| x as u32)
}

/// The top-level `warp_specialize` op of `k` and its attributes, if it has one.
pub fn ws_op(k: &Kernel) -> Option<(Op, WsAttrs)> {
    let o = *k.dfg.blocks[k.body]
        .ops
        .iter()
        .find(|&&o| k.dfg.ops[o].opcode == Opcode::WarpSpecialize)?;
    let od = &k.dfg.ops[o];
    Some((
        o,
        WsAttrs {
            producer_warps: int_attr(od, "producer_warps")?,
            producer_regs: int_attr(od, "producer_regs")?,
            consumers: int_attr(od, "consumers")?,
            consumer_warps: int_attr(od, "consumer_warps")?,
            consumer_regs: int_attr(od, "consumer_regs")?,
            cluster: match od.attr("cluster") {
                Some(_) => int_attr(od, "cluster")?,
                None => 1,
            },
        },
    ))
}

/// A dot's place in its loop's ping-pong: the index of its issue group among the loop body's
/// groups of wgmma dots and their count. A group is a run of wgmma dots that stand next to each
/// other in the body, none reading another's result, all with A from shared memory or all
/// with A in registers (a mixed pair made the atomic backward's five-dot kernel spill): its
/// first dot (`lead`) waits for the
/// warpgroup's turn, its last (`tail`) hands the turn on and waits for the groups in flight, and
/// the dots before the tail leave their groups running, so the tensor cores get them back to
/// back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Turn {
    pub index: usize,
    pub count: usize,
    pub lead: bool,
    pub tail: bool,
}

/// The ping-pong turns of the wgmma dots of `k` (by result value): for a block of exactly two
/// warpgroups, every `for` body that issues 2 to 7 wgmma dots directly (and none nested deeper)
/// gets one turn per issue group (see [`Turn`]), in program order. Empty otherwise.
pub fn pingpong(k: &Kernel, b: Block, target: Target) -> HashMap<Value, Turn> {
    let mut out = HashMap::new();
    if b.warps != 8 || !target.has_wgmma() {
        return out;
    }
    let is_wgmma = |o: &kir_ir::OpData| super::wgmma::wgmma_dot(k, o, b, target).is_some();
    // Whether a wgmma dot's A is in registers (RS) rather than shared memory.
    let rs = |o: &kir_ir::OpData| {
        super::wgmma::wgmma_dot(k, o, b, target).is_some_and(|w| w.a.is_none())
    };
    for op in k.dfg.ops.values().filter(|o| o.opcode == Opcode::For) {
        let Some(&body) = op.regions.first() else {
            continue;
        };
        let ops = &k.dfg.blocks[body].ops;
        let mut run_rs = false;
        let nested = ops
            .iter()
            .any(|&o| !k.dfg.ops[o].regions.is_empty() && region_has_wgmma(k, o, &is_wgmma));
        // Issue groups: (dot results), each a run of adjacent independent wgmma dots.
        let mut groups: Vec<Vec<Value>> = vec![];
        let mut run_open = false;
        for &o in ops {
            let od = &k.dfg.ops[o];
            let Some(&r) = od.results.first().filter(|_| is_wgmma(od)) else {
                run_open = false;
                continue;
            };
            let joins = run_open
                && rs(od) == run_rs
                && groups
                    .last()
                    .is_some_and(|g| !od.operands.iter().any(|x| g.contains(x)));
            run_rs = rs(od);
            match groups.last_mut() {
                Some(g) if joins => g.push(r),
                _ => groups.push(vec![r]),
            }
            run_open = true;
        }
        let dots: usize = groups.iter().map(Vec::len).sum();
        if (2..=7).contains(&dots) && !nested {
            for (index, g) in groups.iter().enumerate() {
                for (i, &v) in g.iter().enumerate() {
                    let turn = Turn {
                        index,
                        count: groups.len(),
                        lead: i == 0,
                        tail: i + 1 == g.len(),
                    };
                    out.insert(v, turn);
                }
            }
        }
    }
    out
}

/// True if any op inside the regions of `o` (at any depth) is a wgmma dot.
fn region_has_wgmma(k: &Kernel, o: kir_ir::Op, is_wgmma: &dyn Fn(&kir_ir::OpData) -> bool) -> bool {
    k.dfg.ops[o].regions.iter().any(|&r| {
        k.dfg.blocks[r]
            .ops
            .iter()
            .any(|&x| is_wgmma(&k.dfg.ops[x]) || region_has_wgmma(k, x, is_wgmma))
    })
}
