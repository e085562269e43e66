//! The partitions' ring loops for `warp_specialize` (`mod.rs`): the
//! producer's loop over a pipelined loop's iteration space (wait for the empty stage, expect its
//! bytes on the full barrier, issue the copies) and the consumer's rewrite of the pipelined loop
//! (wait for the full stage, read, release, arrive on the empty barrier), both counting the
//! ring's global iteration t, whose stage is `t mod S` and parity `(t div S) mod 2`.

use super::split::{guard_body, pingpong};
use super::types::Piped;
use kir_ir::edit::{iconst, op2, simple, Cloner};
use kir_ir::{Attr, Block, Dtype, Expr, Kernel, Opcode, Span, Type, Value};

/// Appends `s = t mod S` and the parity `(t div S) mod 2` (xor 1 when `flip`) to block `b`.
fn stage_parity(k: &mut Kernel, b: Block, t: Value, stages: usize, flip: bool) -> (Value, Value) {
    let sv = iconst(k, b, stages as i64);
    let two = iconst(k, b, 2);
    let s = op2(k, b, Opcode::Rem, None, t, sv, Dtype::I32);
    let r = op2(k, b, Opcode::Div, None, t, sv, Dtype::I32);
    let mut p = op2(k, b, Opcode::Rem, None, r, two, Dtype::I32);
    if flip {
        let one = iconst(k, b, 1);
        p = op2(k, b, Opcode::Xor, None, p, one, Dtype::I32);
    }
    (s, p)
}

/// The producer's loop for pipelined loop `p`; returns the iteration count after it.
#[allow(clippy::too_many_arguments)]
pub(super) fn producer_loop(
    k: &mut Kernel,
    prod: Block,
    cl: &mut Cloner,
    p: &Piped,
    [lo, hi, step]: [Value; 3],
    t: Value,
    full: Value,
    empty: Value,
    src: &kir_ir::Dfg,
) -> Value {
    let lb = k.dfg.new_block();
    let iv = k
        .dfg
        .add_block_arg(lb, Type::scalar(Dtype::I32), None, Span::default());
    let tc = k
        .dfg
        .add_block_arg(lb, Type::scalar(Dtype::I32), None, Span::default());
    let (s, pe) = stage_parity(k, lb, tc, p.stages, true);
    k.dfg.append_op(
        lb,
        simple(Opcode::MbarWait, vec![empty, s, pe], None),
        vec![],
    );
    let mut arrive = simple(Opcode::MbarArrive, vec![full, s], None);
    arrive.attrs = vec![("tx".into(), Attr::Expr(Expr::int(p.bytes)))];
    k.dfg.append_op(lb, arrive, vec![]);
    cl.vmap.insert(p.at, iv);
    cl.vmap.insert(p.pf, s);
    let then = src.ops[p.prefetch].regions[0];
    for &o in &src.blocks[then].ops {
        match src.ops[o].opcode {
            Opcode::Yield => {}
            Opcode::AsyncCopy => {
                let n = cl.op(&mut k.dfg, lb, o);
                let attrs = &mut k.dfg.ops[n].attrs;
                attrs.push(("bar".into(), Attr::Value(full)));
                attrs.sort_by_key(|(key, _)| {
                    Opcode::AsyncCopy
                        .info()
                        .keywords
                        .iter()
                        .position(|(kk, _)| kk == key)
                });
            }
            _ => {
                cl.op(&mut k.dfg, lb, o);
            }
        }
    }
    let one = iconst(k, lb, 1);
    let t1 = op2(k, lb, Opcode::Add, None, tc, one, Dtype::I32);
    k.dfg
        .append_op(lb, simple(Opcode::Yield, vec![t1], None), vec![]);
    let mut f = simple(Opcode::For, vec![lo, hi, step, t], None);
    f.regions = vec![lb];
    let id = k
        .dfg
        .append_op(prod, f, vec![(Type::scalar(Dtype::I32), None)]);
    k.dfg.ops[id].results[0]
}

/// Rewrites pipelined loop `p` for the consumers; returns its iteration count result.
#[allow(clippy::too_many_arguments)]
pub(super) fn consumer_loop(
    k: &mut Kernel,
    p: &Piped,
    t_in: Option<Value>,
    full: Value,
    empty: Value,
    order: Option<Value>,
    wg: Value,
    c: usize,
    skip: Option<(Value, Value)>,
) -> Value {
    let l = p.op;
    let body = k.dfg.ops[l].regions[0];
    // Drop the prefetch, its commit and the group wait.
    k.dfg.blocks[body].ops.retain(|&o| {
        o != p.prefetch && !matches!(k.dfg.ops[o].opcode, Opcode::AsyncCommit | Opcode::AsyncWait)
    });
    // The block whose first dot takes the ping-pong turn: the body, or the guarded part of it.
    let mut turn_block = body;
    if let Some((own_lo, own_hi)) = skip {
        turn_block = guard_body(k, l, p.slot, own_lo, own_hi, order.map(|o| (o, wg, c)));
    }
    // The carried stage becomes the iteration count t.
    let tc = p.stage_arg;
    let init = match t_in {
        Some(t) => t,
        None => {
            let blk = kir_ir::edit::parent_block(&k.dfg, l);
            let zero = {
                let id = k.dfg.append_op(
                    blk,
                    simple(Opcode::Const, vec![], Some(Attr::Expr(Expr::int(0)))),
                    vec![(Type::scalar(Dtype::I32), None)],
                );
                let v = k.dfg.ops[id].results[0];
                let last = k.dfg.blocks[blk].ops.pop().expect("just appended");
                let pos = k.dfg.blocks[blk]
                    .ops
                    .iter()
                    .position(|&o| o == l)
                    .expect("loop");
                k.dfg.blocks[blk].ops.insert(pos, last);
                v
            };
            zero
        }
    };
    k.dfg.ops[l].operands[3 + p.slot] = init;
    let head = k.dfg.new_block();
    let (s, pf) = stage_parity(k, head, tc, p.stages, false);
    k.dfg.append_op(
        head,
        simple(Opcode::MbarWait, vec![full, s, pf], None),
        vec![],
    );
    let head_ops = std::mem::take(&mut k.dfg.blocks[head].ops);
    k.dfg.blocks[body].ops.splice(0..0, head_ops);
    // Stage reads and releases use s; the yield carries t + 1.
    // (tc is a block argument of this loop, so only ops inside it, at any depth, use it.)
    for od in k.dfg.ops.values_mut() {
        if matches!(od.opcode, Opcode::SmemRead | Opcode::SmemRelease) {
            for v in &mut od.operands {
                if *v == tc {
                    *v = s;
                }
            }
        }
    }
    let y = *k.dfg.blocks[body].ops.last().expect("yield");
    let tail = k.dfg.new_block();
    k.dfg.append_op(
        tail,
        simple(Opcode::MbarArrive, vec![empty, s], None),
        vec![],
    );
    if let Some(ord) = order {
        pingpong(k, turn_block, ord, tc, wg, c);
    }
    let one = iconst(k, tail, 1);
    let t1 = op2(k, tail, Opcode::Add, None, tc, one, Dtype::I32);
    let tail_ops = std::mem::take(&mut k.dfg.blocks[tail].ops);
    let ypos = k.dfg.blocks[body].ops.len() - 1;
    k.dfg.blocks[body].ops.splice(ypos..ypos, tail_ops);
    k.dfg.ops[y].operands[p.slot] = t1;
    k.dfg.ops[l].results[p.slot]
}
