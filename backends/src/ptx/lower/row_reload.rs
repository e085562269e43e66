//! Row vectors broadcast into accumulator tiles, loaded where they are used.
//!
//! A `[1, N]` tile broadcast along the rows of an `[M, N]` tile in the mma accumulator layout
//! (`RowMma`) needs, in each thread, the values of the N / 4 columns that thread holds. The
//! vector itself is loaded in the `Blocked` layout (spread over the block's threads), so the
//! general conversion goes through shared memory: a store, a block barrier, a load per slot and
//! another barrier before the buffer is reused. attention_bwd's key-major dK/dV kernel does
//! that twice per query block (lse and delta, whose queries are the accumulator's columns), four
//! block barriers per step (call Y12, docs/benchmarks.md).
//!
//! When the broadcast's operand is a chain of `reshape`s and elementwise ops with scalar
//! operands over a `load` of an `in` tensor (read-only for the whole launch, so reading it again
//! later sees the same values) with no `mask`, each thread instead loads the columns it holds
//! straight from global memory (the load's own bounds and `other`, by `elem::element`), applies
//! the chain to each, and deals them to its slots: no shared memory and no barrier. The vector is
//! small and every warp reads the same bytes, so the loads hit in L1. An f32 vector whose
//! columns all lie inside the tensor, row 8-byte aligned, is read as pairs of columns (one
//! `ld.global.v2.f32` per pair, at constant offsets) behind one run-time test (see `reload`).
//! A 16-bit vector in a warp-specialized kernel keeps the general conversion (its consumer has
//! no registers to spare for the per-column loads).

use super::arith::scalar_op;
use super::ctx::{constant, dtype, Ctx, TensorInfo, Val};
use super::elem::{element, load_elem, offsets};
use super::PtxError;
use crate::ptx::emit::{PtxInst, Reg, RegClass};
use crate::ptx::plan::layout::{rowmma_slot, rows_cols, Layout};
use kir_ir::{Access, OpData, Opcode, ParamKind, Span, Value, ValueDef};

/// The registers of `broadcast(src)` as an `[M, N]` tile of `shape` in `RowMma`, loaded per
/// column as the module doc says; `None` when `src` is not such a chain.
pub(super) fn reload(
    c: &mut Ctx,
    src: Value,
    shape: &[usize],
    sp: Span,
) -> Result<Option<Vec<Reg>>, PtxError> {
    let (m, n) = rows_cols(shape);
    let src_shape = c.k.dfg.ty(src).shape().unwrap_or_default();
    if shape.len() != 2 || m <= 1 || n % 8 != 0 || rows_cols(&src_shape) != (1, n) {
        return Ok(None);
    }
    let Some(VectorLoad {
        chain,
        tensor: t,
        info,
        other,
        rank: load_rank,
    }) = vector_load(c, src)
    else {
        return Ok(None);
    };
    let d = info.dtype;
    // A 16-bit vector in a warp-specialized consumer (a GEMM's bias) takes the general
    // conversion through shared memory: reloaded per column beside a 128×256 tile's
    // accumulator at the consumer's 232 registers it made ptxas spill 164–216 bytes, and the
    // conversion ran 7.8 % faster at 4096³ and 12 % at 8192³ (call D3, docs/benchmarks.md).
    if matches!(d, kir_ir::Dtype::F16 | kir_ir::Dtype::Bf16) && c.asyncs.ws.raw_tid.is_some() {
        return Ok(None);
    }
    let offs = offsets(c, t, sp)?;
    let coords = c.coords(Layout::RowMma, shape);
    // The thread's distinct columns (slot column offset, column register), in slot order.
    let mut cols: Vec<(usize, Reg)> = Vec::new();
    for (s, sc) in coords.iter().enumerate() {
        let key = rowmma_slot(shape, s).1;
        if !cols.iter().any(|(kk, _)| *kk == key) {
            cols.push((key, sc.idx[1]));
        }
    }
    let coord_of = |c: &mut Ctx, col: Reg| {
        if load_rank == 2 {
            vec![c.b.imm32(0), col]
        } else {
            vec![col]
        }
    };
    // The columns come in pairs (2q + 8j, 2q + 8j + 1): an f32 vector with a unit innermost
    // stride whose n columns lie inside the tensor and whose row starts 8-byte aligned is read
    // as n / 8 pair loads at constant offsets from one address; any other launch takes the
    // per-column loads with their bounds. The pair loads made d64 12 % and d128 at 1k queries
    // 7 % faster unspecialized, and the warp-specialized d256 dK/dV kernel (a 4-warp consumer
    // at 256 registers) 2 % faster (call L3 of 2026-12-07, docs/benchmarks.md; at a 240-register
    // budget they had cost it 3 %).
    let pairs = d == kir_ir::Dtype::F32
        && info.contiguous_last
        && cols
            .iter()
            .enumerate()
            .all(|(i, &(kk, _))| kk == 8 * (i / 2) + i % 2);
    let mut by_col: Vec<(usize, Reg)> = Vec::with_capacity(cols.len());
    if pairs {
        let raw: Vec<Reg> = cols.iter().map(|_| c.reg(d)).collect();
        let (done, slow) = (c.b.label("row_reload_done"), c.b.label("row_reload_cols"));
        let rank = offs.len();
        let first = coord_of(c, cols[0].1);
        let (addr, inb) = element(c, &info, &offs, &first);
        let (end, p) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::Pred));
        c.b.ins(
            PtxInst::new("add.s32")
                .op(end)
                .op(offs[rank - 1])
                .op(n as u32),
        );
        c.b.ins(
            PtxInst::new("setp.le.u32")
                .op(p)
                .op(end)
                .op(info.dims[rank - 1]),
        );
        c.b.ins(PtxInst::new("and.pred").op(p).op(p).op(inb));
        c.and_aligned(p, addr, 8);
        c.b.ins_if(p, true, PtxInst::new("bra").op(&slow));
        for (j, pair) in raw.chunks(2).enumerate() {
            c.b.ins(
                PtxInst::new("ld.global.v2.f32")
                    .vec([pair[0], pair[1]])
                    .addr_off(addr, 32 * j),
            );
        }
        c.b.ins(PtxInst::new("bra.uni").op(&done));
        c.b.place(&slow);
        for (&(_, col), &r) in cols.iter().zip(&raw) {
            let coord = coord_of(c, col);
            let (addr, inb) = element(c, &info, &offs, &coord);
            let o = constant(c, d, other);
            c.b.ins(PtxInst::new("mov.b32").op(r).op(o));
            load_elem(c, d, r, addr, inb);
        }
        c.b.place(&done);
        for (&(key, _), &r) in cols.iter().zip(&raw) {
            by_col.push((key, apply_chain(c, &chain, r, sp)?));
        }
    } else {
        for &(key, col) in &cols {
            let coord = coord_of(c, col);
            let (addr, inb) = element(c, &info, &offs, &coord);
            let r = constant(c, d, other);
            load_elem(c, d, r, addr, inb);
            by_col.push((key, apply_chain(c, &chain, r, sp)?));
        }
    }
    let regs = (0..coords.len())
        .map(|s| {
            let key = rowmma_slot(shape, s).1;
            by_col.iter().find(|(kk, _)| *kk == key).map(|&(_, r)| r)
        })
        .collect::<Option<Vec<Reg>>>()
        .ok_or_else(|| PtxError::at(sp, "internal: a slot without its column"))?;
    Ok(Some(regs))
}

/// A row vector's `load` resolved for per-column reads: the chain from the load to the vector,
/// the load's tensor reference and tensor, its `other` and the rank of the tile it loads.
pub(super) struct VectorLoad<'k> {
    pub(super) chain: Vec<kir_ir::Op>,
    pub(super) tensor: &'k kir_ir::TensorRef,
    pub(super) info: TensorInfo,
    pub(super) other: f64,
    pub(super) rank: usize,
}

/// The load at the root of `src`'s chain (`chain_of`), resolved; `None` when there is none or
/// its tensor is not a kernel param.
pub(super) fn vector_load<'k>(c: &Ctx<'k>, src: Value) -> Option<VectorLoad<'k>> {
    let (load, chain) = chain_of(c, src)?;
    let k = c.k;
    let lop = &k.dfg.ops[load];
    let tensor = lop.tensor.as_ref()?;
    let info = c.params.tensors.get(&tensor.param).cloned()?;
    let other = crate::ptx::plan::ir::lit(lop.attr("other")).unwrap_or(0.0);
    let rank = k
        .dfg
        .ty(lop.results[0])
        .shape()
        .map(|s| s.len())
        .unwrap_or(0);
    Some(VectorLoad {
        chain,
        tensor,
        info,
        other,
        rank,
    })
}

/// The `load` at the root of `v`'s chain and the chain's ops from the load's user up to `v`'s
/// definition, when every link is a `reshape` or an elementwise op whose other operands are
/// scalars, and the load reads an `in` tensor with no `mask`.
pub(super) fn chain_of(c: &Ctx, v: Value) -> Option<(kir_ir::Op, Vec<kir_ir::Op>)> {
    let k = c.k;
    let mut chain = Vec::new();
    let mut cur = v;
    for _ in 0..8 {
        let ValueDef::Result(o, _) = k.dfg.values[cur].def else {
            return None;
        };
        let od = &k.dfg.ops[o];
        match od.opcode {
            Opcode::Load => {
                let t = od.tensor.as_ref()?;
                let read_only = k
                    .param(&t.param)
                    .is_some_and(|p| matches!(p.kind, ParamKind::Tensor(Access::In, _)));
                if !read_only || od.attr("mask").is_some() {
                    return None;
                }
                chain.reverse();
                return Some((o, chain));
            }
            Opcode::Reshape => {}
            kir_ir::elementwise_ops!() => {
                let tiles = od
                    .operands
                    .iter()
                    .filter(|&&a| !k.dfg.ty(a).is_scalar())
                    .count();
                if tiles != 1 || od.results.len() != 1 {
                    return None;
                }
            }
            _ => return None,
        }
        chain.push(o);
        cur = *od.operands.iter().find(|&&a| !k.dfg.ty(a).is_scalar())?;
    }
    None
}

/// The chain's ops, in order, on the element in `x`.
pub(super) fn apply_chain(
    c: &mut Ctx,
    chain: &[kir_ir::Op],
    x: Reg,
    sp: Span,
) -> Result<Reg, PtxError> {
    let mut r = x;
    for &o in chain {
        r = apply(c, &c.k.dfg.ops[o], r, sp)?;
    }
    Ok(r)
}

/// One link of the chain on the element in `x`.
fn apply(c: &mut Ctx, od: &OpData, x: Reg, sp: Span) -> Result<Reg, PtxError> {
    if od.opcode == Opcode::Reshape {
        return Ok(x);
    }
    let mut args = Vec::with_capacity(od.operands.len());
    for &a in &od.operands {
        if c.k.dfg.ty(a).is_scalar() {
            match c.val(a, sp)? {
                Val::Scalar(r) => args.push(r),
                _ => return Err(PtxError::at(sp, "internal: a scalar operand")),
            }
        } else {
            args.push(x);
        }
    }
    let operand = od
        .operands
        .first()
        .map(|&a| dtype(c, a))
        .unwrap_or(kir_ir::Dtype::F32);
    let result = dtype(c, od.results[0]);
    scalar_op(c, od, operand, result, &args)
}
