//! The warp-specialized producer's fallback when a copied tensor admits no tensor map (its
//! address, a stride or its innermost dim break TMA's 16-byte rules, the rule the launcher
//! applies before passing zeros instead, abi.rs): the run-time predicate that the maps are
//! real ([`tma_ok`]), and the arrivals a full barrier then counts per phase, one per producer
//! warp and copy ([`fallback_arrivals`]); ws.rs lowers the copies themselves.

use super::ctx::Ctx;
use crate::ptx::emit::{PtxInst, Reg, RegClass};
use crate::ptx::plan::roles::ws_op;
use kir_ir::{Kernel, Opcode};

/// The predicate (in the prologue) that every tensor copied with TMA has a 16-byte aligned
/// address, byte strides that are multiples of 16 and a contiguous innermost dim: exactly when
/// the launcher encodes its tensor maps rather than passing zeros (abi.rs, `fallback`).
pub fn tma_ok(c: &mut Ctx) -> Reg {
    if let Some(p) = c.asyncs.ws.tma_ok {
        return p;
    }
    let ok = c.b.reg(RegClass::Pred);
    let mut params: Vec<String> = crate::abi::tma_copies(c.k)
        .into_iter()
        .map(|(p, _, _)| p)
        .collect();
    params.dedup();
    let infos: Vec<_> = params
        .iter()
        .filter_map(|p| c.params.tensors.get(p).cloned())
        .collect();
    let mut lines = vec![PtxInst::new("setp.eq.u32").op(ok).op(0).op(0)];
    for info in &infos {
        if !info.contiguous_last {
            lines.push(PtxInst::new("setp.ne.u32").op(ok).op(0).op(0));
            continue;
        }
        let vec = 16 / info.dtype.size_bytes().max(1);
        let t = c.b.reg(RegClass::B64);
        lines.push(PtxInst::new("and.b64").op(t).op(info.ptr).op(15));
        lines.push(PtxInst::new("setp.eq.and.u64").op(ok).op(t).op(0).op(ok));
        for &st in &info.strides[..info.strides.len().saturating_sub(1)] {
            let m = c.b.reg(RegClass::B32);
            lines.push(PtxInst::new("and.b32").op(m).op(st).op(vec - 1));
            lines.push(PtxInst::new("setp.eq.and.u32").op(ok).op(m).op(0).op(ok));
        }
    }
    c.b.in_prologue(|b| {
        for l in lines {
            b.ins(l);
        }
    });
    c.asyncs.ws.tma_ok = Some(ok);
    ok
}

/// The arrivals per phase of full barrier `m` when the producer's warps copy (no tensor map):
/// one per warp and copy of a loop iteration (every loop that fills `m` copies equally often),
/// or per copy outside any loop (a one-stage operand the producer fills once, warp_spec_stage).
pub fn fallback_arrivals(c: &Ctx, m: kir_ir::Value) -> Result<u64, String> {
    let k = c.k;
    let Some((_, a)) = ws_op(k) else {
        return Err("internal: no warp_specialize".into());
    };
    fn walk(k: &Kernel, b: kir_ir::Block, m: kir_ir::Value, counts: &mut Vec<usize>) -> usize {
        let mut here = 0;
        for &o in &k.dfg.blocks[b].ops {
            let od = &k.dfg.ops[o];
            if od.opcode == Opcode::AsyncCopy
                && matches!(od.attr("bar"), Some(kir_ir::Attr::Value(v)) if *v == m)
            {
                here += 1;
            }
            for &r in &od.regions {
                let n = walk(k, r, m, counts);
                if od.opcode == Opcode::For && n > 0 {
                    counts.push(n);
                } else {
                    here += n;
                }
            }
        }
        here
    }
    let mut counts = Vec::new();
    let outside = walk(k, k.body, m, &mut counts);
    counts.dedup();
    match (outside, counts.as_slice()) {
        (0, &[n]) | (n @ 1.., []) => Ok(u64::from(a.producer_warps) * n as u64),
        _ => Err(
            "the producer's loops fill one barrier with different numbers of copies, which the \
             copies without a tensor map cannot count"
                .into(),
        ),
    }
}
