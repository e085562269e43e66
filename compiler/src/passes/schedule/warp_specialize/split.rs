//! Several consumers for `warp_specialize`: tiles split along a grid axis, the union of their
//! loop ranges with a guarded body when bounds differ per tile, ping-pong turns, and the last
//! program's tiles past the original grid (an odd tile count split in two), which take part in
//! the ring as consumer 0's tile and write nothing.

use super::types::{bad, Piped, Split, WsPlan};
use crate::passes::schedule::grid::{expr_value, lowerable};
use kir_ir::edit::{self, iconst, op2, simple, Cloner};
use kir_ir::{
    Attr, Block, CmpPred, Diagnostic, Dtype, Expr, ExprKind, Func, Kernel, Op, Opcode, Span, Type,
    Value, ValueDef,
};
use std::collections::HashSet;

/// C > 1 consumers split tiles along the plan's grid axis (see the module doc): rewrites the
/// grid and returns the ops that stay outside the partitions, the ops that move into them (those
/// before the loops that depend on the split axis, then `inside`) and the split, for `build`.
pub(super) fn split_consumers(
    k: &mut Kernel,
    plan: &WsPlan,
    loops: &[Piped],
    outside: &[Op],
    inside: &[Op],
) -> Result<(Vec<Op>, Vec<Op>, Split), Diagnostic> {
    if has_semaphores(k) {
        return Err(bad(k.span, k, SEMAPHORES));
    }
    let axis = plan.split_axis as i64;
    let pid_ops = axis_ops(k, Opcode::ProgramId, axis as usize);
    // Ops outside the partitions that depend on the split axis move into both partitions.
    let (moved, dep) = axis_dependents(k, &pid_ops, outside);
    let stay: Vec<Op> = outside
        .iter()
        .copied()
        .filter(|o| !moved.contains(o))
        .collect();
    if any_writes(k, &moved) {
        return Err(bad(
            k.span,
            k,
            "code before the loops that depends on the split axis writes memory",
        ));
    }
    // The copies and the step must not depend on the split axis; the bounds may (the consumers
    // then walk the union of their ranges).
    for p in loops {
        let then = k.dfg.ops[p.prefetch].regions[0];
        let d = &k.dfg.ops[p.op];
        // A copy may use the loop's own bounds (a key mask `j < hi`): the producer gives it the
        // union's, so it reads a superset of what each consumer's range needs.
        let (lo, hi) = (d.operands[0], d.operands[1]);
        let mut roots: Vec<Value> = vec![d.operands[2]];
        roots.extend(
            edit::region_inputs(&k.dfg, then)
                .into_iter()
                .filter(|&v| v != p.at && v != p.pf && v != lo && v != hi),
        );
        if let Some(v) = depends_on(k, &roots, &dep, inside) {
            return Err(bad(d.span, k, &format!("{} depends on grid axis {axis}, which plan `{}` splits among its consumers (they share every stage, so their copies must agree)", value_name(k, v), plan.name)));
        }
    }
    let mut inside_all = moved.clone();
    inside_all.extend_from_slice(inside);
    let split = shrink_grid(k, plan, pid_ops).map_err(|why| bad(k.span, k, &why))?;
    Ok((stay, inside_all, split))
}

/// Why a kernel with semaphores takes no split: each consumer stands for a program of the
/// original grid, so a semaphore wait of one consumer would count the signals of another
/// consumer of the same program, which docs/ir.md does not allow (a program waits only for
/// programs before it in grid order).
pub(super) const SEMAPHORES: &str = "it orders its programs with semaphores, and the consumers of one program would wait for each other's signals";

/// Whether the kernel orders its programs with `sem_wait` or `sem_signal`.
pub(super) fn has_semaphores(k: &Kernel) -> bool {
    edit::contains(&k.dfg, k.body, &|od| {
        matches!(od.opcode, Opcode::SemWait | Opcode::SemSignal)
    })
}

/// The ops of `ops` (in order) that depend on the split axis: its `program_id` ops `pid_ops`
/// and every op that reads (at any depth) a result of one before it; and the values they define.
pub(super) fn axis_dependents(k: &Kernel, pid_ops: &[Op], ops: &[Op]) -> (Vec<Op>, HashSet<Value>) {
    let mut dep: HashSet<Value> = pid_ops
        .iter()
        .flat_map(|&o| k.dfg.ops[o].results.clone())
        .collect();
    let mut moved = vec![];
    for &o in ops {
        if pid_ops.contains(&o) || all_uses(k, o).iter().any(|u| dep.contains(u)) {
            dep.extend(k.dfg.ops[o].results.iter().copied());
            moved.push(o);
        }
    }
    (moved, dep)
}

/// Whether one of `ops` writes memory: an op with effects, or a region that writes.
pub(super) fn any_writes(k: &Kernel, ops: &[Op]) -> bool {
    ops.iter().any(|&o| {
        let d = &k.dfg.ops[o];
        d.opcode.has_side_effects() || d.regions.iter().any(|&r| edit::writes_memory(&k.dfg, r))
    })
}

/// Shrinks the grid along the plan's axis to cdiv(n, C) (the consumers compute n as IR) and
/// returns the split of the axis's `program_id` ops `pid_ops`; an error saying why when n is not
/// an integer expression of dims.
pub(super) fn shrink_grid(
    k: &mut Kernel,
    plan: &WsPlan,
    pid_ops: Vec<Op>,
) -> Result<Split, String> {
    let axis = plan.split_axis as usize;
    let g = k.grid[axis].clone();
    if !lowerable(&g) {
        return Err(format!("its grid along axis {axis} is not an integer expression of dims, which the consumers need to skip the tiles past it"));
    }
    k.grid[axis] = Expr {
        kind: ExprKind::Call(
            kir_ir::Func::Cdiv,
            vec![g, Expr::int(plan.consumers as i64)],
        ),
        span: Span::default(),
    };
    Ok(Split {
        pid_ops,
        tiles: g_tiles(k, axis),
    })
}

/// The ops of `k` with `opcode` (`program_id` or `num_programs`) along grid axis `axis`.
pub(super) fn axis_ops(k: &Kernel, opcode: Opcode, axis: usize) -> Vec<Op> {
    k.dfg
        .ops
        .keys()
        .filter(|&o| {
            let d = &k.dfg.ops[o];
            d.opcode == opcode
                && matches!(&d.lead, Some(Attr::Expr(e)) if e.as_int() == Some(axis as i64))
        })
        .collect()
}

/// Rewrites every `num_programs axis` of `k` as the value of the grid's expression along `axis`
/// (computed from the dims at the top of the body, as i32), so that it keeps its meaning — the
/// count of tiles — once the split shrinks the grid along that axis.
pub(super) fn num_programs_as_grid(k: &mut Kernel, axis: usize) {
    let ops = axis_ops(k, Opcode::NumPrograms, axis);
    if ops.is_empty() {
        return;
    }
    let grid = k.grid[axis].clone();
    let head = k.dfg.new_block();
    let wide = expr_value(k, head, &grid);
    let id = k.dfg.append_op(
        head,
        simple(Opcode::Cast, vec![wide], None),
        vec![(Type::scalar(Dtype::I32), None)],
    );
    let n = k.dfg.ops[id].results[0];
    let new_ops = std::mem::take(&mut k.dfg.blocks[head].ops);
    let body = k.body;
    k.dfg.blocks[body].ops.splice(0..0, new_ops);
    for o in ops {
        let old = k.dfg.ops[o].results[0];
        edit::replace_uses(&mut k.dfg, old, n, None);
        let blocks: Vec<Block> = k.dfg.blocks.keys().collect();
        for b in blocks {
            k.dfg.blocks[b].ops.retain(|&x| x != o);
        }
    }
}

/// The grid expression along `axis` before the split (undoing `cdiv(·, C)`).
fn g_tiles(k: &Kernel, axis: usize) -> Expr {
    match &k.grid[axis].kind {
        ExprKind::Call(Func::Cdiv, a) => a[0].clone(),
        _ => k.grid[axis].clone(),
    }
}

/// Appends to block `b` consumer 0's tile of this program, `program_id(axis) · C`.
fn first_tile(k: &mut Kernel, b: Block, plan: &WsPlan) -> Value {
    let id = k.dfg.append_op(
        b,
        simple(
            Opcode::ProgramId,
            vec![],
            Some(Attr::Expr(Expr::int(plan.split_axis as i64))),
        ),
        vec![(Type::scalar(Dtype::I32), None)],
    );
    let pid = k.dfg.ops[id].results[0];
    let cc = iconst(k, b, plan.consumers as i64);
    op2(k, b, Opcode::Mul, None, pid, cc, Dtype::I32)
}

/// Appends to block `b` the tile of consumer `w` (a value) of this program, `pid · C + w`, and
/// whether it is inside the original grid; a tile past it is replaced by `pid · C`, consumer 0's,
/// which always is. Returns (tile, valid).
pub(super) fn tile_of(
    k: &mut Kernel,
    b: Block,
    plan: &WsPlan,
    w: Value,
    sp: &Split,
) -> (Value, Value) {
    let first = first_tile(k, b, plan);
    let tile = op2(k, b, Opcode::Add, None, first, w, Dtype::I32);
    let n = expr_value(k, b, &sp.tiles);
    let id = k.dfg.append_op(
        b,
        simple(Opcode::Cast, vec![tile], None),
        vec![(Type::scalar(Dtype::I64), None)],
    );
    let wide = k.dfg.ops[id].results[0];
    let valid = op2(k, b, Opcode::Cmp, Some(CmpPred::Lt), wide, n, Dtype::I1);
    let id = k.dfg.append_op(
        b,
        simple(Opcode::Select, vec![valid, tile, first], None),
        vec![(Type::scalar(Dtype::I32), None)],
    );
    (k.dfg.ops[id].results[0], valid)
}

/// Makes `program_id(axis)` in consumer block `cons` its tile (see [`tile_of`]); returns the
/// value saying whether the tile is inside the original grid.
pub(super) fn consumer_tile(
    k: &mut Kernel,
    cons: Block,
    plan: &WsPlan,
    wg: Value,
    sp: &Split,
) -> Value {
    let head = k.dfg.new_block();
    let (tile, valid) = tile_of(k, head, plan, wg, sp);
    let ops = std::mem::take(&mut k.dfg.blocks[head].ops);
    k.dfg.blocks[cons].ops.splice(0..0, ops);
    for &po in &sp.pid_ops {
        let old = k.dfg.ops[po].results[0];
        edit::replace_uses(&mut k.dfg, old, tile, None);
        k.dfg.blocks[cons].ops.retain(|&o| o != po);
    }
    valid
}

/// Puts every store and atomic of block `b` (at any depth) under `if valid`: a consumer whose
/// tile is past the original grid computes consumer 0's tile and keeps its place in the ring
/// (its waits, reads, releases, arrivals and turns stay) but writes nothing.
pub(super) fn guard_effects(k: &mut Kernel, b: Block, valid: Value) {
    let ops = k.dfg.blocks[b].ops.clone();
    let mut out = Vec::with_capacity(ops.len());
    for o in ops {
        for r in k.dfg.ops[o].regions.clone() {
            guard_effects(k, r, valid);
        }
        if k.dfg.ops[o].opcode.effect() == kir_ir::Effect::WritesMemory {
            let then = edit::yield_block(&mut k.dfg, vec![o], vec![]);
            let els = edit::yield_block(&mut k.dfg, vec![], vec![]);
            let scratch = k.dfg.new_block();
            let id = edit::append_if(&mut k.dfg, scratch, valid, then, els, vec![]);
            k.dfg.blocks[scratch].ops.clear();
            out.push(id);
        } else {
            out.push(o);
        }
    }
    k.dfg.blocks[b].ops = out;
}

/// The first of `roots` whose value (transitively through `among`) depends on `dep`.
pub(super) fn depends_on(
    k: &Kernel,
    roots: &[Value],
    dep: &HashSet<Value>,
    among: &[Op],
) -> Option<Value> {
    let set: HashSet<Op> = among.iter().copied().collect();
    for &r in roots {
        let mut stack = vec![r];
        let mut seen = HashSet::new();
        while let Some(v) = stack.pop() {
            if dep.contains(&v) {
                return Some(r);
            }
            if let ValueDef::Result(d, _) = k.dfg.values[v].def {
                if set.contains(&d) && seen.insert(d) {
                    stack.extend(all_uses(k, d));
                }
            }
        }
    }
    None
}

/// The values op `o` reads: its operands, offsets and mask, and what its regions read from
/// outside them (an `if` whose branch yields `program_id` depends on the split axis).
fn all_uses(k: &Kernel, o: Op) -> Vec<Value> {
    let d = &k.dfg.ops[o];
    let mut v = d.uses();
    for &r in &d.regions {
        v.extend(edit::region_inputs(&k.dfg, r));
    }
    v
}

/// A value as text names it, for messages.
fn value_name(k: &Kernel, v: Value) -> String {
    match &k.dfg.values[v].name {
        Some(n) => format!("`%{n}`"),
        None => "a value".into(),
    }
}

/// Ping-pong: consumer `wg` takes its turn on ordering barrier `wg` (phase t) before the first
/// dot of the iteration and hands it to consumer (wg + 1) mod C right after, so the matrix work
/// of one consumer overlaps the rest of the other's iteration.
pub(super) fn pingpong(k: &mut Kernel, body: Block, ord: Value, t: Value, wg: Value, c: usize) {
    let Some(pos) = k.dfg.blocks[body]
        .ops
        .iter()
        .position(|&o| matches!(k.dfg.ops[o].opcode, Opcode::Dot | Opcode::DotAsync))
    else {
        return;
    };
    let before = k.dfg.new_block();
    let two = iconst(k, before, 2);
    let par = op2(k, before, Opcode::Rem, None, t, two, Dtype::I32);
    k.dfg.append_op(
        before,
        simple(Opcode::MbarWait, vec![ord, wg, par], None),
        vec![],
    );
    let after = k.dfg.new_block();
    let one = iconst(k, after, 1);
    let cc = iconst(k, after, c as i64);
    let w1 = op2(k, after, Opcode::Add, None, wg, one, Dtype::I32);
    let next = op2(k, after, Opcode::Rem, None, w1, cc, Dtype::I32);
    k.dfg.append_op(
        after,
        simple(Opcode::MbarArrive, vec![ord, next], None),
        vec![],
    );
    let after_ops = std::mem::take(&mut k.dfg.blocks[after].ops);
    k.dfg.blocks[body].ops.splice(pos + 1..pos + 1, after_ops);
    let before_ops = std::mem::take(&mut k.dfg.blocks[before].ops);
    k.dfg.blocks[body].ops.splice(pos..pos, before_ops);
}

/// Whether a loop's bounds (`[lo, hi]` in `src`) depend on the split axis (reach one of `pid_ops`).
pub(super) fn bounds_split(
    k: &Kernel,
    pid_ops: &[Op],
    among: &[Op],
    forbid: &HashSet<Value>,
    lo: Value,
    hi: Value,
) -> bool {
    edit::slice_among(k, &[lo, hi], among, forbid)
        .unwrap_or_default()
        .iter()
        .any(|o| pid_ops.contains(o))
}

/// The union [min lo, max hi) over consumers w of a loop's bounds, appended to block `b`: each
/// consumer's bounds are the loop's `[lo, hi]` cloned from `src` with `program_id(axis)` replaced
/// by that consumer's tile (see [`tile_of`]: a tile past the grid counts as consumer 0's, so the
/// union covers the real tiles only).
#[allow(clippy::too_many_arguments)]
pub(super) fn union_bounds(
    k: &mut Kernel,
    b: Block,
    src: &kir_ir::Dfg,
    sp: &Split,
    among: &[Op],
    forbid: &HashSet<Value>,
    plan: &WsPlan,
    [lo, hi]: [Value; 2],
) -> (Value, Value) {
    let pid_ops = &sp.pid_ops;
    let need = edit::slice_among(k, &[lo, hi], among, forbid).unwrap_or_default();
    let mut ends: Vec<(Value, Value)> = vec![];
    for w in 0..plan.consumers as i64 {
        let tile = if w == 0 {
            // Consumer 0's tile, p · C, is always inside the grid.
            first_tile(k, b, plan)
        } else {
            let wv = iconst(k, b, w);
            tile_of(k, b, plan, wv, sp).0
        };
        let mut wl = Cloner::new(src);
        for &po in pid_ops {
            wl.vmap.insert(src.ops[po].results[0], tile);
        }
        for &o in &need {
            if !pid_ops.contains(&o) {
                wl.op(&mut k.dfg, b, o);
            }
        }
        let m = |v: Value| wl.vmap.get(&v).copied().unwrap_or(v);
        ends.push((m(lo), m(hi)));
    }
    let (mut l, mut h) = ends[0];
    for &(lw, hw) in &ends[1..] {
        l = op2(k, b, Opcode::Min, None, l, lw, Dtype::I32);
        h = op2(k, b, Opcode::Max, None, h, hw, Dtype::I32);
    }
    (l, h)
}

/// Guards loop `l`'s body by `own_lo ≤ i < own_hi`: every op but the stage releases and the
/// `yield` moves into `if`'s then-region, which yields the carried values (the stage slot
/// `slot` aside); the else-region yields them unchanged and, with ping-pong, still takes and
/// hands on the turn. Returns the then-block.
pub(super) fn guard_body(
    k: &mut Kernel,
    l: Op,
    slot: usize,
    own_lo: Value,
    own_hi: Value,
    turn: Option<(Value, Value, usize)>,
) -> Block {
    let body = k.dfg.ops[l].regions[0];
    let ops = std::mem::take(&mut k.dfg.blocks[body].ops);
    let (y, rest) = ops.split_last().expect("a loop body ends with yield");
    let (releases, inner): (Vec<Op>, Vec<Op>) = rest
        .iter()
        .partition(|&&o| k.dfg.ops[o].opcode == Opcode::SmemRelease);
    let iv = k.dfg.blocks[body].args[0];
    let args: Vec<Value> = k.dfg.blocks[body].args[1..].to_vec();
    let yields = k.dfg.ops[*y].operands.clone();
    let keep: Vec<usize> = (0..yields.len()).filter(|&i| i != slot).collect();
    let then = k.dfg.new_block();
    k.dfg.blocks[then].ops = inner;
    k.dfg.append_op(
        then,
        simple(
            Opcode::Yield,
            keep.iter().map(|&i| yields[i]).collect(),
            None,
        ),
        vec![],
    );
    let els = k.dfg.new_block();
    if let Some((ord, wg, c)) = turn {
        let two = iconst(k, els, 2);
        let t = args[slot];
        let par = op2(k, els, Opcode::Rem, None, t, two, Dtype::I32);
        k.dfg.append_op(
            els,
            simple(Opcode::MbarWait, vec![ord, wg, par], None),
            vec![],
        );
        let one = iconst(k, els, 1);
        let cc = iconst(k, els, c as i64);
        let w1 = op2(k, els, Opcode::Add, None, wg, one, Dtype::I32);
        let next = op2(k, els, Opcode::Rem, None, w1, cc, Dtype::I32);
        k.dfg.append_op(
            els,
            simple(Opcode::MbarArrive, vec![ord, next], None),
            vec![],
        );
    }
    k.dfg.append_op(
        els,
        simple(Opcode::Yield, keep.iter().map(|&i| args[i]).collect(), None),
        vec![],
    );
    let ge = op2(
        k,
        body,
        Opcode::Cmp,
        Some(kir_ir::CmpPred::Ge),
        iv,
        own_lo,
        Dtype::I1,
    );
    let lt = op2(
        k,
        body,
        Opcode::Cmp,
        Some(kir_ir::CmpPred::Lt),
        iv,
        own_hi,
        Dtype::I1,
    );
    let inside = op2(k, body, Opcode::And, None, ge, lt, Dtype::I1);
    let tys: Vec<(Type, Option<String>)> = keep
        .iter()
        .map(|&i| (k.dfg.ty(args[i]).clone(), None))
        .collect();
    let id = edit::append_if(&mut k.dfg, body, inside, then, els, tys);
    let res = k.dfg.ops[id].results.clone();
    k.dfg.blocks[body].ops.extend(releases);
    let mut new_yields = yields.clone();
    for (r, &i) in res.into_iter().zip(&keep) {
        new_yields[i] = r;
    }
    k.dfg.ops[*y].operands = new_yields;
    k.dfg.blocks[body].ops.push(*y);
    then
}
