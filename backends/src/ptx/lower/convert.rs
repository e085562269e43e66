//! Layout conversions: a register tile into another layout, or a shared tile into registers,
//! through the scratch region of shared memory (each element written and read at its
//! row-major position), and the slot and register-type helpers the conversions share with the
//! shape ops and reductions.

use super::ctx::{class_of, Ctx, Val};
use super::PtxError;
use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::{PtxInst, Reg, RegClass};
use crate::ptx::plan::layout::{self, Layout};
use kir_ir::{Dtype, Span};

/// The `ld`/`st` type of a register holding a value of `d`.
pub(super) fn sty(d: Dtype) -> &'static str {
    match class_of(d) {
        RegClass::F32 => "f32",
        RegClass::B64 => "b64",
        _ => "b32",
    }
}

fn ebytes(d: Dtype) -> usize {
    if d == Dtype::I64 {
        8
    } else {
        4
    }
}

/// Writes a register tile to the scratch region at row-major positions (after a barrier).
pub(super) fn spill(c: &mut Ctx, layout: Layout, shape: &[usize], d: Dtype, regs: &[Reg]) {
    let bytes = shape.iter().product::<usize>() * ebytes(d) as usize;
    c.mem.scratch_peak = c.mem.scratch_peak.max(bytes as u32);
    let coords = c.coords(layout, shape);
    c.sync_block();
    let owner_only = layout == Layout::RowMma && layout::rows_cols(shape).1 == 1;
    for (s, (sc, &r)) in coords.iter().zip(regs).enumerate() {
        if !slot_live(c, layout, shape, s) {
            continue;
        }
        let lin = c.linear(&sc.idx, shape);
        let a = c.smem_addr(c.mem.scratch_off, &[lin], 1, 0, ebytes(d));
        let (val, t) = if d == Dtype::I1 {
            let t = c.b.reg(RegClass::B32);
            c.b.ins(PtxInst::new("selp.b32").op(t).op(1).op(0).op(r));
            (t, "b32")
        } else {
            (r, sty(d))
        };
        let valid = match (sc.valid, owner_only) {
            (Some(v), _) => Some(v),
            (None, true) => Some(c.thread.quad_leader),
            (None, false) => None,
        };
        c.b.ins_if_opt(valid, PtxInst::new("st.shared").m(t).addr(a).op(val));
    }
    c.sync_block();
}

/// Reads one element of dtype `d` at scratch linear index `lin` into a fresh register; slots
/// that hold no element (`valid` false) read nothing and keep 0.
pub(super) fn read_scratch(c: &mut Ctx, d: Dtype, lin: Reg, valid: Option<Reg>) -> Reg {
    let a = c.smem_addr(c.mem.scratch_off, &[lin], 1, 0, ebytes(d));
    let r = super::ctx::constant(c, d, 0.0);
    if d == Dtype::I1 {
        let t = c.b.reg(RegClass::B32);
        c.b.ins(PtxInst::new("mov.b32").op(t).op(0));
        c.b.ins_if_opt(valid, PtxInst::new("ld.shared.b32").op(t).addr(a));
        c.b.ins(PtxInst::new("setp.ne.u32").op(r).op(t).op(0));
    } else {
        c.b.ins_if_opt(valid, PtxInst::new("ld.shared").m(sty(d)).op(r).addr(a));
    }
    r
}

/// Converts a value to registers in `to` (same shape).
pub fn convert(c: &mut Ctx, v: &Val, to: Layout, sp: Span) -> Result<Val, PtxError> {
    match v {
        Val::Scalar(_) => Err(PtxError::at(sp, "internal: convert of a scalar")),
        Val::Tile {
            layout,
            shape,
            dtype,
            regs,
        } => {
            if *layout == to {
                return Ok(v.clone());
            }
            spill(c, *layout, shape, *dtype, regs);
            let coords = c.coords(to, shape);
            let mut out = Vec::new();
            for (s, sc) in coords.iter().enumerate() {
                if !slot_live(c, to, shape, s) {
                    out.push(super::ctx::constant(c, *dtype, 0.0));
                    continue;
                }
                let lin = c.linear(&sc.idx, shape);
                out.push(read_scratch(c, *dtype, lin, sc.valid));
            }
            Ok(Val::Tile {
                layout: to,
                shape: shape.clone(),
                dtype: *dtype,
                regs: out,
            })
        }
        Val::Shared {
            off,
            dyn_off,
            shape,
            dtype,
            row_stride,
            col_stride,
        } => {
            let coords = c.coords(to, &shape[..]);
            let eb = super::ctx::smem_bytes(*dtype);
            let mut out = Vec::new();
            for sc in &coords {
                let a = c.smem_addr(*off, &sc.idx, *row_stride, *col_stride, eb);
                let a = c.plus_dyn(a, *dyn_off);
                let r = super::ctx::constant(c, *dtype, 0.0);
                match dtype {
                    Dtype::F16 | Dtype::Bf16 => {
                        let h = c.b.reg(RegClass::B16);
                        c.b.ins(PtxInst::new("mov.b16").op(h).op(0));
                        c.b.ins_if_opt(sc.valid, PtxInst::new("ld.shared.b16").op(h).addr(a));
                        let t = if *dtype == Dtype::F16 { "f16" } else { "bf16" };
                        c.b.need(Isa::cvt_to_f32(*dtype))
                            .ins(PtxInst::new("cvt.f32").m(t).op(r).op(h));
                    }
                    _ => c.b.ins_if_opt(
                        sc.valid,
                        PtxInst::new("ld.shared").m(sty(*dtype)).op(r).addr(a),
                    ),
                }
                out.push(r);
            }
            Ok(Val::Tile {
                layout: to,
                shape: shape.to_vec(),
                dtype: *dtype,
                regs: out,
            })
        }
    }
}

/// True if slot `s` of a tile of `shape` in `layout` holds an element in some thread (a
/// `Blocked` tile smaller than the block leaves trailing slots empty everywhere).
pub(super) fn slot_live(c: &Ctx, layout: Layout, shape: &[usize], s: usize) -> bool {
    let v = crate::ptx::plan::VEC;
    layout != Layout::Blocked
        || (s / v) * c.plan.blk.threads as usize * v + s % v < shape.iter().product::<usize>()
}
