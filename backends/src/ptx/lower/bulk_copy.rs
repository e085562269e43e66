//! The bulk copies of row vectors that a TMA ring carries beside its tiles
//! (`kir_ir::masks::is_bulk_copy`: attention_bwd's lse and delta in the dK/dV kernel's ring of
//! query blocks); `row_staged.rs` reads them.
//!
//! The copy (`async_copy … bar` into a stage of a one-dimensional buffer) is the filling
//! thread's. When the vector lies inside its tensor (every leading index in bounds, its last
//! element before the innermost dim's end), its first element is 16-byte aligned and the
//! innermost dim is contiguous, the thread announces the vector's bytes on the stage's barrier
//! (`mbarrier.expect_tx`) and issues one `cp.async.bulk` from global to shared memory that
//! completes them there. Otherwise the elements are loaded one by one (the load's bounds and
//! `other`) and stored into the stage, then fenced for the async proxy (a bulk copy may write the
//! stage a round later): by the lanes of the filling warp where the warp runs the fill (an
//! unspecialized kernel's producer block, `producer.rs`; then `bar.warp.sync` before the elected
//! lane's arrival), else by the one thread. The pipelining pass puts bulk copies before the
//! fill's arrival, so in both cases the arrival comes after: its release publishes the stores of
//! the element path, and its `tx` is the IR's less the bulk copies' bytes, which each copy
//! announced itself or never sent (`kir_ir::masks::bulk_bytes`, tma.rs). A producer run by warps
//! without tensor maps (`ws.rs`) copies the elements by warps and arrives per warp, as its tensor
//! copies do.

use super::ctx::{constant, Ctx};
use super::elem::{element, load_elem, offsets, row_inside};
use super::state::StageBuf;
use super::PtxError;
use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::{PtxInst, Reg, RegClass};
use crate::ptx::plan::ir::lit;
use kir_ir::{Attr, OpData};

/// A bulk copy of a vector into its stage at shared offset `off` (plus `dyn_off` for a
/// run-time stage), as the module doc says.
pub(super) fn copy(
    c: &mut Ctx,
    op: &OpData,
    buf: &StageBuf,
    off: u32,
    dyn_off: Option<Reg>,
) -> Result<(), PtxError> {
    let sp = op.span;
    let (t, info) = super::memory::copied_tensor(c, op)?;
    let (Some(Attr::Value(m)), Some(&s)) = (op.attr("bar"), op.operands.get(1)) else {
        return Err(PtxError::at(
            sp,
            "internal: a bulk copy without its barrier",
        ));
    };
    let (n, d) = (buf.shape[1], buf.dtype);
    if buf.shape[0] != 1 || d.size_bytes() != 4 || (n * 4) % 16 != 0 {
        return Err(PtxError::at(
            sp,
            format!(
                "internal: a bulk copy of {}×{n} {d}: the PTX backend copies rows of 32-bit \
                 elements whose bytes are a multiple of 16",
                buf.shape[0]
            ),
        ));
    }
    let bytes = (n * 4) as u32;
    let other = lit(op.attr("other")).unwrap_or(0.0);
    let offs = offsets(c, t, sp)?;
    let dst = c.b.reg(RegClass::B32);
    c.b.ins(PtxInst::new("add.u32").op(dst).op(c.mem.smem).op(off));
    let dst = c.plus_dyn(dst, dyn_off);
    if c.asyncs.tma.by_warps {
        let (tid, threads) = (c.thread.tid, c.plan.blk.threads);
        element_loop(c, &info, &offs, n, other, dst, tid, threads);
        return super::tma::warp_arrive(c, *m, s, sp);
    }
    let mbar = super::tma::bar_addr(c, *m, s, sp)?;
    let done = c.b.label("bulk_done");
    // Who runs this: the filling warp with its elected lane (an unspecialized kernel's producer
    // block), or one thread (the elected one of the block, or a warp-specialized producer's).
    let (warp, pre) = match (c.asyncs.tma.in_producer, c.asyncs.tma.lead) {
        (true, Some(lead)) => (true, Some(lead)),
        (true, None) => (false, None),
        (false, _) => (false, Some(super::tma::elected(c))),
    };
    if let (false, Some(p)) = (warp, pre) {
        c.b.ins_if(p, true, PtxInst::new("bra").op(&done));
    }
    if info.contiguous_last {
        let slow = c.b.label("bulk_elems");
        let zero = c.b.imm32(0);
        let (src, inb) = element(c, &info, &offs, &[zero]);
        let p = row_inside(c, &info, &offs, inb, n);
        c.and_aligned(p, src, 16);
        c.b.ins_if(p, true, PtxInst::new("bra").op(&slow));
        let lead = if warp { pre } else { None };
        c.b.need(Isa::MBARRIER_TX).ins(
            PtxInst::new("mbarrier.expect_tx.relaxed.cta.shared::cta.b64")
                .addr(mbar)
                .op(bytes)
                .guard_opt(lead),
        );
        c.b.need(Isa::CP_ASYNC_BULK).ins(
            PtxInst::new("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes")
                .addr(dst)
                .addr(src)
                .op(bytes)
                .addr(mbar)
                .guard_opt(lead),
        );
        c.b.ins(PtxInst::new("bra").op(&done));
        c.b.place(&slow);
    }
    if warp {
        // Two elements a lane at n = 64, one load latency; the elected lane's arrival after
        // `bar.warp.sync` publishes every lane's stores.
        let lane = c.b.reg(RegClass::B32);
        c.b.ins(PtxInst::new("and.b32").op(lane).op(c.thread.tid).op(31));
        element_loop(c, &info, &offs, n, other, dst, lane, 32);
        c.b.ins(PtxInst::new("bar.warp.sync").op(-1));
    } else {
        let first = c.b.imm32(0);
        element_loop(c, &info, &offs, n, other, dst, first, 1);
    }
    c.b.place(&done);
    Ok(())
}

/// Orders this thread's stores into a stage before any later write of it through the async
/// proxy (a bulk copy into the same stage a round later).
fn fence_stores(c: &mut Ctx) {
    c.b.need(Isa::FENCE_PROXY_ASYNC)
        .ins(PtxInst::new("fence.proxy.async.shared::cta"));
}

/// Elements `first`, `first + step`, … below `n` of the vector, loaded with their bounds
/// (`other` outside the tensor) and stored at `dst + 4·e`, then fenced for the async proxy.
#[allow(clippy::too_many_arguments)]
fn element_loop(
    c: &mut Ctx,
    info: &super::ctx::TensorInfo,
    offs: &[Reg],
    n: usize,
    other: f64,
    dst: Reg,
    first: Reg,
    step: u32,
) {
    let d = info.dtype;
    let (e, p, sa) = (
        c.b.reg(RegClass::B32),
        c.b.reg(RegClass::Pred),
        c.b.reg(RegClass::B32),
    );
    let (top, end) = (c.b.label("bulk_elem"), c.b.label("bulk_elem_end"));
    c.b.ins(PtxInst::new("mov.b32").op(e).op(first));
    c.b.place(&top);
    c.b.ins(PtxInst::new("setp.ge.u32").op(p).op(e).op(n as u32));
    c.b.ins_if(p, false, PtxInst::new("bra").op(&end));
    let r = constant(c, d, other);
    let (addr, inb) = element(c, info, offs, &[e]);
    load_elem(c, d, r, addr, inb);
    c.b.ins(PtxInst::new("mad.lo.s32").op(sa).op(e).op(4).op(dst));
    c.b.ins(PtxInst::new("st.shared.b32").addr(sa).op(r));
    c.b.ins(PtxInst::new("add.s32").op(e).op(e).op(step));
    c.b.ins(PtxInst::new("bra").op(&top));
    c.b.place(&end);
    fence_stores(c);
}
