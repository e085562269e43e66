//! Row vectors kept compact in a warp-specialized consumer and spread into the accumulator
//! layout where they are used.
//!
//! A `[1, N]` f32 vector broadcast along the rows of a `RowMma` tile (attention_bwd's lse and
//! delta, whose queries are the key-major tile's columns) needs, in each thread, the N / 4
//! columns it holds: 16 registers a vector at N = 64. `row_reload.rs` loads them where the
//! broadcast stands, at the top of the dK/dV kernel's loop body, so both vectors (32 registers)
//! live across the score and dP dots beside the two accumulators; in the warp-specialized
//! five-dot kernel (240-register consumers) that made ptxas spill 92–120 bytes (d128, ptxas
//! 13.0), and without the two vectors it spilled none.
//!
//! Here, in a warp-specialized consumer, the broadcast of a 64-column vector loads it once per
//! warp instead: lane l reads columns 2l and 2l + 1 (2 registers a vector; the load's own bounds
//! and `other`, the chain applied to each), and each use of the broadcast rebuilds the thread's
//! 16 columns with one `shfl.sync.idx` each: column 2q + 8j + e of the accumulator's layout (q
//! the lane's index in its quad) lives in lane q + 4j, register e, and a segment mask of 3 makes
//! the source lane (reading lane & 3) | 4j, so the lane index is an immediate. The loads stay
//! where they were issued (their latency under the dots); the 16 values a use needs exist only
//! there. It applies where the consumer is short of registers (`short_of_registers`) and every
//! use of the broadcast is in the broadcast's own block, so the shuffles run where all the
//! warp's lanes do (a consumer's straight-line loop body). In call S3 of 2026-12-07 (an H100,
//! d128 S = 16k, two interleaved rounds, docs/benchmarks.md) the five-dot kernel's atomic mode
//! ran 497.2–498.3 TFLOP/s against 462.9–463.4 (causal 485.3–502.8 against 475.5–476.1), the
//! ordered one 458.7–458.9 against 441.6–443.2 (causal 435.6–456.7 against 404.8–420.8).

use super::ctx::{dtype, Ctx, Val};
use super::elem::{element, load_elem, offsets};
use super::row_reload::{apply_chain, vector_load};
use super::state::Compact;
use super::PtxError;
use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::{PtxInst, Reg, RegClass};
use crate::ptx::plan::layout::{rowmma_slot, rows_cols, Layout};
use kir_ir::{Dtype, Opcode, Span, Value, ValueDef};

/// `shfl.sync.idx`'s `c` operand for a source lane of (reading lane & 3) | (b & ~3): segment
/// mask 3 (bits 8–12), clamp 31 (bits 0–4).
const SEGMENT_QUAD: u32 = (3 << 8) | 31;

/// The compact form of `broadcast(src)` into `shape` (the broadcast's result `v`), loaded here,
/// when this is a warp-specialized consumer, `src` is a chain over an f32 load that
/// `row_reload.rs` would read per column, N is 64 and every use of `v` is in its block.
pub(super) fn compact(
    c: &mut Ctx,
    v: Value,
    src: Value,
    shape: &[usize],
    sp: Span,
) -> Result<Option<Compact>, PtxError> {
    let (m, n) = rows_cols(shape);
    let src_shape = c.k.dfg.ty(src).shape().unwrap_or_default();
    if c.asyncs.ws.raw_tid.is_none()
        || shape.len() != 2
        || m <= 1
        || n != 64
        || rows_cols(&src_shape) != (1, n)
        || !uses_in_own_block(c, v)
        || !short_of_registers(c, v)
    {
        return Ok(None);
    }
    let Some(vl) = vector_load(c, src) else {
        return Ok(None);
    };
    if vl.info.dtype != Dtype::F32 {
        return Ok(None);
    }
    let offs = offsets(c, vl.tensor, sp)?;
    let p = 2;
    let lane = c.b.reg(RegClass::B32);
    c.b.ins(PtxInst::new("and.b32").op(lane).op(c.thread.tid).op(31));
    let mut regs = Vec::with_capacity(p);
    for e in 0..p {
        let col = c.b.reg(RegClass::B32);
        c.b.ins(
            PtxInst::new("mad.lo.s32")
                .op(col)
                .op(lane)
                .op(p as u32)
                .op(e as u32),
        );
        let coord = if vl.rank == 2 {
            vec![c.b.imm32(0), col]
        } else {
            vec![col]
        };
        let (addr, inb) = element(c, &vl.info, &offs, &coord);
        let r = super::ctx::constant(c, Dtype::F32, vl.other);
        load_elem(c, Dtype::F32, r, addr, inb);
        regs.push(apply_chain(c, &vl.chain, r, sp)?);
    }
    let d = dtype(c, v);
    Ok(Some(Compact {
        regs,
        shape: shape.to_vec(),
        dtype: d,
    }))
}

/// The registers of a compact vector's broadcast in `RowMma`, built here by shuffles (one per
/// distinct column the thread holds; see the module doc).
pub(super) fn expand(c: &mut Ctx, cv: &Compact, sp: Span) -> Result<Val, PtxError> {
    let shape = cv.shape.clone();
    let slots = crate::ptx::plan::layout::slots(Layout::RowMma, &shape, c.plan.blk);
    let mut by_col: Vec<(usize, Reg)> = Vec::new();
    for s in 0..slots {
        let key = rowmma_slot(&shape, s).1;
        if by_col.iter().any(|(kk, _)| *kk == key) {
            continue;
        }
        // Column 2q + 8j + e lives in lane q + 4j, register e: `shfl.sync.idx` with segment
        // mask 3 takes the source lane's low two bits from the reading lane (q) and the rest
        // from the immediate 4j, so no lane index lives in a register across the loop.
        let r = c.reg(cv.dtype);
        c.b.need(Isa::SHFL_SYNC).ins(
            PtxInst::new("shfl.sync.idx.b32")
                .op(r)
                .op(cv.regs[key % 2])
                .op((key / 8 * 4) as u32)
                .op(SEGMENT_QUAD)
                .op(-1),
        );
        by_col.push((key, r));
    }
    let regs = (0..slots)
        .map(|s| {
            let key = rowmma_slot(&shape, s).1;
            by_col.iter().find(|(kk, _)| *kk == key).map(|&(_, r)| r)
        })
        .collect::<Option<Vec<Reg>>>()
        .ok_or_else(|| PtxError::at(sp, "internal: a slot without its column"))?;
    Ok(Val::Tile {
        layout: Layout::RowMma,
        shape,
        dtype: cv.dtype,
        regs,
    })
}

/// Whether every op that reads `v` sits in the block of `v`'s definition.
fn uses_in_own_block(c: &Ctx, v: Value) -> bool {
    let dfg = &c.k.dfg;
    let ValueDef::Result(def, _) = dfg.values[v].def else {
        return false;
    };
    let home = kir_ir::edit::parent_block(dfg, def);
    kir_ir::edit::users(dfg, v)
        .into_iter()
        .all(|u| kir_ir::edit::parent_block(dfg, u) == home)
}

/// Whether the consumer lacks the registers to hold its row vectors per thread: the results of
/// the dots in the block of `v`'s broadcast (not those under a branch of it) and N / 4 registers
/// for each `[1, N]` vector broadcast there into a 2-D tile exceed the consumer's budget
/// (`setmaxnreg`). attention_bwd d128's five-dot kernel: 224 + 32 > 240; d256's dK/dV kernel,
/// whose consumers' dk and dv dots sit under the branch of their role: 32 + 32, so it keeps the
/// per-thread pairs, which ran 3–7 % faster there than the shuffles (call S3 of 2026-12-07:
/// 388.7–393.0 TFLOP/s against 367.3–377.5).
fn short_of_registers(c: &Ctx, v: Value) -> bool {
    let dfg = &c.k.dfg;
    let ValueDef::Result(def, _) = dfg.values[v].def else {
        return false;
    };
    let Some((_, ws)) = crate::ptx::plan::roles::ws_op(c.k) else {
        return false;
    };
    let threads = c.plan.blk.threads.max(1) as usize;
    let home = kir_ir::edit::parent_block(dfg, def);
    let mut regs = 0usize;
    for &o in &dfg.blocks[home].ops {
        let od = &dfg.ops[o];
        let shape = |x: Value| dfg.ty(x).shape().unwrap_or_default();
        match od.opcode {
            Opcode::Dot | Opcode::DotAsync => {
                regs += od
                    .results
                    .first()
                    .map_or(0, |&r| shape(r).iter().product::<usize>())
                    / threads;
            }
            Opcode::Broadcast => {
                let (Some(&a), Some(&r)) = (od.operands.first(), od.results.first()) else {
                    continue;
                };
                let (src, dst) = (rows_cols(&shape(a)), rows_cols(&shape(r)));
                if src.0 == 1 && dst.0 > 1 && shape(r).len() == 2 {
                    regs += dst.1 / 4;
                }
            }
            _ => {}
        }
    }
    regs > ws.consumer_regs as usize
}
