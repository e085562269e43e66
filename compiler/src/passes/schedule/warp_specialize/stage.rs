//! `warp_specialize`: the producer also fills the tile operands that the consumer loads before
//! its ring loops and that only the loops' dots read (attention's query block `q`).
//!
//! Without this the consumer copies such a tile itself before its first iteration, and on a
//! persistent grid it does so again at every tile, after the previous tile's epilogue, while
//! the tensor cores wait. Here each qualifying `%x = load t[…] : tile<R x C x e>` of the block
//! that holds `warp_specialize` (the kernel body, or a persistent kernel's tile loop body before
//! `persist::hoist`) becomes a buffer of S stages (one, or two on a persistent grid:
//! below) with its own barrier pair:
//! - `%buf = smem_alloc : smem<S x R x C x e>` at the top of the kernel body,
//!   `%xf = mbar_alloc arrivals 1 : mbar<S>` and `%xe = mbar_alloc arrivals N : mbar<S>`
//!   (N consumers) before `warp_specialize`;
//! - the producer starts with `mbar_wait %xe, s, n xor 1`, `mbar_arrive %xf, s tx R·C·size(e)`
//!   and `async_copy t[…], %buf, s bar %xf` (the load's own indices and `other`);
//! - the consumer starts with `mbar_wait %xf, s, n` and `%x = smem_read %buf, s`, and after its
//!   last top-level op that reads `%x` releases the stage: `smem_release %buf, s` and
//!   `mbar_arrive %xe, s`.
//!
//! In a kernel that runs once the buffer has one stage and the fill parity n is 0. In a
//! persistent kernel fill i is the tile's ordinal `(tile − first) div step`, its stage `i mod S`
//! and its parity `(i div S) mod 2`, so it waits for the release of fill i − S. S is 2 when the
//! kernel's buffers then fit the shared-memory budget: the producer issues the next tile's copy
//! (and so that tile's ring fills) while the consumer still runs this tile's loops (given the
//! registers for the stage's address: `SECOND_STAGE_REGS`); with S = 1 it
//! waits for the end of those loops, and the copy runs under the epilogue.
//!
//! A load qualifies when it is a copy a tensor copy makes exactly (the TMA rules of
//! `pipelining::tma`, with no `mask`), its indices come from pure ops the producer can compute,
//! and every user is a `dot` nested in the consumer's loops. The result is the same bit for bit:
//! the copy fills the buffer with the loaded values (+0 outside the tensor, as `other 0.0`).

use super::types::WsPlan;
use crate::passes::schedule::pipelining::alloc;
use crate::passes::schedule::pipelining::tma::tensor_copy_ok;
use kir_ir::edit::{self, iconst, op2, simple};
use kir_ir::{Attr, Block, Dtype, Expr, Kernel, Offset, Op, Opcode, Type, Value, ValueDef};

/// A persistent kernel's tile loop, for the fill parity: its induction variable, first tile
/// and step.
pub(super) struct TileLoop {
    pub iv: Value,
    pub lo: Value,
    pub step: Value,
}

/// Shared memory the PTX backend keeps beside the IR's buffers (barriers, row counts).
const BACKEND_RESERVE: u64 = 1024;

/// The consumer registers per thread a second stage needs. Measured on the H200
/// (docs/benchmarks.md, call L3): at 232 registers (128×128 tiles) the second stage made the
/// persistent kernel 4–8 % faster; at 160 (192×128 on three warpgroups) the stage's address,
/// live across the ring loops, made ptxas spill in the loop and the kernel 3–5 % slower.
const SECOND_STAGE_REGS: u32 = 200;

/// Moves every qualifying load of `body` (the block holding `warp_specialize`) into the
/// producer, as the module doc describes, for `plan`'s consumers; on a persistent grid a buffer
/// gets two stages when the kernel's buffers then stay within `smem_budget` bytes and the
/// consumer has at least `SECOND_STAGE_REGS` registers per thread.
pub(super) fn stage_operands(
    k: &mut Kernel,
    body: Block,
    plan: &WsPlan,
    tile: Option<TileLoop>,
    smem_budget: u64,
) {
    let (consumers, consumer_regs) = (plan.consumers, plan.consumer_regs);
    let Some(ws) = k.dfg.blocks[body]
        .ops
        .iter()
        .copied()
        .find(|&o| k.dfg.ops[o].opcode == Opcode::WarpSpecialize)
    else {
        return;
    };
    let at = k.dfg.blocks[body].ops.iter().position(|&o| o == ws);
    let before: Vec<Op> = k.dfg.blocks[body].ops[..at.unwrap_or(0)].to_vec();
    let cands: Vec<Op> = before
        .into_iter()
        .filter(|&o| qualifies(k, body, o))
        .collect();
    if cands.is_empty() {
        return;
    }
    // The fill's ordinal n, stage and parity, computed before `warp_specialize` from pure ops
    // (a persistent kernel's producer clones them, its consumer moves them).
    let scratch = k.dfg.new_block();
    let ordinal = tile.as_ref().map(|t| {
        let d = op2(k, scratch, Opcode::Sub, None, t.iv, t.lo, Dtype::I32);
        op2(k, scratch, Opcode::Div, None, d, t.step, Dtype::I32)
    });
    let stage_parity = |k: &mut Kernel, stages: usize| match ordinal {
        None => (iconst(k, scratch, 0), iconst(k, scratch, 0)),
        Some(n) => {
            let sv = iconst(k, scratch, stages as i64);
            let two = iconst(k, scratch, 2);
            let s = op2(k, scratch, Opcode::Rem, None, n, sv, Dtype::I32);
            let r = op2(k, scratch, Opcode::Div, None, n, sv, Dtype::I32);
            (s, op2(k, scratch, Opcode::Rem, None, r, two, Dtype::I32))
        }
    };
    let (prod, cons) = (k.dfg.ops[ws].regions[0], k.dfg.ops[ws].regions[1]);
    let mut prod_ops = vec![];
    let mut cons_head = vec![];
    for o in cands {
        let od = k.dfg.ops[o].clone();
        let x = od.results[0];
        let ty = k.dfg.ty(x).clone();
        let (Type::Tile(dims, elem), Some(dt)) = (&ty, ty.dtype()) else {
            continue;
        };
        let bytes = ty.shape().map_or(0, |s| s.iter().product::<usize>()) * dt.size_bytes();
        // The buffer, after the kernel's other stage buffers: a second stage on a persistent
        // grid (the next tile's copy then need not wait for this tile's ring loops) if it fits.
        let fits = kir_ir::verifier::rules_sched::kernel_smem_bytes(k)
            + 2 * bytes as u64
            + BACKEND_RESERVE
            <= smem_budget;
        let stages = if ordinal.is_some() && fits && consumer_regs >= SECOND_STAGE_REGS {
            2
        } else {
            1
        };
        let (stage, parity) = stage_parity(k, stages);
        let one = iconst(k, scratch, 1);
        let flipped = op2(k, scratch, Opcode::Xor, None, parity, one, Dtype::I32);
        let buf = alloc(k, dims, elem, stages);
        let full = mbar(k, scratch, 1, stages);
        let empty = mbar(k, scratch, consumers as i64, stages);
        // Producer: wait for the previous fill's release, expect the bytes, copy.
        let p = k.dfg.new_block();
        k.dfg.append_op(
            p,
            simple(Opcode::MbarWait, vec![empty, stage, flipped], None),
            vec![],
        );
        let mut arrive = simple(Opcode::MbarArrive, vec![full, stage], None);
        arrive.attrs = vec![("tx".into(), Attr::Expr(Expr::int(bytes as i64)))];
        k.dfg.append_op(p, arrive, vec![]);
        let mut copy = simple(Opcode::AsyncCopy, vec![buf, stage], None);
        copy.tensor = od.tensor.clone();
        copy.span = od.span;
        // The load's `other` (absent or +0: `tensor_copy_ok`), then the barrier.
        copy.attrs = od
            .attrs
            .iter()
            .filter(|(key, _)| key == "other")
            .cloned()
            .chain([("bar".to_string(), Attr::Value(full))])
            .collect();
        k.dfg.append_op(p, copy, vec![]);
        prod_ops.extend(std::mem::take(&mut k.dfg.blocks[p].ops));
        // Consumer: wait for the fill and read the stage in place of the load.
        let c = k.dfg.new_block();
        k.dfg.append_op(
            c,
            simple(Opcode::MbarWait, vec![full, stage, parity], None),
            vec![],
        );
        let mut read = simple(Opcode::SmemRead, vec![buf, stage], None);
        read.span = od.span;
        let name = k.dfg.values[x].name.clone();
        let id = k.dfg.append_op(c, read, vec![(ty.clone(), name)]);
        let staged = k.dfg.ops[id].results[0];
        cons_head.extend(std::mem::take(&mut k.dfg.blocks[c].ops));
        edit::replace_uses(&mut k.dfg, x, staged, None);
        k.dfg.blocks[body].ops.retain(|&b| b != o);
        // The release computes its stage again from the tile, so no stage index stays live
        // across the consumer's ring loops.
        let rel = k.dfg.new_block();
        let rel_stage = match (&tile, stages) {
            (Some(t), 2) => {
                let d = op2(k, rel, Opcode::Sub, None, t.iv, t.lo, Dtype::I32);
                let n = op2(k, rel, Opcode::Div, None, d, t.step, Dtype::I32);
                let sv = iconst(k, rel, 2);
                op2(k, rel, Opcode::Rem, None, n, sv, Dtype::I32)
            }
            _ => iconst(k, rel, 0),
        };
        release_after_last_use(k, cons, rel, buf, empty, rel_stage, staged);
    }
    // The parity and barrier ops go just before `warp_specialize`.
    kir_ir::edit::splice_ops(&mut k.dfg, body, ws, scratch, false);
    k.dfg.blocks[prod].ops.splice(0..0, prod_ops);
    k.dfg.blocks[cons].ops.splice(0..0, cons_head);
}

/// Appends `mbar_alloc arrivals n : mbar<stages>` to `b`; returns the barriers.
pub(super) fn mbar(k: &mut Kernel, b: Block, n: i64, stages: usize) -> Value {
    let mut op = simple(Opcode::MbarAlloc, vec![], None);
    op.attrs = vec![("arrivals".into(), Attr::Expr(Expr::int(n)))];
    let id = k
        .dfg
        .append_op(b, op, vec![(Type::Mbar(Expr::int(stages as i64)), None)]);
    k.dfg.ops[id].results[0]
}

/// Appends `smem_release %buf, %stage` and `mbar_arrive %empty, %stage` to block `b` (which
/// computes `stage`) and moves its ops after the last top-level op of `cons` that reads `x` at
/// any depth.
fn release_after_last_use(
    k: &mut Kernel,
    cons: Block,
    b: Block,
    buf: Value,
    empty: Value,
    stage: Value,
    x: Value,
) {
    let ops = k.dfg.blocks[cons].ops.clone();
    let Some(last) = ops.iter().rposition(|&o| edit::reads_deep(&k.dfg, o, x)) else {
        return;
    };
    k.dfg.append_op(
        b,
        simple(Opcode::SmemRelease, vec![buf, stage], None),
        vec![],
    );
    k.dfg.append_op(
        b,
        simple(Opcode::MbarArrive, vec![empty, stage], None),
        vec![],
    );
    let rel = std::mem::take(&mut k.dfg.blocks[b].ops);
    k.dfg.blocks[cons].ops.splice(last + 1..last + 1, rel);
}

/// Whether op `o` of `body` is a load the producer can take over (see the module doc).
fn qualifies(k: &Kernel, body: Block, o: Op) -> bool {
    let od = &k.dfg.ops[o];
    if od.opcode != Opcode::Load || od.results.len() != 1 || od.attr("mask").is_some() {
        return false;
    }
    let x = od.results[0];
    if !matches!(k.dfg.ty(x), Type::Tile(..)) || !tensor_copy_ok(k, od, k.dfg.ty(x), |_| false) {
        return false;
    }
    let indices_ok = od.tensor.as_ref().is_some_and(|t| {
        t.offsets.iter().all(|off| match off {
            Offset::Value(v) => pure_root(k, *v, 0),
            _ => true,
        })
    });
    let users = edit::users(&k.dfg, x);
    indices_ok
        && !users.is_empty()
        && users.iter().all(|&u| {
            k.dfg.ops[u].opcode == Opcode::Dot && {
                let pb = edit::parent_block(&k.dfg, u);
                pb != body && pb != k.body
            }
        })
}

/// Whether `v` is computed from block arguments by pure ops without regions only.
fn pure_root(k: &Kernel, v: Value, depth: usize) -> bool {
    match k.dfg.values[v].def {
        ValueDef::Arg(..) => true,
        ValueDef::Result(o, _) => {
            let od = &k.dfg.ops[o];
            depth < 64
                && od.regions.is_empty()
                && edit::is_pure(k, od)
                && od.opcode != Opcode::Load
                && od.uses().iter().all(|&u| pure_root(k, u, depth + 1))
        }
    }
}
