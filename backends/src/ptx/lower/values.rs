//! Small facts and registers of values that every lowering module uses: where a value lives,
//! its dtype and shape, constants in registers, and rounding to a narrow dtype.

use super::ctx::Ctx;
use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::{f32_lit, PtxInst, Reg, RegClass};
use crate::ptx::plan::layout::Place;
use kir_ir::{Dtype, Value};

pub fn place(c: &Ctx, v: Value) -> Place {
    c.plan.places.get(&v).copied().unwrap_or(Place::Scalar)
}

pub fn dtype(c: &Ctx, v: Value) -> Dtype {
    c.k.dfg.ty(v).dtype().unwrap_or(Dtype::F32)
}

pub fn shape(c: &Ctx, v: Value) -> Vec<usize> {
    c.k.dfg.ty(v).shape().unwrap_or_default()
}

/// Rounds an f32 register holding a value meant as `d` (f16/bf16) to that dtype, in place;
/// wraps u8 to 8 bits.
pub fn round(c: &mut Ctx, d: Dtype, r: Reg) {
    match d {
        Dtype::F16 | Dtype::Bf16 => {
            let t = if d == Dtype::F16 { "f16" } else { "bf16" };
            let h = c.b.reg(RegClass::B16);
            c.b.need(Isa::cvt_from_f32(d))
                .ins(PtxInst::new("cvt.rn").m(t).m("f32").op(h).op(r));
            c.b.need(Isa::cvt_to_f32(d))
                .ins(PtxInst::new("cvt.f32").m(t).op(r).op(h));
        }
        Dtype::U8 => c.b.ins(PtxInst::new("and.b32").op(r).op(r).op(255)),
        Dtype::F32 | Dtype::I32 | Dtype::I64 | Dtype::I1 => {}
    }
}

/// A register holding constant `v` as dtype `d` (rounded).
pub fn constant(c: &mut Ctx, d: Dtype, v: f64) -> Reg {
    let r = c.reg(d);
    match d {
        Dtype::F32 | Dtype::F16 | Dtype::Bf16 => {
            let x = match d {
                Dtype::F16 => half::f16::from_f32(v as f32).to_f32(),
                Dtype::Bf16 => half::bf16::from_f32(v as f32).to_f32(),
                _ => v as f32,
            };
            c.b.ins(PtxInst::new("mov.b32").op(r).op(f32_lit(x)));
        }
        Dtype::I32 => c.b.ins(PtxInst::new("mov.b32").op(r).op(v as i64 as i32)),
        Dtype::U8 => c.b.ins(PtxInst::new("mov.b32").op(r).op((v as i64) & 255)),
        Dtype::I64 => c.b.ins(PtxInst::new("mov.b64").op(r).op(v as i64)),
        Dtype::I1 => c.b.ins(
            PtxInst::new("setp.ne.u32")
                .op(r)
                .op((v != 0.0) as u32)
                .op(0),
        ),
    }
    r
}
