//! The per-concern state that [`super::ctx::Ctx`] groups: values, params, thread coordinates,
//! memory, and asynchronous work (TMA, warp specialization, wgmma). Each struct is the state one
//! concern of the lowering keeps while it emits a kernel.

use super::ctx::{TensorInfo, Val};
use crate::ptx::emit::Reg;
use kir_ir::Value;
use std::collections::HashMap;

/// What each IR value lowered to.
#[derive(Default)]
pub struct ValueState {
    pub vals: HashMap<Value, Val>,
    /// Cheap integer/mask tiles (iota and index arithmetic) that are recomputed at each use
    /// instead of living in registers across loops.
    pub lazy: HashMap<Value, kir_ir::Op>,
    /// i32/i1 scalars whose values are known while lowering: integer constants, the stage
    /// index of the copy of an unrolled ring loop being lowered, and what folds from them.
    pub statics: HashMap<Value, i64>,
    /// Prologue registers holding known scalars, by (is a predicate, value).
    pub imms: HashMap<(bool, i64), Reg>,
}

/// Kernel params in registers (loaded in the prologue).
#[derive(Default)]
pub struct Params {
    pub tensors: HashMap<String, TensorInfo>,
    pub dims: HashMap<String, Reg>,
    pub scalars: HashMap<String, Reg>,
}

/// Thread coordinates (computed in the prologue or on first use) and the barrier of the
/// threads running the code being lowered.
pub struct ThreadRegs {
    pub tid: Reg,
    pub warp: Reg,
    pub g: Reg,
    pub colbase: Reg,
    pub quad_leader: Reg,
    /// The barrier that synchronizes the threads running the code being lowered: `None` is the
    /// whole block (`bar.sync 0`); `Some((id, threads))` a named barrier, inside a
    /// warp-specialized partition whose other warps never reach it.
    pub block_bar: Option<(u32, u32)>,
    pub(super) rowbases: HashMap<usize, Reg>,
    pub(super) gridbases: HashMap<(usize, usize), (Reg, Reg)>,
    pub(super) ldm_lane: Option<(Reg, Reg, Reg)>,
}

/// Shared memory (its base register, the allocation top, the scratch region, stage buffers)
/// and the order of global stores.
pub struct MemState {
    pub smem: Reg,
    pub smem_top: u32,
    /// The scratch region (conversions, reductions) as an offset ≥ [`super::ctx::SCRATCH_BASE`].
    pub scratch_off: u32,
    /// Whether any instruction addressed the scratch region.
    pub scratch_used: bool,
    /// Bytes of the largest tile spilled to the scratch region (its size; `tile::spill` is its
    /// only writer and reads stay inside the spilled tile).
    pub scratch_peak: u32,
    /// Stage buffers (`smem_alloc` results) and where their stages live (see `sched.rs`).
    pub smem_bufs: HashMap<Value, super::sched::StageBuf>,
    /// A `smem_release` was lowered and no `bar.sync` since: a copy into shared memory must
    /// synchronize the block first (another thread may still read the released stage).
    pub release_pending: bool,
    /// Per tensor, how its last store since the last block barrier was spread (store_order.rs).
    pub stores: super::store_order::State,
    /// Casts a store converts itself: cast result → its f32 source (mma_store.rs).
    pub store_casts: HashMap<Value, Value>,
}

/// Asynchronous work: TMA rings and mbarriers, warp specialization, and wgmma groups.
#[derive(Default)]
pub struct AsyncState {
    /// Tensor maps and mbarriers (tma.rs).
    pub tma: super::tma::TmaState,
    /// Warp specialization: the launch's thread index and the deferred ops (ws.rs).
    pub ws: super::ws::WsState,
    /// A wgmma group left in flight by a held dot (see `wgmma.rs`): the enclosing loop waits
    /// for it when it ends.
    pub wgmma_in_flight: bool,
}
