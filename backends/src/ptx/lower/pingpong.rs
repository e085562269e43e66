//! Inter-warpgroup ping-pong for loops of wgmma dots (FlashAttention-3's schedule, without warp
//! specialization): in a block of two warpgroups whose loop body issues k ≥ 2 wgmma dots, the
//! warpgroups take turns on the tensor cores. Per iteration the issue order is
//! D0(wg0), D0(wg1), D1(wg0), D1(wg1), …, so while one warpgroup runs its softmax (the work
//! between two dots) the other one's dot occupies the tensor cores.
//!
//! The order comes from named barriers (ids 1 ..= 2k − 1; id 0 is the block-wide `bar.sync 0`):
//! - X_i (id 1 + i): warpgroup 0 arrives after issuing D_i; warpgroup 1 waits on it before
//!   issuing D_i.
//! - Y_i (id 1 + k + i, i < k − 1): warpgroup 1 arrives after issuing D_i; warpgroup 0 waits on
//!   it before issuing D_{i+1}.
//!
//! Each barrier counts 256 threads per phase (one warpgroup arriving, the other waiting), once per
//! iteration; the wrap-around (D0 of the next iteration after D_{k−1}) is ordered by the loop's
//! own block-wide barrier. Both warpgroups run the same trip count (loop bounds are uniform in a
//! block) and the dots sit directly in the loop body (no branch around them), so every phase
//! gets its 256 arrivals: the barriers order issue, they cannot deadlock. Results do not depend
//! on the order (each warpgroup computes its own rows).

use super::ctx::Ctx;
use crate::ptx::emit::{PtxInst, Reg, RegClass};
use crate::ptx::plan::roles::Turn;

/// This thread's warpgroup is warpgroup 0 (a predicate).
fn first_group(c: &mut Ctx) -> Reg {
    let (wg, p) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::Pred));
    c.b.ins(PtxInst::new("shr.u32").op(wg).op(c.thread.warp).op(2));
    c.b.ins(PtxInst::new("setp.eq.u32").op(p).op(wg).op(0));
    p
}

/// Waits for this warpgroup's turn before issuing the dot of turn `t`.
pub fn before_issue(c: &mut Ctx, t: Turn) {
    let p = first_group(c);
    if t.index > 0 {
        c.b.ins(
            PtxInst::new("bar.sync")
                .op(1 + t.count + t.index - 1)
                .op(256)
                .guard(p, false),
        );
    }
    c.b.ins(
        PtxInst::new("bar.sync")
            .op(1 + t.index)
            .op(256)
            .guard(p, true),
    );
}

/// Hands the turn on after issuing (and committing) the dot of turn `t`.
pub fn after_issue(c: &mut Ctx, t: Turn) {
    let p = first_group(c);
    c.b.ins(
        PtxInst::new("bar.arrive")
            .op(1 + t.index)
            .op(256)
            .guard(p, false),
    );
    if t.index + 1 < t.count {
        c.b.ins(
            PtxInst::new("bar.arrive")
                .op(1 + t.count + t.index)
                .op(256)
                .guard(p, true),
        );
    }
}
