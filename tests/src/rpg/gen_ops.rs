//! The pure ops of the kernel-body builder: unary and binary elementwise ops (with operands
//! that cannot fail at run time), integer logic and shifts, comparisons, selects, casts,
//! bitcasts, reductions, broadcasts, reshapes, transposes, `dot`, `nf4`, and the authoring ops
//! `erf`, `pow`, `fma` (and `print`, which has an effect but no result). Each picks operands
//! from the values in scope (or makes them) and keeps the f32 magnitude estimates of `gen`.

use super::gen::{Kb, MAG_LIMIT};
use super::ty::{int_bits, Facts, Ty, Val};
use kir_ir::Dtype;

impl Kb<'_> {
    /// One random pure op (or nothing when no operands fit).
    pub fn pure_op(&mut self) {
        let r = self.rng.range(0, 100);
        let _ = match r {
            0..=21 => self.binary(),
            22..=35 => self.unary(),
            36..=43 => self.compare(),
            44..=51 => self.select(),
            52..=59 => self.cast(),
            60..=62 => self.bitcast(),
            63..=69 => self.reduce(),
            70..=75 => self.broadcast(),
            76..=80 => self.reshape(),
            81..=84 => self.transpose(),
            85..=88 => self.dot(),
            89..=90 => self.nf4(),
            91..=95 => self.int_logic(),
            96 => self.authoring(),
            _ => {
                let ty = self.random_type();
                Some(self.make(&ty))
            }
        };
    }

    fn unary(&mut self) -> Option<Val> {
        let x = self.pick(|_| true)?;
        let d = x.ty.dt();
        let op: &'static str = if d.is_float() {
            self.choose(&[
                "neg", "abs", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "sigmoid",
                "silu", "recip", "floor",
            ])
        } else if d == Dtype::I1 {
            "not"
        } else {
            self.choose(&["neg", "abs", "not"])
        };
        let m = self.mag(&x);
        let v = self.op(
            op,
            &format!("{op} {}", x.r()),
            x.ty.clone(),
            Facts::default(),
        );
        let nm = match op {
            "exp" => m.exp(),
            "exp2" => m.exp2(),
            "log" | "log2" | "tanh" | "sigmoid" => 200.0,
            "sqrt" => m.sqrt(),
            "rsqrt" | "recip" => MAG_LIMIT,
            _ => m,
        };
        self.set_mag(&v, nm.min(MAG_LIMIT));
        Some(self.tame(v))
    }

    /// `erf`, `pow`, `fma` or `print`, equally often.
    fn authoring(&mut self) -> Option<Val> {
        match self.rng.range(0, 4) {
            0 => {
                let x = self.pick(|v| v.ty.dt().is_float())?;
                let v = self.op(
                    "erf",
                    &format!("erf {}", x.r()),
                    x.ty.clone(),
                    Facts::default(),
                );
                self.set_mag(&v, 1.0);
                Some(v)
            }
            1 => self.pow(),
            2 => self.fma(),
            _ => {
                // Zero, one or two values of any type (a line per element of each).
                let n = self.choose(&[0usize, 1, 1, 1, 2]);
                let mut vals = Vec::new();
                for _ in 0..n {
                    vals.extend(self.pick(|_| true).map(|v| v.r()));
                }
                let prefix = self.fresh("p");
                let args = if vals.is_empty() {
                    String::new()
                } else {
                    format!(" {}", vals.join(", "))
                };
                self.line(format!("print \"{prefix}\"{args}"));
                self.feats.add("print");
                self.budget = self.budget.saturating_sub(1);
                None
            }
        }
    }

    /// `pow b, e`: a base |x| + c (c ≥ 0.5) with a constant exponent in [−2, 3], or any base with
    /// the exponent 2 or 3 (a negative base's sign follows the parity).
    fn pow(&mut self) -> Option<Val> {
        let x = self.pick(|v| v.ty.dt().is_float())?;
        let d = x.ty.dt();
        let (b, e) = if self.chance(0.3) {
            (x, self.choose(&[2.0, 3.0]))
        } else {
            let b = self.safe_divisor(x);
            (b, self.choose(&[-2.0, -0.5, 0.5, 1.5, 2.0, 3.0]))
        };
        let ty = if self.chance(0.7) {
            Ty::Scalar(d)
        } else {
            b.ty.clone()
        };
        let k = self.konst(ty, e);
        let m = self.mag(&b).max(2.0).powf(e.abs());
        let v = self.op(
            "pow",
            &format!("pow {}, {}", b.r(), k.r()),
            b.ty.clone(),
            Facts::default(),
        );
        self.set_mag(&v, m.min(MAG_LIMIT));
        Some(self.tame(v))
    }

    /// `fma a, b, c` on floats of one dtype (scalars broadcast over the tile operands).
    fn fma(&mut self) -> Option<Val> {
        let x = self.pick(|v| v.ty.dt().is_float())?;
        let (y, z) = (self.partner(&x), self.partner(&x));
        let ty = [&x, &y, &z]
            .into_iter()
            .find(|v| !v.ty.is_scalar())
            .map_or(x.ty.clone(), |v| v.ty.clone());
        let m = self.mag(&x) * self.mag(&y) + self.mag(&z);
        let v = self.op(
            "fma",
            &format!("fma {}, {}, {}", x.r(), y.r(), z.r()),
            ty,
            Facts::default(),
        );
        self.set_mag(&v, m.min(MAG_LIMIT));
        Some(self.tame(v))
    }

    /// A second operand for a binary op with `x`: same type, or a scalar of its dtype.
    fn partner(&mut self, x: &Val) -> Val {
        if !x.ty.is_scalar() && self.chance(0.25) {
            return self.value_of(&Ty::Scalar(x.ty.dt()));
        }
        self.value_of(&x.ty)
    }

    /// A divisor for integer `div`/`rem`: (y & 7) | 2, negated half of the time: in ±[2, 9].
    fn int_divisor(&mut self, y: Val) -> Val {
        let d = y.ty.dt();
        let seven = self.konst(Ty::Scalar(d), 7.0);
        let two = self.konst(Ty::Scalar(d), 2.0);
        let a = self.op(
            "and",
            &format!("and {}, {}", y.r(), seven.r()),
            y.ty.clone(),
            Facts::default(),
        );
        let b = self.op(
            "or",
            &format!("or {}, {}", a.r(), two.r()),
            y.ty.clone(),
            Facts::default(),
        );
        if d != Dtype::U8 && self.chance(0.5) {
            return self.op(
                "neg",
                &format!("neg {}", b.r()),
                y.ty.clone(),
                Facts::default(),
            );
        }
        b
    }

    /// A float divisor bounded away from zero: `abs(y) + c`, c ∈ {0.5, 1, 3}.
    fn safe_divisor(&mut self, y: Val) -> Val {
        let d = y.ty.dt();
        let c = self.choose(&[0.5, 1.0, 3.0]);
        let k = self.konst(Ty::Scalar(d), c);
        let m = self.mag(&y);
        let a = self.op(
            "abs",
            &format!("abs {}", y.r()),
            y.ty.clone(),
            Facts::default(),
        );
        let b = self.op(
            "add",
            &format!("add {}, {}", a.r(), k.r()),
            y.ty.clone(),
            Facts::default(),
        );
        self.set_mag(&b, m + c);
        b
    }

    fn binary(&mut self) -> Option<Val> {
        let x = self.pick(|v| v.ty.dt() != Dtype::I1)?;
        let d = x.ty.dt();
        let op: &'static str =
            self.choose(&["add", "sub", "mul", "div", "max", "min", "mul", "add"]);
        let mut y = self.partner(&x);
        // A float add or sub with a constant operand could meet the e-graph's x + 0 = x, exact
        // only up to the sign of a zero: use a loaded or computed value instead when there is one.
        if d.is_float() && matches!(op, "add" | "sub") && (y.facts.constant || x.facts.constant) {
            let t = y.ty.clone();
            if let Some(z) = self.pick(|v| v.ty == t && !v.facts.constant) {
                y = z;
            }
        }
        if op == "div" && !d.is_float() {
            y = self.int_divisor(y);
        } else if op == "div" && (y.ty.is_scalar() || self.chance(0.3)) && self.chance(0.85) {
            y = self.safe_divisor(y);
        }
        let (mx, my) = (self.mag(&x), self.mag(&y));
        let ty = if x.ty.is_scalar() {
            y.ty.clone()
        } else {
            x.ty.clone()
        };
        let (a, b) = if op == "div" || self.chance(0.5) || !y.ty.is_scalar() || !x.ty.is_scalar() {
            (x, y)
        } else {
            (y, x)
        };
        let f = Facts {
            constant: a.facts.constant && b.facts.constant,
            index: false,
        };
        let v = self.op(op, &format!("{op} {}, {}", a.r(), b.r()), ty, f);
        let m = match op {
            "add" | "sub" => mx + my,
            "mul" => mx * my,
            "div" => mx / 0.5,
            _ => mx.max(my),
        };
        self.set_mag(&v, m.min(MAG_LIMIT));
        Some(self.tame(v))
    }

    fn int_logic(&mut self) -> Option<Val> {
        let x = self.pick(|v| !v.ty.dt().is_float())?;
        let d = x.ty.dt();
        let ops: &[&'static str] = if d == Dtype::I1 {
            &["and", "or", "xor"]
        } else {
            &["and", "or", "xor", "shl", "shr", "rem", "max", "min"]
        };
        let op = self.choose(ops);
        let mut y = self.partner(&x);
        if matches!(op, "shl" | "shr") {
            let m = self.konst(Ty::Scalar(d), (int_bits(d) - 1) as f64);
            y = self.op(
                "and",
                &format!("and {}, {}", y.r(), m.r()),
                y.ty.clone(),
                Facts::default(),
            );
        } else if op == "rem" {
            y = self.int_divisor(y);
        }
        let ty = if x.ty.is_scalar() {
            y.ty.clone()
        } else {
            x.ty.clone()
        };
        Some(self.op(
            op,
            &format!("{op} {}, {}", x.r(), y.r()),
            ty,
            Facts::default(),
        ))
    }

    fn compare(&mut self) -> Option<Val> {
        let x = self.pick(|v| v.ty.dt() != Dtype::I1)?;
        let y = self.partner(&x);
        let p = self.choose(&["eq", "ne", "lt", "le", "gt", "ge"]);
        let ty = if x.ty.is_scalar() {
            y.ty.clone()
        } else {
            x.ty.clone()
        };
        Some(self.op(
            "cmp",
            &format!("cmp {p} {}, {}", x.r(), y.r()),
            ty.with_dt(Dtype::I1),
            Facts::default(),
        ))
    }

    fn select(&mut self) -> Option<Val> {
        let x = self.pick(|_| true)?;
        let y = self.value_of(&x.ty);
        let c = if x.ty.is_scalar() || self.chance(0.2) {
            self.value_of(&Ty::Scalar(Dtype::I1))
        } else {
            self.value_of(&x.ty.with_dt(Dtype::I1))
        };
        let m = self.mag(&x).max(self.mag(&y));
        let v = self.op(
            "select",
            &format!("select {}, {}, {}", c.r(), x.r(), y.r()),
            x.ty.clone(),
            Facts::default(),
        );
        self.set_mag(&v, m);
        Some(v)
    }

    fn cast(&mut self) -> Option<Val> {
        let x = self.pick(|_| true)?;
        let to = self.random_dt();
        let m = self.mag(&x);
        let v = self.op(
            "cast",
            &format!("cast {}", x.r()),
            x.ty.with_dt(to),
            Facts::default(),
        );
        let m = match x.ty.dt() {
            Dtype::I64 => 9.3e18,
            Dtype::I32 => 2.2e9,
            Dtype::U8 => 255.0,
            Dtype::I1 => 1.0,
            _ => m,
        };
        let m = if to == Dtype::F16 { m.min(65504.0) } else { m };
        self.set_mag(&v, m.min(MAG_LIMIT));
        Some(self.tame(v))
    }

    fn bitcast(&mut self) -> Option<Val> {
        let x = self.pick(|v| {
            matches!(
                v.ty.dt(),
                Dtype::F32 | Dtype::I32 | Dtype::F16 | Dtype::Bf16
            )
        })?;
        let to = match x.ty.dt() {
            Dtype::F32 => Dtype::I32,
            Dtype::I32 => Dtype::F32,
            Dtype::F16 => Dtype::Bf16,
            _ => Dtype::F16,
        };
        let v = self.op(
            "bitcast",
            &format!("bitcast {}", x.r()),
            x.ty.with_dt(to),
            Facts::default(),
        );
        // Any bit pattern: NaNs, infinities and huge values.
        self.set_mag(&v, MAG_LIMIT);
        Some(self.tame(v))
    }

    fn reduce(&mut self) -> Option<Val> {
        let x = self.pick(|v| v.ty.shape().len() == 2)?;
        let d = x.ty.dt();
        let kinds: &[&str] = if d == Dtype::I1 {
            &["max", "min"]
        } else {
            &["sum", "max", "min"]
        };
        let k = self.choose(kinds);
        let axis = self.rng.range(0, 2);
        let mut s = x.ty.shape().to_vec();
        let n = s[axis] as f64;
        s[axis] = 1;
        let m = self.mag(&x) * if k == "sum" { n } else { 1.0 };
        let v = self.op(
            "reduce",
            &format!("reduce {k} {} axis {axis}", x.r()),
            Ty::tile(&s, d),
            Facts::default(),
        );
        self.set_mag(&v, m.min(MAG_LIMIT));
        Some(self.tame(v))
    }

    fn broadcast(&mut self) -> Option<Val> {
        let x = self.pick(|v| v.ty.shape().len() == 2 && v.ty.shape().contains(&1))?;
        let [bm, bn] = self.tile;
        let s = x.ty.shape();
        let to = [
            if s[0] == 1 { bm } else { s[0] },
            if s[1] == 1 { bn } else { s[1] },
        ];
        if to[0] != s[0] && s[0] != 1 || to[1] != s[1] && s[1] != 1 {
            return None;
        }
        let m = self.mag(&x);
        let v = self.op(
            "broadcast",
            &format!("broadcast {}", x.r()),
            Ty::tile(&to, x.ty.dt()),
            Facts::default(),
        );
        self.set_mag(&v, m);
        Some(v)
    }

    fn reshape(&mut self) -> Option<Val> {
        let x = self.pick(|v| !v.ty.is_scalar())?;
        let n = x.ty.count();
        let [bm, bn] = self.tile;
        let mut shapes: Vec<Vec<usize>> = vec![vec![n]];
        for s in [[bm, bn], [bn, bm], [bm, 1], [1, bn], [1, bm], [bn, 1]] {
            if s[0] * s[1] == n {
                shapes.push(s.to_vec());
            }
        }
        let to = self.choose(&shapes);
        let m = self.mag(&x);
        let v = self.op(
            "reshape",
            &format!("reshape {}", x.r()),
            Ty::tile(&to, x.ty.dt()),
            Facts::default(),
        );
        self.set_mag(&v, m);
        Some(v)
    }

    fn transpose(&mut self) -> Option<Val> {
        let x = self.pick(|v| v.ty.shape().len() == 2)?;
        let s = x.ty.shape();
        let m = self.mag(&x);
        let v = self.op(
            "transpose",
            &format!("transpose {}", x.r()),
            Ty::tile(&[s[1], s[0]], x.ty.dt()),
            Facts::default(),
        );
        self.set_mag(&v, m);
        Some(v)
    }

    /// `dot` of a [M, K] and a [K, N] float tile found in scope (or the first operand's
    /// transpose), accumulating into an f32 [M, N] tile.
    pub fn dot(&mut self) -> Option<Val> {
        let a = self.pick(|v| v.ty.shape().len() == 2 && v.ty.dt().is_float())?;
        let (m, k) = (a.ty.shape()[0], a.ty.shape()[1]);
        let d = a.ty.dt();
        let want = |v: &Val| v.ty.shape().len() == 2 && v.ty.dt() == d && v.ty.shape()[0] == k;
        let b = match self.pick(want) {
            Some(b) => b,
            None => {
                let t = self.op(
                    "transpose",
                    &format!("transpose {}", a.r()),
                    Ty::tile(&[k, m], d),
                    Facts::default(),
                );
                let ma = self.mag(&a);
                self.set_mag(&t, ma);
                t
            }
        };
        let n = b.ty.shape()[1];
        if m * n > 4096 || m * k * n > 65536 {
            return None;
        }
        let acc_ty = Ty::tile(&[m, n], Dtype::F32);
        let acc = if self.chance(0.5) {
            self.konst(acc_ty.clone(), 0.0)
        } else {
            self.value_of(&acc_ty)
        };
        let mag = self.mag(&a) * self.mag(&b) * k as f64 + self.mag(&acc);
        let v = self.op(
            "dot",
            &format!("dot {}, {}, {}", a.r(), b.r(), acc.r()),
            acc_ty,
            Facts::default(),
        );
        self.set_mag(&v, mag.min(MAG_LIMIT));
        Some(self.tame(v))
    }

    fn nf4(&mut self) -> Option<Val> {
        let x = match self.pick(|v| v.ty.dt() == Dtype::U8 && !v.ty.is_scalar()) {
            Some(x) => x,
            None => {
                let t = self.main(Dtype::U8);
                self.make(&t)
            }
        };
        let v = self.op(
            "nf4",
            &format!("nf4 {}", x.r()),
            x.ty.with_dt(Dtype::F32),
            Facts::default(),
        );
        self.set_mag(&v, 1.0);
        Some(v)
    }
}
