//! Held rings for the `pipelining` pass (see its module doc, "Held rings"): which loops hold
//! their stages one iteration longer, and the stage arithmetic and releases that holding adds.

use kir_ir::edit::{self, iconst, op2, simple};
use kir_ir::{Block, Dtype, Kernel, Op, Opcode, Type, Value};

/// True if a `dot` directly in loop `l`'s body accumulates into one of the loop's carried values
/// and has the shape an asynchronous matrix unit takes (16-bit operands, M and K multiples of
/// 64: sm_90a's wgmma); holding stages for other dots would only shorten the prefetch.
pub(super) fn has_carried_dot(k: &Kernel, l: Op) -> bool {
    let body = k.dfg.ops[l].regions[0];
    let args = &k.dfg.blocks[body].args;
    k.dfg.blocks[body].ops.iter().any(|&o| {
        let od = &k.dfg.ops[o];
        let a = od.operands.first().map(|&a| k.dfg.ty(a));
        let async_shape = a.is_some_and(|t| {
            matches!(t.dtype(), Some(Dtype::F16 | Dtype::Bf16))
                && t.shape()
                    .is_some_and(|s| s.len() == 2 && s[0] % 64 == 0 && s[1] % 64 == 0)
        });
        od.opcode == Opcode::Dot
            && async_shape
            && od.operands.get(2).is_some_and(|a| args[1..].contains(a))
    })
}

/// Inserts, right after loop `l` in block `parent`, the release of the stage its last iteration
/// read, `(trips − 1) mod stages`, for every buffer of `bufs`, if the loop ran at all.
pub(super) fn release_after(k: &mut Kernel, parent: Block, l: Op, bufs: &[Value], stages: usize) {
    let (lo, hi, step) = {
        let od = &k.dfg.ops[l];
        (od.operands[0], od.operands[1], od.operands[2])
    };
    // After the loop: the last iteration's stage, (trips − 1) mod S, if it ran at all.
    let after = k.dfg.new_block();
    let one = iconst(k, after, 1);
    let span = op2(k, after, Opcode::Sub, None, hi, lo, Dtype::I32);
    let up = op2(k, after, Opcode::Add, None, span, step, Dtype::I32);
    let up = op2(k, after, Opcode::Sub, None, up, one, Dtype::I32);
    let trips = op2(k, after, Opcode::Div, None, up, step, Dtype::I32);
    let zero = iconst(k, after, 0);
    let ran = op2(
        k,
        after,
        Opcode::Cmp,
        Some(kir_ir::CmpPred::Gt),
        trips,
        zero,
        Dtype::I1,
    );
    let last = op2(k, after, Opcode::Sub, None, trips, one, Dtype::I32);
    let n = iconst(k, after, stages as i64);
    let last = op2(k, after, Opcode::Rem, None, last, n, Dtype::I32);
    release_if(k, after, ran, bufs, last);
    edit::splice_ops(&mut k.dfg, parent, l, after, true);
}

/// Appends `(s + n) mod stages` for a stage index `s` in [0, stages) and 0 ≤ n < stages:
/// `select(s < stages − n, s + n, s − (stages − n))`, which folds when `s` is known.
pub(super) fn stage_plus(k: &mut Kernel, b: Block, s: Value, n: usize, stages: usize) -> Value {
    let lim = iconst(k, b, (stages - n) as i64);
    let wrap = op2(
        k,
        b,
        Opcode::Cmp,
        Some(kir_ir::CmpPred::Lt),
        s,
        lim,
        Dtype::I1,
    );
    let nv = iconst(k, b, n as i64);
    let plus = op2(k, b, Opcode::Add, None, s, nv, Dtype::I32);
    let minus = op2(k, b, Opcode::Sub, None, s, lim, Dtype::I32);
    let id = k.dfg.append_op(
        b,
        simple(Opcode::Select, vec![wrap, plus, minus], None),
        vec![(Type::scalar(Dtype::I32), None)],
    );
    k.dfg.ops[id].results[0]
}

/// Appends `if cond { smem_release buf, stage }` for every buffer of `bufs`.
pub(super) fn release_if(k: &mut Kernel, b: Block, cond: Value, bufs: &[Value], stage: Value) {
    let then = k.dfg.new_block();
    for &buf in bufs {
        k.dfg.append_op(
            then,
            simple(Opcode::SmemRelease, vec![buf, stage], None),
            vec![],
        );
    }
    k.dfg
        .append_op(then, simple(Opcode::Yield, vec![], None), vec![]);
    let els = edit::yield_block(&mut k.dfg, vec![], vec![]);
    edit::append_if(&mut k.dfg, b, cond, then, els, vec![]);
}
