//! Structural matchers for the RMSNorm → GEMM fusion (`norm.rs`): recognising an
//! RMSNorm producer kernel (Σx² loop, `rsqrt(Σx²/C + eps)`, the `y = x·rstd·w` store) and the
//! K loop of a GEMM consumer that reads `y`, from the dataflow alone (never from names). Each
//! matcher's error says which part of the structure is missing; it goes into the fusion report.

use kir_ir::edit::{self, def_data};
use kir_ir::{
    Attr, Dfg, Dtype, ExprKind, Kernel, Offset, Op, OpData, Opcode, ParamKind, Value, ValueDef,
};

/// What the matcher found in an RMSNorm producer.
pub(super) struct Norm {
    /// The param of `x`.
    pub(super) x: String,
    /// The param of `w`.
    pub(super) w: String,
    /// The param of `y`.
    pub(super) y: String,
    /// The op giving `eps` (a scalar `param` or `const`).
    pub(super) eps: OpData,
    /// The `reduce sum … axis 1` op of Σx².
    pub(super) reduce: OpData,
}

/// A match result, or why there is none.
pub(super) type R<T> = Result<T, String>;

fn is(d: &Dfg, v: Value, op: Opcode) -> bool {
    def_data(d, v).is_some_and(|o| o.opcode == op)
}

/// True if `v` is a `const` 0 (integer or float, scalar or tile).
fn zero(d: &Dfg, v: Value) -> bool {
    def_data(d, v).is_some_and(|o| o.opcode == Opcode::Const && lit_zero(o.lead.as_ref()))
}

fn lit_zero(a: Option<&Attr>) -> bool {
    match a {
        Some(Attr::Expr(e)) => match &e.kind {
            ExprKind::Int(0) => true,
            ExprKind::Float(f) => f.0 == 0.0,
            _ => false,
        },
        _ => false,
    }
}

/// The name of the dim `v` reads (`dim NAME`).
fn dim_name(d: &Dfg, v: Value) -> Option<String> {
    let o = def_data(d, v)?;
    match (o.opcode == Opcode::Dim, &o.lead) {
        (true, Some(Attr::Name(n, _))) => Some(n.clone()),
        _ => None,
    }
}

/// `v` with any chain of the listed ops (one operand each) stripped.
fn strip(d: &Dfg, mut v: Value, ops: &[Opcode]) -> Value {
    while let Some(o) = def_data(d, v).filter(|o| ops.contains(&o.opcode)) {
        v = o.operands[0];
    }
    v
}

/// The unmasked, zero-filled load behind `v` (through casts), with its param and offsets.
fn load_of(d: &Dfg, v: Value) -> Option<(String, Vec<Offset>)> {
    let o = def_data(d, strip(d, v, &[Opcode::Cast]))?;
    let t = o.tensor.as_ref()?;
    let ok = o.opcode == Opcode::Load && o.attr("mask").is_none() && lit_zero(o.attr("other"));
    ok.then(|| (t.param.clone(), t.offsets.clone()))
}

/// The tensor dims of param `p` of `k`, as text.
fn pdims(k: &Kernel, p: &str) -> Vec<String> {
    match k.param(p).map(|x| &x.kind) {
        Some(ParamKind::Tensor(_, t)) => t.dims.iter().map(|e| format!("{e}")).collect(),
        _ => vec![],
    }
}

/// Checks that `for` op `f` runs from 0 to `dim C` by a constant step.
fn row_loop(d: &Dfg, f: &OpData, c: &str) -> R<()> {
    let hi = dim_name(d, f.operands[1]);
    if !zero(d, f.operands[0]) || hi.as_deref() != Some(c) || !is(d, f.operands[2], Opcode::Const) {
        return Err(format!("a loop does not run over 0..dim {c}"));
    }
    Ok(())
}

/// Recognises an RMSNorm kernel; the error says which part of the structure is missing.
pub(super) fn match_norm(k: &Kernel) -> R<Norm> {
    let d = &k.dfg;
    let top = &d.blocks[k.body].ops;
    let not = |why: &str| format!("@{} is not an RMSNorm: {why}", k.name);
    let stores: Vec<Op> = d
        .ops
        .iter()
        .filter(|(_, o)| [Opcode::Store, Opcode::AtomicAdd].contains(&o.opcode))
        .map(|(id, _)| id)
        .collect();
    let [st] = stores[..] else {
        return Err(not("it does not store exactly once"));
    };
    let f2 = top
        .iter()
        .copied()
        .find(|&o| {
            d.ops[o].opcode == Opcode::For && d.blocks[d.ops[o].regions[0]].ops.contains(&st)
        })
        .ok_or_else(|| not("its store is not in a top-level loop"))?;
    let (so, lo) = (&d.ops[st], &d.ops[f2]);
    let body2 = &d.blocks[lo.regions[0]];
    let y = so
        .tensor
        .as_ref()
        .map(|t| t.param.clone())
        .unwrap_or_default();
    let [Offset::Value(row), Offset::Value(iv)] =
        so.tensor.as_ref().map_or(&[][..], |t| &t.offsets)
    else {
        return Err(not("the store is not at [row, column]"));
    };
    let pid0 = def_data(d, *row)
        .is_some_and(|o| o.opcode == Opcode::ProgramId && lit_zero(o.lead.as_ref()));
    if !pid0 || body2.args.first() != Some(iv) || so.attr("mask").is_some() {
        return Err(not(
            "the store is not at [program_id 0, loop index], unmasked",
        ));
    }
    // y = cast(x · rstd · w): the leaves of the product tree.
    let prod = strip(d, so.operands[0], &[Opcode::Cast]);
    let mut leaves = vec![];
    let mut stack = vec![prod];
    while let Some(v) = stack.pop() {
        match def_data(d, v).filter(|o| o.opcode == Opcode::Mul && !d.ty(v).is_scalar()) {
            Some(o) => stack.extend(o.operands.iter().copied()),
            None => leaves.push(v),
        }
    }
    if leaves.len() != 3 || d.ty(prod).dtype() != Some(Dtype::F32) {
        return Err(not(
            "the stored value is not a product of three f32 factors",
        ));
    }
    let (mut x, mut w, mut r) = (None, None, None);
    for &v in &leaves {
        let inner = strip(d, v, &[Opcode::Reshape, Opcode::Broadcast]);
        match load_of(d, v).or_else(|| load_of(d, inner)) {
            Some((p, offs)) if offs == [Offset::Value(*row), Offset::Value(*iv)] => x = Some(p),
            Some((p, offs)) if offs == [Offset::Value(*iv)] => w = Some(p),
            Some(_) => return Err(not("a factor is loaded at other offsets")),
            None if matches!(d.values[inner].def, ValueDef::Result(o, _) if top.contains(&o)) => {
                r = Some(inner)
            }
            None => {
                return Err(not(
                    "a factor is neither loaded nor computed before the loop",
                ))
            }
        }
    }
    let (Some(x), Some(w), Some(r)) = (x, w, r) else {
        return Err(not("the stored value is not x · w · (a per-row scale)"));
    };
    let (xd, yd) = (pdims(k, &x), pdims(k, &y));
    if xd.len() != 2 || yd != xd || pdims(k, &w) != [xd[1].clone()] {
        return Err(not("x, w, y are not [R, C], [C], [R, C]"));
    }
    let grid: Vec<String> = k.grid.iter().map(|e| format!("{e}")).collect();
    if grid != [xd[0].clone(), "1".into(), "1".into()] {
        return Err(not("the grid is not one program per row"));
    }
    row_loop(d, lo, &xd[1])?;
    // rstd = rsqrt(mean + eps), mean = Σx² / C.
    let ro = def_data(d, r).ok_or_else(|| not("no row scale"))?;
    let var = if ro.opcode == Opcode::Rsqrt {
        ro.operands[0]
    } else if ro.opcode == Opcode::Recip && is(d, ro.operands[0], Opcode::Sqrt) {
        def_data(d, ro.operands[0]).map_or(r, |s| s.operands[0])
    } else {
        return Err(not("the row scale is not rsqrt(…)"));
    };
    let add = def_data(d, var).filter(|o| o.opcode == Opcode::Add);
    let add = add.ok_or_else(|| not("rsqrt's operand is not mean + eps"))?;
    let scalar = |v: Value| {
        def_data(d, v)
            .filter(|o| [Opcode::Param, Opcode::Const].contains(&o.opcode) && d.ty(v).is_scalar())
    };
    let (eps, mean) = match (scalar(add.operands[0]), scalar(add.operands[1])) {
        (None, Some(e)) => (e.clone(), add.operands[0]),
        (Some(e), None) => (e.clone(), add.operands[1]),
        _ => return Err(not("rsqrt's operand is not mean + a scalar eps")),
    };
    let count = |v: Value| {
        def_data(d, v).is_some_and(|o| o.opcode == Opcode::Cast)
            && dim_name(d, strip(d, v, &[Opcode::Cast])).as_ref() == Some(&xd[1])
    };
    let m = def_data(d, mean).ok_or_else(|| not("no mean"))?;
    let [a, b] = m.operands[..] else {
        return Err(not("no mean"));
    };
    let recip_count = |v: Value| {
        def_data(d, v).is_some_and(|o| o.opcode == Opcode::Recip && count(o.operands[0]))
    };
    let total =
        if (m.opcode == Opcode::Div && count(b)) || (m.opcode == Opcode::Mul && recip_count(b)) {
            a
        } else if m.opcode == Opcode::Mul && recip_count(a) {
            b
        } else {
            return Err(not("the mean is not Σ / dim C"));
        };
    let red = def_data(d, total).filter(|o| {
        o.opcode == Opcode::Reduce
            && o.reduce_kind() == Some(kir_ir::ReduceKind::Sum)
            && matches!(o.attr("axis"), Some(Attr::Expr(e)) if e.as_int() == Some(1))
    });
    let red = red.ok_or_else(|| not("the mean's numerator is not a row sum"))?;
    sum_of_squares(d, red.operands[0], &x, *row, &xd[1]).map_err(|e| not(&e))?;
    Ok(Norm {
        x,
        w,
        y,
        eps,
        reduce: red.clone(),
    })
}

/// Checks that `ss` is the result of a top-level loop that accumulates `x[row, c]²` from zero.
fn sum_of_squares(d: &Dfg, ss: Value, x: &str, row: Value, c: &str) -> R<()> {
    let ValueDef::Result(f1, 0) = d.values[ss].def else {
        return Err("the row sum is not of a loop's result".into());
    };
    let lo = &d.ops[f1];
    if lo.opcode != Opcode::For || lo.operands.len() != 4 || !zero(d, lo.operands[3]) {
        return Err("the row sum is not of a loop carrying one zero-initialised value".into());
    }
    row_loop(d, lo, c)?;
    let b = &d.blocks[lo.regions[0]];
    let y = b.ops.last().map(|&o| &d.ops[o]);
    let next = y
        .filter(|o| o.opcode == Opcode::Yield)
        .map(|o| o.operands[0]);
    let add = next
        .and_then(|v| def_data(d, v))
        .filter(|o| o.opcode == Opcode::Add);
    let sq = add.and_then(|o| match o.operands[..] {
        [a, s] | [s, a] if a == b.args[1] && is(d, s, Opcode::Mul) => def_data(d, s),
        _ => None,
    });
    let ok = sq.is_some_and(|o| {
        o.operands[0] == o.operands[1]
            && load_of(d, o.operands[0])
                == Some((
                    x.to_string(),
                    vec![Offset::Value(row), Offset::Value(b.args[0])],
                ))
    });
    if !ok {
        return Err("no loop accumulates x[row, c]² from zero".into());
    }
    Ok(())
}

/// The GEMM K loop of a consumer: where `y` is loaded and which accumulator it feeds.
pub(super) struct Gemm {
    /// The K loop (`for`).
    pub(super) l: Op,
    /// The `load y` op.
    pub(super) load: Op,
    /// The dot's accumulator: its index among the loop's carried values.
    pub(super) acc: usize,
}

/// Recognises `acc = dot(load y[m0, k], B, acc)` in a top-level K loop of `k` over `dim K`
/// (K: the second dim of `y`), from a zero accumulator, the loaded tile used by nothing else.
pub(super) fn match_gemm(k: &Kernel, y: &str) -> R<Gemm> {
    let d = &k.dfg;
    let top = &d.blocks[k.body].ops;
    let reads: Vec<Op> = d
        .ops
        .iter()
        .filter(|(_, o)| o.tensor.as_ref().is_some_and(|t| t.param == y))
        .map(|(id, _)| id)
        .collect();
    let [load] = reads[..] else {
        return Err(format!("@{} does not read `{y}` exactly once", k.name));
    };
    let l = top.iter().copied().find(|&o| {
        d.ops[o].opcode == Opcode::For && d.blocks[d.ops[o].regions[0]].ops.contains(&load)
    });
    let l = l.ok_or("the read of the normalized rows is not in a top-level loop")?;
    let (lo, ld) = (&d.ops[l], &d.ops[load]);
    let b = &d.blocks[lo.regions[0]];
    let kd = pdims(k, y);
    let bk = d
        .ty(ld.results.first().copied().ok_or("no result")?)
        .shape();
    let step = def_data(d, lo.operands[2]).and_then(|o| match &o.lead {
        Some(Attr::Expr(e)) => e.as_int(),
        _ => None,
    });
    let offs = &ld.tensor.as_ref().ok_or("no tensor")?.offsets;
    let m0_outside = |v: &Offset| match v {
        Offset::Value(v) => matches!(d.values[*v].def, ValueDef::Result(o, _) if top.contains(&o)),
        Offset::Expr(_) => false,
    };
    if ld.opcode != Opcode::Load
        || ld.attr("mask").is_some()
        || !lit_zero(ld.attr("other"))
        || kd.len() != 2
        || offs.len() != 2
        || !m0_outside(&offs[0])
        || offs[1] != Offset::Value(b.args[0])
    {
        return Err("the normalized rows are not loaded unmasked at [m0, k] in the K loop".into());
    }
    if !zero(d, lo.operands[0])
        || dim_name(d, lo.operands[1]).as_ref() != Some(&kd[1])
        || bk.as_ref().and_then(|s| s.get(1)).map(|&n| n as i64) != step
    {
        return Err(format!(
            "the K loop does not run over 0..dim {} by its tile",
            kd[1]
        ));
    }
    let at = ld.results[0];
    let [dot] = edit::users(d, at)[..] else {
        return Err("the loaded tile has other uses than one dot".into());
    };
    let dd = &d.ops[dot];
    let acc = b.args.iter().position(|&a| dd.operands.get(2) == Some(&a));
    let yield_ok = |i: usize| {
        let yo = b.ops.last().map(|&o| &d.ops[o]);
        yo.is_some_and(|o| o.opcode == Opcode::Yield && o.operands.get(i - 1) == dd.results.first())
    };
    match acc {
        Some(i)
            if dd.opcode == Opcode::Dot
                && dd.operands[0] == at
                && dd.operands[1] != at
                && i >= 1
                && edit::users(d, b.args[i]) == [dot]
                && edit::users(d, dd.results[0]).len() == 1
                && yield_ok(i)
                && zero(d, lo.operands[2 + i]) =>
        {
            Ok(Gemm {
                l,
                load,
                acc: i - 1,
            })
        }
        _ => Err("the tile does not feed `acc = dot(tile, B, acc)` from a zero accumulator".into()),
    }
}
