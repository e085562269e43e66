//! Pairs of wgmma dots issued back to back: a synchronous wgmma dot D1 that reads A and B from
//! shared memory (SS) commits its group and leaves it in flight when a later dot D2 of its
//! block, SS too and independent of it, can be issued right after it; D2 is then lowered there
//! (*hoisted*, if other ops stood between them) and its `wait_group 0` retires both, since a
//! warpgroup's groups retire in issue order. The tensor cores start D2 while D1's tail drains,
//! instead of idling through a wait and whatever code stood between two independent dots:
//! attention_bwd's dK/dV step issues dpᵀ = v·doᵀ with sᵀ = k·qᵀ, its dQ step dp = do·vᵀ with
//! s = q·kᵀ, both on sm_90a, whose other targets keep the op's order.
//!
//! D2 is the first `dot` after D1 in the block that qualifies, when:
//! - every op between them is free of side effects (pure or a read, other dots included; an
//!   `if` whose regions hold only such ops), so D2 reads the same operands early and nothing
//!   in between observes the order;
//! - it is a `dot` (not `dot_async`) that lowers to wgmma with A and B in shared memory already
//!   (`Val::Shared` values lowered before D1: a ring stage, a tile stored once), so lowering it
//!   stores nothing to shared memory that D1's group might still be reading; it reads neither
//!   D1's result nor, unless D1 starts from zero in fresh registers, D1's accumulator; and its
//!   own accumulator is a zero start (fresh registers) or a value lowered before D1;
//! - neither dot takes a ping-pong turn (their issue order is the named barriers', `wgmma.rs`);
//! - when D2 is hoisted over other ops, D2's result lives longer, so the registers must be
//!   free: the block's shared memory already bounds it to N blocks per SM with
//!   N · threads ≤ 256 (then 255 registers a thread cost no occupancy; `kernel.rs`,
//!   `min_blocks`). attention_bwd's dK/dV at head dim 64 (three blocks per SM by registers at
//!   168) went to 192 registers and two blocks in a first version that held dpᵀ across the
//!   softmax and paired its RS dots too, 11 % slower on the H200 (call Y5); at head dim 128
//!   (two blocks by shared memory) the hoist gained 5 % (call Y7).
//!
//! Register A operands (RS dots) are never paired: their fragments would stay live until the
//! group retires. The first dot's own conditions (synchronous, not held across iterations) are
//! checked where it is lowered (`dot.rs`).

use super::ctx::{place, Ctx, Val};
use crate::ptx::plan::layout::{self, Layout, Place};
use kir_ir::{Block, Kernel, Op, Opcode, Value, ValueDef};

/// The dot to issue right after the synchronous SS wgmma dot whose result is `v` (see the
/// module doc), if one qualifies. `acc` is that dot's accumulator unless it starts from zero.
pub fn partner(c: &Ctx, v: Value, acc: Option<Value>) -> Option<Op> {
    if c.plan.pingpong.contains_key(&v) {
        return None;
    }
    let ValueDef::Result(me, _) = c.k.dfg.values[v].def else {
        return None;
    };
    let block = c.k.dfg.blocks.values().find(|b| b.ops.contains(&me))?;
    let at = block.ops.iter().position(|&o| o == me)?;
    let mut between = 0;
    for &o in &block.ops[at + 1..] {
        if c.k.dfg.ops[o].opcode == Opcode::Dot && qualifies(c, o, v, acc) {
            return (between == 0 || registers_free(c)).then_some(o);
        }
        if !effect_free(c.k, o) {
            return None;
        }
        between += 1;
    }
    None
}

/// Whether dot `o` can be issued right after the dot whose result is `v` (the module doc's
/// second and third rules).
fn qualifies(c: &Ctx, o: Op, v: Value, acc: Option<Value>) -> bool {
    let n = &c.k.dfg.ops[o];
    let (Some(&a), Some(&b), Some(&nacc), Some(&r)) = (
        n.operands.first(),
        n.operands.get(1),
        n.operands.get(2),
        n.results.first(),
    ) else {
        return false;
    };
    if c.plan.pingpong.contains_key(&r) || n.operands.iter().any(|&x| x == v || Some(x) == acc) {
        return false;
    }
    let (ta, tb, tr) = (c.k.dfg.ty(a), c.k.dfg.ty(b), c.k.dfg.ty(r));
    let mma_place = matches!(place(c, r), Place::Reg(Layout::RowMma));
    if !mma_place || !layout::dot_uses_mma(ta, tb, tr, c.plan.blk.warps) {
        return false;
    }
    let Some(w) = crate::ptx::plan::wgmma::wgmma_dot(c.k, n, c.plan.blk, c.target) else {
        return false;
    };
    let shared = |x: Value| matches!(c.values.vals.get(&x), Some(Val::Shared { .. }));
    let acc_ready = w.zero_init || c.values.vals.contains_key(&nacc);
    w.a.is_some() && shared(a) && !w.b_in_regs && shared(b) && acc_ready
}

/// Whether op `o` neither writes memory nor synchronizes: pure ops, reads, and `if`s whose
/// regions hold only such ops (and their `yield`s).
fn effect_free(k: &Kernel, o: Op) -> bool {
    let od = &k.dfg.ops[o];
    match od.opcode {
        Opcode::If => od.regions.iter().all(|&r| region_free(k, r)),
        Opcode::For | Opcode::Yield => false,
        opc => od.regions.is_empty() && !opc.has_side_effects(),
    }
}

fn region_free(k: &Kernel, b: Block) -> bool {
    k.dfg.blocks[b]
        .ops
        .iter()
        .all(|&o| k.dfg.ops[o].opcode == Opcode::Yield || effect_free(k, o))
}

/// Whether the kernel's shared memory (what is allocated so far, a lower bound of the whole)
/// already bounds it to N blocks per SM with N · threads ≤ 256, so that a thread may use 255
/// registers at no cost in occupancy.
fn registers_free(c: &Ctx) -> bool {
    let per_sm = c.target.smem_per_block() + 1024;
    let per_block = u64::from(c.mem.smem_top) + 1024;
    let threads = u64::from(c.plan.blk.threads);
    c.mem.smem_top > 0 && threads <= 128 && (per_sm / per_block) * threads <= 256
}
