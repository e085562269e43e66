//! Clusters of two programs that share their copies: a persistent, warp-specialized kernel whose
//! pairs of programs (2c, 2c + 1) run as one cluster of the GPU, each CTA fetching a share of a
//! tile that both need and multicasting it to both (TMA multicast on sm_90a and sm_100a).
//!
//! Input: a kernel after `warp_specialize` on a persistent grid (the `persistent` pass's
//! output): grid `[min(T', P), 1, 1]` with P even, and both partitions walking
//! `for %tile = program_id 0 to T step P`, with one consumer. Program 2c and program 2c + 1
//! then hold tiles t and t xor 1 at every step, so a tile both need is the same copy in
//! both. Output:
//! - `warp_specialize … cluster 2`, and the grid `[min(2 · cdiv(T', 2), P), 1, 1]` (a cluster
//!   needs an even program count);
//! - both tile loops run to T rounded up to even, so both programs of a pair take the same
//!   number of steps; a program whose tile is T (the odd count's last pair) computes tile
//!   T − 1 again (`%tile` is replaced by `min(%tile, T − 1)` for everything it indexes) and its
//!   consumer stores nothing (every store and atomic is masked by `%tile < T`);
//! - in the producer, a ring copy whose indices outside the ring loop are computed from the
//!   tile gets `multicast %same`, where `%same` compares those indices with the ones the peer
//!   program computes for its tile (`min(%tile xor 1, T − 1)`, the same ops cloned): both
//!   programs compute the same `%same`, and where it holds they copy the same tile;
//! - every consumer arrival without `tx` (the empty barriers, which release stages) arrives on
//!   both programs' barriers (`mbar_arrive … cluster 2`), and those barriers expect twice the
//!   arrivals: a producer refills a stage only once both consumers released it, as the
//!   multicast writes the stage in both programs.
//!
//! Every program still computes its own tiles with the same ops, so the outputs are the same bit
//! for bit (the interpreter runs one program and counts a cluster arrival for both; the tests
//! compare against the kernel without clusters under scheduler seeds). The loops inside a tile
//! must not depend on the tile for their bounds, nor any `if` on it, so that both programs make
//! the same copies and arrivals in the same order.

use kir_ir::edit::{self, iconst, op2, simple};
use kir_ir::{
    Attr, Block, CmpPred, Diagnostic, Diagnostics, Dtype, Expr, ExprKind, Func, Kernel, Module,
    Offset, Op, Opcode, Span, Value, ValueDef,
};
use std::collections::HashSet;

/// The programs of a cluster this pass forms.
pub const CLUSTER: i64 = 2;

/// Forms clusters of two in every kernel of `m` that qualifies (module doc); the others are
/// left as they are. With `strict` (`--cluster on`), a module none of whose kernels qualifies
/// is an error that names each kernel and why it does not (a program's helper kernels, such as
/// stream-K's zeroing kernel, never qualify and need not).
pub fn cluster(m: &Module, strict: bool) -> Result<Module, Diagnostics> {
    let mut out = m.clone();
    let mut formed = false;
    let mut why = vec![];
    for (_, k) in out.kernels.iter_mut() {
        match shape(k) {
            Ok(s) => {
                rewrite(k, &s);
                kir_ir::renumber::renumber_kernel(k);
                formed = true;
            }
            Err(e) => why.push(Diagnostic::new(
                k.span,
                format!(
                    "kernel `@{}` cannot run in clusters of {CLUSTER}: {e}",
                    k.name
                ),
            )),
        }
    }
    if strict && !formed {
        return Err(Diagnostics(why));
    }
    Ok(out)
}

/// What the rewrite needs: the `warp_specialize` op, the tile loops of its producer and
/// consumer, the tile count T and the barriers the consumer releases.
struct Shape {
    ws: Op,
    loops: [Op; 2],
    total: Value,
    empties: Vec<Value>,
}

/// Whether `k` qualifies, and its parts; else why not.
fn shape(k: &Kernel) -> Result<Shape, String> {
    let dfg = &k.dfg;
    let top = &dfg.blocks[k.body].ops;
    let ws = *top
        .iter()
        .find(|&&o| dfg.ops[o].opcode == Opcode::WarpSpecialize)
        .ok_or("it is not warp-specialized")?;
    let wd = &dfg.ops[ws];
    let lit = |key: &str| match wd.attr(key) {
        Some(Attr::Expr(e)) => e.as_int(),
        _ => None,
    };
    if lit("consumers") != Some(1) {
        return Err("its warp specialization has more than one consumer partition".into());
    }
    if lit("cluster").is_some_and(|c| c != 1) {
        return Err("it already runs in clusters".into());
    }
    if kir_ir::edit::contains(dfg, k.body, &|od| {
        matches!(od.opcode, Opcode::SemWait | Opcode::SemSignal)
    }) {
        // A spare program's writes are masked off; a semaphore has no mask.
        return Err("it orders its adds with semaphores".into());
    }
    let programs = persistent_programs(k).ok_or("its grid is not persistent")?;
    if programs % CLUSTER != 0 {
        return Err(format!("its persistent grid of {programs} programs is odd"));
    }
    let mut loops = vec![];
    for &r in &wd.regions {
        let fors: Vec<Op> = dfg.blocks[r]
            .ops
            .iter()
            .copied()
            .filter(|&o| dfg.ops[o].opcode == Opcode::For)
            .collect();
        let [f] = fors[..] else {
            return Err("a partition does not walk the tiles in one loop".into());
        };
        loops.push(f);
    }
    let (lo, hi, step) = bounds(k, loops[0]);
    if bounds(k, loops[1]) != (lo, hi, step) {
        return Err("its partitions walk different tiles".into());
    }
    let is_pid = matches!(def(k, lo), Some(od) if od.opcode == Opcode::ProgramId
        && matches!(&od.lead, Some(Attr::Expr(e)) if e.as_int() == Some(0)));
    let step_p = def(k, step).and_then(edit::fold::const_int);
    if !is_pid || step_p != Some(programs) {
        return Err("its tile loops do not start at the program id and step by the grid".into());
    }
    for &l in &loops {
        tile_independent(k, l)?;
    }
    // The barriers the consumer arrives on without bytes; nothing else may arrive on them.
    let mut empties = vec![];
    let consumer = wd.regions[1];
    for_ops(k, consumer, &mut |od| {
        if od.opcode == Opcode::MbarArrive && od.attr("tx").is_none() {
            empties.push(od.operands[0]);
        }
    });
    empties.sort();
    empties.dedup();
    let mut foreign = false;
    for_ops(k, wd.regions[0], &mut |od| {
        foreign |= od.opcode == Opcode::MbarArrive && empties.contains(&od.operands[0]);
    });
    if foreign || empties.is_empty() {
        return Err("its consumer releases no stage the producer alone fills".into());
    }
    Ok(Shape {
        ws,
        loops: [loops[0], loops[1]],
        total: hi,
        empties,
    })
}

/// P of a grid `[min(e, P), 1, 1]`.
fn persistent_programs(k: &Kernel) -> Option<i64> {
    let [g0, g1, g2] = &k.grid[..] else {
        return None;
    };
    if g1.as_int() != Some(1) || g2.as_int() != Some(1) {
        return None;
    }
    match &g0.kind {
        ExprKind::Call(Func::Min, args) => args.get(1)?.as_int(),
        _ => None,
    }
}

fn def(k: &Kernel, v: Value) -> Option<&kir_ir::OpData> {
    edit::def_data(&k.dfg, v)
}

fn bounds(k: &Kernel, f: Op) -> (Value, Value, Value) {
    let o = &k.dfg.ops[f].operands;
    (o[0], o[1], o[2])
}

/// Calls `f` on every op of block `b`, at any depth.
fn for_ops(k: &Kernel, b: Block, f: &mut dyn FnMut(&kir_ir::OpData)) {
    for &o in &k.dfg.blocks[b].ops {
        let od = &k.dfg.ops[o];
        f(od);
        for &r in &od.regions {
            for_ops(k, r, f);
        }
    }
}

/// The values of the tile loop `l`'s body that depend on its tile (the block argument), at
/// any depth.
fn tile_values(k: &Kernel, l: Op) -> HashSet<Value> {
    let body = k.dfg.ops[l].regions[0];
    let mut dep: HashSet<Value> = HashSet::from([k.dfg.blocks[body].args[0]]);
    loop {
        let before = dep.len();
        mark(k, body, &mut dep);
        if dep.len() == before {
            return dep;
        }
    }
}

fn mark(k: &Kernel, b: Block, dep: &mut HashSet<Value>) {
    for &o in &k.dfg.blocks[b].ops {
        let od = &k.dfg.ops[o];
        let mut uses = vec![];
        let mut c = od.clone();
        edit::for_each_use(&mut c, |v| uses.push(*v));
        if uses.iter().any(|v| dep.contains(v)) {
            dep.extend(od.results.iter().copied());
        }
        if od.opcode == Opcode::For {
            // Carried values: a carried init that depends on the tile makes its argument and
            // result depend on it (the bounds are checked apart).
            let body = od.regions[0];
            for (i, &init) in od.operands.iter().enumerate().skip(3) {
                if dep.contains(&init) {
                    dep.insert(k.dfg.blocks[body].args[i - 2]);
                    if let Some(&r) = od.results.get(i - 3) {
                        dep.insert(r);
                    }
                }
            }
        }
        for &r in &od.regions {
            mark(k, r, dep);
        }
    }
}

/// No loop inside the tile loop `l` has bounds that depend on the tile, and no `if` a
/// condition that does: both programs of a cluster make the same copies and arrivals.
fn tile_independent(k: &Kernel, l: Op) -> Result<(), String> {
    let dep = tile_values(k, l);
    let mut bad = None;
    for_ops(k, k.dfg.ops[l].regions[0], &mut |od| {
        let ctl = match od.opcode {
            Opcode::For => &od.operands[..3],
            Opcode::If => &od.operands[..1],
            _ => &[][..],
        };
        if bad.is_none() && ctl.iter().any(|v| dep.contains(v)) {
            bad = Some(format!(
                "a `{}` inside its tile loop depends on the tile, so the two programs of a \
                 cluster could make different copies",
                od.opcode.name()
            ));
        }
    });
    bad.map_or(Ok(()), Err)
}

/// Inserts `ops` (built at the end of `from`, a scratch block) before op `at` of block `b`.
fn splice_before(k: &mut Kernel, b: Block, at: Op, from: Block) {
    edit::splice_ops(&mut k.dfg, b, at, from, false);
}

fn rewrite(k: &mut Kernel, s: &Shape) {
    let body = k.body;
    // T rounded up to even, and T − 1, before the partitions.
    let scratch = k.dfg.new_block();
    let one = iconst(k, scratch, 1);
    let odd = op2(k, scratch, Opcode::And, None, s.total, one, Dtype::I32);
    let even = op2(k, scratch, Opcode::Add, None, s.total, odd, Dtype::I32);
    let last = op2(k, scratch, Opcode::Sub, None, s.total, one, Dtype::I32);
    splice_before(k, body, s.ws, scratch);
    for (i, &l) in s.loops.iter().enumerate() {
        k.dfg.ops[l].operands[1] = even;
        let lb = k.dfg.ops[l].regions[0];
        let tile = k.dfg.blocks[lb].args[0];
        // Everything the tile indexes sees min(tile, T − 1).
        let first = k.dfg.blocks[lb].ops[0];
        let scratch = k.dfg.new_block();
        let eff = op2(k, scratch, Opcode::Min, None, tile, last, Dtype::I32);
        let min_op = *k.dfg.blocks[scratch].ops.last().expect("min was appended");
        splice_before(k, lb, first, scratch);
        edit::replace_uses(&mut k.dfg, tile, eff, Some(min_op));
        if i == 0 {
            producer(k, l, tile, eff, last, one);
        } else {
            consumer(k, lb, tile, s.total);
        }
    }
    for &m in &s.empties {
        double_arrivals(k, m);
    }
    k.dfg.ops[s.ws]
        .attrs
        .push(("cluster".into(), Attr::Expr(Expr::int(CLUSTER))));
    let g0 = k.grid[0].clone();
    if let ExprKind::Call(Func::Min, args) = &g0.kind {
        let call = |f: Func, a: Vec<Expr>| Expr {
            kind: ExprKind::Call(f, a),
            span: Span::default(),
        };
        let halves = call(Func::Cdiv, vec![args[0].clone(), Expr::int(CLUSTER)]);
        let even = Expr {
            kind: ExprKind::Binary(
                kir_ir::BinOp::Mul,
                Box::new(Expr::int(CLUSTER)),
                Box::new(halves),
            ),
            span: Span::default(),
        };
        k.grid[0] = call(Func::Min, vec![even, args[1].clone()]);
    }
}

/// The consumer's stores and atomics of tile loop body `lb` are masked by `%tile < T`.
fn consumer(k: &mut Kernel, lb: Block, tile: Value, total: Value) {
    let first = k.dfg.blocks[lb].ops[0];
    let scratch = k.dfg.new_block();
    let live = op2(
        k,
        scratch,
        Opcode::Cmp,
        Some(CmpPred::Lt),
        tile,
        total,
        Dtype::I1,
    );
    splice_before(k, lb, first, scratch);
    let mut writes = vec![];
    collect(
        k,
        lb,
        &mut |od| matches!(od.opcode, Opcode::Store | Opcode::AtomicAdd),
        &mut writes,
    );
    for (b, o) in writes {
        let mask = match k.dfg.ops[o].attr("mask") {
            Some(Attr::Value(m)) => {
                let m = *m;
                let mty = k.dfg.ty(m).clone();
                let scratch = k.dfg.new_block();
                let id = k.dfg.append_op(
                    scratch,
                    simple(Opcode::And, vec![m, live], None),
                    vec![(mty, None)],
                );
                let both = k.dfg.ops[id].results[0];
                splice_before(k, b, o, scratch);
                both
            }
            _ => live,
        };
        let attrs = &mut k.dfg.ops[o].attrs;
        attrs.retain(|(key, _)| key != "mask");
        attrs.insert(0, ("mask".into(), Attr::Value(mask)));
    }
}

/// Every op of block `b` (any depth) that `pred` selects, with its block.
fn collect(
    k: &Kernel,
    b: Block,
    pred: &dyn Fn(&kir_ir::OpData) -> bool,
    out: &mut Vec<(Block, Op)>,
) {
    for &o in &k.dfg.blocks[b].ops {
        let od = &k.dfg.ops[o];
        if pred(od) {
            out.push((b, o));
        }
        for &r in &od.regions {
            collect(k, r, pred, out);
        }
    }
}

/// The producer's ring copies (tile loop `l`) get `multicast %same`: their tile-dependent
/// indices, computed before the loop that copies, equal the peer program's. The peer's indices
/// are computed once per such loop (the ops that give them, cloned on the peer's tile), just
/// before it.
fn producer(k: &mut Kernel, l: Op, tile: Value, eff: Value, last: Value, one: Value) {
    let lb = k.dfg.ops[l].regions[0];
    let dep = tile_values(k, l);
    let top: Vec<Op> = k.dfg.blocks[lb].ops.clone();
    let mut copies = vec![];
    collect(
        k,
        lb,
        &|od| {
            od.opcode == Opcode::AsyncCopy && od.attr("bar").is_some() && od.attr("mask").is_none()
        },
        &mut copies,
    );
    // The peer's tile: min(tile xor 1, T − 1), right after this program's.
    let min_op = top[0];
    let scratch = k.dfg.new_block();
    let peer = op2(k, scratch, Opcode::Xor, None, tile, one, Dtype::I32);
    let peer_eff = op2(k, scratch, Opcode::Min, None, peer, last, Dtype::I32);
    edit::splice_ops(&mut k.dfg, lb, min_op, scratch, true);
    // Each copy with its tile-dependent indices, by the top-level op that holds it (its ring
    // loop), where every such index is computed at the tile body's top level before that op.
    let mut by_holder: Vec<(Op, Vec<(Op, Vec<Value>)>)> = vec![];
    for (_, c) in copies {
        let offs: Vec<Value> = k.dfg.ops[c]
            .tensor
            .iter()
            .flat_map(|t| t.offsets.iter())
            .filter_map(|o| match o {
                Offset::Value(v) if dep.contains(v) => Some(*v),
                _ => None,
            })
            .collect();
        let Some(&holder) = top.iter().find(|&&o| holds(k, o, c)) else {
            continue;
        };
        let before = |v: &Value| match k.dfg.values[*v].def {
            ValueDef::Result(d, _) => top
                .iter()
                .take_while(|&&o| o != holder)
                .any(|&o| o == d && o != min_op),
            _ => false,
        };
        if !offs.iter().all(before) {
            continue;
        }
        match by_holder.iter_mut().find(|(h, _)| *h == holder) {
            Some((_, list)) => list.push((c, offs)),
            None => by_holder.push((holder, vec![(c, offs)])),
        }
    }
    for (holder, list) in by_holder {
        let among: Vec<Op> = top
            .iter()
            .copied()
            .take_while(|&o| o != holder)
            .filter(|&o| o != min_op)
            .collect();
        let mut roots: Vec<Value> = list.iter().flat_map(|(_, v)| v.iter().copied()).collect();
        roots.sort();
        roots.dedup();
        let Some(slice) = edit::slice_among(k, &roots, &among, &HashSet::new()) else {
            continue;
        };
        let scratch = k.dfg.new_block();
        let src = k.dfg.clone();
        let mut cl = edit::Cloner::new(&src);
        cl.vmap.insert(eff, peer_eff);
        for &o in &slice {
            cl.op(&mut k.dfg, scratch, o);
        }
        for (c, offs) in list {
            let mut same = None;
            for &v in &offs {
                let pv = cl.vmap.get(&v).copied().unwrap_or(v);
                let eq = op2(k, scratch, Opcode::Cmp, Some(CmpPred::Eq), v, pv, Dtype::I1);
                same = Some(match same {
                    None => eq,
                    Some(s) => op2(k, scratch, Opcode::And, None, s, eq, Dtype::I1),
                });
            }
            // A copy whose indices do not depend on the tile is the same in every program.
            let same = same.unwrap_or_else(|| {
                op2(
                    k,
                    scratch,
                    Opcode::Cmp,
                    Some(CmpPred::Eq),
                    one,
                    one,
                    Dtype::I1,
                )
            });
            k.dfg.ops[c]
                .attrs
                .push(("multicast".into(), Attr::Value(same)));
        }
        splice_before(k, lb, holder, scratch);
    }
}

/// Whether op `o` is `c` or holds it in its regions.
fn holds(k: &Kernel, o: Op, c: Op) -> bool {
    o == c
        || k.dfg.ops[o]
            .regions
            .iter()
            .any(|&r| k.dfg.blocks[r].ops.iter().any(|&x| holds(k, x, c)))
}

/// Barrier `m`'s allocation expects twice its arrivals, and every arrival on it without bytes
/// is a cluster arrival.
fn double_arrivals(k: &mut Kernel, m: Value) {
    let ids: Vec<Op> = k.dfg.ops.keys().collect();
    for o in ids {
        let od = &mut k.dfg.ops[o];
        if od.opcode == Opcode::MbarAlloc && od.results.first() == Some(&m) {
            let n = match od.attr("arrivals") {
                Some(Attr::Expr(e)) => e.as_int().unwrap_or(1),
                _ => 1,
            };
            od.attrs.retain(|(key, _)| key != "arrivals");
            od.attrs
                .push(("arrivals".into(), Attr::Expr(Expr::int(n * CLUSTER))));
        } else if od.opcode == Opcode::MbarArrive
            && od.operands.first() == Some(&m)
            && od.attr("tx").is_none()
        {
            od.attrs
                .push(("cluster".into(), Attr::Expr(Expr::int(CLUSTER))));
        }
    }
}
