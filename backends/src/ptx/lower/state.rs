//! The per-concern state that `Ctx` (ctx.rs) groups: values, params, thread coordinates,
//! memory, and asynchronous work (TMA, warp specialization, wgmma). Each struct is the state one
//! concern of the lowering keeps while it emits a kernel.

use crate::ptx::emit::{Operand, Reg};
use crate::ptx::plan::layout::Layout;
use kir_ir::{Dtype, Op, Value};
use std::collections::{HashMap, HashSet};

/// The deferred unpacking and conversion of one 16-bit load (`deferred.rs`).
pub struct Pending {
    /// The loaded value.
    pub value: Value,
    /// The instructions that fill its f32 registers from the loaded words.
    pub insts: Vec<crate::ptx::emit::PtxInst>,
    /// The depth of the block that holds the load.
    pub depth: u32,
    /// Values that hold the same registers (widening casts and reshapes of the loaded tile),
    /// so a reader of one of them needs the conversion too, each with the depth of the block
    /// that made it.
    pub aliases: Vec<(Value, u32)>,
}

/// A 64-column row vector held 2 registers a lane (lane l: columns 2l and 2l + 1), for a
/// broadcast into an `[M, 64]` `RowMma` tile of `shape` (row_compact.rs).
#[derive(Clone, Debug)]
pub struct Compact {
    /// The lane's 2 values (the chain applied).
    pub regs: Vec<Reg>,
    /// The broadcast's result shape.
    pub shape: Vec<usize>,
    /// The broadcast's element type.
    pub dtype: Dtype,
}

/// What each IR value lowered to.
#[derive(Default)]
pub struct ValueState {
    pub vals: HashMap<Value, Val>,
    /// Cheap integer/mask tiles (iota and index arithmetic) that are recomputed at each use
    /// instead of living in registers across loops.
    pub lazy: HashMap<Value, kir_ir::Op>,
    /// Row vectors broadcast into accumulator tiles in a warp-specialized consumer, held a few
    /// registers a lane and spread into the layout at each use (`row_compact.rs`).
    pub compact: HashMap<Value, Compact>,
    /// i32/i1 scalars whose values are known while lowering: integer constants, the stage
    /// index of the copy of an unrolled ring loop being lowered, and what folds from them.
    pub statics: HashMap<Value, i64>,
    /// Prologue registers holding known scalars, by (is a predicate, value).
    pub imms: HashMap<(bool, i64), Reg>,
    /// The unpacking and conversion to f32 of 16-bit tiles loaded but not yet used, by the
    /// loaded value (`deferred.rs`): emitted before the first op that reads the value, so
    /// consecutive loads are in flight together.
    pub pending: Vec<Pending>,
    /// How many blocks deep the dispatcher is (the kernel body is 1): a pending conversion
    /// belongs to the block of its load (`deferred.rs`).
    pub depth: u32,
    /// Pending conversions of enclosing blocks already emitted in an inner block, with the
    /// depth of the block that emitted them: valid there until that block ends.
    pub emitted_inner: Vec<(Value, u32)>,
    /// While a load is lowered with deferral on, where its conversions go.
    pub defer: Option<Vec<crate::ptx::emit::PtxInst>>,
    /// Whether loads defer their conversions in this kernel (not in a warp-specialized one,
    /// whose partitions are lowered out of program order).
    pub defer_on: bool,
    /// Dots lowered early, right after the dot they are paired with (`wgmma_pair.rs`): the
    /// block walk skips them where they stand.
    pub hoisted: HashSet<kir_ir::Op>,
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
    /// warp-specialized partition whose other warps never reach it. The id is an immediate, or
    /// a register where each of several consumers takes its own (consumers.rs).
    pub block_bar: Option<(Operand, u32)>,
    pub(super) rowbases: HashMap<usize, Reg>,
    pub(super) gridbases: HashMap<(usize, usize), (Reg, Reg)>,
    pub(super) ldm_lane: Option<(Reg, Reg, Reg)>,
}

/// Shared memory (its base register, the allocation top, the scratch region, stage buffers)
/// and the order of global stores.
pub struct MemState {
    pub smem: Reg,
    pub smem_top: u32,
    /// The scratch region (conversions, reductions) as an offset ≥ `SCRATCH_BASE` (ctx.rs).
    pub scratch_off: u32,
    /// Whether any instruction addressed the scratch region.
    pub scratch_used: bool,
    /// Bytes of the largest tile spilled to the scratch region (its size; `convert::spill` is its
    /// only writer and reads stay inside the spilled tile).
    pub scratch_peak: u32,
    /// Stage buffers (`smem_alloc` results) and where their stages live (see `sched.rs`).
    pub smem_bufs: HashMap<Value, StageBuf>,
    /// A `smem_release` was lowered and no `bar.sync` since: a copy into shared memory must
    /// synchronize the block first (another thread may still read the released stage).
    pub release_pending: bool,
    /// Per tensor, how its last store since the last block barrier was spread (store_order.rs).
    pub stores: State,
    /// Casts a store converts itself: cast result → its f32 source (mma_store.rs).
    pub store_casts: HashMap<Value, Value>,
    /// The shared region of bulk reductions: every one of the kernel's bulk `atomic_add`s
    /// reuses it, since each waits until the region is read (bulk_reduce.rs).
    pub bulk_region: Option<Region>,
    /// A lowered `sem_wait` whose spin the next op makes: an `atomic_add` lowered as a bulk
    /// reduction spins in its issuing threads only; any other op first spins in every thread
    /// (semaphore.rs).
    pub sem_wait: Option<SemWait>,
    /// In a kernel with a `sem_signal`: the registers of the signal it defers (semaphore.rs).
    pub signal: Option<Signal>,
    /// In a kernel with several consumer partitions, the shared memory each consumer allocates
    /// for itself (consumers.rs); `None` otherwise.
    pub arena: Option<Arena>,
    /// In a warp-specialized kernel whose producer's second warp issues the consumer's bulk
    /// reductions (writer.rs): its barriers, mailboxes and the consumer's phase.
    pub writer: Option<Writer>,
    /// The op after the one being lowered in its block (an `atomic_add` through the writer
    /// takes the `sem_signal` that follows it).
    pub next_op: Option<Op>,
    /// Set by an `atomic_add` that gave the following `sem_signal` to the writer: the predicate
    /// of its writer path, on which that signal's own lowering is skipped (semaphore.rs).
    pub taken_signal: Option<Reg>,
}

/// The writer warp's shared state (writer.rs): `parts` full barriers then `parts` empty ones
/// at `bars`, `parts` mailboxes at `mail`, and the consumer's phase register (flipped at each
/// message).
#[derive(Clone, Copy, Debug)]
pub struct Writer {
    pub bars: u32,
    pub mail: u32,
    pub parts: u32,
    pub phase: Reg,
}

/// The shared memory that each of several consumer partitions allocates for itself while its
/// region is lowered (staged operands, reduction partials, the bulk-reduction region, the
/// scratch region): one copy per consumer, consumer i's at `i × stride` past consumer 0's, where
/// the stride (the arena's size, rounded up to its alignment) is known only when the kernel is
/// finished ([`crate::ptx::emit::Operand::ArenaStride`]). Everything below `start` (the rings,
/// barriers and operands every consumer reads) has one copy.
#[derive(Clone, Copy, Debug)]
pub struct Arena {
    /// The first offset of the arena: the allocation top when the consumer region began.
    pub start: u32,
    /// How many copies there are (the consumer count).
    pub copies: u32,
    /// The largest alignment an allocation inside the arena asked for (16 at least): the
    /// stride is a multiple of it, so every copy keeps its allocations' alignment.
    pub align: u32,
    /// This consumer's base address, `kir_smem + %i × stride`, while the consumer region is
    /// lowered (every offset at or above `start` is added to it); `None` before and after.
    pub base: Option<Reg>,
}

/// Asynchronous work: TMA rings and mbarriers, warp specialization, and wgmma groups.
#[derive(Default)]
pub struct AsyncState {
    /// Tensor maps and mbarriers (tma.rs).
    pub tma: TmaState,
    /// Warp specialization: the launch's thread index and the deferred ops (ws.rs).
    pub ws: WsState,
    /// A wgmma group left in flight by a held dot (see `wgmma.rs`): the enclosing loop waits
    /// for it when it ends.
    pub wgmma_in_flight: bool,
}

/// How an IR value is held during lowering.
#[derive(Clone, Debug)]
pub enum Val {
    /// One register, the same in every thread.
    Scalar(Reg),
    /// One register per slot of `layout`.
    Tile {
        layout: Layout,
        shape: Vec<usize>,
        dtype: Dtype,
        regs: Vec<Reg>,
    },
    /// A rank-2 tile in shared memory at byte offset `off` (element (i, j) at
    /// `off + (i·row_stride + j·col_stride)·elem_bytes`; both strides 0: the core-matrix layout
    /// of a wgmma operand, see `wgmma.rs`), plus `dyn_off` bytes known only at run time (a stage
    /// of a ring that is not unrolled, read by wgmma alone: sched.rs).
    Shared {
        off: u32,
        dyn_off: Option<Reg>,
        shape: [usize; 2],
        dtype: Dtype,
        row_stride: usize,
        col_stride: usize,
    },
}

/// A tensor param: its base pointer, dtype, dims and element strides.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    pub ptr: Reg,
    pub dtype: Dtype,
    pub dims: Vec<Reg>,
    pub strides: Vec<Reg>,
    /// True when the last dim has stride 1 (C order, or declared strides ending in literal 1),
    /// which vectorized access needs.
    pub contiguous_last: bool,
}

/// Where the stages of one `smem_alloc` live.
#[derive(Clone, Debug)]
pub struct StageBuf {
    /// Offset of stage 0; stage h at `off + h · stride`.
    pub off: u32,
    pub stride: u32,
    pub stages: usize,
    /// One stage: [rows, cols].
    pub shape: [usize; 2],
    pub dtype: Dtype,
    /// The core-matrix layout of wgmma operands (else rows padded by 16 bytes).
    pub core: bool,
}

/// How one access spreads over the block's threads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dist {
    /// One element, from every thread (loads) or thread 0 (stores).
    Scalar,
    /// Each element of a register tile from the thread that holds it.
    Tile(Layout, Vec<usize>),
    /// Unknown: different distributions on different paths.
    Mixed,
}

/// The distribution of each tensor's last store since the last block barrier.
pub type State = HashMap<String, Dist>;

/// One `mbar_alloc`: its shared offset and stage count.
#[derive(Clone, Copy, Debug)]
pub struct MbarBuf {
    pub off: u32,
    pub stages: usize,
    /// The per-stage count of rows a row-prefix-masked fill delivers (`tma_rows.rs`), for a
    /// barrier such fills complete on: one 32-bit word per stage.
    pub rows_off: Option<u32>,
    /// Whether the cluster's CTAs arrive on it (`mbar_arrive … cluster`): each arrival on it
    /// is made on the peer CTA's barrier too.
    pub cluster: bool,
}

/// What the TMA lowering keeps per kernel.
#[derive(Clone, Debug, Default)]
pub struct TmaState {
    /// Generic addresses of the tensor-map params, by (tensor param, box).
    pub maps: HashMap<(String, Vec<u32>), Reg>,
    /// The barriers allocated so far.
    pub bars: HashMap<Value, MbarBuf>,
    /// The filling thread (lane 0 of the last warp), made on first use.
    pub(super) elected: Option<Reg>,
    /// `lane == 0`, made on first use.
    pub(super) lane0: Option<Reg>,
    /// Lowering a producer block (on the filling warp, producer.rs, or a warp-specialized
    /// producer's thread 0, ws.rs).
    pub in_producer: bool,
    /// In a producer block run by the filling warp: the predicate of its lane that arrives and
    /// copies (elected by `elect.sync`); `None` where one thread runs the producer alone.
    pub(super) lead: Option<Reg>,
    /// The filling warp (the block's last), made on first use.
    pub(super) filling_warp: Option<Reg>,
    /// Lowering a warp-specialized producer whose warps copy without tensor maps (ws.rs).
    pub by_warps: bool,
    /// Lowering the body of a ring that is not unrolled (stage indices may be registers).
    pub dynamic_ring: bool,
    /// Empty-barrier arrivals a warp-specialized consumer defers while a held wgmma reads the
    /// stage: per barrier, the register holding the stage still owed (−1: none).
    pub owed: Vec<(Value, Reg)>,
}

/// What the lowering keeps for a warp-specialized kernel.
#[derive(Clone, Debug, Default)]
pub struct WsState {
    /// `%tid.x` (the consumer's `Ctx::tid` counts from its first warp).
    pub raw_tid: Option<Reg>,
    /// Ops before `warp_specialize` lowered in the consumer partition instead of in place.
    pub deferred: HashSet<Op>,
    /// The deferred ops in program order.
    pub(super) order: Vec<Op>,
    /// Whether every tensor the kernel copies with TMA admits a tensor map (made on first use).
    pub(super) tma_ok: Option<Reg>,
    /// In a cluster: CTAs per cluster, and this CTA's rank in it (`%cluster_ctarank`).
    pub(super) cluster: Option<(u32, Reg)>,
}

/// What the kernel's `print` ops need from the module and the entry (print.rs): the format
/// strings (the module declares each as `.global` bytes named after the kernel symbol), the
/// size of the `.local` argument buffer, and its generic address once made.
#[derive(Default)]
pub struct PrintState {
    /// The kernel's symbol, which names its format strings.
    pub symbol: String,
    /// The format strings, in order of first use.
    pub formats: Vec<String>,
    /// Bytes of the largest argument list (0: the kernel prints nothing).
    pub args_bytes: u32,
    /// The generic address of the argument buffer (set in the prologue at the first print).
    pub args: Option<Reg>,
}

/// The kernel's bulk-reduction region: its shared offset and bytes, and how it is split
/// between the warpgroups (every bulk reduction of a kernel must split it alike, so that a
/// warpgroup's wait for its own reads covers every later write to its part).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub off: u32,
    pub bytes: u32,
    pub split: Split,
}

/// A `sem_wait` not yet spun on: the counter's address, whether it is inside its tensor, and
/// the count to reach (semaphore.rs).
#[derive(Clone, Copy, Debug)]
pub struct SemWait {
    pub addr: Reg,
    pub inb: Reg,
    pub want: Reg,
}

/// The deferred `sem_signal` of a kernel (semaphore.rs): the counter's address, and whether a
/// signal is owed (uniform across the block).
#[derive(Clone, Copy, Debug)]
pub struct Signal {
    pub addr: Reg,
    pub owed: Reg,
}

/// Who writes and issues a bulk reduction (bulk_reduce.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// The whole block writes the region between block barriers; thread 0 issues.
    Block,
    /// Each of `groups` warpgroups writes its `part_bytes` of the region between named
    /// barriers `first_bar + w` over its 128 threads; its first thread issues.
    Groups {
        groups: u32,
        part_bytes: u32,
        first_bar: u32,
    },
}
