//! Global memory (load, store, atomic_add with predication for bounds, masks and `guard`) and
//! the loading of dot operands straight into shared memory. An `atomic_add` right after a
//! `sem_wait` makes that wait's spin (semaphore.rs).
//!
//! GPU code never touches memory out of bounds: an element outside the tensor reads `other`
//! (or 0 when the op has no `other`) and is skipped by stores. The interpreter reports such
//! unguarded accesses as errors; on the GPU they are suppressed, never undefined.

use super::convert::slot_live;
use super::ctx::round;
use super::ctx::{smem_bytes, Ctx, SlotCoord, TensorInfo, Val};
use super::elem::{and_pred, element, gty, load_elem, offsets, store_bits};
use super::values::regs_in;
use super::vector::{blocked_vec_access, cp_async_tile, vec_ok, vector_alignment_ok, Access};
use super::PtxError;
use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::{PtxInst, Reg, RegClass};
use crate::ptx::plan::ir::lit;
use crate::ptx::plan::layout::{Layout, Place};
use kir_ir::{Attr, Dtype, OpData, Opcode, Span, TensorRef};

/// The predicate of a store or atomic of a tile whose `mask` is one scalar i1.
fn scalar_mask_of_tile_write(c: &mut Ctx, op: &OpData) -> Result<Option<Reg>, PtxError> {
    let (Opcode::Store | Opcode::AtomicAdd, Some(Attr::Value(m)), Some(&src)) =
        (op.opcode, op.attr("mask"), op.operands.first())
    else {
        return Ok(None);
    };
    if !c.k.dfg.ty(*m).is_scalar() || c.k.dfg.ty(src).is_scalar() {
        return Ok(None);
    }
    match c.val(*m, op.span)? {
        Val::Scalar(r) => Ok(Some(r)),
        _ => Ok(None),
    }
}

fn mask_regs(
    c: &mut Ctx,
    op: &OpData,
    layout: Option<Layout>,
    shape: &[usize],
) -> Result<Option<Vec<Reg>>, PtxError> {
    match op.attr("mask") {
        Some(Attr::Value(m)) => Ok(Some(match layout {
            Some(l) => regs_in(c, *m, l, shape, op.span)?,
            None => match c.val(*m, op.span)? {
                Val::Scalar(r) => vec![r],
                _ => return Err(PtxError::at(op.span, "a scalar access needs a scalar mask")),
            },
        })),
        _ => Ok(None),
    }
}

/// Lowers load, store and atomic_add.
pub fn lower_memory_op(c: &mut Ctx, op: &OpData) -> Result<(), PtxError> {
    let sp = op.span;
    if let Some(p) = scalar_mask_of_tile_write(c, op)? {
        // One predicate for the whole tile (a `cluster` program's spare tile, say): branch
        // around the write, which keeps its vector paths.
        let mut plain = op.clone();
        plain.attrs.retain(|(k, _)| k != "mask");
        let skip = c.b.label("masked_off");
        c.b.ins_if(p, true, PtxInst::new("bra").op(&skip));
        lower_memory_op(c, &plain)?;
        c.b.place(&skip);
        return Ok(());
    }
    let (t, info) = c.tensor_of(op)?;
    let offs = offsets(c, t, sp)?;
    super::store_order::before_access(c, op, &t.param);
    match op.opcode {
        Opcode::Load => {
            let v = *op
                .results
                .first()
                .ok_or_else(|| PtxError::at(sp, "load without a result"))?;
            let d = info.dtype;
            let other = lit(op.attr("other")).unwrap_or(0.0);
            let shape = c.k.dfg.ty(v).shape().unwrap_or_default();
            match c.plan.places.get(&v).copied().unwrap_or(Place::Scalar) {
                Place::Scalar => {
                    let r = super::ctx::constant(c, d, other);
                    let (addr, inb) = element(c, &info, &offs, &[]);
                    let m = mask_regs(c, op, None, &shape)?.map(|m| m[0]);
                    let p = and_pred(c, inb, m);
                    load_elem(c, d, r, addr, p);
                    c.values.vals.insert(v, Val::Scalar(r));
                }
                Place::Reg(l)
                    if l == Layout::Blocked
                        && vec_ok(&info, &shape, d)
                        && op.attr("mask").is_none() =>
                {
                    super::deferred::start(c);
                    let regs = blocked_vec_access(
                        c,
                        &info,
                        &offs,
                        &shape,
                        d,
                        Access::Load(other),
                        None,
                        None,
                    );
                    super::deferred::finish(c, v);
                    let regs = regs?;
                    c.values.vals.insert(
                        v,
                        Val::Tile {
                            layout: l,
                            shape,
                            dtype: d,
                            regs,
                        },
                    );
                }
                Place::Reg(l) => {
                    let coords = c.coords(l, &shape);
                    let masks = mask_regs(c, op, Some(l), &shape)?;
                    let mut regs = Vec::with_capacity(coords.len());
                    for (i, sc) in coords.iter().enumerate() {
                        let r = super::ctx::constant(c, d, other);
                        if !slot_live(c, l, &shape, i) {
                            regs.push(r);
                            continue;
                        }
                        let (addr, inb) = element(c, &info, &offs, &sc.idx);
                        let p = and_pred(c, inb, masks.as_ref().map(|m| m[i]));
                        let p = and_pred(c, p, sc.valid);
                        load_elem(c, d, r, addr, p);
                        regs.push(r);
                    }
                    c.values.vals.insert(
                        v,
                        Val::Tile {
                            layout: l,
                            shape,
                            dtype: d,
                            regs,
                        },
                    );
                }
                Place::Shared => {
                    let val = load_shared(c, op, &info, &offs, &shape, other)?;
                    c.values.vals.insert(v, val);
                }
            }
        }
        Opcode::Store | Opcode::AtomicAdd => {
            let src = *op
                .operands
                .first()
                .ok_or_else(|| PtxError::at(sp, "store needs a value"))?;
            // A cast the store converts itself (mma_store::store_cast): its f32 source.
            let src = c.mem.store_casts.get(&src).copied().unwrap_or(src);
            let d = info.dtype;
            let (regs, coords, owner, shape): (Vec<Reg>, Vec<SlotCoord>, Option<Reg>, Vec<usize>) =
                match c.val(src, sp)? {
                    // A scalar store is thread 0's (store_order.rs); a scalar atomic is
                    // limited to thread 0 below.
                    Val::Scalar(r) => (
                        vec![r],
                        vec![SlotCoord {
                            idx: vec![],
                            valid: None,
                        }],
                        (op.opcode == Opcode::Store).then(|| {
                            let first = c.b.reg(RegClass::Pred);
                            c.b.ins(PtxInst::new("setp.eq.u32").op(first).op(c.thread.tid).op(0));
                            first
                        }),
                        vec![],
                    ),
                    Val::Tile {
                        layout,
                        shape,
                        regs,
                        ..
                    } => {
                        let coords = c.coords(layout, &shape);
                        let owner = (layout == Layout::RowMma
                            && crate::ptx::plan::layout::rows_cols(&shape).1 == 1)
                            .then_some(c.thread.quad_leader);
                        (regs, coords, owner, shape)
                    }
                    other @ Val::Shared { .. } => {
                        let t = super::convert::convert(c, &other, Layout::Blocked, sp)?;
                        let Val::Tile { regs, shape, .. } = t else {
                            return Err(PtxError::at(sp, "internal: conversion"));
                        };
                        (regs, c.coords(Layout::Blocked, &shape), None, shape)
                    }
                };
            let layout = match c.val(src, sp)? {
                Val::Tile { layout, .. } => Some(layout),
                Val::Scalar(_) => None,
                Val::Shared { .. } => Some(Layout::Blocked),
            };
            if op.opcode == Opcode::Store
                && layout == Some(Layout::Blocked)
                && vec_ok(&info, &shape, d)
                && op.attr("mask").is_none()
            {
                let regs =
                    super::mma_store::unrounded(c, src, d, &shape, Layout::Blocked).unwrap_or(regs);
                blocked_vec_access(c, &info, &offs, &shape, d, Access::Store, Some(&regs), None)?;
                return Ok(());
            }
            if let (Opcode::Store, Some(l)) = (op.opcode, layout) {
                let regs = super::mma_store::unrounded(c, src, d, &shape, l)
                    .unwrap_or_else(|| regs.clone());
                if super::mma_store::store(c, op, &info, &offs, l, &shape, &regs, owner) {
                    return Ok(());
                }
            }
            // A `sem_wait` right before an add: its issuing threads spin on a bulk
            // reduction's path, every thread on the others (semaphore.rs).
            let wait = match op.opcode {
                Opcode::AtomicAdd => super::semaphore::take(c),
                _ => None,
            };
            if let (Opcode::AtomicAdd, Some(l)) = (op.opcode, layout) {
                // A tile that is one contiguous region: one bulk reduction (sm_90+), with the
                // per-element path below for launches whose strides or alignment break it
                // (bulk_reduce.rs qualifies only tiles that path takes).
                let mut per_element = |c: &mut Ctx| {
                    if let Some(w) = wait {
                        super::semaphore::spin(c, w);
                    }
                    super::mma_store::store(c, op, &info, &offs, l, &shape, &regs, owner);
                };
                if super::bulk_reduce::bulk_add(
                    c,
                    op,
                    &info,
                    &offs,
                    l,
                    &shape,
                    &regs,
                    wait,
                    &mut per_element,
                ) {
                    return Ok(());
                }
            }
            if let Some(w) = wait {
                super::semaphore::spin(c, w);
            }
            if let (Opcode::AtomicAdd, Some(l)) = (op.opcode, layout) {
                if super::mma_store::store(c, op, &info, &offs, l, &shape, &regs, owner) {
                    return Ok(());
                }
            }
            let masks = mask_regs(c, op, layout, &shape)?;
            for (i, sc) in coords.iter().enumerate() {
                if layout.is_some_and(|l| !slot_live(c, l, &shape, i)) {
                    continue;
                }
                let (addr, inb) = element(c, &info, &offs, &sc.idx);
                let mut p = and_pred(c, inb, masks.as_ref().map(|m| m[i]));
                p = and_pred(c, p, sc.valid);
                p = and_pred(c, p, owner);
                let bits = store_bits(c, d, regs[i]);
                if op.opcode == Opcode::Store {
                    c.b.ins_if(
                        p,
                        false,
                        PtxInst::new("st.global").m(gty(d)).addr(addr).op(bits),
                    );
                } else {
                    if i == 0 && coords.len() == 1 && shape.is_empty() {
                        // A scalar atomic from every thread would add once per thread.
                        let first = c.b.reg(RegClass::Pred);
                        c.b.ins(PtxInst::new("setp.eq.u32").op(first).op(c.thread.tid).op(0));
                        p = and_pred(c, p, Some(first));
                    }
                    let red = match d {
                        Dtype::F32 => "red.global.add.f32".to_string(),
                        Dtype::F16 => {
                            c.b.need(Isa::RED_ADD_F16);
                            "red.global.add.noftz.f16".to_string()
                        }
                        Dtype::Bf16 if c.target.has_red_bf16() => {
                            c.b.need(Isa::RED_ADD_BF16);
                            "red.global.add.noftz.bf16".to_string()
                        }
                        Dtype::I32 => "red.global.add.s32".to_string(),
                        Dtype::I64 => "red.global.add.u64".to_string(),
                        Dtype::Bf16 | Dtype::U8 | Dtype::I1 => {
                            return Err(PtxError::at(
                                sp,
                                format!(
                                    "atomic_add on {d} is not supported by the PTX backend on {}",
                                    c.target.name()
                                ),
                            ))
                        }
                    };
                    c.b.ins_if(p, false, PtxInst::new(red).addr(addr).op(bits));
                }
            }
        }
        _ => return Err(PtxError::at(sp, "internal: not a memory op")),
    }
    Ok(())
}

/// Loads a rank-2 tile into its own shared-memory region (rows padded by 16 bytes so mma
/// fragment reads are conflict-free), synchronizing the block before and after.
fn load_shared(
    c: &mut Ctx,
    op: &OpData,
    info: &TensorInfo,
    offs: &[Reg],
    shape: &[usize],
    other: f64,
) -> Result<Val, PtxError> {
    let d = info.dtype;
    let eb = smem_bytes(d);
    let (rows, cols) = (shape[0], shape[1]);
    let rs = cols + 16 / eb;
    let core = op.results.first().is_some_and(|r| c.plan.core.contains(r));
    let (row_stride, col_stride) = if core { (0, 0) } else { (rs, 1) };
    let val = |off| Val::Shared {
        off,
        dyn_off: None,
        shape: [rows, cols],
        dtype: d,
        row_stride,
        col_stride,
    };
    let bytes = if core {
        crate::ptx::plan::wgmma::core_tile_bytes(shape, eb)
    } else {
        (rows * rs * eb) as u32
    };
    let off = if core {
        c.alloc_shared_aligned(bytes, crate::ptx::plan::wgmma::CORE_ALIGN)
    } else {
        c.alloc_shared(bytes)
    };
    c.sync_block();
    copy_tile(c, op, info, offs, shape, other, off, core)?;
    c.b.need(Isa::CP_ASYNC)
        .ins(PtxInst::new("cp.async.commit_group"));
    c.b.ins(PtxInst::new("cp.async.wait_group").op(0));
    fence_async(c);
    c.sync_block();
    Ok(val(off))
}

/// Issues the copy of the tile a `load` or `async_copy` op reads (its tensor, offsets `offs`,
/// `mask` and `other`) into the shared region at `off` (cp.async when possible, scalar loads
/// otherwise) without waiting or synchronizing: the caller commits, waits and places the
/// barriers. `core`: the region uses the core-matrix layout of wgmma operands (see wgmma.rs),
/// else rows padded by 16 bytes.
#[allow(clippy::too_many_arguments)]
pub fn copy_tile(
    c: &mut Ctx,
    op: &OpData,
    info: &TensorInfo,
    offs: &[Reg],
    shape: &[usize],
    other: f64,
    off: u32,
    core: bool,
) -> Result<(), PtxError> {
    let sp = op.span;
    let d = info.dtype;
    let eb = smem_bytes(d);
    let (rows, cols) = (shape[0], shape[1]);
    let rs = cols + 16 / eb;
    let vec = 16 / eb;
    let core_rows = core.then_some(rows);
    // A warp-specialized producer copies without its tensor maps (ws.rs `copy_by_warps`) only
    // when the tensor breaks the rules that 16-byte copies need too (address, stride, innermost
    // contiguity: docs/backends.md "Tensor maps"), so it goes element by element at once.
    let vectorizable = info.contiguous_last
        && !c.asyncs.tma.by_warps
        && cols % vec == 0
        && other == 0.0
        && (op.attr("mask").is_none() || vec == crate::ptx::plan::VEC)
        && matches!(d, Dtype::F16 | Dtype::Bf16 | Dtype::F32 | Dtype::I32);
    let done = c.b.label("ldsm_done");
    if vectorizable {
        let slow = c.b.label("ldsm_slow");
        let fast = vector_alignment_ok(c, info, offs, vec);
        c.b.ins_if(fast, true, PtxInst::new("bra.uni").op(&slow));
        let mask = match op.attr("mask") {
            Some(Attr::Value(m)) => Some(*m),
            _ => None,
        };
        let copied =
            super::cp_rows::cp_async_rows(c, info, offs, rows, cols, off, rs, eb, mask, core, sp)?;
        if !copied && core {
            // The core layout has no general vector copy: element by element below.
            c.b.ins(PtxInst::new("bra.uni").op(&slow));
        } else if !copied {
            cp_async_tile(c, info, offs, rows, cols, off, rs, eb, mask, shape, sp)?;
        }
        c.b.ins(PtxInst::new("bra.uni").op(&done));
        c.b.place(&slow);
    }
    // A lazy mask is evaluated at any element's coordinates, whatever layout its class has.
    let lazy_mask = match op.attr("mask") {
        Some(Attr::Value(m))
            if c.values.lazy.contains_key(m)
                && c.k.dfg.ty(*m).shape().as_deref() == Some(shape) =>
        {
            Some(*m)
        }
        _ => None,
    };
    if op.attr("mask").is_some() && lazy_mask.is_none() {
        // Masked: element by element in the Blocked layout (the mask lives there).
        let coords = c.coords(Layout::Blocked, shape);
        let masks = mask_regs(c, op, Some(Layout::Blocked), shape)?;
        for (i, sc) in coords.iter().enumerate() {
            let r = super::ctx::constant(c, d, other);
            let (addr, inb) = element(c, info, offs, &sc.idx);
            let p = and_pred(c, inb, masks.as_ref().map(|m| m[i]));
            load_elem(c, d, r, addr, p);
            store_smem_elem(c, d, r, off, &sc.idx, rs, eb, core_rows, sc.valid, sp)?;
        }
    } else {
        // A loop over this thread's elements keeps register use flat on the scalar path.
        let numel = rows * cols;
        let (e, p) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::Pred));
        let (top, end) = (c.b.label("ldsm"), c.b.label("ldsm_end"));
        c.b.ins(PtxInst::new("mov.b32").op(e).op(c.thread.tid));
        c.b.place(&top);
        c.b.ins(PtxInst::new("setp.ge.u32").op(p).op(e).op(numel));
        c.b.ins_if(p, false, PtxInst::new("bra.uni").op(&end));
        let (i, j) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
        c.b.ins(
            PtxInst::new("div.u32")
                .op(i)
                .op(e)
                .op(cols)
                .strength_reduced(),
        );
        c.b.ins(
            PtxInst::new("rem.u32")
                .op(j)
                .op(e)
                .op(cols)
                .strength_reduced(),
        );
        let r = super::ctx::constant(c, d, other);
        let (addr, inb) = element(c, info, offs, &[i, j]);
        let inb = match lazy_mask {
            // A mask computed from indices is evaluated for this element only.
            Some(m) => {
                let mv = super::values::coord_value(c, m, &[i, j], sp)?;
                and_pred(c, inb, Some(mv))
            }
            None => inb,
        };
        load_elem(c, d, r, addr, inb);
        store_smem_elem(c, d, r, off, &[i, j], rs, eb, core_rows, None, sp)?;
        c.b.ins(PtxInst::new("add.s32").op(e).op(e).op(c.plan.blk.threads));
        c.b.ins(PtxInst::new("bra").op(&top));
        c.b.place(&end);
    }
    c.b.place(&done);
    let _ = round;
    Ok(())
}

/// The tensor an `async_copy` reads.
pub(super) fn copy_tensor(op: &OpData) -> Result<&TensorRef, PtxError> {
    op.tensor
        .as_ref()
        .ok_or_else(|| PtxError::at(op.span, "async_copy without a tensor"))
}

/// An `async_copy`: the tile its tensor reference reads (a [rows, cols] `shape`, with the op's
/// `mask` and `other`) into the stage at shared offset `off` (no wait, no barrier).
pub fn copy_into_stage(
    c: &mut Ctx,
    op: &OpData,
    shape: &[usize],
    off: u32,
    core: bool,
) -> Result<(), PtxError> {
    let sp = op.span;
    let t = copy_tensor(op)?;
    let info = c.tensor_info(&t.param, sp)?;
    let other = lit(op.attr("other")).unwrap_or(0.0);
    let offs = offsets(c, t, sp)?;
    copy_tile(c, op, &info, &offs, shape, other, off, core)
}

/// Stores one element (register form) into a shared tile at (idx[0], idx[1]).
#[allow(clippy::too_many_arguments)]
fn store_smem_elem(
    c: &mut Ctx,
    d: Dtype,
    r: Reg,
    off: u32,
    idx: &[Reg],
    rs: usize,
    eb: usize,
    core_rows: Option<usize>,
    valid: Option<Reg>,
    sp: Span,
) -> Result<(), PtxError> {
    let sa = match (core_rows, idx) {
        (Some(rows), [i, j]) => super::wgmma::core_addr(c, off, *i, *j, rows, eb),
        _ => c.smem_addr(off, idx, rs, 1, eb),
    };
    match d {
        Dtype::F16 | Dtype::Bf16 => {
            let h = c.b.reg(RegClass::B16);
            let t = if d == Dtype::F16 { "f16" } else { "bf16" };
            c.b.need(Isa::cvt_from_f32(d))
                .ins(PtxInst::new("cvt.rn").m(t).m("f32").op(h).op(r));
            c.b.ins_if_opt(valid, PtxInst::new("st.shared.b16").addr(sa).op(h));
        }
        Dtype::F32 | Dtype::I32 | Dtype::U8 => {
            c.b.ins_if_opt(valid, PtxInst::new("st.shared.b32").addr(sa).op(r))
        }
        Dtype::I64 | Dtype::I1 => {
            return Err(PtxError::at(
                sp,
                format!("a {d} tile cannot be a dot operand"),
            ))
        }
    }
    Ok(())
}

/// Makes this thread's completed cp.async writes visible to the async proxy (wgmma reads shared
/// memory through it); only in kernels with wgmma operand tiles. Call after the wait, before
/// the barrier that publishes the tiles.
pub(super) fn fence_async(c: &mut Ctx) {
    if !c.plan.core.is_empty() {
        c.b.need(Isa::FENCE_PROXY_ASYNC)
            .ins(PtxInst::new("fence.proxy.async.shared::cta"));
    }
}
