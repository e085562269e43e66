//! TMA rings for the `pipelining` pass (see its module doc, "TMA rings"): which loops get a ring
//! of mbarriers instead of cp.async copy groups, and the barrier ops that ring adds.
//!
//! A ring qualifies when the target has TMA and wgmma (`PipelineConfig::tma_rings`), it is not a
//! held ring, and every copy is one a tensor copy makes exactly as `load` defines it:
//! - a 2-D tile of f16/bf16 over the two trailing dims of an `in` tensor of rank 2–5 that
//!   declares no strides and whose innermost dim is a literal multiple of 8 (so every stride is
//!   a multiple of 16 bytes, as a tensor map needs);
//! - rows a multiple of 8 up to 256 (one box per 64 columns, at most 256 rows), columns a
//!   multiple of 64 (one 128-byte swizzle span of 16-bit elements per box);
//! - no `mask` but a row-prefix one (`kir_ir::masks::row_prefix_bound`: a key range's end, whose rows past it
//!   the backend zeroes in shared memory after the copy lands), and `other` absent or +0 (a
//!   tensor copy fills out-of-tensor elements with +0).
//!
//! The ring of S stages then uses `%full = mbar_alloc arrivals 1 : mbar<S>` (one arrival with the
//! stage's bytes per fill) and `%empty = mbar_alloc arrivals 1 : mbar<S>` (one arrival per
//! release), and the loop carries the parity `ph` of its round: iteration t (stage s = t mod S)
//! waits `mbar_wait %full, s, ph` where the cp.async ring waits for its group, arrives
//! `mbar_arrive %empty, s` after its releases, and flips `ph` after stage S − 1. The refill
//! for iteration t + S − 1 goes to stage s' = (s + S − 1) mod S, last read by iteration t − 1:
//! it first waits on `%empty[s']` for that read's round, parity `ph xor 1` when s = 0 and `ph`
//! otherwise (a fresh barrier passes parity 1 at once, so the first fill of each stage does not
//! wait), then `mbar_arrive %full, s' tx BYTES` and the copies with `bar %full`.

use super::candidates::Cand;
use kir_ir::edit::{iconst, insert_op, op2, simple};
use kir_ir::{
    Access, Attr, Block, CmpPred, Dtype, ExprKind, Kernel, Op, Opcode, ParamKind, Type, Value,
};

/// Whether loop `l`'s ring can be a TMA ring: nothing but `for` loops encloses it (see
/// `enclosing_loops`) and every copy can be a tensor copy (see the module doc).
pub(super) fn eligible(k: &Kernel, l: Op, cands: &[Cand]) -> bool {
    !cands.is_empty() && enclosing_loops(k, l).is_some() && cands.iter().all(|c| copy_ok(k, l, c))
}

/// The `for` loops that enclose op `o`, outermost first, or `None` when any other op with
/// regions (an `if`) encloses it. A ring inside loops runs once per iteration of each: its
/// barriers' phases run on from one run to the next, so such a ring carries the parity of each
/// stage through the loops (`thread_parities`) rather than one parity that restarts.
pub(super) fn enclosing_loops(k: &Kernel, o: Op) -> Option<Vec<Op>> {
    let mut loops = Vec::new();
    let mut cur = o;
    while let Some((p, od)) = k.dfg.ops.iter().find(|(_, od)| {
        od.regions
            .iter()
            .any(|&r| k.dfg.blocks[r].ops.contains(&cur))
    }) {
        if od.opcode != Opcode::For {
            return None;
        }
        loops.push(p);
        cur = p;
    }
    loops.reverse();
    Some(loops)
}

/// Threads a per-stage parity mask (bit s: the parity of stage s's next use, all 0 at the
/// start) through `loops` (outermost first, the loops around a ring): each carries it, starting
/// from 0 before the outermost; returns the innermost loop's carried value, the ring's mask on
/// entry. `close` then yields the ring's final mask out through the same loops.
pub(super) fn thread_parities(k: &mut Kernel, loops: &[Op]) -> Value {
    let outer = loops[0];
    let parent = kir_ir::edit::parent_block(&k.dfg, outer);
    let scratch = k.dfg.new_block();
    let mut init = iconst(k, scratch, 0);
    kir_ir::edit::splice_ops(&mut k.dfg, parent, outer, scratch, false);
    for &l in loops {
        init = kir_ir::edit::add_carried(&mut k.dfg, l, init, Type::scalar(Dtype::I32), None).0;
    }
    init
}

/// Yields `last` (the ring loop's final parity mask) out of `loops` (those `thread_parities`
/// threaded it through): the innermost loop's body yields it, each outer one the result of the
/// loop inside it.
pub(super) fn close(k: &mut Kernel, loops: &[Op], last: Value) {
    let mut v = last;
    for &l in loops.iter().rev() {
        let body = k.dfg.ops[l].regions[0];
        let y = *k.dfg.blocks[body]
            .ops
            .last()
            .expect("the body ends with yield");
        k.dfg.ops[y].operands.push(v);
        v = *k.dfg.ops[l]
            .results
            .last()
            .expect("the carried mask's result");
    }
}

/// Bit `s` of parity mask `pm`, `(pm >> s) & 1`, xor `flip`, appended to `b`.
pub(super) fn mask_bit(k: &mut Kernel, b: Block, pm: Value, s: Value, flip: bool) -> Value {
    let one = iconst(k, b, 1);
    let sh = op2(k, b, Opcode::Shr, None, pm, s, Dtype::I32);
    let bit = op2(k, b, Opcode::And, None, sh, one, Dtype::I32);
    if flip {
        op2(k, b, Opcode::Xor, None, bit, one, Dtype::I32)
    } else {
        bit
    }
}

/// `pm xor (1 << s)`: stage s used once more, appended to `b`.
pub(super) fn flip_bit(k: &mut Kernel, b: Block, pm: Value, s: Value) -> Value {
    let one = iconst(k, b, 1);
    let bit = op2(k, b, Opcode::Shl, None, one, s, Dtype::I32);
    op2(k, b, Opcode::Xor, None, pm, bit, Dtype::I32)
}

fn copy_ok(k: &Kernel, l: Op, c: &Cand) -> bool {
    tensor_copy_ok(k, &k.dfg.ops[c.op], &c.ty, |m| {
        kir_ir::masks::row_prefix_bound(k, l, m).is_some()
    })
}

/// Whether load `od` of tile type `ty` is one a tensor copy makes exactly as `load` defines it
/// (the module doc's rules); a `mask` must satisfy `mask_ok`.
pub(in crate::internal::passes::schedule) fn tensor_copy_ok(
    k: &Kernel,
    od: &kir_ir::OpData,
    ty: &Type,
    mask_ok: impl Fn(Value) -> bool,
) -> bool {
    let (Some(shape), Some(dt)) = (ty.shape(), ty.dtype()) else {
        return false;
    };
    let [rows, cols] = shape[..] else {
        return false;
    };
    let tile_ok = matches!(dt, Dtype::F16 | Dtype::Bf16)
        && rows % 8 == 0
        && (8..=256).contains(&rows)
        && cols % 64 == 0;
    let zero_fill = match od.attr("other") {
        None => true,
        Some(Attr::Expr(e)) => match &e.kind {
            ExprKind::Int(0) => true,
            ExprKind::Float(f) => f.0.to_bits() == 0,
            _ => false,
        },
        Some(_) => false,
    };
    let Some(tr) = &od.tensor else { return false };
    let tensor_ok = k.param(&tr.param).is_some_and(|p| match &p.kind {
        ParamKind::Tensor(Access::In, t) => {
            let inner = t.dims.last().and_then(|d| d.as_int());
            (2..=5).contains(&t.dims.len())
                && t.strides.is_none()
                && inner.is_some_and(|n| n > 0 && n % 8 == 0)
        }
        _ => false,
    });
    let mask_ok = match od.attr("mask") {
        None => true,
        Some(Attr::Value(m)) => mask_ok(*m),
        Some(_) => false,
    };
    tile_ok && zero_fill && tensor_ok && mask_ok
}

/// The full and empty barriers of one ring of `stages` stages, allocated at the top of the
/// kernel body after its stage buffers.
pub(super) fn alloc_bars(k: &mut Kernel, stages: usize) -> (Value, Value) {
    let mut bar = || {
        let n = k.dfg.blocks[k.body]
            .ops
            .iter()
            .filter(|&&o| matches!(k.dfg.ops[o].opcode, Opcode::SmemAlloc | Opcode::MbarAlloc))
            .count();
        let mut op = simple(Opcode::MbarAlloc, vec![], None);
        op.attrs = vec![("arrivals".into(), Attr::Expr(kir_ir::Expr::int(1)))];
        let ty = Type::Mbar(kir_ir::Expr::int(stages as i64));
        insert_op(&mut k.dfg, k.body, n, op, vec![(ty, None)])[0]
    };
    let full = bar();
    let empty = bar();
    (full, empty)
}

/// One fill of a TMA ring: the barrier its copies complete on, the bytes of one stage, and, for
/// a refill, the empty barrier and the parity of the round that last read the stage.
#[derive(Clone, Copy)]
pub(super) struct Fill {
    pub full: Value,
    pub bytes: u64,
    pub wait_empty: Option<(Value, Value)>,
}

impl Fill {
    /// Appends to `b` the fill's waits and its arrival with the stage's bytes on `stage`.
    pub(super) fn start(&self, k: &mut Kernel, b: Block, stage: Value) {
        if let Some((empty, parity)) = self.wait_empty {
            k.dfg.append_op(
                b,
                simple(Opcode::MbarWait, vec![empty, stage, parity], None),
                vec![],
            );
        }
        let mut arrive = simple(Opcode::MbarArrive, vec![self.full, stage], None);
        arrive.attrs = vec![(
            "tx".into(),
            Attr::Expr(kir_ir::Expr::int(self.bytes as i64)),
        )];
        k.dfg.append_op(b, arrive, vec![]);
    }
}

/// Appends `mbar_wait %bar, %s, %parity` to `b`.
pub(super) fn wait(k: &mut Kernel, b: Block, bar: Value, s: Value, parity: Value) {
    k.dfg.append_op(
        b,
        simple(Opcode::MbarWait, vec![bar, s, parity], None),
        vec![],
    );
}

/// Appends `mbar_arrive %bar, %s` to `b`.
pub(super) fn arrive(k: &mut Kernel, b: Block, bar: Value, s: Value) {
    k.dfg
        .append_op(b, simple(Opcode::MbarArrive, vec![bar, s], None), vec![]);
}

/// `select(s == at, ph xor 1, ph)`, appended to `b`.
pub(super) fn flip_at(k: &mut Kernel, b: Block, s: Value, at: usize, ph: Value) -> Value {
    let at_v = iconst(k, b, at as i64);
    let one = iconst(k, b, 1);
    let hit = op2(k, b, Opcode::Cmp, Some(CmpPred::Eq), s, at_v, Dtype::I1);
    let flipped = op2(k, b, Opcode::Xor, None, ph, one, Dtype::I32);
    let id = k.dfg.append_op(
        b,
        simple(Opcode::Select, vec![hit, flipped, ph], None),
        vec![(Type::scalar(Dtype::I32), None)],
    );
    k.dfg.ops[id].results[0]
}
