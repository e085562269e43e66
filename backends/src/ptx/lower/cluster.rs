//! Clusters of two CTAs on the PTX backend (`warp_specialize … cluster 2`, the `cluster` pass of
//! docs/passes.md), on targets with clusters (sm_90a and later):
//!
//! - [`cluster_start`]: this CTA's rank (`%cluster_ctarank`) and a cluster barrier after the
//!   mbarriers' initialisation (`fence.mbarrier_init.release.cluster`, tma.rs), so neither CTA
//!   copies into the other or arrives on its barriers before they exist; [`cluster_barrier`]
//!   again before the kernel exits (ws.rs), so neither leaves while the other may still do so.
//!   The kernel declares `.reqnctapercluster 2, 1, 1` (kernel.rs): the launch needs no cluster
//!   attribute.
//! - [`multicast`] and [`issue_shared`]: a ring copy marked `multicast %p` whose tile is an even
//!   number of 64-column boxes is issued half by each CTA when %p holds, each box
//!   `.multicast::cluster` to both CTAs (mask 0b11) at the same shared offset, completing its
//!   bytes on both CTAs' barriers at the same offset; where %p does not hold, the caller's
//!   local copies run instead (tma.rs, `lower_copy`). [`BoxCopy::inst`] builds the copy
//!   instruction of one box for both, with or without the mask.
//! - [`peer_arrive`]: a release of a stage (`mbar_arrive … cluster 2`) also arrives on the peer
//!   CTA's barrier (`mapa`, then `mbarrier.arrive.shared::cluster` with its default, CTA-scope
//!   release: the reads it releases have retired, and a `.release.cluster` arrival made ptxas
//!   emit `MEMBAR.ALL.GPU` in the mainloop, 1.6× slower on an H100).

use super::ctx::{Ctx, Val};
use super::PtxError;
use crate::abi::TMA_BOX_COLS;
use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::{Operand, PtxInst, Reg, RegClass};
use crate::ptx::plan::roles::WsAttrs;
use kir_ir::{OpData, Span};

/// A copy both CTAs make: the predicate that it is shared now, this CTA's rank and the CTA
/// mask of both (a 16-bit register).
pub(super) struct Shared {
    pub(super) pred: Reg,
    rank: Reg,
    mask: Reg,
}

/// What [`issue_shared`] needs of a tensor copy into a core-layout stage: the tensor map, the
/// barrier's address, the copy's element offsets (outermost first), the tensor's rank, the
/// stage's rows, its shared offset and the run-time stage offset.
pub(super) struct BoxCopy<'a> {
    pub(super) map: Reg,
    pub(super) mbar: Reg,
    pub(super) offs: &'a [Reg],
    pub(super) rank: usize,
    pub(super) rows: usize,
    pub(super) off: u32,
    pub(super) dyn_off: Option<Reg>,
}

impl BoxCopy<'_> {
    /// The tensor copy of one box into shared address `dst` from column `col` of the tile
    /// (`cp.async.bulk.tensor`, coordinates innermost first, completing on the barrier): into
    /// this CTA's stage, or with `multicast` (the CTA mask) into the same stage of each CTA
    /// the mask names.
    pub(super) fn inst(&self, dst: Reg, col: Reg, multicast: Option<Reg>) -> PtxInst {
        let mut coords = vec![Operand::from(col)];
        coords.extend(self.offs[..self.rank - 1].iter().rev().map(Operand::from));
        let inst = PtxInst::new("cp.async.bulk.tensor")
            .m(format_args!("{}d", self.rank))
            .m("shared::cluster.global.mbarrier::complete_tx::bytes");
        let inst = match multicast {
            Some(_) => inst.m("multicast::cluster"),
            None => inst,
        };
        let inst = inst
            .addr(dst)
            .op(Operand::Tensor(Box::new(self.map.into()), coords))
            .addr(self.mbar);
        match multicast {
            Some(mask) => inst.op(mask),
            None => inst,
        }
    }
}

/// In a cluster (`warp_specialize … cluster 2`): this CTA's rank, and the first cluster barrier.
/// Clusters of another size, or on a target without clusters, are an error naming them.
pub(super) fn cluster_start(c: &mut Ctx, a: &WsAttrs, sp: Span) -> Result<(), PtxError> {
    match a.cluster {
        1 => Ok(()),
        2 if c.target.has_clusters() => {
            let rank = c.b.reg(RegClass::B32);
            c.b.need(Isa::CLUSTER).ins(
                PtxInst::new("mov.u32")
                    .op(rank)
                    .op(Operand::Special("%cluster_ctarank")),
            );
            c.asyncs.ws.cluster = Some((2, rank));
            cluster_barrier(c);
            Ok(())
        }
        n => Err(PtxError::at(
            sp,
            format!(
                "the PTX backend lowers clusters of 2 CTAs on targets with clusters; this \
                 `warp_specialize` asks for {n} on {}",
                c.target.name()
            ),
        )),
    }
}

/// Every thread of both CTAs: `barrier.cluster.arrive.release` then `wait.acquire` (the forms
/// without `.aligned`: the threads may come from different branches).
pub(super) fn cluster_barrier(c: &mut Ctx) {
    c.b.need(Isa::CLUSTER)
        .ins(PtxInst::new("barrier.cluster.arrive.release"));
    c.b.need(Isa::CLUSTER)
        .ins(PtxInst::new("barrier.cluster.wait.acquire"));
}

/// A copy's `multicast %p` where it can be shared: on the producer's thread (`pre` is `None`)
/// of a cluster of 2, with an even number `nblk` of boxes. `None` (each CTA copies the whole
/// tile) otherwise.
pub(super) fn multicast(
    c: &mut Ctx,
    op: &OpData,
    nblk: usize,
    pre: Option<Reg>,
) -> Result<Option<Shared>, PtxError> {
    let Some(kir_ir::Attr::Value(v)) = op.attr("multicast") else {
        return Ok(None);
    };
    let Some((2, rank)) = c.asyncs.ws.cluster else {
        return Ok(None);
    };
    if pre.is_some() || nblk % 2 != 0 {
        return Ok(None);
    }
    let Val::Scalar(pred) = c.val(*v, op.span)? else {
        return Err(PtxError::at(op.span, "`multicast` must be a scalar i1"));
    };
    let mask = c.b.reg(RegClass::B16);
    c.b.ins(PtxInst::new("mov.b16").op(mask).op(3));
    Ok(Some(Shared { pred, rank, mask }))
}

/// This CTA's half of the `nblk` boxes of a shared copy, under its predicate: boxes
/// rank · nblk/2 … (rank + 1) · nblk/2 − 1, each written into both CTAs' stages.
pub(super) fn issue_shared(c: &mut Ctx, cp: &BoxCopy, nblk: usize, sh: &Shared) {
    let half = nblk / 2;
    let first = c.b.reg(RegClass::B32);
    c.b.ins(
        PtxInst::new("mul.lo.s32")
            .op(first)
            .op(sh.rank)
            .op(half as u32),
    );
    for j in 0..half {
        let (b, dst, col) = (
            c.b.reg(RegClass::B32),
            c.b.reg(RegClass::B32),
            c.b.reg(RegClass::B32),
        );
        c.b.ins(PtxInst::new("add.s32").op(b).op(first).op(j as u32));
        // The box lands at stage offset + b · rows · 128 (the core layout, tma.rs) and starts
        // at column b · 64 of the tile.
        let smem = c.mem.smem;
        c.b.ins(
            PtxInst::new("mad.lo.s32")
                .op(dst)
                .op(b)
                .op((cp.rows * 128) as u32)
                .op(smem),
        );
        c.b.ins(PtxInst::new("add.u32").op(dst).op(dst).op(cp.off));
        let dst = c.plus_dyn(dst, cp.dyn_off);
        c.b.ins(
            PtxInst::new("mad.lo.s32")
                .op(col)
                .op(b)
                .op(TMA_BOX_COLS)
                .op(cp.offs[cp.rank - 1]),
        );
        c.b.need(Isa::CLUSTER)
            .need(Isa::CP_ASYNC_BULK_TENSOR)
            .ins(cp.inst(dst, col, Some(sh.mask)).guard(sh.pred, false));
    }
}

/// The same arrival on the peer CTA's barrier at shared address `a` (its offset in this CTA),
/// by the threads of predicate `p` (module doc).
pub(super) fn peer_arrive(c: &mut Ctx, a: Reg, p: Reg, sp: Span) -> Result<(), PtxError> {
    let Some((2, rank)) = c.asyncs.ws.cluster else {
        return Err(PtxError::at(
            sp,
            "the PTX backend lowers cluster arrivals in warp-specialized kernels with clusters of 2",
        ));
    };
    let (peer, ra) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
    c.b.ins(PtxInst::new("xor.b32").op(peer).op(rank).op(1));
    c.b.need(Isa::CLUSTER).ins(
        PtxInst::new("mapa.shared::cluster.u32")
            .op(ra)
            .op(a)
            .op(peer),
    );
    c.b.need(Isa::CLUSTER).ins(
        PtxInst::new("mbarrier.arrive.shared::cluster.b64")
            .op(Operand::Sink)
            .addr(ra)
            .guard(p, false),
    );
    Ok(())
}
