//! Stage buffers (`smem_alloc` results): their allocation in shared memory on first use
//! ([`buffer`]; wgmma operand rings in the core layout) and the offset and tile of a stage,
//! known while lowering or in a register ([`StageIx`]).

use super::ctx::{smem_bytes, Ctx, Val};
pub use super::state::StageBuf;
use super::PtxError;
use crate::ptx::emit::PtxInst;
use kir_ir::{Dtype, Value};

/// Bytes of the shared-memory region a load of `shape` and dtype `d` needs.
pub fn shared_tile_bytes(shape: &[usize], d: Dtype) -> u32 {
    let eb = smem_bytes(d);
    (shape[0] * (shape[1] + 16 / eb) * eb) as u32
}

/// A stage index: known while lowering (an unrolled ring's copy, a constant), or in a register
/// (a TMA ring whose stages only wgmma reads is not unrolled: [`dynamic_ring`]).
#[derive(Clone, Copy, Debug)]
pub enum StageIx {
    Known(usize),
    Reg(crate::ptx::emit::Reg),
}

impl StageBuf {
    /// Stage `ix`'s byte offset: a constant, plus a register for a run-time stage.
    pub fn stage_off(&self, c: &mut Ctx, ix: StageIx) -> (u32, Option<crate::ptx::emit::Reg>) {
        match ix {
            StageIx::Known(h) => (self.off + h as u32 * self.stride, None),
            StageIx::Reg(s) => {
                let d = c.b.reg(crate::ptx::emit::RegClass::B32);
                c.b.ins(PtxInst::new("mul.lo.s32").op(d).op(s).op(self.stride));
                (self.off, Some(d))
            }
        }
    }

    /// The stage as a shared tile (the element strides of its layout; 0, 0 for the core layout).
    pub(super) fn stage(&self, c: &mut Ctx, ix: StageIx) -> Val {
        let (row_stride, col_stride) = if self.core {
            (0, 0)
        } else {
            (self.shape[1] + 16 / smem_bytes(self.dtype), 1)
        };
        let (off, dyn_off) = self.stage_off(c, ix);
        Val::Shared {
            off,
            dyn_off,
            shape: self.shape,
            dtype: self.dtype,
            row_stride,
            col_stride,
        }
    }
}

/// The stages of buffer `b` (an `smem_alloc` result), reserved in shared memory at the first
/// use: S stages of one tile each, row-padded or (for wgmma operands) in the core layout.
pub(super) fn buffer(c: &mut Ctx, b: Value, sp: kir_ir::Span) -> Result<StageBuf, PtxError> {
    if let Some(buf) = c.mem.smem_bufs.get(&b) {
        return Ok(buf.clone());
    }
    let ty = c.k.dfg.ty(b);
    let (Some(shape), Some(d)) = (ty.shape(), ty.dtype()) else {
        return Err(PtxError::at(sp, "internal: a stage buffer of unknown type"));
    };
    let [stages, rows, cols] = shape[..] else {
        return Err(PtxError::at(
            sp,
            format!(
                "the PTX backend stages 2-D tiles in shared memory, not `{ty}` on {}",
                c.target.name()
            ),
        ));
    };
    if !matches!(
        d,
        Dtype::F16 | Dtype::Bf16 | Dtype::F32 | Dtype::I32 | Dtype::U8
    ) {
        return Err(PtxError::at(
            sp,
            format!("the PTX backend does not stage {d} tiles in shared memory"),
        ));
    }
    let core = c.plan.core.contains(&b);
    let eb = smem_bytes(d);
    let (stride, off) = if core {
        let align = crate::ptx::plan::wgmma::CORE_ALIGN;
        let stride =
            crate::ptx::plan::wgmma::core_tile_bytes(&[rows, cols], eb).div_ceil(align) * align;
        (
            stride,
            c.alloc_shared_aligned(stride * stages as u32, align),
        )
    } else {
        let stride = shared_tile_bytes(&[rows, cols], d).div_ceil(16) * 16;
        (stride, c.alloc_shared(stride * stages as u32))
    };
    let buf = StageBuf {
        off,
        stride,
        stages,
        shape: [rows, cols],
        dtype: d,
        core,
    };
    c.mem.smem_bufs.insert(b, buf.clone());
    Ok(buf)
}
