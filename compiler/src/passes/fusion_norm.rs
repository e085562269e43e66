//! RMSNorm → GEMM prologue fusion, part of the `fusion` pass (see `fusion.rs`).
//!
//! A producer launch is recognised as an RMSNorm from its structure, never its name: a
//! top-level loop accumulating Σx² over a row of `x` (from a zero tile), then
//! `rstd = rsqrt(Σx²/C + eps)` (or `1/sqrt`, `·recip(C)`), then a loop storing
//! `y = cast(x · rstd · w)` at the row and column it loaded. A consumer launch is recognised as a
//! GEMM on `y` from its K loop: `acc = dot(load y[m0, k], B, acc)` from a zero accumulator, with
//! the loaded tile used by nothing else. The consumer is rewritten to load `x` and `w` instead
//! of `y`, feed `cast(x·w)` to the dot and accumulate Σx² in the same loop; after the loop the
//! accumulator is scaled by `rsqrt(Σx²/K + eps)` per row. This is exact in real arithmetic
//! because the accumulator starts at zero and the dot is linear in the rows of its first operand
//! (the division-after-matmul identity); the rounding point moves (see docs/passes.md).
//!
//! The fusion is applied only when the traffic cost model ([`crate::traffic`]) says the fused
//! program moves fewer bytes with every program dim at [`NOMINAL_DIM`].

use super::fusion::{State, NOMINAL_DIM};
use crate::kedit::{self, simple};
use crate::traffic::launch_bytes;
use kir_ir::{
    Access, Attr, Dfg, Dtype, ExprKind, Kernel, Offset, Op, OpData, Opcode, ParamKind, Type, Value,
    ValueDef,
};

/// What the matcher found in an RMSNorm producer.
struct Norm {
    /// The params of `x`, `w` and `y`.
    x: String,
    w: String,
    y: String,
    /// The op giving `eps` (a scalar `param` or `const`).
    eps: OpData,
    /// The `reduce sum … axis 1` op of Σx².
    reduce: OpData,
}

type R<T> = Result<T, String>;

/// The op defining `v`, if `v` is an op result.
fn def(d: &Dfg, v: Value) -> Option<&OpData> {
    match d.values[v].def {
        ValueDef::Result(o, _) => Some(&d.ops[o]),
        ValueDef::Arg(..) => None,
    }
}

fn is(d: &Dfg, v: Value, op: Opcode) -> bool {
    def(d, v).is_some_and(|o| o.opcode == op)
}

/// True if `v` is a `const` 0 (integer or float, scalar or tile).
fn zero(d: &Dfg, v: Value) -> bool {
    def(d, v).is_some_and(|o| o.opcode == Opcode::Const && lit_zero(o.lead.as_ref()))
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
    let o = def(d, v)?;
    match (o.opcode == Opcode::Dim, &o.lead) {
        (true, Some(Attr::Name(n, _))) => Some(n.clone()),
        _ => None,
    }
}

/// `v` with any chain of the listed ops (one operand each) stripped.
fn strip(d: &Dfg, mut v: Value, ops: &[Opcode]) -> Value {
    while let Some(o) = def(d, v).filter(|o| ops.contains(&o.opcode)) {
        v = o.operands[0];
    }
    v
}

/// The unmasked, zero-filled load behind `v` (through casts), with its param and offsets.
fn load_of(d: &Dfg, v: Value) -> Option<(String, Vec<Offset>)> {
    let o = def(d, strip(d, v, &[Opcode::Cast]))?;
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
fn match_norm(k: &Kernel) -> R<Norm> {
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
    let pid0 =
        def(d, *row).is_some_and(|o| o.opcode == Opcode::ProgramId && lit_zero(o.lead.as_ref()));
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
        match def(d, v).filter(|o| o.opcode == Opcode::Mul && !d.ty(v).is_scalar()) {
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
    let ro = def(d, r).ok_or_else(|| not("no row scale"))?;
    let var = if ro.opcode == Opcode::Rsqrt {
        ro.operands[0]
    } else if ro.opcode == Opcode::Recip && is(d, ro.operands[0], Opcode::Sqrt) {
        def(d, ro.operands[0]).map_or(r, |s| s.operands[0])
    } else {
        return Err(not("the row scale is not rsqrt(…)"));
    };
    let add = def(d, var).filter(|o| o.opcode == Opcode::Add);
    let add = add.ok_or_else(|| not("rsqrt's operand is not mean + eps"))?;
    let scalar = |v: Value| {
        def(d, v)
            .filter(|o| [Opcode::Param, Opcode::Const].contains(&o.opcode) && d.ty(v).is_scalar())
    };
    let (eps, mean) = match (scalar(add.operands[0]), scalar(add.operands[1])) {
        (None, Some(e)) => (e.clone(), add.operands[0]),
        (Some(e), None) => (e.clone(), add.operands[1]),
        _ => return Err(not("rsqrt's operand is not mean + a scalar eps")),
    };
    let count = |v: Value| {
        def(d, v).is_some_and(|o| o.opcode == Opcode::Cast)
            && dim_name(d, strip(d, v, &[Opcode::Cast])).as_ref() == Some(&xd[1])
    };
    let m = def(d, mean).ok_or_else(|| not("no mean"))?;
    let [a, b] = m.operands[..] else {
        return Err(not("no mean"));
    };
    let recip_count =
        |v: Value| def(d, v).is_some_and(|o| o.opcode == Opcode::Recip && count(o.operands[0]));
    let total = if m.opcode == Opcode::Div && count(b) {
        a
    } else if m.opcode == Opcode::Mul && recip_count(b) {
        a
    } else if m.opcode == Opcode::Mul && recip_count(a) {
        b
    } else {
        return Err(not("the mean is not Σ / dim C"));
    };
    let red = def(d, total).filter(|o| {
        o.opcode == Opcode::Reduce
            && matches!(&o.lead, Some(Attr::Name(n, _)) if n == "sum")
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
        .and_then(|v| def(d, v))
        .filter(|o| o.opcode == Opcode::Add);
    let sq = add.and_then(|o| match o.operands[..] {
        [a, s] | [s, a] if a == b.args[1] && is(d, s, Opcode::Mul) => def(d, s),
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
struct Gemm {
    /// The `for` op, the `load y` op and the dot's accumulator index among the carried values.
    l: Op,
    load: Op,
    acc: usize,
}

/// Recognises `acc = dot(load y[m0, k], B, acc)` in a top-level K loop of `k` over `dim K`
/// (K: the second dim of `y`), from a zero accumulator, the loaded tile used by nothing else.
fn match_gemm(k: &Kernel, y: &str) -> R<Gemm> {
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
    let step = def(d, lo.operands[2]).and_then(|o| match &o.lead {
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
    let [dot] = kedit::users(d, at)[..] else {
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
                && kedit::users(d, b.args[i]) == [dot]
                && kedit::users(d, dd.results[0]).len() == 1
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

/// Inserts `op` with one result of type `ty` at `*pos` of block `b` and advances `pos`.
fn ins(d: &mut Dfg, b: kir_ir::Block, pos: &mut usize, op: OpData, ty: Type, n: &str) -> Value {
    let r = kedit::insert_op(d, b, *pos, op, vec![(ty, Some(n.to_string()))]);
    *pos += 1;
    r[0]
}

impl State<'_> {
    /// Fuses an RMSNorm launch into the GEMM launch that reads its output, when the byte
    /// estimate says it pays; see the module doc.
    pub(crate) fn fuse_norm(&mut self) -> bool {
        let g = self.graph();
        for e in g.edge_indices() {
            let Some((pi, ci)) = g.edge_endpoints(e) else {
                continue;
            };
            let (p, c) = (g[pi], g[ci]);
            let what = format!(
                "RMSNorm fusion of @{} into @{}",
                self.kernels[p].name, self.kernels[c].name
            );
            match self.try_norm(p, c, &g[e]) {
                Ok(how) => {
                    self.rep.fused.push(format!("{what}: {how}"));
                    return true;
                }
                Err(why) => {
                    let line = format!("{what}: {why}");
                    if !self.rep.not_fused.contains(&line) {
                        self.rep.not_fused.push(line);
                    }
                }
            }
        }
        false
    }

    fn try_norm(&mut self, p: usize, c: usize, yb: &str) -> R<String> {
        let n = match_norm(&self.kernels[p])?;
        let buf = |s: &Self, q: &str| s.buffer(p, q).ok_or(format!("`{q}` is unbound"));
        let (xb, wb) = (buf(self, &n.x)?, buf(self, &n.w)?);
        if buf(self, &n.y)? != yb || self.buffer_dims(&xb) != self.buffer_dims(yb) {
            return Err(format!("`{yb}` is not the normalized `{xb}`"));
        }
        for j in p + 1..=c {
            if self
                .tensors(j)
                .iter()
                .any(|(_, b, a)| a.writes() && (*b == xb || *b == wb))
            {
                let kj = &self.kernels[j].name;
                return Err(format!(
                    "@{kj} writes `{xb}` or `{wb}` before the GEMM reads them"
                ));
            }
        }
        let yp: Vec<String> = self
            .tensors(c)
            .into_iter()
            .filter(|t| t.1 == yb)
            .map(|t| t.0)
            .collect();
        let [yp] = &yp[..] else {
            return Err(format!("the consumer binds `{yb}` more than once"));
        };
        let gm = match_gemm(&self.kernels[c], yp)?;
        let dims = self.dims_into(p, c)?;
        let nominal = |_: &str| Some(NOMINAL_DIM);
        let cost = |s: &Self, i: usize| {
            launch_bytes(&s.prog, &s.prog.launches[i], &s.kernels[i], &nominal)
        };
        let (bp, bc) = (cost(self, p), cost(self, c));
        let saved = (self.kernels[c].clone(), self.prog.launches[c].clone());
        let done = self.rewrite(p, c, &n, &gm, &dims, yp);
        // The RMSNorm launch stays if anything else reads `y` (or `y` is an output).
        let y_read = !self.prog.temps.iter().any(|t| t.name == yb)
            || (0..self.kernels.len()).any(|j| {
                j != p
                    && self
                        .tensors(j)
                        .iter()
                        .any(|(_, b, a)| b == yb && *a != Access::Out)
            });
        let sum = |a: Option<u64>, b: Option<u64>| Some(a? + b?);
        let after = if y_read {
            sum(bp, cost(self, c))
        } else {
            cost(self, c)
        };
        match (done, sum(bp, bc), after) {
            (Ok(()), Some(b0), Some(b1)) if b1 < b0 => {
                let name = format!("{}_{}", self.kernels[p].name, self.kernels[c].name);
                self.kernels[c].name = name.clone();
                self.prog.launches[c].kernel = name;
                Ok(format!(
                    "the GEMM loads `{xb}`·`{wb}` instead of `{yb}`, accumulates Σx² in its K \
                     loop and scales its accumulator by rsqrt(Σx²/K + eps); estimate {b0} -> {b1} \
                     bytes (every dim = {NOMINAL_DIM})"
                ))
            }
            (done, b0, b1) => {
                (self.kernels[c], self.prog.launches[c]) = saved;
                let b = |x: Option<u64>| x.map_or("unknown".into(), |v: u64| v.to_string());
                done?;
                Err(format!(
                    "it does not pay: estimate {} -> {} bytes (every dim = {NOMINAL_DIM}{})",
                    b(b0),
                    b(b1),
                    if y_read { ", `y` still read" } else { "" }
                ))
            }
        }
    }

    /// Rewrites launch `c` (the GEMM) to compute from `x` and `w` what it read from `y`.
    fn rewrite(
        &mut self,
        p: usize,
        c: usize,
        n: &Norm,
        gm: &Gemm,
        dims: &std::collections::HashMap<String, String>,
        yp: &str,
    ) -> R<()> {
        let kp = &self.kernels[p];
        let kind = |q: &str| -> R<(ParamKind, Dtype)> {
            match kp.param(q).map(|x| x.kind.clone()) {
                Some(ParamKind::Tensor(a, mut t)) => {
                    let dt = t.elem.known().ok_or("unknown dtype")?;
                    t.dims = t
                        .dims
                        .iter()
                        .map(|e| kedit::rename_expr(e, &|s| dims.get(s).cloned()))
                        .collect();
                    Ok((ParamKind::Tensor(a, t), dt))
                }
                _ => Err(format!("`{q}` is not a tensor")),
            }
        };
        let ((xk, dx), (wk, dw)) = (kind(&n.x)?, kind(&n.w)?);
        let eps_ty = kp.dfg.ty(n.eps.results[0]).clone();
        let mut eps = n.eps.clone();
        let eps_param = match &eps.lead {
            Some(Attr::Name(q, _)) if eps.opcode == Opcode::Param => {
                let b = self.buffer(p, q).ok_or("`eps` is unbound")?;
                Some((b, kp.param(q).ok_or("no eps param")?.kind.clone()))
            }
            _ => None,
        };
        let xb = self.buffer(p, &n.x).ok_or("unbound x")?;
        let wb = self.buffer(p, &n.w).ok_or("unbound w")?;
        let xn = self.bind(c, &xb, xk);
        let wn = self.bind(c, &wb, wk);
        if let (Some((b, k)), Some(Attr::Name(q, _))) = (eps_param, &mut eps.lead) {
            *q = self.bind(c, &b, k);
        }
        let k = &mut self.kernels[c];
        let top = k.body;
        let d = &mut k.dfg;
        let (l, body) = (gm.l, d.ops[gm.l].regions[0]);
        let iv = d.blocks[body].args[0];
        let at = d.ops[gm.load].results[0];
        let (shape, ydt) = (d.ty(at).shape().unwrap_or_default(), d.ty(at).dtype());
        let [bm, bk] = shape[..] else {
            return Err("the loaded tile is not 2-D".into());
        };
        let ydt = ydt.ok_or("unknown dtype")?;
        let f32 = Dtype::F32;
        let acc = d.ops[l].results[gm.acc];
        let acc_ty = d.ty(acc).clone();
        let cast = |v: Value| simple(Opcode::Cast, vec![v], None);
        let bin = |o: Opcode, a: Value, b: Value| simple(o, vec![a, b], None);
        // Σx² accumulator, carried by the K loop from a zero tile.
        let mut pos = d.blocks[top]
            .ops
            .iter()
            .position(|&o| o == l)
            .ok_or("no loop")?;
        let zero_init = def(d, d.ops[l].operands[3 + gm.acc])
            .ok_or("no init")?
            .clone();
        let z = ins(
            d,
            top,
            &mut pos,
            zero_init,
            Type::tile(&[bm, bk], f32),
            "ss0",
        );
        let (ss_c, ss) = kedit::add_carried(d, l, z, Type::tile(&[bm, bk], f32), Some("ss".into()));
        // In the loop: x·w replaces y, and Σx² accumulates.
        let mut at_pos = d.blocks[body]
            .ops
            .iter()
            .position(|&o| o == gm.load)
            .ok_or("no load")?;
        let mut xl = d.ops[gm.load].clone();
        if let Some(t) = &mut xl.tensor {
            t.param = xn;
        }
        let mut wl = xl.clone();
        if let Some(t) = &mut wl.tensor {
            (t.param, t.offsets) = (wn, vec![Offset::Value(iv)]);
        }
        let mut xf = ins(d, body, &mut at_pos, xl, Type::tile(&[bm, bk], dx), "xt");
        if dx != f32 {
            xf = ins(
                d,
                body,
                &mut at_pos,
                cast(xf),
                Type::tile(&[bm, bk], f32),
                "xf",
            );
        }
        let mut wf = ins(d, body, &mut at_pos, wl, Type::tile(&[bk], dw), "wt");
        if dw != f32 {
            wf = ins(d, body, &mut at_pos, cast(wf), Type::tile(&[bk], f32), "wf");
        }
        let w2 = simple(Opcode::Reshape, vec![wf], None);
        let w2 = ins(d, body, &mut at_pos, w2, Type::tile(&[1, bk], f32), "w2");
        let wbc = simple(Opcode::Broadcast, vec![w2], None);
        let wbc = ins(d, body, &mut at_pos, wbc, Type::tile(&[bm, bk], f32), "wb");
        let xw = ins(
            d,
            body,
            &mut at_pos,
            bin(Opcode::Mul, xf, wbc),
            Type::tile(&[bm, bk], f32),
            "xw",
        );
        let a2 = if ydt != f32 {
            ins(
                d,
                body,
                &mut at_pos,
                cast(xw),
                Type::tile(&[bm, bk], ydt),
                "xwt",
            )
        } else {
            xw
        };
        let sq = ins(
            d,
            body,
            &mut at_pos,
            bin(Opcode::Mul, xf, xf),
            Type::tile(&[bm, bk], f32),
            "sq",
        );
        let ssn = ins(
            d,
            body,
            &mut at_pos,
            bin(Opcode::Add, ss_c, sq),
            Type::tile(&[bm, bk], f32),
            "ss_n",
        );
        kedit::replace_uses(d, at, a2, None);
        let y = *d.blocks[body].ops.last().ok_or("empty loop")?;
        d.ops[y].operands.push(ssn);
        // After the loop: acc · rsqrt(Σx²/K + eps), per row.
        pos += 1;
        let mut red = n.reduce.clone();
        red.operands = vec![ss];
        let col = Type::tile(&[bm, 1], f32);
        let tot = ins(d, top, &mut pos, red, col.clone(), "ss_row");
        let kd = d.ops[l].operands[1];
        let nf = ins(d, top, &mut pos, cast(kd), Type::scalar(f32), "kf");
        let rn = ins(
            d,
            top,
            &mut pos,
            simple(Opcode::Recip, vec![nf], None),
            Type::scalar(f32),
            "inv_k",
        );
        let mean = ins(
            d,
            top,
            &mut pos,
            bin(Opcode::Mul, tot, rn),
            col.clone(),
            "mean",
        );
        let e = ins(d, top, &mut pos, eps, eps_ty, "eps");
        let var = ins(
            d,
            top,
            &mut pos,
            bin(Opcode::Add, mean, e),
            col.clone(),
            "var",
        );
        let r = ins(
            d,
            top,
            &mut pos,
            simple(Opcode::Rsqrt, vec![var], None),
            col,
            "rstd",
        );
        let rb = simple(Opcode::Broadcast, vec![r], None);
        let rb = ins(d, top, &mut pos, rb, acc_ty.clone(), "rstd_b");
        let scaled = ins(
            d,
            top,
            &mut pos,
            bin(Opcode::Mul, acc, rb),
            acc_ty,
            "acc_norm",
        );
        let ValueDef::Result(sop, _) = d.values[scaled].def else {
            return Err("no scale op".into());
        };
        kedit::replace_uses(d, acc, scaled, Some(sop));
        kedit::dce(k);
        k.params.retain(|x| x.name != yp);
        self.prog.launches[c].args.retain(|a| a.param != yp);
        Ok(())
    }
}
