//! Control flow and memory for the kernel-body builder: `if` with results, `for` with carried
//! values, `static_if` on module constants, loads (masks, `other`, rows, columns, scalars,
//! data-dependent offsets), stores (guarded, masked, scalar) and `atomic_add`.
//!
//! Stores only ever write inside the program instance's own block of the output (the offsets
//! are the block's origin, a tile of the block shape or smaller), so no two instances write one
//! element and results never depend on the order instances run in; `atomic_add` is the only
//! way instances combine.

use super::gen::{Kb, Tensor};
use super::ty::{Facts, Ty, Val};
use kir_ir::Dtype;

/// Where the current program instance's block starts: (row offset, column offset) values, and
/// whether the column offset is the program's own (tile style) or a loop variable.
#[derive(Clone, Debug)]
pub struct Origin {
    /// Row offset (`m0`), an i32 scalar.
    pub m0: Val,
    /// Column offset (`n0` or the loop variable), an i32 scalar.
    pub n0: Val,
    /// Whether (m0, n0) is known to be inside every [M, N] tensor (false before a row loop,
    /// where n0 is 0 and N may be 0): scalar accesses there then need `other` / `guard`.
    pub inside: bool,
}

impl<'r> Kb<'r> {
    /// Writes `n` random ops (pure ops, loads, stores, control flow) at the current depth.
    pub fn block(&mut self, n: usize, o: &Origin) {
        let start = self.budget;
        self.budget = n;
        let mut tries = 0;
        while self.budget > 0 && tries < 4 * n + 4 {
            tries += 1;
            let r = self.rng.range(0, 100);
            match r {
                0..=61 => self.pure_op(),
                62..=73 => {
                    self.load(o);
                }
                74..=81 => self.store(o),
                82..=84 => self.atomic(o),
                85..=89 if self.depth < 3 => self.if_op(o),
                90..=94 if self.depth < 3 => self.for_op(o),
                95..=97 if self.depth < 3 && !self.consts.is_empty() => self.static_if(o),
                _ => self.pure_op(),
            }
        }
        self.budget = start;
    }

    /// Runs `f` in a new scope one level deeper; the scope's values are dropped afterwards.
    fn region<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> T {
        self.depth += 1;
        self.scopes.push(vec![]);
        let r = f(self);
        self.scopes.pop();
        self.depth -= 1;
        r
    }

    /// A value of type `ty` preferring the innermost scope (for `yield`).
    fn yield_value(&mut self, ty: &Ty) -> Val {
        let inner = self
            .scopes
            .last()
            .map(|s| {
                s.iter()
                    .filter(|v| &v.ty == ty)
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        if !inner.is_empty() && self.chance(0.8) {
            let i = self.rng.range(0, inner.len());
            return inner[i].clone();
        }
        self.value_of(ty)
    }

    /// Types for the results of a region op: 0–2 types of values in scope.
    fn result_types(&mut self) -> Vec<Ty> {
        let n = self.rng.range(0, 3);
        let mut out = vec![];
        for _ in 0..n {
            let ty = match self.pick(|_| true) {
                Some(v) => v.ty,
                None => self.random_type(),
            };
            out.push(ty);
        }
        out
    }

    /// Writes one region body of about `n` ops ending in a `yield` of `tys`.
    fn region_body(&mut self, n: usize, o: &Origin, tys: &[Ty]) -> Vec<(Val, f64)> {
        self.region(|kb| {
            let saved = kb.budget;
            kb.block(n, o);
            kb.budget = saved;
            let ys: Vec<Val> = tys.iter().map(|t| kb.yield_value(t)).collect();
            let mags: Vec<f64> = ys.iter().map(|v| kb.mag(v)).collect();
            if !ys.is_empty() {
                let names: Vec<String> = ys.iter().map(|v| v.r()).collect();
                kb.line(format!("yield {}", names.join(", ")));
            }
            ys.into_iter().zip(mags).collect()
        })
    }

    /// Binds `tys` as the results of a region op: returns the result list text and the values.
    fn results(&mut self, tys: &[Ty], mags: &[f64]) -> (String, Vec<Val>) {
        let vals: Vec<Val> = tys
            .iter()
            .map(|t| Val {
                name: self.fresh("r"),
                ty: t.clone(),
                facts: Facts::default(),
            })
            .collect();
        for (v, m) in vals.iter().zip(mags) {
            self.set_mag(v, *m);
        }
        let names: Vec<String> = vals.iter().map(|v| v.r()).collect();
        (names.join(", "), vals)
    }

    fn type_list(tys: &[Ty]) -> String {
        tys.iter().map(|t| t.text()).collect::<Vec<_>>().join(", ")
    }

    /// `if %c : T… { … } else { … }`.
    fn if_op(&mut self, o: &Origin) {
        let c = self.value_of(&Ty::Scalar(Dtype::I1));
        let tys = self.result_types();
        let at = self.lines.len();
        let n = self.rng.range(1, 6);
        let a = self.region_body(n, o, &tys);
        let then_lines: Vec<String> = self.lines.drain(at..).collect();
        let n = self.rng.range(0, 6);
        let b = if tys.is_empty() && self.chance(0.4) {
            None
        } else {
            Some(self.region_body(n, o, &tys))
        };
        let else_lines: Vec<String> = self.lines.drain(at..).collect();
        let mags: Vec<f64> = (0..tys.len())
            .map(|i| a[i].1.max(b.as_ref().map_or(0.0, |b| b[i].1)))
            .collect();
        let (names, vals) = self.results(&tys, &mags);
        let head = if tys.is_empty() {
            format!("if {} {{", c.r())
        } else {
            format!("{names} = if {} : {} {{", c.r(), Self::type_list(&tys))
        };
        self.line(head);
        self.lines.extend(then_lines);
        if b.is_some() {
            self.line("} else {");
            self.lines.extend(else_lines);
        }
        self.line("}");
        self.feats.add("if");
        self.budget = self.budget.saturating_sub(2);
        for v in vals {
            self.push(v);
        }
    }

    /// `static_if EXPR : T… { … } else { … }` on the module constants.
    fn static_if(&mut self, o: &Origin) {
        let (name, value) = self.choose(&self.consts.clone());
        let k = value + self.rng.range(0, 3) as i64 - 1;
        let op = self.choose(&["<", "<=", "==", "!=", ">", ">="]);
        let cond = format!("{name} {op} {k}");
        let tys = self.result_types();
        let at = self.lines.len();
        let n = self.rng.range(1, 5);
        let a = self.region_body(n, o, &tys);
        let then_lines: Vec<String> = self.lines.drain(at..).collect();
        let n = self.rng.range(1, 5);
        let b = self.region_body(n, o, &tys);
        let else_lines: Vec<String> = self.lines.drain(at..).collect();
        let mags: Vec<f64> = (0..tys.len()).map(|i| a[i].1.max(b[i].1)).collect();
        let (names, vals) = self.results(&tys, &mags);
        let head = if tys.is_empty() {
            format!("static_if {cond} {{")
        } else {
            format!("{names} = static_if {cond} : {} {{", Self::type_list(&tys))
        };
        self.line(head);
        self.lines.extend(then_lines);
        self.line("} else {");
        self.lines.extend(else_lines);
        self.line("}");
        self.feats.add("static_if");
        self.budget = self.budget.saturating_sub(2);
        for v in vals {
            self.push(v);
        }
    }

    /// `for %i = lo to hi step s iter(…)` with a few carried values; a small constant trip
    /// count, or a walk over a dim by a tile-sized step.
    fn for_op(&mut self, o: &Origin) {
        let i32t = Ty::Scalar(Dtype::I32);
        let (lo, hi, step) = if self.chance(0.5) {
            let lo = self.rng.range(0, 3) as f64;
            let trips = self.rng.range(0, 4) as f64;
            let s = self.choose(&[1.0, 2.0, 3.0]);
            let a = self.konst(i32t.clone(), lo);
            let b = self.konst(i32t.clone(), lo + trips * s);
            let c = self.konst(i32t.clone(), s);
            (a, b, c)
        } else {
            let dim = self.choose(&["M", "N"]);
            let known = self.tensors.iter().any(|t| t.dims.contains(&dim));
            if !known {
                return;
            }
            let a = self.konst(i32t.clone(), 0.0);
            let b = self.op("dim", &format!("dim {dim}"), i32t.clone(), Facts::default());
            let s = self.choose(&[8.0, 16.0, 32.0, 64.0]);
            let c = self.konst(i32t.clone(), s);
            (a, b, c)
        };
        let n_carry = self.rng.range(0, 3);
        let mut carried = vec![];
        for _ in 0..n_carry {
            if let Some(v) = self.pick(|_| true) {
                carried.push(v);
            }
        }
        // A carried float value is assumed to stay within max(its initial estimate, 1e6); what
        // the body yields is clamped to ±1e6 when its estimate is larger, so the assumption holds.
        let (iv, args, limits) = self.loop_header("i", &carried);
        let tys: Vec<Ty> = carried.iter().map(|v| v.ty.clone()).collect();
        let at = self.lines.len();
        let n = self.rng.range(1, 7);
        let iv2 = iv.clone();
        let args2 = args.clone();
        let body = self.region(|kb| {
            kb.push(iv2.clone());
            for a in &args2 {
                kb.push(a.clone());
            }
            let saved = kb.budget;
            kb.block(n, o);
            kb.budget = saved;
            let ys: Vec<Val> = tys.iter().map(|t| kb.yield_value(t)).collect();
            let ys: Vec<Val> = ys
                .into_iter()
                .zip(&limits)
                .map(|(v, l)| kb.tame_to(v, *l))
                .collect();
            if !ys.is_empty() {
                let names: Vec<String> = ys.iter().map(|v| v.r()).collect();
                kb.line(format!("yield {}", names.join(", ")));
            }
            ys
        });
        let _ = body;
        let body_lines: Vec<String> = self.lines.drain(at..).collect();
        let mags: Vec<f64> = args.iter().map(|a| self.mag(a)).collect();
        let (names, vals) = self.results(&tys, &mags);
        let iter = if carried.is_empty() {
            String::new()
        } else {
            let pairs: Vec<String> = args
                .iter()
                .zip(&carried)
                .map(|(a, v)| format!("{} = {}", a.r(), v.r()))
                .collect();
            format!(" iter({})", pairs.join(", "))
        };
        let head = format!(
            "for {} = {} to {} step {}{iter}",
            iv.r(),
            lo.r(),
            hi.r(),
            step.r()
        );
        let head = if tys.is_empty() {
            format!("{head} {{")
        } else {
            format!("{names} = {head} : {} {{", Self::type_list(&tys))
        };
        self.line(head);
        self.lines.extend(body_lines);
        self.line("}");
        self.feats.add("for");
        self.budget = self.budget.saturating_sub(2);
        for v in vals {
            self.push(v);
        }
    }

    /// Input tensors (`in` or `inout`).
    fn inputs(&self) -> Vec<Tensor> {
        self.tensors
            .iter()
            .filter(|t| t.access != "out" && !t.atomic)
            .cloned()
            .collect()
    }

    /// A load from an input tensor at the block origin: a block tile, a row, a column (of a
    /// vector), or a scalar; with `other` (and often a mask) or, for a scalar at the origin, none.
    pub fn load(&mut self, o: &Origin) -> Option<Val> {
        let ins = self.inputs();
        if ins.is_empty() {
            return None;
        }
        let t = self.choose(&ins);
        let [bm, bn] = self.tile;
        let d = t.dt;
        // Offsets per tensor dim and the loaded type.
        let (offs, ty): (Vec<String>, Ty) = match t.dims.as_slice() {
            ["M", "N"] => {
                let mut m0 = o.m0.r();
                // Only a tensor this kernel never writes may be read outside the block.
                if t.access == "in" && self.chance(0.1) {
                    // A data-dependent row offset (maybe far outside the tensor): `other` covers it.
                    if let Some(v) = self.pick(|v| v.ty == Ty::Scalar(Dtype::I32)) {
                        m0 = v.r();
                    }
                }
                let shape = match self.rng.range(0, 10) {
                    0..=6 => Ty::tile(&[bm, bn], d),
                    7 => Ty::tile(&[1, bn], d),
                    8 => Ty::tile(&[bn], d),
                    _ => Ty::Scalar(d),
                };
                (vec![m0, o.n0.r()], shape)
            }
            ["M"] => (vec![o.m0.r()], Ty::tile(&[bm], d)),
            ["N"] => (vec![o.n0.r()], Ty::tile(&[bn], d)),
            _ => return None,
        };
        let plain_scalar = ty.is_scalar() && offs[0] == o.m0.r() && o.inside;
        let mut rhs = format!("load {}[{}]", t.name, offs.join(", "));
        if !plain_scalar || self.chance(0.5) {
            if self.chance(0.4) {
                let m = if ty.is_scalar() || self.chance(0.15) {
                    self.value_of(&Ty::Scalar(Dtype::I1))
                } else {
                    self.value_of(&ty.with_dt(Dtype::I1))
                };
                rhs.push_str(&format!(" mask {}", m.r()));
            }
            let other = self.other_lit(d);
            rhs.push_str(&format!(" other {other}"));
        }
        let v = self.op("load", &rhs, ty.clone(), Facts::default());
        self.set_mag(&v, 1e3);
        // Rows and columns of vectors become 2-D for the rest of the body.
        if let [n] = ty.shape() {
            let to = if t.dims == ["M"] { [*n, 1] } else { [1, *n] };
            let r = self.op(
                "reshape",
                &format!("reshape {}", v.r()),
                Ty::tile(&to, d),
                Facts::default(),
            );
            self.set_mag(&r, 1e3);
            return Some(r);
        }
        Some(v)
    }

    /// A value of type `ty` converted from whatever is in scope (a cast when the dtype differs).
    pub fn value_as(&mut self, ty: &Ty) -> Val {
        let shape = ty.shape().to_vec();
        let same_shape =
            self.pick(|v| v.ty.shape() == shape.as_slice() && v.ty.is_scalar() == shape.is_empty());
        match same_shape {
            Some(v) if v.ty == *ty => v,
            Some(v) if self.chance(0.8) => {
                let m = self.mag(&v);
                let c = self.op(
                    "cast",
                    &format!("cast {}", v.r()),
                    ty.clone(),
                    Facts::default(),
                );
                self.set_mag(&c, m);
                c
            }
            _ => self.value_of(ty),
        }
    }

    /// A store into an output at the block origin: a block tile (guarded, maybe masked), a
    /// row, or a scalar at the origin (in bounds: no guard needed).
    pub fn store(&mut self, o: &Origin) {
        let outs: Vec<Tensor> = self
            .tensors
            .iter()
            .filter(|t| t.access != "in" && t.dims.len() == 2 && !t.atomic)
            .cloned()
            .collect();
        if outs.is_empty() {
            return;
        }
        let t = self.choose(&outs);
        let [bm, bn] = self.tile;
        let ty = match self.rng.range(0, 10) {
            0..=6 => Ty::tile(&[bm, bn], t.dt),
            7 => Ty::tile(&[1, bn], t.dt),
            8 => Ty::tile(&[bm, 1], t.dt),
            _ => Ty::Scalar(t.dt),
        };
        let v = self.value_as(&ty);
        let mut s = format!("store {}[{}, {}], {}", t.name, o.m0.r(), o.n0.r(), v.r());
        if !ty.is_scalar() {
            if self.chance(0.3) {
                let m = self.value_of(&ty.with_dt(Dtype::I1));
                s.push_str(&format!(" mask {}", m.r()));
            }
            s.push_str(" guard");
        } else {
            if self.chance(0.3) {
                let m = self.value_of(&Ty::Scalar(Dtype::I1));
                s.push_str(&format!(" mask {}", m.r()));
            }
            if !o.inside {
                s.push_str(" guard");
            }
        }
        self.line(s);
        self.feats.add("store");
        self.budget = self.budget.saturating_sub(1);
    }

    /// `atomic_add` into an `inout` accumulator: a block tile into [M, N], or row sums of a
    /// block into [M].
    pub fn atomic(&mut self, o: &Origin) {
        let accs: Vec<Tensor> = self.tensors.iter().filter(|t| t.atomic).cloned().collect();
        if accs.is_empty() {
            return;
        }
        let t = self.choose(&accs);
        let [bm, bn] = self.tile;
        let s = if t.dims.len() == 2 {
            let v = self.value_as(&Ty::tile(&[bm, bn], t.dt));
            format!(
                "atomic_add {}[{}, {}], {} guard",
                t.name,
                o.m0.r(),
                o.n0.r(),
                v.r()
            )
        } else {
            let v = self.value_as(&Ty::tile(&[bm, bn], t.dt));
            let r = self.op(
                "reduce",
                &format!("reduce sum {} axis 1", v.r()),
                Ty::tile(&[bm, 1], t.dt),
                Facts::default(),
            );
            let r1 = self.op(
                "reshape",
                &format!("reshape {}", r.r()),
                Ty::tile(&[bm], t.dt),
                Facts::default(),
            );
            let mut s = format!("atomic_add {}[{}], {}", t.name, o.m0.r(), r1.r());
            if self.chance(0.3) {
                let m = self.value_of(&Ty::tile(&[bm], Dtype::I1));
                s.push_str(&format!(" mask {}", m.r()));
            }
            s + " guard"
        };
        self.line(s);
        self.feats.add("atomic_add");
        self.budget = self.budget.saturating_sub(1);
    }
}
