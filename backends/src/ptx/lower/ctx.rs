//! Per-kernel lowering state: params and dims in registers, where each IR value lives, thread
//! coordinates of every layout, and the shared-memory plan.

pub use super::state::{
    AsyncState, MemState, Params, PrintState, TensorInfo, ThreadRegs, Val, ValueState,
};
use super::PtxError;
use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::{f32_lit, Builder, Operand, PtxInst, Reg, RegClass};
use crate::ptx::plan::layout::{self, Layout, Place};
use crate::ptx::plan::KernelPlan;
use crate::target::Target;
use kir_ir::{Dtype, Expr, Kernel, ParamKind, Value};

/// One slot's coordinates: one b32 index per tile dim, and whether the slot holds an element.
#[derive(Clone, Debug)]
pub struct SlotCoord {
    pub idx: Vec<Reg>,
    pub valid: Option<Reg>,
}

/// Lowering state of one kernel: the kernel and target, the builder, the kernel's plan, and the
/// per-concern state the lowering modules keep (see `state.rs`).
pub struct Ctx<'a> {
    pub k: &'a Kernel,
    pub target: Target,
    pub b: Builder,
    /// The kernel's plan: block, layouts, wgmma core tiles and ping-pong turns. Immutable
    /// except `blk`, which the producer partition of a warp-specialized kernel swaps (ws.rs).
    pub plan: KernelPlan,
    /// What each IR value lowered to.
    pub values: ValueState,
    /// Kernel params in registers.
    pub params: Params,
    /// Thread coordinates and the barrier of the running threads.
    pub thread: ThreadRegs,
    /// Shared memory, stage buffers and the order of global stores.
    pub mem: MemState,
    /// TMA rings, warp specialization and wgmma groups in flight.
    pub asyncs: AsyncState,
    /// The format strings and argument buffer of `print` ops.
    pub prints: PrintState,
    /// Decisions recorded for the kernel's [`super::report::PtxReport`].
    pub(super) report: super::report::Notes,
}

/// The lowered kernel.
pub struct Lowered {
    /// The `.entry`, from `.visible .entry` to its closing brace.
    pub text: String,
    /// Module-scope declarations the entry uses (its `print` format strings), which
    /// [`crate::ptx::compile_kernels`] puts in the module's head, before every entry: empty
    /// for a kernel without `print`.
    pub decls: String,
    /// Whether the entry calls `vprintf` (the module's head then declares its prototype once).
    pub calls_vprintf: bool,
    /// Threads per block.
    pub threads: u32,
    pub shared_bytes: u32,
    /// What the kernel's instructions need: PTX ISA version and target features.
    pub isa: crate::ptx::emit::isa::Requirements,
    /// The alignment the kernel needs of the dynamic shared memory base (16, or 1024 with
    /// wgmma operand tiles).
    pub smem_align: u32,
    /// The lowering decisions.
    pub report: super::report::PtxReport,
    /// The number of instructions in the `.entry` (its final `ret` included).
    pub instructions: usize,
}

/// The register class holding values of `d`.
pub fn class_of(d: Dtype) -> RegClass {
    match d {
        Dtype::F32 | Dtype::F16 | Dtype::Bf16 => RegClass::F32,
        Dtype::I32 | Dtype::U8 => RegClass::B32,
        Dtype::I64 => RegClass::B64,
        Dtype::I1 => RegClass::Pred,
    }
}

/// Bytes of one element of `d` in a shared-memory tile (bf16/f16 packed, the rest 32 bits,
/// i64 64 bits).
pub fn smem_bytes(d: Dtype) -> usize {
    match d {
        Dtype::F16 | Dtype::Bf16 => 2,
        Dtype::I64 => 8,
        Dtype::F32 | Dtype::I32 | Dtype::U8 | Dtype::I1 => 4,
    }
}

impl<'a> Ctx<'a> {
    /// A fresh register for a value of `d`.
    pub fn reg(&mut self, d: Dtype) -> Reg {
        self.b.reg(class_of(d))
    }

    /// Coordinates of every slot of a tile of `shape` in `layout`, computed at the use site
    /// (only the per-shape row base of `RowMma` is kept from the prologue), so coordinates do
    /// not occupy registers across the kernel.
    pub fn coords(&mut self, layout: Layout, shape: &[usize]) -> Vec<SlotCoord> {
        let (tid, blk) = (self.thread.tid, self.plan.blk);
        let n = layout::slots(layout, shape, blk);
        let mut out = Vec::with_capacity(n);
        match layout {
            Layout::Blocked => {
                let numel: usize = shape.iter().product();
                let t = blk.threads as usize;
                let v = crate::ptx::plan::VEC;
                for s in 0..n {
                    let e = self.b.reg(RegClass::B32);
                    // e = ((s / VEC)·T + tid)·VEC + s % VEC
                    self.b
                        .ins(PtxInst::new("add.s32").op(e).op(tid).op((s / v) * t));
                    self.b
                        .ins(PtxInst::new("mad.lo.s32").op(e).op(e).op(v).op(s % v));
                    let valid = if (s / v + 1) * t * v > numel {
                        let p = self.b.reg(RegClass::Pred);
                        self.b
                            .ins(PtxInst::new("setp.lt.u32").op(p).op(e).op(numel));
                        Some(p)
                    } else {
                        None
                    };
                    let idx = self.unravel(e, shape);
                    out.push(SlotCoord { idx, valid });
                }
            }
            Layout::RowMma | Layout::Grid => {
                for s in 0..n {
                    let sc = self.slot_coord(layout, shape, s);
                    out.push(sc);
                }
            }
        }
        out
    }

    /// Coordinates of slot `s` only (see [`Ctx::coords`]).
    pub fn slot_coord(&mut self, layout: Layout, shape: &[usize], s: usize) -> SlotCoord {
        let (tid, blk) = (self.thread.tid, self.plan.blk);
        match layout {
            Layout::Blocked => {
                let numel: usize = shape.iter().product();
                let (t, v) = (blk.threads as usize, crate::ptx::plan::VEC);
                let e = self.b.reg(RegClass::B32);
                self.b
                    .ins(PtxInst::new("add.s32").op(e).op(tid).op((s / v) * t));
                self.b
                    .ins(PtxInst::new("mad.lo.s32").op(e).op(e).op(v).op(s % v));
                let valid = ((s / v + 1) * t * v > numel).then(|| {
                    let p = self.b.reg(RegClass::Pred);
                    self.b
                        .ins(PtxInst::new("setp.lt.u32").op(p).op(e).op(numel));
                    p
                });
                let idx = self.unravel(e, shape);
                SlotCoord { idx, valid }
            }
            Layout::RowMma | Layout::Grid => {
                let (rowbase, colbase, sub) = if layout == Layout::Grid {
                    let (r, c, wn) = self.grid_bases(shape);
                    let (m, n) = layout::rows_cols(shape);
                    (r, c, vec![m, n / wn])
                } else {
                    (self.rowbase(shape), self.thread.colbase, shape.to_vec())
                };
                let (ro, co) = layout::rowmma_slot(&sub, s);
                let r = self.b.reg(RegClass::B32);
                self.b.ins(PtxInst::new("add.s32").op(r).op(rowbase).op(ro));
                let mut idx = vec![r];
                if shape.len() == 2 {
                    if shape[1] == 1 {
                        idx.push(self.b.imm32(0));
                    } else {
                        let c = self.b.reg(RegClass::B32);
                        self.b.ins(PtxInst::new("add.s32").op(c).op(colbase).op(co));
                        idx.push(c);
                    }
                }
                SlotCoord { idx, valid: None }
            }
        }
    }

    /// For a `Grid` tile of `shape`: (row base = wmi·M/wm + g, column base = wni·N/wn + 2q, wn),
    /// where warp = wmi·wn + wni (prologue registers, one pair per shape).
    pub fn grid_bases(&mut self, shape: &[usize]) -> (Reg, Reg, usize) {
        let (m, n) = layout::rows_cols(shape);
        let (wm, wn) = layout::grid_dims(shape, self.plan.blk);
        if let Some(&(r, c)) = self.thread.gridbases.get(&(m, n)) {
            return (r, c, wn);
        }
        let (warp, g, colbase) = (self.thread.warp, self.thread.g, self.thread.colbase);
        let (r, c, wmi, wni) = (
            self.b.reg(RegClass::B32),
            self.b.reg(RegClass::B32),
            self.b.reg(RegClass::B32),
            self.b.reg(RegClass::B32),
        );
        self.b.in_prologue(|b| {
            b.ins(PtxInst::new("div.u32").op(wmi).op(warp).op(wn));
            b.ins(PtxInst::new("rem.u32").op(wni).op(warp).op(wn));
            b.ins(PtxInst::new("mad.lo.s32").op(r).op(wmi).op(m / wm).op(g));
            b.ins(
                PtxInst::new("mad.lo.s32")
                    .op(c)
                    .op(wni)
                    .op(n / wn)
                    .op(colbase),
            );
        });
        self.thread.gridbases.insert((m, n), (r, c));
        (r, c, wn)
    }

    /// warp·(rows per warp) + g for a `RowMma` tile of `shape` (one prologue register per M).
    pub(super) fn rowbase(&mut self, shape: &[usize]) -> Reg {
        let (m, _) = layout::rows_cols(shape);
        if let Some(&r) = self.thread.rowbases.get(&m) {
            return r;
        }
        let (warp, g, w) = (
            self.thread.warp,
            self.thread.g,
            self.plan.blk.warps as usize,
        );
        let r = self.b.reg(RegClass::B32);
        self.b
            .in_prologue(|b| b.ins(PtxInst::new("mad.lo.s32").op(r).op(warp).op(m / w).op(g)));
        self.thread.rowbases.insert(m, r);
        r
    }
}

/// Offsets at or above this address the scratch region (relative to its final place).
pub const SCRATCH_BASE: u32 = 1 << 30;

impl Ctx<'_> {
    /// Per-lane (8·(m&1), 8·(m>>1), r) for ldmatrix.x4, where m = lane/8 picks the matrix and
    /// r = lane%8 its row (computed once, in the prologue).
    pub fn ldmatrix_lane(&mut self) -> (Reg, Reg, Reg) {
        if let Some(t) = self.thread.ldm_lane {
            return t;
        }
        let tid = self.thread.tid;
        let t = self.b.in_prologue(|b| {
            let (lane, m, mi, mj, r) = (
                b.reg(RegClass::B32),
                b.reg(RegClass::B32),
                b.reg(RegClass::B32),
                b.reg(RegClass::B32),
                b.reg(RegClass::B32),
            );
            b.ins(PtxInst::new("and.b32").op(lane).op(tid).op(31));
            b.ins(PtxInst::new("shr.u32").op(m).op(lane).op(3));
            b.ins(PtxInst::new("and.b32").op(r).op(lane).op(7));
            b.ins(PtxInst::new("and.b32").op(mi).op(m).op(1));
            b.ins(PtxInst::new("shl.b32").op(mi).op(mi).op(3));
            b.ins(PtxInst::new("shr.u32").op(mj).op(m).op(1));
            b.ins(PtxInst::new("shl.b32").op(mj).op(mj).op(3));
            (mi, mj, r)
        });
        self.thread.ldm_lane = Some(t);
        t
    }

    /// Like [`Ctx::alloc_shared`], at a multiple of `align` bytes (a power of two). Inside the
    /// region of one of several consumers the allocation is in its arena, whose copies keep
    /// the alignment ([`super::state::Arena`]).
    pub fn alloc_shared_aligned(&mut self, bytes: u32, align: u32) -> u32 {
        let off = self.mem.smem_top.div_ceil(align) * align;
        self.mem.smem_top = off + bytes;
        if let Some(a) = self.mem.arena.as_mut().filter(|a| a.base.is_some()) {
            a.align = a.align.max(align);
        }
        off
    }

    /// The register that shared offset `off` is added to: the kernel's shared base, or, inside
    /// the region of one of several consumers, that consumer's arena base for an offset the
    /// region allocated (at or above the arena's start, the scratch region included).
    pub fn smem_base(&self, off: u32) -> Reg {
        match self.mem.arena {
            Some(super::state::Arena {
                start,
                base: Some(b),
                ..
            }) if off >= start => b,
            _ => self.mem.smem,
        }
    }

    /// The tensor a memory op (or a semaphore) references, and what the kernel knows of it.
    pub fn tensor_of<'o>(
        &self,
        op: &'o kir_ir::OpData,
    ) -> Result<(&'o kir_ir::TensorRef, TensorInfo), PtxError> {
        let sp = op.span;
        let t = op
            .tensor
            .as_ref()
            .ok_or_else(|| PtxError::at(sp, "memory op without a tensor"))?;
        Ok((t, self.tensor_info(&t.param, sp)?))
    }

    /// What the kernel knows of tensor param `param` (an error at `sp` if it has none).
    pub fn tensor_info(&self, param: &str, sp: kir_ir::Span) -> Result<TensorInfo, PtxError> {
        self.params
            .tensors
            .get(param)
            .cloned()
            .ok_or_else(|| PtxError::at(sp, format!("unknown tensor `{param}`")))
    }

    /// Synchronizes (and orders the shared-memory accesses of) every thread that runs the code
    /// being lowered: the whole block, or the partition's named barrier (see `block_bar`).
    pub fn sync_block(&mut self) {
        match &self.thread.block_bar {
            None => self.b.ins(PtxInst::new("bar.sync").op(0)),
            Some((id, n)) => {
                let inst = PtxInst::new("bar.sync").op(id.clone()).op(*n);
                self.b.ins(inst)
            }
        }
    }

    /// Reserves `bytes` of shared memory (16-byte aligned) for the rest of the kernel.
    pub fn alloc_shared(&mut self, bytes: u32) -> u32 {
        let off = self.mem.smem_top.div_ceil(16) * 16;
        self.mem.smem_top = off + bytes;
        off
    }

    /// The shared address of element (idx[0]·rs + idx[1]·cs) of a region at `off` with
    /// elements of `eb` bytes (idx may have one or two entries).
    pub fn smem_addr(&mut self, off: u32, idx: &[Reg], rs: usize, cs: usize, eb: usize) -> Reg {
        let a = self.b.reg(RegClass::B32);
        match idx {
            [i, j] => {
                self.b.ins(PtxInst::new("mul.lo.s32").op(a).op(i).op(rs));
                let t = self.b.reg(RegClass::B32);
                self.b.ins(PtxInst::new("mul.lo.s32").op(t).op(j).op(cs));
                self.b.ins(PtxInst::new("add.s32").op(a).op(a).op(t));
            }
            [i] => self.b.ins(PtxInst::new("mul.lo.s32").op(a).op(i).op(rs)),
            _ => self.b.ins(PtxInst::new("mov.b32").op(a).op(0)),
        }
        self.b.ins(
            PtxInst::new("mad.lo.s32")
                .op(a)
                .op(a)
                .op(eb)
                .op(self.smem_base(off)),
        );
        if off >= SCRATCH_BASE {
            // The scratch region goes after every other region; its offset is patched in once
            // the kernel is lowered (see `lower_kernel`).
            self.mem.scratch_used = true;
            self.b.ins(
                PtxInst::new("add.s32")
                    .op(a)
                    .op(a)
                    .op(Operand::Scratch(off - SCRATCH_BASE)),
            );
        } else if off > 0 {
            self.b.ins(PtxInst::new("add.s32").op(a).op(a).op(off));
        }
        a
    }

    /// The shared address `off + rel` (`rel` a byte offset within the region).
    /// `p &= (addr % bytes == 0)` for a global address `addr` (b64) and a power of two `bytes`
    /// up to 2³¹ (the low word decides).
    pub fn and_aligned(&mut self, p: Reg, addr: Reg, bytes: u32) {
        debug_assert!(bytes.is_power_of_two());
        let (lo, al) = (self.b.reg(RegClass::B32), self.b.reg(RegClass::Pred));
        self.b.ins(PtxInst::new("cvt.u32.u64").op(lo).op(addr));
        self.b
            .ins(PtxInst::new("and.b32").op(lo).op(lo).op(bytes - 1));
        self.b.ins(PtxInst::new("setp.eq.u32").op(al).op(lo).op(0));
        self.b.ins(PtxInst::new("and.pred").op(p).op(p).op(al));
    }

    /// `a + dyn_off` (a shared address plus a stage's run-time byte offset), or `a`.
    pub fn plus_dyn(&mut self, a: Reg, dyn_off: Option<Reg>) -> Reg {
        match dyn_off {
            None => a,
            Some(d) => {
                let r = self.b.reg(RegClass::B32);
                self.b.ins(PtxInst::new("add.s32").op(r).op(a).op(d));
                r
            }
        }
    }

    pub fn shared_at(&mut self, off: u32, rel: Reg) -> Reg {
        self.smem_addr(off, &[rel], 1, 1, 1)
    }

    /// Row-major linear index of a slot's coordinates within `shape`.
    pub fn linear(&mut self, idx: &[Reg], shape: &[usize]) -> Reg {
        let r = self.b.reg(RegClass::B32);
        self.b.ins(PtxInst::new("mov.b32").op(r).op(0));
        for (d, &i) in idx.iter().enumerate() {
            self.b.ins(
                PtxInst::new("mad.lo.s32")
                    .op(r)
                    .op(r)
                    .op(shape.get(d).copied().unwrap_or(1))
                    .op(i),
            );
        }
        r
    }

    pub(super) fn setup_tensors(&mut self) -> Result<(), PtxError> {
        for p in &self.k.params {
            let ParamKind::Tensor(_, t) = &p.kind else {
                continue;
            };
            let dim_regs = self.prologue_exprs(&t.dims)?;
            let stride_regs = match &t.strides {
                Some(st) => self.prologue_exprs(st)?,
                None => {
                    let one = self.b.in_prologue(|b| b.imm32(1));
                    let mut st = vec![one; dim_regs.len()];
                    for i in (0..dim_regs.len().saturating_sub(1)).rev() {
                        let r = self.b.reg(RegClass::B32);
                        let (a, bb) = (st[i + 1], dim_regs[i + 1]);
                        self.b
                            .in_prologue(|b| b.ins(PtxInst::new("mul.lo.s32").op(r).op(a).op(bb)));
                        st[i] = r;
                    }
                    st
                }
            };
            let contiguous_last = match &t.strides {
                None => true,
                Some(st) => st.last().and_then(|e| e.as_int()) == Some(1),
            };
            if let Some(info) = self.params.tensors.get_mut(&p.name) {
                info.dims = dim_regs;
                info.strides = stride_regs;
                info.contiguous_last = contiguous_last;
            }
        }
        Ok(())
    }

    /// Evaluates expressions over dims in the prologue.
    fn prologue_exprs(&mut self, es: &[Expr]) -> Result<Vec<Reg>, PtxError> {
        self.b.swap_sections();
        let r = es.iter().map(|e| self.expr(e)).collect();
        self.b.swap_sections();
        r
    }
}

/// Where `v` lives (a scalar when the plan has no place for it).
pub fn place(c: &Ctx, v: Value) -> Place {
    c.plan.places.get(&v).copied().unwrap_or(Place::Scalar)
}

/// The dtype of `v` (f32 for a value without one).
pub fn dtype(c: &Ctx, v: Value) -> Dtype {
    c.k.dfg.ty(v).dtype().unwrap_or(Dtype::F32)
}

/// The shape of `v` (empty for a scalar).
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

impl Ctx<'_> {
    /// The row-major coordinates of linear element index `e` in a tile of `shape`: `e % n` of
    /// the innermost dim, then the quotient's for the next, the last quotient for dim 0
    /// (divisions by powers of two as shifts and masks, `PtxInst::strength_reduced`).
    pub(super) fn unravel(&mut self, e: Reg, shape: &[usize]) -> Vec<Reg> {
        let mut idx = vec![e; shape.len()];
        let mut rest = e;
        for d in (1..shape.len()).rev() {
            let (r, q) = (self.b.reg(RegClass::B32), self.b.reg(RegClass::B32));
            let rem = PtxInst::new("rem.u32").op(r).op(rest).op(shape[d]);
            self.b.ins(rem.strength_reduced());
            let div = PtxInst::new("div.u32").op(q).op(rest).op(shape[d]);
            self.b.ins(div.strength_reduced());
            idx[d] = r;
            rest = q;
        }
        if !shape.is_empty() {
            idx[0] = rest;
        }
        idx
    }
}

impl Ctx<'_> {
    /// The predicate `lane == 0` (set once, in the prologue).
    pub fn lane0(&mut self) -> Reg {
        if let Some(p) = self.asyncs.tma.lane0 {
            return p;
        }
        let (p, l, tid) = (
            self.b.reg(RegClass::Pred),
            self.b.reg(RegClass::B32),
            self.thread.tid,
        );
        self.b.in_prologue(|b| {
            b.ins(PtxInst::new("and.b32").op(l).op(tid).op(31));
            b.ins(PtxInst::new("setp.eq.u32").op(p).op(l).op(0));
        });
        self.asyncs.tma.lane0 = Some(p);
        p
    }

    /// Lane 0 of this warp arrives on the mbarrier at shared address `a` once every lane of
    /// the warp is done; returns the lane-0 predicate.
    pub fn warp_arrive_at(&mut self, a: Reg) -> Reg {
        let l0 = self.lane0();
        self.arrive_after_warp(a, l0);
        l0
    }

    /// The lanes where `p` holds arrive on the mbarrier at shared address `a` once every lane
    /// of the warp is done (`bar.warp.sync` orders the lanes' accesses before the arrival's
    /// release).
    pub fn arrive_after_warp(&mut self, a: Reg, p: Reg) {
        self.b.ins(PtxInst::new("bar.warp.sync").op(-1));
        self.b.need(Isa::MBARRIER_TX).ins(
            PtxInst::new("mbarrier.arrive.shared::cta.b64")
                .op(Operand::Sink)
                .addr(a)
                .guard(p, false),
        );
    }
}
