//! RMSNorm → GEMM prologue fusion, part of the `fusion` pass (see `mod.rs`).
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

use super::norm_match::{match_gemm, match_norm, Gemm, Norm, R};
use super::state::{State, NOMINAL_DIM};
use crate::traffic::launch_bytes;
use kir_ir::edit::{self, def_data, simple};
use kir_ir::{Access, Attr, Dfg, Dtype, Offset, OpData, Opcode, ParamKind, Type, Value, ValueDef};

/// Inserts `op` with one result of type `ty` at `*pos` of block `b` and advances `pos`.
fn ins(d: &mut Dfg, b: kir_ir::Block, pos: &mut usize, op: OpData, ty: Type, n: &str) -> Value {
    let r = edit::insert_op(d, b, *pos, op, vec![(ty, Some(n.to_string()))]);
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
                        .map(|e| edit::rename_expr(e, &|s| dims.get(s).cloned()))
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
        let zero_init = def_data(d, d.ops[l].operands[3 + gm.acc])
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
        let (ss_c, ss) = edit::add_carried(d, l, z, Type::tile(&[bm, bk], f32), Some("ss".into()));
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
        edit::replace_uses(d, at, a2, None);
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
        edit::replace_uses(d, acc, scaled, Some(sop));
        edit::dce(k);
        k.params.retain(|x| x.name != yp);
        self.prog.launches[c].args.retain(|a| a.param != yp);
        Ok(())
    }
}
