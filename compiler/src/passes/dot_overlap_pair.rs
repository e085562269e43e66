//! The paired form of `dot_overlap` (FlashAttention-3's intra-warpgroup overlap): in a TMA ring
//! loop whose body starts a fresh dot on the stage it waited for (D0, attention's `s = q · kᵀ`)
//! and ends with a dot that accumulates into a carried value from the same stage (D1, `o += p ·
//! v`), iteration j issues D0 of block j and D1 of block j − 1 back to back, as two asynchronous
//! groups, then runs block j's softmax while D1 of block j − 1 computes.
//!
//! The body's top-level ops fall into four sets:
//! - B: D1, the read of its stage operand (and a transpose of it), and the ops of D1's operand
//!   cone that depend on the carried accumulator (attention's rescale `acc · α`);
//! - R: the releases of the current stage (`smem_release`, and the empty-barrier `mbar_arrive`);
//! - F: the refill (`if` holding tensor copies);
//! - A: everything else (the wait, D0, the softmax, the stage arithmetic).
//!
//! The values that A defines and B reads (X: attention's `p` and `α`) are carried one iteration.
//! Output, with n the trip count of the loop over [lo, hi):
//! - before the loop, `if lo < hi`: F and A of block 0 (D0 synchronous); its values, X, and the
//!   stage of block 0 become the new loop's initial values (else the old inits and zeros);
//! - the loop over [lo + step, hi): A up to D0 (D0 as `dot_async`), B of the previous block with
//!   the carried X and stage (D1 as `dot_async`), `dot_wait` D0 `pending 1`, the rest of A,
//!   `dot_wait` D1, R of the previous stage, then F (after R: the refill reuses the stage just
//!   released, which the original refilled at the top of the next iteration);
//! - after the loop, `if lo < hi`: B of the last block (D1 synchronous) and R of its stage.
//!
//! Every block's A and B run once on the same stages and the same values as before, so the
//! result is bit-identical (tests/tests/dot_overlap.rs). The refill runs one iteration later
//! relative to the reads, so the overlap needs a ring of at least 3 stages to keep the prefetch
//! distance of the unrotated loop.

use super::dot_overlap::Found;
use crate::kedit::{self, op2, simple, Cloner};
use kir_ir::expr::{ExprKind, F64Bits};
use kir_ir::{Attr, CmpPred, Dtype, Expr, Kernel, Op, Opcode, Type, Value, ValueDef};
use std::collections::HashSet;

/// The ops of a qualifying loop's body, by set (module doc), each in program order.
struct Sets {
    a: Vec<Op>,
    b: Vec<Op>,
    r: Vec<Op>,
    f: Vec<Op>,
    /// D1 and the index of its accumulator among the carried values.
    d1: Op,
    acc: usize,
    /// Values defined by A and read by B.
    x: Vec<Value>,
}

fn def_op(k: &Kernel, v: Value) -> Option<Op> {
    match k.dfg.values.get(v)?.def {
        ValueDef::Result(o, _) => Some(o),
        ValueDef::Arg(..) => None,
    }
}

/// Whether block `b` holds (at any depth) a tensor copy.
fn has_copy(k: &Kernel, b: kir_ir::Block) -> bool {
    k.dfg.blocks[b].ops.iter().any(|&o| {
        let od = &k.dfg.ops[o];
        od.opcode == Opcode::AsyncCopy || od.regions.iter().any(|&r| has_copy(k, r))
    })
}

fn split(k: &Kernel, f: &Found) -> Option<Sets> {
    let body = k.dfg.ops[f.l].regions[0];
    let args = k.dfg.blocks[body].args.clone();
    let ops = k.dfg.blocks[body].ops.clone();
    let (y, ops) = ops.split_last()?;
    let yops = k.dfg.ops[*y].operands.clone();
    let stage_v = k.dfg.ops[f.wait].operands[1];
    // D1: a top-level dot whose result is yielded as the carried value it accumulates into.
    let (d1, acc) = ops.iter().find_map(|&o| {
        let od = &k.dfg.ops[o];
        if od.opcode != Opcode::Dot || o == f.dot {
            return None;
        }
        let r = od.results[0];
        let i = yops.iter().position(|&v| v == r)?;
        (kedit::users(&k.dfg, r).len() == 1).then_some((o, i))
    })?;
    let acc_arg = args[1 + acc];
    // D1's stage operand: a read of the current stage, maybe transposed.
    let bv = k.dfg.ops[d1].operands[1];
    let mut b: HashSet<Op> = [d1].into_iter().collect();
    let mut src = bv;
    if let Some(t) = def_op(k, bv).filter(|&t| k.dfg.ops[t].opcode == Opcode::Transpose) {
        b.insert(t);
        src = k.dfg.ops[t].operands[0];
    }
    let read = def_op(k, src)?;
    let rd = &k.dfg.ops[read];
    if rd.opcode != Opcode::SmemRead || rd.operands.get(1) != Some(&stage_v) {
        return None;
    }
    b.insert(read);
    // A register A operand converted from f32 (attention's `p_lo = cast p`): the conversion
    // stays with D1, so the carried value is the f32 tile the matrix unit packs from.
    let av = k.dfg.ops[d1].operands[0];
    if let Some(cast) = def_op(k, av).filter(|&o| {
        k.dfg.ops[o].opcode == Opcode::Cast && ops.contains(&o) && kedit::users(&k.dfg, av).len() == 1
    }) {
        b.insert(cast);
    }
    // The accumulator's cone: ops depending on the carried accumulator, all feeding D1.
    let mut dep: HashSet<Value> = [acc_arg].into_iter().collect();
    for &o in ops {
        let od = &k.dfg.ops[o];
        if od.uses().iter().any(|v| dep.contains(v)) && o != d1 {
            if !od.regions.is_empty() || od.results.len() != 1 {
                return None;
            }
            dep.insert(od.results[0]);
            b.insert(o);
        }
    }
    // Broadcasts that only B reads (attention's `broadcast α`) move with it: the loop then
    // carries the row factors, not a whole tile of them.
    loop {
        let more: Vec<Op> = ops
            .iter()
            .copied()
            .filter(|o| !b.contains(o))
            .filter(|&o| {
                let od = &k.dfg.ops[o];
                od.opcode == Opcode::Broadcast
                    && od.results.len() == 1
                    && kedit::users(&k.dfg, od.results[0]).iter().all(|u| b.contains(u))
            })
            .collect();
        if more.is_empty() {
            break;
        }
        b.extend(more);
    }
    // Every op of B other than D1 must feed D1 only.
    for &o in &b {
        if o != d1 && k.dfg.ops[o].results.iter().any(|&r| {
            kedit::users(&k.dfg, r).iter().any(|u| !b.contains(u))
        }) {
            return None;
        }
    }
    let mut sets = Sets { a: vec![], b: vec![], r: vec![], f: vec![], d1, acc, x: vec![] };
    for &o in ops {
        let od = &k.dfg.ops[o];
        if b.contains(&o) {
            sets.b.push(o);
        } else if (od.opcode == Opcode::SmemRelease
            || (od.opcode == Opcode::MbarArrive && od.attrs.is_empty()))
            && od.operands.get(1) == Some(&stage_v)
        {
            sets.r.push(o);
        } else if od.opcode == Opcode::If && od.regions.iter().any(|&r| has_copy(k, r)) {
            sets.f.push(o);
        } else {
            sets.a.push(o);
        }
    }
    // B reads only the accumulator, the stage, values from outside the loop, and A's values.
    let a_defs: HashSet<Value> =
        sets.a.iter().flat_map(|&o| k.dfg.ops[o].results.clone()).collect();
    for &o in &sets.b {
        for v in k.dfg.ops[o].uses() {
            if a_defs.contains(&v) && !sets.x.contains(&v) {
                sets.x.push(v);
            } else if args.contains(&v) && v != acc_arg && v != stage_v {
                return None;
            }
        }
    }
    // R and F must not read B's values; the yield reads B only through D1.
    let b_defs: HashSet<Value> =
        sets.b.iter().flat_map(|&o| k.dfg.ops[o].results.clone()).collect();
    let clean = |o: &Op| k.dfg.ops[*o].uses().iter().all(|v| !b_defs.contains(v));
    if !sets.r.iter().chain(&sets.f).chain(&sets.a).all(clean) || sets.r.is_empty() {
        return None;
    }
    Some(sets)
}

/// A zero of type `ty` appended to block `b`.
fn zero(k: &mut Kernel, b: kir_ir::Block, ty: &Type) -> Value {
    let float = ty.dtype().is_some_and(|d| d.is_float());
    let e = if float {
        Expr { kind: ExprKind::Float(F64Bits(0.0)), span: kir_ir::Span::default() }
    } else {
        Expr::int(0)
    };
    let id = k
        .dfg
        .append_op(b, simple(Opcode::Const, vec![], Some(Attr::Expr(e))), vec![(ty.clone(), None)]);
    k.dfg.ops[id].results[0]
}

/// Rotates loop `f.l` of `k` into the paired form if it qualifies; returns whether it did.
pub(super) fn rotate_pair(k: &mut Kernel, f: &Found) -> bool {
    let Some(s) = split(k, f) else {
        return false;
    };
    let l = f.l;
    let src = k.dfg.clone();
    let body = src.ops[l].regions[0];
    let args = src.blocks[body].args.clone();
    let y = *src.blocks[body].ops.last().expect("yield");
    let yops = src.ops[y].operands.clone();
    let (lo, hi, step) = (src.ops[l].operands[0], src.ops[l].operands[1], src.ops[l].operands[2]);
    let inits: Vec<Value> = src.ops[l].operands[3..].to_vec();
    let stage_v = src.ops[f.wait].operands[1];
    let d0_res = src.ops[f.dot].results[0];
    let d1_res = src.ops[s.d1].results[0];
    let nc = inits.len();
    let parent = kedit::parent_block(&k.dfg, l);
    let at = k.dfg.blocks[parent].ops.iter().position(|&o| o == l).expect("loop in its block");
    let x_tys: Vec<Type> = s.x.iter().map(|&v| src.ty(v).clone()).collect();
    let c_tys: Vec<Type> = args[1..].iter().map(|&v| src.ty(v).clone()).collect();

    // Before the loop: block 0's refill and A, if there is a block 0.
    let pre = k.dfg.new_block();
    let has0 = op2(k, pre, Opcode::Cmp, Some(CmpPred::Lt), lo, hi, Dtype::I1);
    let lo2 = op2(k, pre, Opcode::Add, None, lo, step, Dtype::I32);
    let then = k.dfg.new_block();
    let mut c = Cloner::new(&src);
    c.vmap.insert(args[0], lo);
    for i in 0..nc {
        c.vmap.insert(args[1 + i], inits[i]);
    }
    for &o in s.a.iter().chain(&s.f) {
        c.op(&mut k.dfg, then, o);
    }
    let get = |c: &Cloner, v: Value| c.vmap.get(&v).copied().unwrap_or(v);
    let mut tv: Vec<Value> = (0..nc).filter(|&i| i != s.acc).map(|i| get(&c, yops[i])).collect();
    tv.extend(s.x.iter().map(|&v| get(&c, v)));
    tv.push(inits[f.stage]);
    k.dfg.append_op(then, simple(Opcode::Yield, tv, None), vec![]);
    let els = k.dfg.new_block();
    let mut ev: Vec<Value> = (0..nc).filter(|&i| i != s.acc).map(|i| inits[i]).collect();
    for t in &x_tys {
        ev.push(zero(k, els, t));
    }
    ev.push(inits[f.stage]);
    k.dfg.append_op(els, simple(Opcode::Yield, ev, None), vec![]);
    let mut pre_tys: Vec<(Type, Option<String>)> =
        (0..nc).filter(|&i| i != s.acc).map(|i| (c_tys[i].clone(), None)).collect();
    pre_tys.extend(x_tys.iter().map(|t| (t.clone(), None)));
    pre_tys.push((Type::scalar(Dtype::I32), None));
    let iff = kedit::append_if(&mut k.dfg, pre, has0, then, els, pre_tys);
    let pv = k.dfg.ops[iff].results.clone();

    // The loop over blocks 1..n: carried = the old carried values, then X, then the stage of
    // the block whose B is pending.
    let mut new_inits = vec![];
    let mut it = pv.iter();
    for i in 0..nc {
        new_inits.push(if i == s.acc { inits[i] } else { *it.next().expect("pre value") });
    }
    new_inits.extend(it.copied());
    let nb = k.dfg.new_block();
    let n0 = k.dfg.add_block_arg(nb, Type::scalar(Dtype::I32), None, kir_ir::Span::default());
    let mut nargs = vec![];
    for (i, t) in c_tys.iter().chain(&x_tys).enumerate() {
        let name = args.get(1 + i).and_then(|&a| src.values[a].name.clone());
        nargs.push(k.dfg.add_block_arg(nb, t.clone(), name, kir_ir::Span::default()));
    }
    let s_prev = k.dfg.add_block_arg(nb, Type::scalar(Dtype::I32), None, kir_ir::Span::default());
    let mut ca = Cloner::new(&src);
    ca.vmap.insert(args[0], n0);
    for i in 0..nc {
        ca.vmap.insert(args[1 + i], nargs[i]);
    }
    let mut cb = Cloner::new(&src);
    cb.vmap.insert(args[1 + s.acc], nargs[s.acc]);
    cb.vmap.insert(stage_v, s_prev);
    for (j, &x) in s.x.iter().enumerate() {
        cb.vmap.insert(x, nargs[nc + j]);
    }
    let d0_at = s.a.iter().position(|&o| o == f.dot).expect("D0 in A");
    for &o in &s.a[..=d0_at] {
        let n = ca.op(&mut k.dfg, nb, o);
        if o == f.dot {
            k.dfg.ops[n].opcode = Opcode::DotAsync;
        }
    }
    for &o in &s.b {
        let n = cb.op(&mut k.dfg, nb, o);
        if o == s.d1 {
            k.dfg.ops[n].opcode = Opcode::DotAsync;
        }
    }
    let wait = |k: &mut Kernel, d: Value, pending: i64| -> Value {
        let mut w = simple(Opcode::DotWait, vec![d], None);
        w.attrs = vec![("pending".into(), Attr::Expr(Expr::int(pending)))];
        let ty = k.dfg.ty(d).clone();
        let id = k.dfg.append_op(nb, w, vec![(ty, None)]);
        k.dfg.ops[id].results[0]
    };
    let s_now = wait(k, get(&ca, d0_res), 1);
    ca.vmap.insert(d0_res, s_now);
    for &o in &s.a[d0_at + 1..] {
        ca.op(&mut k.dfg, nb, o);
    }
    let acc_new = wait(k, get(&cb, d1_res), 0);
    let mut cr = Cloner::new(&src);
    cr.vmap.insert(stage_v, s_prev);
    for &o in &s.r {
        cr.op(&mut k.dfg, nb, o);
    }
    for &o in &s.f {
        ca.op(&mut k.dfg, nb, o);
    }
    let mut yv: Vec<Value> =
        (0..nc).map(|i| if i == s.acc { acc_new } else { get(&ca, yops[i]) }).collect();
    yv.extend(s.x.iter().map(|&v| get(&ca, v)));
    yv.push(nargs[f.stage]);
    k.dfg.append_op(nb, simple(Opcode::Yield, yv, None), vec![]);
    let mut lp = simple(Opcode::For, vec![lo2, hi, step], None);
    lp.operands.extend(new_inits);
    lp.regions = vec![nb];
    lp.span = src.ops[l].span;
    lp.doc = src.ops[l].doc.clone();
    let mut l_tys: Vec<(Type, Option<String>)> = (0..nc)
        .map(|i| (c_tys[i].clone(), src.values[src.ops[l].results[i]].name.clone()))
        .collect();
    l_tys.extend(x_tys.iter().map(|t| (t.clone(), None)));
    l_tys.push((Type::scalar(Dtype::I32), None));
    let nl = k.dfg.append_op(pre, lp, l_tys);
    let lr = k.dfg.ops[nl].results.clone();

    // After the loop: the last block's B and release, if there was a block.
    let pt = k.dfg.new_block();
    let mut cp = Cloner::new(&src);
    cp.vmap.insert(args[1 + s.acc], lr[s.acc]);
    cp.vmap.insert(stage_v, lr[nc + s.x.len()]);
    for (j, &x) in s.x.iter().enumerate() {
        cp.vmap.insert(x, lr[nc + j]);
    }
    for &o in s.b.iter().chain(&s.r) {
        cp.op(&mut k.dfg, pt, o);
    }
    let fin = get(&cp, d1_res);
    k.dfg.append_op(pt, simple(Opcode::Yield, vec![fin], None), vec![]);
    let pe = kedit::yield_block(&mut k.dfg, vec![], vec![lr[s.acc]]);
    let acc_name = src.values[src.ops[l].results[s.acc]].name.clone();
    let post = kedit::append_if(&mut k.dfg, pre, has0, pt, pe, vec![(c_tys[s.acc].clone(), acc_name)]);
    let acc_fin = k.dfg.ops[post].results[0];

    // The old loop's results, then the old loop out and the new ops in.
    let old = src.ops[l].results.clone();
    for i in 0..nc {
        let to = if i == s.acc { acc_fin } else { lr[i] };
        kedit::replace_uses(&mut k.dfg, old[i], to, None);
    }
    let new_ops = std::mem::take(&mut k.dfg.blocks[pre].ops);
    k.dfg.blocks[parent].ops.splice(at..=at, new_ops);
    true
}
