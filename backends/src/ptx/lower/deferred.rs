//! Deferred conversions of 16-bit loads. A blocked vector load of an f16 or bf16 tile lands in
//! packed 32-bit words (both of its paths, vector and element by element, meet there), and the
//! tile's f32 registers come from unpacking and converting those words. Emitted right after the
//! load, the conversion waits for the load's data at once, so a warp has one load in flight at
//! a time. Deferred, the conversion is emitted before the first op that reads the loaded value,
//! so the loads before it (x and dy of a row, or the next row's tiles carried by a loop) are in
//! flight together.
//!
//! The rule, applied before every op the dispatcher lowers: a `load` flushes nothing; a
//! widening `cast` to f32 or a `Blocked` `reshape` of a pending tile is a view of its registers
//! and waits with it ([`alias`]); an op that only reads its operands' registers (elementwise,
//! shape ops, constants, params, program ids) flushes the pending conversions of its operands;
//! a loop without dots flushes its operands and the tiles viewed before it, and leaves the
//! others pending into its body; every other op (stores, other control flow, dots, scheduling,
//! `print`) flushes everything. The end of a block flushes its own loads and what its `yield`
//! reads.
//!
//! Conversions are scoped to blocks: one pending from an enclosing block and flushed inside a
//! nested block (a dot-free loop's body, say) is emitted there, once per block, and stays
//! pending outside, so the packed words are what lives across the loop and a reader after the
//! loop (which may have run no times) converts again. Kernels with `warp_specialize`, whose
//! partitions are lowered out of program order, never defer.

use super::ctx::{Ctx, Val};
use super::state::Pending;
use crate::ptx::emit::PtxInst;
use crate::ptx::plan::layout::{Layout, Place};
use kir_ir::{Block, Dtype, OpData, Opcode, Value};

/// Whether `op` reads registers of its operands only (so only their conversions must be done).
fn reads_operands_only(op: &OpData) -> bool {
    matches!(
        op.opcode,
        kir_ir::elementwise_ops!()
            | Opcode::Iota
            | Opcode::Splat
            | Opcode::Broadcast
            | Opcode::Reshape
            | Opcode::Transpose
            | Opcode::Reduce
            | Opcode::Const
            | Opcode::Dim
            | Opcode::Param
            | Opcode::ProgramId
            | Opcode::NumPrograms
    )
}

/// Emits the pending conversions `op` needs before it is lowered (module doc).
pub(super) fn before(c: &mut Ctx, op: &OpData) {
    if c.values.pending.is_empty() || op.opcode == Opcode::Load {
        return;
    }
    if reads_operands_only(op) {
        let wanted: Vec<Value> = op.operands.clone();
        flush_where(c, |v| wanted.contains(&v));
    } else if op.opcode == Opcode::For && !op.regions.iter().any(|&r| has_dot(c, r)) {
        // A dot-free loop: a tile loaded before it and first read inside is converted there,
        // in each iteration, so only its packed words live across the loop. One cast or
        // reshaped before the loop is converted before it, where the kernel asked for it.
        let wanted: Vec<Value> = op.operands.clone();
        let viewed: Vec<Value> = c
            .values
            .pending
            .iter()
            .filter(|p| !p.aliases.is_empty())
            .map(|p| p.value)
            .collect();
        flush_where(c, |v| wanted.contains(&v) || viewed.contains(&v));
    } else {
        flush_all(c);
    }
}

/// Whether block `b` or a block nested in it holds a dot (of any kind) or a scheduled op.
fn has_dot(c: &Ctx, b: Block) -> bool {
    let dfg = &c.k.dfg;
    dfg.blocks[b].ops.iter().any(|&o| {
        let op = &dfg.ops[o];
        matches!(
            op.opcode,
            Opcode::Dot | Opcode::DotAsync | Opcode::DotWait | kir_ir::schedule_ops!()
        ) || op.regions.iter().any(|&r| has_dot(c, r))
    })
}

/// Emits every pending conversion (before an op that may read any register).
pub(super) fn flush_all(c: &mut Ctx) {
    flush_where(c, |_| true);
}

/// Lowers `op` as a view of a pending tile's registers when it is one: a cast of an f16 or
/// bf16 tile to f32 (the registers already hold the f32 values) or a reshape between `Blocked`
/// tiles (the same registers in the same order). The result joins the pending conversion, so
/// the conversion still waits for the first real reader (possibly inside a loop). Returns
/// whether `op` was lowered so.
pub(super) fn alias(c: &mut Ctx, op: &OpData) -> bool {
    let (Some(&a), Some(&r)) = (op.operands.first(), op.results.first()) else {
        return false;
    };
    let Some(i) = c
        .values
        .pending
        .iter()
        .position(|p| p.value == a || p.aliases.iter().any(|&(v, _)| v == a))
    else {
        return false;
    };
    let Some(Val::Tile {
        layout,
        dtype,
        regs,
        ..
    }) = c.values.vals.get(&a)
    else {
        return false;
    };
    let (layout, dtype, regs) = (*layout, *dtype, regs.clone());
    let Some(shape) = c.k.dfg.ty(r).shape() else {
        return false;
    };
    let same_place = matches!(c.plan.places.get(&r), Some(Place::Reg(l)) if *l == layout);
    let to = c.k.dfg.ty(r).dtype();
    let view = match op.opcode {
        Opcode::Cast => {
            matches!(dtype, Dtype::F16 | Dtype::Bf16) && to == Some(Dtype::F32) && same_place
        }
        Opcode::Reshape => layout == Layout::Blocked && same_place && to == Some(dtype),
        _ => false,
    };
    if !view {
        return false;
    }
    let dtype = to.unwrap_or(dtype);
    c.values.vals.insert(
        r,
        Val::Tile {
            layout,
            shape,
            dtype,
            regs,
        },
    );
    let depth = c.values.depth;
    c.values.pending[i].aliases.push((r, depth));
    true
}

/// Enters a block: the conversions pending so far belong to enclosing blocks.
pub(super) fn enter_block(c: &mut Ctx) {
    c.values.depth += 1;
}

/// Leaves a block whose final `yield` reads `yielded`: the conversions of its own loads and of
/// the yielded values are emitted; what an enclosing block's conversions emitted here filled
/// no longer counts once the block ends (a loop's body may run no times).
pub(super) fn leave_block(c: &mut Ctx, yielded: &[Value]) {
    let depth = c.values.depth;
    let own: Vec<Value> = c
        .values
        .pending
        .iter()
        .filter(|p| p.depth >= depth)
        .flat_map(|p| std::iter::once(p.value).chain(p.aliases.iter().map(|&(v, _)| v)))
        .collect();
    flush_where(c, |v| own.contains(&v) || yielded.contains(&v));
    c.values.emitted_inner.retain(|&(_, d)| d < depth);
    // Views made in this block are out of scope after it: a later loop still sees the tile as
    // loaded, not as cast before it.
    for p in &mut c.values.pending {
        p.aliases.retain(|&(_, d)| d < depth);
    }
    c.values.depth -= 1;
}

/// Emits the pending conversions of the values `pick` selects. A conversion of a load in this
/// block is emitted once and done; one of an enclosing block's load is emitted here (once per
/// block) and stays pending there, so a dot-free loop body converts a 16-bit value from
/// outside at its use in each iteration and the packed words, half the registers, are what
/// lives across the loop.
fn flush_where(c: &mut Ctx, pick: impl Fn(Value) -> bool) {
    let depth = c.values.depth;
    let pending = std::mem::take(&mut c.values.pending);
    let mut keep = Vec::with_capacity(pending.len());
    for p in pending {
        if !pick(p.value) && !p.aliases.iter().any(|&(a, _)| pick(a)) {
            keep.push(p);
        } else if p.depth >= depth {
            for i in p.insts {
                c.b.ins(i);
            }
        } else {
            if !c.values.emitted_inner.iter().any(|&(v, _)| v == p.value) {
                for i in &p.insts {
                    c.b.ins(i.clone());
                }
                c.values.emitted_inner.push((p.value, depth));
            }
            keep.push(p);
        }
    }
    c.values.pending = keep;
}

/// Starts deferring the conversions of the load being lowered (when the kernel allows it).
pub(super) fn start(c: &mut Ctx) {
    if c.values.defer_on {
        c.values.defer = Some(Vec::new());
    }
}

/// Ends the load of `v`: its conversions, if any were deferred, wait for their first reader.
pub(super) fn finish(c: &mut Ctx, v: Value) {
    if let Some(insts) = c.values.defer.take() {
        if !insts.is_empty() {
            let depth = c.values.depth;
            c.values.pending.push(Pending {
                value: v,
                insts,
                depth,
                aliases: Vec::new(),
            });
        }
    }
}

/// Emits `inst` now, or keeps it with the load being lowered when deferral is on.
pub(super) fn emit(c: &mut Ctx, inst: PtxInst) {
    match c.values.defer.as_mut() {
        Some(d) => d.push(inst),
        None => c.b.ins(inst),
    }
}
