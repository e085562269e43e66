//! Intra-warpgroup overlap (FlashAttention-3's) as IR: in a loop over a TMA ring whose body
//! starts a fresh dot on the stage it waited for (D0, attention's scores `s = q · kᵀ`) and ends
//! with a dot that accumulates into a carried value from the same stage (D1, `o += p · v`),
//! iteration j issues D0 of block j and D1 of block j − 1 back to back, as two asynchronous
//! groups, then runs block j's softmax while D1 of block j − 1 computes.
//!
//! Input: a `for` at the top level of a kernel, or of a `warp_specialize` op's consumer, whose
//! body waits `mbar_wait %full, %s, %par` (the stage carried, as the unspecialized TMA ring of
//! `pipelining` has it, or computed from a carried count, as a consumer of `warp_specialize`
//! has it), reads `%r = smem_read %buf, %s`, optionally transposes it, and takes it into
//! `%d = dot %a, %r', %z` with `%a` and a zero `%z` from outside the loop. The body's top-level
//! ops then fall into four sets:
//! - B: D1, the read of its stage operand (and a transpose of it), the conversion of its
//!   register A operand, the ops of D1's operand cone that depend on the carried accumulator
//!   (attention's rescale `acc · α`), and broadcasts only they read;
//! - R: the releases of the stage (`smem_release`, and the empty-barrier `mbar_arrive`);
//! - F: the refill (`if` holding tensor copies; none in a consumer);
//! - A: everything else (the wait, D0, the softmax, the stage arithmetic).
//!
//! The values B and R read from A or from the loop's arguments (X: attention's `p`, `α` and the
//! stage) are carried one iteration. Output, with n the trip count of the loop over [lo, hi):
//! - before the loop, `if lo < hi`: A and F of block 0 (D0 synchronous); its values and X become
//!   the new loop's initial values (else the old inits, and zeros for X);
//! - the loop over [lo + step, hi): A up to D0 (D0 as `dot_async`), B of the previous block with
//!   the carried X (D1 as `dot_async`), `dot_wait` D0 `pending 1`, the rest of A, `dot_wait` D1,
//!   R of the previous block's stage, then F (after R: the refill takes the stage just
//!   released, which the unrotated loop refilled at the top of the next iteration). When the
//!   rest of A holds control flow (attention's edge-block mask `if`), D0 is waited for at once
//!   and B follows that control flow instead: ptxas retires every wgmma group in flight where
//!   branches join (seen in the SASS), so D1 stays in flight over straight-line code only;
//! - after the loop, `if lo < hi`: B and R of the last block (D1 synchronous).
//!
//! Every block's A and B run once, on the same stages and values as before, so the result is
//! bit-identical (tests/tests/dot_overlap.rs runs the interpreter before and after under 20
//! scheduler seeds; the interpreter checks the ring protocol: every read after its fill, no
//! release while a `dot_async` reads the stage). The refill runs one iteration later relative
//! to the reads, so an unspecialized ring needs 3 stages to keep the prefetch distance of the
//! unrotated loop.

use kir_ir::edit::{self, def_op, op2, ops_in, simple, Cloner};
use kir_ir::expr::{ExprKind, F64Bits};
use kir_ir::{Attr, CmpPred, Diagnostics, Dtype, Expr, Kernel, Module, Op, Opcode, Type, Value};
use std::collections::HashSet;

/// Rotates every qualifying loop of `m` (see the module doc); other kernels and loops are
/// unchanged. Returns the module and how many loops it rotated.
pub fn dot_overlap(m: &Module) -> Result<(Module, usize), Diagnostics> {
    let mut out = m.clone();
    let mut n = 0;
    for k in out.kernels.values_mut() {
        // The kernel's top-level loops and those of a warp-specialized consumer.
        let mut blocks = vec![k.body];
        for &o in &k.dfg.blocks[k.body].ops {
            let od = &k.dfg.ops[o];
            if od.opcode == Opcode::WarpSpecialize {
                blocks.extend(od.regions.iter().skip(1).copied());
            }
        }
        let loops: Vec<Op> = blocks
            .iter()
            .flat_map(|&b| k.dfg.blocks[b].ops.clone())
            .filter(|&o| k.dfg.ops[o].opcode == Opcode::For)
            .collect();
        let mut changed = false;
        for l in loops {
            if let Some(s) = find(k, l).and_then(|f| split(k, &f).map(|s| (f, s))) {
                rotate(k, &s.0, &s.1);
                changed = true;
                n += 1;
            }
        }
        if changed {
            kir_ir::renumber::renumber_kernel(k);
        }
    }
    Ok((out, n))
}

/// The wait, read and fresh dot (D0) of a qualifying loop.
struct Found {
    l: Op,
    /// `mbar_wait %full, %s, %par`.
    wait: Op,
    dot: Op,
}

fn find(k: &Kernel, l: Op) -> Option<Found> {
    let body = *k.dfg.ops[l].regions.first()?;
    let args = k.dfg.blocks[body].args.clone();
    let ops = k.dfg.blocks[body].ops.clone();
    let mut inside = HashSet::new();
    ops_in(&k.dfg, body, &mut inside);
    if inside.iter().any(|&o| {
        matches!(
            k.dfg.ops[o].opcode,
            Opcode::DotAsync | Opcode::DotWait | Opcode::WarpSpecialize
        )
    }) {
        return None;
    }
    let outside =
        |v: Value| def_op(&k.dfg, v).is_none_or(|o| !inside.contains(&o)) && !args.contains(&v);
    let single = |v: Value| edit::users(&k.dfg, v).len() == 1;
    // D0: the first top-level dot of a stage read (maybe transposed) with A and a zero
    // accumulator from outside the loop, after the full-barrier wait on the read's stage.
    ops.iter().enumerate().find_map(|(i, &o)| {
        let d = &k.dfg.ops[o];
        if d.opcode != Opcode::Dot {
            return None;
        }
        let (a, b, z) = (d.operands[0], d.operands[1], d.operands[2]);
        let zero = def_op(&k.dfg, z).is_some_and(|zo| {
            let zd = &k.dfg.ops[zo];
            zd.opcode == Opcode::Const
                && matches!(&zd.lead, Some(Attr::Expr(e))
                    if matches!(e.kind, ExprKind::Float(x) if x.0 == 0.0)
                        || matches!(e.kind, ExprKind::Int(0)))
        });
        if !outside(a) || !outside(z) || !zero {
            return None;
        }
        let bo = def_op(&k.dfg, b)?;
        let src = match k.dfg.ops[bo].opcode {
            Opcode::Transpose if single(b) && ops.contains(&bo) => k.dfg.ops[bo].operands[0],
            Opcode::Transpose => return None,
            _ => b,
        };
        let rd = &k.dfg.ops[def_op(&k.dfg, src)?];
        if rd.opcode != Opcode::SmemRead || !single(src) {
            return None;
        }
        let stage = *rd.operands.get(1)?;
        let wait = ops[..i].iter().copied().find(|&w| {
            let wd = &k.dfg.ops[w];
            wd.opcode == Opcode::MbarWait && wd.operands.get(1) == Some(&stage)
        })?;
        Some(Found { l, wait, dot: o })
    })
}

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
        (edit::users(&k.dfg, r).len() == 1).then_some((o, i))
    })?;
    let acc_arg = args[1 + acc];
    // D1's stage operand: a read of the current stage, maybe transposed.
    let bv = k.dfg.ops[d1].operands[1];
    let mut b: HashSet<Op> = [d1].into_iter().collect();
    let mut src = bv;
    if let Some(t) = def_op(&k.dfg, bv).filter(|&t| k.dfg.ops[t].opcode == Opcode::Transpose) {
        b.insert(t);
        src = k.dfg.ops[t].operands[0];
    }
    let read = def_op(&k.dfg, src)?;
    let rd = &k.dfg.ops[read];
    if rd.opcode != Opcode::SmemRead || rd.operands.get(1) != Some(&stage_v) {
        return None;
    }
    b.insert(read);
    // A register A operand converted from f32 (attention's `p_lo = cast p`): the conversion
    // stays with D1, so the carried value is the f32 tile the matrix unit packs from.
    let av = k.dfg.ops[d1].operands[0];
    if let Some(cast) = def_op(&k.dfg, av).filter(|&o| {
        k.dfg.ops[o].opcode == Opcode::Cast
            && ops.contains(&o)
            && edit::users(&k.dfg, av).len() == 1
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
                    && edit::users(&k.dfg, od.results[0])
                        .iter()
                        .all(|u| b.contains(u))
            })
            .collect();
        if more.is_empty() {
            break;
        }
        b.extend(more);
    }
    // Every op of B other than D1 must feed D1 only.
    for &o in &b {
        if o != d1
            && k.dfg.ops[o]
                .results
                .iter()
                .any(|&r| edit::users(&k.dfg, r).iter().any(|u| !b.contains(u)))
        {
            return None;
        }
    }
    let mut sets = Sets {
        a: vec![],
        b: vec![],
        r: vec![],
        f: vec![],
        d1,
        acc,
        x: vec![],
    };
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
    // X: what B and R read from A or from the loop's arguments (the accumulator aside).
    let a_defs: HashSet<Value> = sets
        .a
        .iter()
        .flat_map(|&o| k.dfg.ops[o].results.clone())
        .collect();
    for &o in sets.b.iter().chain(&sets.r) {
        for v in k.dfg.ops[o].uses() {
            let prev = a_defs.contains(&v) || (args.contains(&v) && v != acc_arg);
            if prev && !sets.x.contains(&v) {
                sets.x.push(v);
            }
        }
    }
    // R and F must not read B's values; the yield reads B only through D1.
    let b_defs: HashSet<Value> = sets
        .b
        .iter()
        .flat_map(|&o| k.dfg.ops[o].results.clone())
        .collect();
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
        Expr {
            kind: ExprKind::Float(F64Bits(0.0)),
            span: kir_ir::Span::default(),
        }
    } else {
        Expr::int(0)
    };
    let id = k.dfg.append_op(
        b,
        simple(Opcode::Const, vec![], Some(Attr::Expr(e))),
        vec![(ty.clone(), None)],
    );
    k.dfg.ops[id].results[0]
}

/// Rotates loop `f.l` of `k` into the paired form if it qualifies; returns whether it did.
fn rotate(k: &mut Kernel, f: &Found, s: &Sets) {
    let l = f.l;
    let src = k.dfg.clone();
    let body = src.ops[l].regions[0];
    let args = src.blocks[body].args.clone();
    let y = *src.blocks[body].ops.last().expect("yield");
    let yops = src.ops[y].operands.clone();
    let (lo, hi, step) = (
        src.ops[l].operands[0],
        src.ops[l].operands[1],
        src.ops[l].operands[2],
    );
    let inits: Vec<Value> = src.ops[l].operands[3..].to_vec();
    let d0_res = src.ops[f.dot].results[0];
    let d1_res = src.ops[s.d1].results[0];
    let nc = inits.len();
    let parent = edit::parent_block(&k.dfg, l);
    let at = k.dfg.blocks[parent]
        .ops
        .iter()
        .position(|&o| o == l)
        .expect("loop in its block");
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
    let mut tv: Vec<Value> = (0..nc)
        .filter(|&i| i != s.acc)
        .map(|i| get(&c, yops[i]))
        .collect();
    tv.extend(s.x.iter().map(|&v| get(&c, v)));
    k.dfg
        .append_op(then, simple(Opcode::Yield, tv, None), vec![]);
    let els = k.dfg.new_block();
    let mut ev: Vec<Value> = (0..nc).filter(|&i| i != s.acc).map(|i| inits[i]).collect();
    for (&x, t) in s.x.iter().zip(&x_tys) {
        // An argument's value before the loop; an A value has none (no block ran).
        let init = match args.iter().position(|&a| a == x) {
            Some(0) => lo,
            Some(i) => inits[i - 1],
            None => zero(k, els, t),
        };
        ev.push(init);
    }
    k.dfg
        .append_op(els, simple(Opcode::Yield, ev, None), vec![]);
    let mut pre_tys: Vec<(Type, Option<String>)> = (0..nc)
        .filter(|&i| i != s.acc)
        .map(|i| (c_tys[i].clone(), None))
        .collect();
    pre_tys.extend(x_tys.iter().map(|t| (t.clone(), None)));
    let iff = edit::append_if(&mut k.dfg, pre, has0, then, els, pre_tys);
    // The peeled blocks are located at the loop (reports and errors point there).
    k.dfg.ops[iff].span = src.ops[l].span;
    let pv = k.dfg.ops[iff].results.clone();

    // The loop over blocks 1..n: carried = the old carried values, then X of the block whose
    // B is pending.
    let mut new_inits = vec![];
    let mut it = pv.iter();
    for (i, &init) in inits.iter().enumerate() {
        new_inits.push(if i == s.acc {
            init
        } else {
            *it.next().expect("pre value")
        });
    }
    new_inits.extend(it.copied());
    let nb = k.dfg.new_block();
    let n0_name = src.values[args[0]].name.clone();
    let n0 = k.dfg.add_block_arg(
        nb,
        Type::scalar(Dtype::I32),
        n0_name,
        kir_ir::Span::default(),
    );
    let mut nargs = vec![];
    for (i, t) in c_tys.iter().chain(&x_tys).enumerate() {
        let name = args.get(1 + i).and_then(|&a| src.values[a].name.clone());
        nargs.push(
            k.dfg
                .add_block_arg(nb, t.clone(), name, kir_ir::Span::default()),
        );
    }
    let mut ca = Cloner::new(&src);
    ca.vmap.insert(args[0], n0);
    for i in 0..nc {
        ca.vmap.insert(args[1 + i], nargs[i]);
    }
    let mut cb = Cloner::new(&src);
    cb.vmap.insert(args[1 + s.acc], nargs[s.acc]);
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
    let wait = |k: &mut Kernel, d: Value, pending: i64| -> Value {
        let mut w = simple(Opcode::DotWait, vec![d], None);
        w.attrs = vec![("pending".into(), Attr::Expr(Expr::int(pending)))];
        let ty = k.dfg.ty(d).clone();
        let id = k.dfg.append_op(nb, w, vec![(ty, None)]);
        k.dfg.ops[id].results[0]
    };
    // Control flow after D0 (attention's edge-block mask `if`) comes before D1's issue: a
    // compiler may retire every group in flight where branches join, so D1 is left in flight
    // over straight-line code only (the rest of the softmax). Without any, D1 issues right
    // after D0 and D0's scores are taken with D1 still running.
    let rest = &s.a[d0_at + 1..];
    let joins = rest
        .iter()
        .rposition(|&o| !src.ops[o].regions.is_empty())
        .map_or(0, |i| i + 1);
    let issue_b = |k: &mut Kernel, cb: &mut Cloner| {
        for &o in &s.b {
            let n = cb.op(&mut k.dfg, nb, o);
            if o == s.d1 {
                k.dfg.ops[n].opcode = Opcode::DotAsync;
            }
        }
    };
    if joins == 0 {
        issue_b(k, &mut cb);
    }
    let s_now = wait(k, get(&ca, d0_res), if joins == 0 { 1 } else { 0 });
    ca.vmap.insert(d0_res, s_now);
    for &o in &rest[..joins] {
        ca.op(&mut k.dfg, nb, o);
    }
    if joins > 0 {
        issue_b(k, &mut cb);
    }
    for &o in &rest[joins..] {
        ca.op(&mut k.dfg, nb, o);
    }
    let acc_new = wait(k, get(&cb, d1_res), 0);
    for &o in &s.r {
        cb.op(&mut k.dfg, nb, o);
    }
    for &o in &s.f {
        ca.op(&mut k.dfg, nb, o);
    }
    let mut yv: Vec<Value> = (0..nc)
        .map(|i| {
            if i == s.acc {
                acc_new
            } else {
                get(&ca, yops[i])
            }
        })
        .collect();
    yv.extend(s.x.iter().map(|&v| get(&ca, v)));
    k.dfg.append_op(nb, simple(Opcode::Yield, yv, None), vec![]);
    let mut lp = simple(Opcode::For, vec![lo2, hi, step], None);
    lp.operands.extend(new_inits);
    lp.regions = vec![nb];
    lp.span = src.ops[l].span;
    lp.doc = src.ops[l].doc.clone();
    let mut l_tys: Vec<(Type, Option<String>)> = (0..nc)
        .map(|i| {
            (
                c_tys[i].clone(),
                src.values[src.ops[l].results[i]].name.clone(),
            )
        })
        .collect();
    l_tys.extend(x_tys.iter().map(|t| (t.clone(), None)));
    let nl = k.dfg.append_op(pre, lp, l_tys);
    let lr = k.dfg.ops[nl].results.clone();

    // After the loop: the last block's B and release, if there was a block.
    let pt = k.dfg.new_block();
    let mut cp = Cloner::new(&src);
    cp.vmap.insert(args[1 + s.acc], lr[s.acc]);
    for (j, &x) in s.x.iter().enumerate() {
        cp.vmap.insert(x, lr[nc + j]);
    }
    for &o in s.b.iter().chain(&s.r) {
        cp.op(&mut k.dfg, pt, o);
    }
    let fin = get(&cp, d1_res);
    k.dfg
        .append_op(pt, simple(Opcode::Yield, vec![fin], None), vec![]);
    let pe = edit::yield_block(&mut k.dfg, vec![], vec![lr[s.acc]]);
    let acc_name = src.values[src.ops[l].results[s.acc]].name.clone();
    let post = edit::append_if(
        &mut k.dfg,
        pre,
        has0,
        pt,
        pe,
        vec![(c_tys[s.acc].clone(), acc_name)],
    );
    k.dfg.ops[post].span = src.ops[l].span;
    let acc_fin = k.dfg.ops[post].results[0];

    // The old loop's results, then the old loop out and the new ops in.
    let old = src.ops[l].results.clone();
    for i in 0..nc {
        let to = if i == s.acc { acc_fin } else { lr[i] };
        edit::replace_uses(&mut k.dfg, old[i], to, None);
    }
    let new_ops = std::mem::take(&mut k.dfg.blocks[pre].ops);
    k.dfg.blocks[parent].ops.splice(at..=at, new_ops);
}
