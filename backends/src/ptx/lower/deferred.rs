//! Deferred conversions of 16-bit loads. A blocked vector load of an f16 or bf16 tile lands in
//! packed 32-bit words (both of its paths, vector and element by element, meet there), and the
//! tile's f32 registers come from unpacking and converting those words. Emitted right after the
//! load, the conversion waits for the load's data at once, so a warp has one load in flight at
//! a time. Deferred, the conversion is emitted before the first op that reads the loaded value,
//! so the loads before it (x and dy of a row, or the next row's tiles carried by a loop) are in
//! flight together.
//!
//! The rule, applied before every op the dispatcher lowers: a `load` flushes nothing; an op
//! that only reads its operands' registers (elementwise, shape ops, constants, params, program
//! ids) flushes the pending conversions of its operands; every other op (stores, control flow,
//! dots, scheduling, `print`) flushes everything, and so does the end of every block (a
//! `yield`'s values are read when the block ends). Kernels with `warp_specialize`, whose
//! partitions are lowered out of program order, never defer.

use super::ctx::Ctx;
use crate::ptx::emit::PtxInst;
use kir_ir::{OpData, Opcode, Value};

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
    } else {
        flush_all(c);
    }
}

/// Emits every pending conversion (the end of a block).
pub(super) fn flush_all(c: &mut Ctx) {
    flush_where(c, |_| true);
}

fn flush_where(c: &mut Ctx, pick: impl Fn(Value) -> bool) {
    let pending = std::mem::take(&mut c.values.pending);
    let mut keep = Vec::with_capacity(pending.len());
    for (v, insts) in pending {
        if pick(v) {
            for i in insts {
                c.b.ins(i);
            }
        } else {
            keep.push((v, insts));
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
            c.values.pending.push((v, insts));
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
