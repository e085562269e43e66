//! One element of a tensor in global memory: the PTX type it moves as, the tensor offsets in
//! registers, an element's address and bounds predicate, and the predicated load or the bits a
//! store writes.

use super::ctx::{Ctx, TensorInfo, Val};
use super::PtxError;
use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::{PtxInst, Reg, RegClass};
use kir_ir::{Dtype, ExprKind, Offset, Span, TensorRef};

/// The PTX type used to move one element of `d` to or from global memory.
pub(super) fn gty(d: Dtype) -> &'static str {
    match d {
        Dtype::F32 => "f32",
        Dtype::F16 | Dtype::Bf16 => "b16",
        Dtype::I32 => "s32",
        Dtype::I64 => "s64",
        Dtype::U8 | Dtype::I1 => "u8",
    }
}

/// Offsets as b32 registers.
pub(super) fn offsets(c: &mut Ctx, t: &TensorRef, sp: Span) -> Result<Vec<Reg>, PtxError> {
    let mut out = Vec::new();
    for o in &t.offsets {
        out.push(match o {
            Offset::Value(v) => match c.val(*v, sp)? {
                Val::Scalar(r) if r.class == RegClass::B64 => {
                    let n = c.b.reg(RegClass::B32);
                    c.b.ins(PtxInst::new("cvt.u32.u64").op(n).op(r));
                    n
                }
                Val::Scalar(r) => r,
                _ => return Err(PtxError::at(sp, "a tensor offset must be a scalar")),
            },
            Offset::Expr(e) => match &e.kind {
                ExprKind::Int(i) => c.b.imm32(*i),
                _ => c.expr(e)?,
            },
        });
    }
    Ok(out)
}

/// For one element: the address and the in-bounds predicate. `coord` indexes the trailing dims.
pub(super) fn element(c: &mut Ctx, info: &TensorInfo, offs: &[Reg], coord: &[Reg]) -> (Reg, Reg) {
    let rank = offs.len();
    let lead = rank - coord.len();
    let esize = info.dtype.size_bytes();
    let inb = c.b.reg(RegClass::Pred);
    let addr = c.b.reg(RegClass::B64);
    c.b.ins(PtxInst::new("mov.b64").op(addr).op(info.ptr));
    let mut first = true;
    for d in 0..rank {
        let idx = if d >= lead {
            let i = c.b.reg(RegClass::B32);
            c.b.ins(
                PtxInst::new("add.s32")
                    .op(i)
                    .op(offs[d])
                    .op(coord[d - lead]),
            );
            i
        } else {
            offs[d]
        };
        let p = c.b.reg(RegClass::Pred);
        c.b.ins(PtxInst::new("setp.lt.u32").op(p).op(idx).op(info.dims[d]));
        if first {
            c.b.ins(PtxInst::new("mov.pred").op(inb).op(p));
            first = false;
        } else {
            c.b.ins(PtxInst::new("and.pred").op(inb).op(inb).op(p));
        }
        let lin = c.b.reg(RegClass::B32);
        c.b.ins(
            PtxInst::new("mul.lo.s32")
                .op(lin)
                .op(idx)
                .op(info.strides[d]),
        );
        let w = c.b.reg(RegClass::B64);
        c.b.ins(PtxInst::new("mul.wide.s32").op(w).op(lin).op(esize));
        c.b.ins(PtxInst::new("add.s64").op(addr).op(addr).op(w));
    }
    if first {
        c.b.ins(PtxInst::new("setp.eq.u32").op(inb).op(0).op(0));
    }
    (addr, inb)
}

/// Loads one element of `dtype` at `addr` into `dst` when `p`, converting to the register form.
pub(super) fn load_elem(c: &mut Ctx, d: Dtype, dst: Reg, addr: Reg, p: Reg) {
    match d {
        Dtype::F16 | Dtype::Bf16 => {
            let h = c.b.reg(RegClass::B16);
            c.b.ins_if(p, false, PtxInst::new("ld.global.b16").op(h).addr(addr));
            let t = if d == Dtype::F16 { "f16" } else { "bf16" };
            c.b.need(Isa::cvt_to_f32(d)).ins_if(
                p,
                false,
                PtxInst::new("cvt.f32").m(t).op(dst).op(h),
            );
        }
        Dtype::I1 => {
            let t = c.b.reg(RegClass::B32);
            c.b.ins(PtxInst::new("mov.b32").op(t).op(0));
            c.b.ins_if(p, false, PtxInst::new("ld.global.u8").op(t).addr(addr));
            let q = c.b.reg(RegClass::Pred);
            c.b.ins(PtxInst::new("setp.ne.u32").op(q).op(t).op(0));
            c.b.ins_if(p, false, PtxInst::new("mov.pred").op(dst).op(q));
        }
        Dtype::F32 | Dtype::I32 | Dtype::I64 | Dtype::U8 => {
            c.b.ins_if(
                p,
                false,
                PtxInst::new("ld.global").m(gty(d)).op(dst).addr(addr),
            );
        }
    }
}

/// Two f32 registers rounded to one packed f16x2/bf16x2 word (`t` is `f16` or `bf16`): `lo`
/// in the lower half (the first of two adjacent columns), `hi` in the upper.
pub(super) fn pack_half2(c: &mut Ctx, t: &str, lo: Reg, hi: Reg) -> Reg {
    let w = c.b.reg(RegClass::B32);
    c.b.need(Isa::CVT_TO_BF16_OR_PACKED).ins(
        PtxInst::new("cvt.rn")
            .m(t)
            .suffix("x2")
            .m("f32")
            .op(w)
            .op(hi)
            .op(lo),
    );
    w
}

/// A register holding the bits to store for `src` of dtype `d`.
pub(super) fn store_bits(c: &mut Ctx, d: Dtype, src: Reg) -> Reg {
    match d {
        Dtype::F16 | Dtype::Bf16 => {
            let h = c.b.reg(RegClass::B16);
            let t = if d == Dtype::F16 { "f16" } else { "bf16" };
            c.b.need(Isa::cvt_from_f32(d))
                .ins(PtxInst::new("cvt.rn").m(t).m("f32").op(h).op(src));
            h
        }
        Dtype::I1 => {
            let t = c.b.reg(RegClass::B32);
            c.b.ins(PtxInst::new("selp.b32").op(t).op(1).op(0).op(src));
            t
        }
        Dtype::F32 | Dtype::I32 | Dtype::I64 | Dtype::U8 => src,
    }
}

pub(super) fn and_pred(c: &mut Ctx, a: Reg, b: Option<Reg>) -> Reg {
    match b {
        None => a,
        Some(b) => {
            let p = c.b.reg(RegClass::Pred);
            c.b.ins(PtxInst::new("and.pred").op(p).op(a).op(b));
            p
        }
    }
}
