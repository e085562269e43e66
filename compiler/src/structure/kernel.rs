//! The classification of one kernel (docs/configs.md, "Classes"): which loop carries its dots,
//! where their operands come from, and from that its kind, the roles of its constants and its
//! features. Only the IR's structure is read, never a name of the module, kernel or constants.

use super::types::{Features, Found, KernelKind, KernelShape, Role};
use super::view::{yielded, View};
use kir_ir::{Attr, Block, Expr, Offset, Op, Opcode, ReduceKind, Value};
use std::collections::BTreeSet;

/// Classifies `v`'s kernel.
pub fn analyze(v: &View) -> KernelShape {
    let (kind, roles, features) = classify(v);
    KernelShape {
        name: v.kernel.name.clone(),
        kind,
        roles,
        features,
    }
}

fn other(why: &str) -> Found {
    (
        KernelKind::Other(why.to_string()),
        vec![],
        Features::default(),
    )
}

fn classify(v: &View) -> Found {
    let with_dots: Vec<(Op, Vec<Op>)> = v
        .loops()
        .into_iter()
        .map(|l| (l, dots_in(v, body(v, l))))
        .filter(|(_, d)| !d.is_empty())
        .collect();
    if with_dots.is_empty() {
        return super::rows::classify(v).unwrap_or_else(|| {
            other("no loop with a dot, and not a row reduction or an elementwise tile")
        });
    }
    // Attention backward's dK/dV kernel nests its query loop in a loop over heads: the loop
    // with the dots is the one classified.
    if let [(l, dots)] = &with_dots[..] {
        if let Some(f) = dot_loop(v, *l, dots) {
            return f;
        }
        if let Some(f) = softmax_loop(v, *l, dots) {
            return f;
        }
    }
    if with_dots.len() > 1 {
        return other("more than one loop with dots");
    }
    other("a loop with dots of another shape (an operand computed, not loaded)")
}

fn body(v: &View, l: Op) -> Block {
    v.op(l).regions[0]
}

/// The dots of loop body `b`, with those in the branches of its `if`s (dots that only some
/// programs run, as attention_bwd's dK/dV parts at large head dims).
fn dots_in(v: &View, b: Block) -> Vec<Op> {
    let mut out = vec![];
    for &o in v.ops(b) {
        match v.op(o).opcode {
            Opcode::Dot => out.push(o),
            Opcode::If => {
                for &r in &v.op(o).regions {
                    out.extend(dots_in(v, r));
                }
            }
            _ => {}
        }
    }
    out
}

/// Where a dot operand comes from: `Some(transposed)` when it is a tile load of a tensor in
/// block `b` (possibly through one `transpose`).
fn loaded_in(v: &View, x: Value, b: Block) -> Option<(bool, Op)> {
    let (op, d) = v.def(x)?;
    match d.opcode {
        Opcode::Load if v.ops(b).contains(&op) => Some((false, op)),
        Opcode::Transpose => {
            let (inner, di) = v.def(d.operands[0])?;
            (di.opcode == Opcode::Load && v.ops(b).contains(&inner)).then_some((true, inner))
        }
        _ => None,
    }
}

/// The constant a dim expression names (`None` for a literal or a compound expression).
fn role(v: &View, e: Option<&Expr>) -> Option<String> {
    e.and_then(|e| v.const_name(e))
}

/// A `for` loop's step as the constant it names.
fn step_const(v: &View, l: Op) -> (Option<String>, Option<i64>) {
    let step = v.op(l).operands[2];
    match v.def(step) {
        Some((_, d)) if d.opcode == Opcode::Const => match &d.lead {
            Some(Attr::Expr(e)) => (v.const_name(e), v.int(e)),
            _ => (None, None),
        },
        _ => (None, None),
    }
}

/// Whether a carried value `x` of loop body `b` flows into dot `d`'s accumulator and the dot's
/// result is yielded back in its place.
fn accumulates(v: &View, l: Op, d: Op) -> bool {
    let b = body(v, l);
    let dd = v.op(d);
    let r = dd.results[0];
    let acc = dd.operands[2];
    let slice = v.slice(acc);
    let dfg = &v.kernel.dfg;
    (1..dfg.blocks[b].args.len()).any(|i| {
        let arg = dfg.blocks[b].args[i];
        slice.contains(&arg) && yielded(dfg, b, i - 1).is_some_and(|y| yields(v, y, r))
    })
}

/// Whether `y` is `r`, or the result of an `if` that one of its branches yields `r` into.
fn yields(v: &View, y: Value, r: Value) -> bool {
    let y = v.resolve(y);
    if y == r {
        return true;
    }
    let dfg = &v.kernel.dfg;
    match (v.def(y), dfg.values[y].def) {
        (Some((_, d)), kir_ir::ValueDef::Result(_, j)) if d.opcode == Opcode::If => d
            .regions
            .iter()
            .any(|&br| yielded(dfg, br, j as usize).is_some_and(|x| yields(v, x, r))),
        _ => false,
    }
}

/// GEMM-like: every dot of the loop accumulates into a carried f32 tile and takes both operands
/// straight from tile loads in the loop indexed by the induction variable; one dot, or two
/// sharing A.
fn dot_loop(v: &View, l: Op, dots: &[Op]) -> Option<Found> {
    let b = body(v, l);
    let induction = v.kernel.dfg.blocks[b].args[0];
    let mut trans = (false, false);
    let mut a_ops = BTreeSet::new();
    let mut loads = vec![];
    for &d in dots {
        let dd = v.op(d);
        if v.dtype(dd.results[0]).as_deref() != Some("f32") || !accumulates(v, l, d) {
            return None;
        }
        // The accumulator is the carried value itself (not rescaled, as attention's is).
        if !is_arg(v, dd.operands[2]) {
            return None;
        }
        let (ta, la) = loaded_in(v, dd.operands[0], b)?;
        let (tb, lb) = loaded_in(v, dd.operands[1], b)?;
        for ld in [la, lb] {
            let walks = offsets(v, ld)
                .iter()
                .any(|o| v.slice(*o).contains(&induction));
            if !walks {
                return None;
            }
        }
        trans = (trans.0 || ta, trans.1 || tb);
        a_ops.insert(v.resolve(dd.operands[0]));
        loads.extend([la, lb]);
    }
    if dots.len() > 2 || a_ops.len() != 1 {
        return None;
    }
    let first = v.op(dots[0]);
    let out = v.dims(first.results[0]);
    let a = v.resolve(first.operands[0]);
    // The operand is M×K (a transpose's result included); its K is the loop step.
    let k_dims = v.dims(a);
    let (_, step_val) = step_const(v, l);
    let k_tile = role(v, k_dims.get(1));
    if step_val.is_none() || k_dims.get(1).and_then(|e| v.int(e)) != step_val {
        return None;
    }
    let mut roles = vec![
        (Role::MTile, role(v, out.first())),
        (Role::NTile, role(v, out.get(1))),
        (Role::KTile, k_tile),
    ];
    let offs: Vec<Value> = loads.iter().flat_map(|ld| offsets(v, *ld)).collect();
    if let Some(g) = group(v, &offs, &roles) {
        roles.push((Role::Group, Some(g)));
    }
    let dtype = v.dtype(a).unwrap_or_default();
    let features = Features {
        dtype,
        dots: dots.len(),
        acc_loads: acc_shaped_loads(v, b, &out),
        trans_a: trans.0,
        trans_b: trans.1,
        m_dim: rows_dim(v, &out),
        out_dims: stored_param(v, &out)
            .and_then(|p| param_dims(v, &p))
            .unwrap_or_default(),
        ..Features::default()
    };
    Some((KernelKind::DotLoop, roles, features))
}

/// The runtime dim of the rows of the tensor a tile of dims `out` (the accumulator's) is stored
/// to: the second-to-last dim of that tensor param, when it is a bare name.
fn rows_dim(v: &View, out: &[Expr]) -> Option<String> {
    param_rows_dim(v, &stored_param(v, out)?)
}

/// The tensor param a tile of dims `out` (the accumulator's) is stored to: the last store of
/// the kernel whose tile's trailing dims are `out`'s.
fn stored_param(v: &View, out: &[Expr]) -> Option<String> {
    let mut found = None;
    for b in v.blocks() {
        for &o in v.ops(b) {
            let d = v.op(o);
            if d.opcode != Opcode::Store {
                continue;
            }
            let dims = v.dims(d.operands[0]);
            if dims.len() < 2 || out.len() != 2 {
                continue;
            }
            let tail = &dims[dims.len() - 2..];
            if !(same_extent(v, &tail[0], &out[0]) && same_extent(v, &tail[1], &out[1])) {
                continue;
            }
            if let Some(t) = d.tensor.as_ref() {
                found = Some(t.param.clone());
            }
        }
    }
    found
}

/// Two tile extents are the same: the same constant, or the same literal value.
fn same_extent(v: &View, a: &Expr, b: &Expr) -> bool {
    match (v.const_name(a), v.const_name(b)) {
        (Some(x), Some(y)) => x == y,
        _ => v.int(a).is_some() && v.int(a) == v.int(b),
    }
}

/// The tile loads outside the loop body `body` whose tiles have the accumulator's dims `out`:
/// a tile of the output's shape read in the epilogue (gemm's `c_in`).
fn acc_shaped_loads(v: &View, body: Block, out: &[Expr]) -> usize {
    let mut n = 0;
    for b in v.blocks() {
        if b == body {
            continue;
        }
        for &o in v.ops(b) {
            let d = v.op(o);
            if d.opcode != Opcode::Load {
                continue;
            }
            let dims = v.dims(d.results[0]);
            if dims.len() == out.len() && dims.iter().zip(out).all(|(a, b)| same_extent(v, a, b)) {
                n += 1;
            }
        }
    }
    n
}

/// Every dim of tensor param `name`, when each is a bare name.
fn param_dims(v: &View, name: &str) -> Option<Vec<String>> {
    let p = v.kernel.params.iter().find(|p| p.name == name)?;
    match &p.kind {
        kir_ir::ParamKind::Tensor(_, tt) => tt
            .dims
            .iter()
            .map(|d| match &d.kind {
                kir_ir::ExprKind::Ident(n) => Some(n.clone()),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// The runtime dim of the rows of the tensor the tile `x` is loaded from (attention's Sq, from
/// the score dot's q tile), as [`param_rows_dim`] names it.
fn load_rows_dim(v: &View, x: Value) -> Option<String> {
    let (_, d) = v.def(x)?;
    if d.opcode != Opcode::Load {
        return None;
    }
    param_rows_dim(v, &d.tensor.as_ref()?.param)
}

/// The second-to-last dim of the kernel's tensor param `name`, when it is a bare name.
fn param_rows_dim(v: &View, name: &str) -> Option<String> {
    let p = v.kernel.params.iter().find(|p| p.name == name)?;
    match &p.kind {
        kir_ir::ParamKind::Tensor(_, tt) if tt.dims.len() >= 2 => {
            match &tt.dims[tt.dims.len() - 2].kind {
                kir_ir::ExprKind::Ident(n) => Some(n.clone()),
                _ => None,
            }
        }
        _ => None,
    }
}

fn is_arg(v: &View, x: Value) -> bool {
    v.arg_of(x).is_some()
}

/// The SSA offsets of a memory op.
fn offsets(v: &View, op: Op) -> Vec<Value> {
    v.op(op)
        .tensor
        .iter()
        .flat_map(|t| t.offsets.iter())
        .filter_map(|o| match o {
            Offset::Value(x) => Some(*x),
            Offset::Expr(_) => None,
        })
        .collect()
}

/// The program-order group: the one integer constant, besides the tiles, that feeds the block
/// offsets `offs` (through any `static_if` region).
fn group(v: &View, offs: &[Value], roles: &[(Role, Option<String>)]) -> Option<String> {
    let mut names = BTreeSet::new();
    for o in offs {
        names.extend(v.consts_feeding(*o));
    }
    for (_, c) in roles {
        if let Some(c) = c {
            names.remove(c);
        }
    }
    (names.len() == 1)
        .then(|| names.into_iter().next())
        .flatten()
}

/// A score dot: `x · transpose(k)` into a constant (zero) accumulator.
fn is_score_dot(v: &View, d: Op) -> bool {
    let dd = v.op(d);
    v.opcode(dd.operands[2]) == Some(Opcode::Const)
        && v.opcode(dd.operands[1]) == Some(Opcode::Transpose)
}

/// Attention: a loop with a score dot, exp of the scores and dots accumulating into carried
/// values. Two dots and a row max: the forward's online softmax; three or more and no row
/// max: a backward kernel, dK/dV when its accumulators' rows are the keys (the score columns,
/// or the score rows of a key-major kernel with two accumulators), dQ when they are the score
/// rows (queries) of its one accumulator.
fn softmax_loop(v: &View, l: Op, dots: &[Op]) -> Option<Found> {
    let b = body(v, l);
    let ops = v.ops(b);
    let score = *dots.iter().find(|d| is_score_dot(v, **d))?;
    let s = v.op(score).results[0];
    let accs: Vec<Op> = dots
        .iter()
        .copied()
        .filter(|d| accumulates(v, l, *d))
        .collect();
    let acc = *accs.first()?;
    let has = |pred: &dyn Fn(&kir_ir::OpData) -> bool| ops.iter().any(|o| pred(v.op(*o)));
    let exp_of_scores = ops.iter().any(|o| {
        let d = v.op(*o);
        matches!(d.opcode, Opcode::Exp | Opcode::Exp2) && v.slice(d.results[0]).contains(&s)
    });
    if !exp_of_scores {
        return None;
    }
    let row_max = has(&|d| d.opcode == Opcode::Reduce && d.reduce_kind() == Some(ReduceKind::Max));
    let s_dims = v.dims(s);
    let a_dims = v.dims(v.op(acc).results[0]);
    let q = v.op(score).operands[0];
    let dtype = v.dtype(v.resolve(q)).unwrap_or_default();
    let positions = position_compares(v, b);
    let features = Features {
        dtype,
        dots: dots.len(),
        head_dim: a_dims.get(1).and_then(|e| v.int(e)),
        causal: positions >= 1,
        // Only the backward's loops are read for a band: the forward's carries the mask_split
        // pass's own position comparison beside the causal one.
        band: !row_max && positions >= 2,
        mask: mask(v, b, dots, &s),
        softcap: softcap(v, b, &s),
        m_dim: load_rows_dim(v, q),
        ..Features::default()
    };
    let same = |x: Option<&Expr>, y: Option<&Expr>| match (x, y) {
        (Some(x), Some(y)) => match (v.const_name(x), v.const_name(y)) {
            (Some(a), Some(b)) => a == b,
            (None, None) => v.int(x).is_some() && v.int(x) == v.int(y),
            _ => false,
        },
        _ => false,
    };
    let (step, _) = step_const(v, l);
    if dots.len() == 2 && row_max && accs.len() == 1 {
        let mut roles = vec![
            (Role::QueryBlock, role(v, a_dims.first())),
            (Role::KeyBlock, role(v, s_dims.get(1))),
        ];
        let mut offs = vec![];
        if let Some((qop, qd)) = v.def(q) {
            if qd.opcode == Opcode::Load {
                offs = offsets(v, qop);
            }
        }
        if let Some(g) = group(v, &offs, &roles) {
            roles.push((Role::Group, Some(g)));
        }
        return Some((KernelKind::Attention, roles, features));
    }
    if dots.len() >= 3 && !row_max {
        // dK/dV: the accumulators' rows are the keys, the score columns of s = q·kᵀ, or the
        // score rows of the key-major sᵀ = k·qᵀ, where dv and dk both accumulate (dQ has one).
        let key_rows = same(a_dims.first(), s_dims.get(1))
            || accs.len() >= 2 && same(a_dims.first(), s_dims.first());
        if key_rows {
            let roles = vec![
                (Role::KvBlock, role(v, a_dims.first())),
                (Role::QueryStep, step),
            ];
            return Some((KernelKind::AttentionBwdKv, roles, features));
        }
        if same(a_dims.first(), s_dims.first()) {
            let roles = vec![
                (Role::QueryBlock, role(v, a_dims.first())),
                (Role::KeyBlock, step),
            ];
            return Some((KernelKind::AttentionBwdQ, roles, features));
        }
    }
    None
}

/// How many comparisons in loop body `b` read both the row and the column index of a tile
/// (`iota axis 0` and `iota axis 1`): one where the score mask compares query and key
/// positions (causal), two where a window bounds the keys from below as well (a band).
fn position_compares(v: &View, b: Block) -> usize {
    v.ops(b)
        .iter()
        .filter(|o| {
            let d = v.op(**o);
            if d.opcode != Opcode::Cmp {
                return false;
            }
            let mut axes = BTreeSet::new();
            for x in v.slice(d.results[0]) {
                if let Some((_, xd)) = v.def(x) {
                    if xd.opcode == Opcode::Iota {
                        if let Some(Attr::Expr(e)) = xd.attr("axis") {
                            axes.extend(v.int(e));
                        }
                    }
                }
            }
            axes.contains(&0) && axes.contains(&1)
        })
        .count()
}

/// Whether loop body `b` loads a score-shaped tile that no dot takes (an additive mask).
fn mask(v: &View, b: Block, dots: &[Op], s: &Value) -> bool {
    let mut operand_loads = BTreeSet::new();
    for d in dots {
        for &x in &v.op(*d).operands[..2] {
            if let Some((_, ld)) = loaded_in(v, x, b) {
                operand_loads.insert(ld);
            }
        }
    }
    let s_shape = v.shape(*s);
    // The mask tile has the scores' shape, or its transpose in a key-major kernel (sᵀ = k·qᵀ).
    let flipped = s_shape.clone().map(|mut x| {
        x.reverse();
        x
    });
    v.ops(b).iter().any(|o| {
        let d = v.op(*o);
        d.opcode == Opcode::Load
            && !operand_loads.contains(o)
            && s_shape.is_some()
            && d.results
                .first()
                .is_some_and(|&r| [&s_shape, &flipped].contains(&&v.shape(r)))
    })
}

/// Whether the scores pass through a `tanh` in loop body `b` or a region inside it (a logit
/// soft cap, whose backward also keeps the cap's derivative: one more score-sized tile).
fn softcap(v: &View, b: Block, s: &Value) -> bool {
    v.ops(b).iter().any(|o| {
        let d = v.op(*o);
        (d.opcode == Opcode::Tanh && v.slice(d.results[0]).contains(s))
            || d.regions.iter().any(|&r| softcap(v, r, s))
    })
}
