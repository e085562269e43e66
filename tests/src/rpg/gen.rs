//! The kernel-body builder: a pool of typed values in nested scopes and the pure ops that make
//! new values from them (constants, iota, splat, unary and binary elementwise ops, comparisons,
//! selects, casts, bitcasts, reductions, broadcasts, reshapes, transposes, dot, nf4).
//!
//! Every op it writes is well typed by construction; integer division, remainders and shifts
//! get operands that cannot fail at run time (divisors in ±[2, 9], shift amounts masked to the
//! width). f32 values carry a magnitude estimate, and a value whose estimate passes 2⁶⁰ is
//! clamped, so the e-graph's inexact f32 rewrites stay inside the domain their error bounds are
//! stated for (docs/passes.md); divisions by a scalar, a broadcast row or a square root use a
//! divisor whose magnitude is at least a positive constant (`abs(y) + c`) most of the time.

use super::ty::{float_lit, int_bits, lit, Facts, Ty, Val};
use crate::Rng;
use kir_ir::Dtype;

/// A tensor param of the kernel being built.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// The param name.
    pub name: String,
    /// `in`, `out` or `inout`.
    pub access: &'static str,
    /// Element type.
    pub dt: Dtype,
    /// Dim names (`M`, `N`, `K`), outermost first.
    pub dims: Vec<&'static str>,
    /// An `inout` accumulator that only `atomic_add` touches (never loaded or stored, so no
    /// result depends on the order program instances run in).
    pub atomic: bool,
}

/// Counts of what a generated program contains (for coverage statistics).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Features {
    /// Ops written, by mnemonic.
    pub ops: std::collections::BTreeMap<&'static str, usize>,
}

impl Features {
    /// Counts one op.
    pub fn add(&mut self, op: &'static str) {
        *self.ops.entry(op).or_default() += 1;
    }
}

/// f32 magnitudes above this are clamped (2⁶⁰).
pub const MAG_LIMIT: f64 = 1.152_921_504_606_847e18;

/// Builds one kernel body (see the module doc).
pub struct Kb<'r> {
    /// The generator's random source.
    pub rng: &'r mut Rng,
    /// Lines written so far (indented).
    pub lines: Vec<String>,
    /// Current indentation depth (regions).
    pub depth: usize,
    /// Values in scope, innermost scope last.
    pub scopes: Vec<Vec<Val>>,
    /// The kernel's main tile shape [BM, BN].
    pub tile: [usize; 2],
    /// Tensor params.
    pub tensors: Vec<Tensor>,
    /// Scalar params (name, dtype).
    pub scalars: Vec<(String, Dtype)>,
    /// Integer module constants usable in `static_if` conditions (name, value).
    pub consts: Vec<(String, i64)>,
    /// Ops left to write.
    pub budget: usize,
    /// What was written.
    pub feats: Features,
    /// Estimated bound on |x| of finite f32/f16/bf16 values, by name.
    pub mags: std::collections::HashMap<String, f64>,
    next: usize,
}

impl<'r> Kb<'r> {
    /// An empty body with one scope.
    pub fn new(rng: &'r mut Rng, tile: [usize; 2], tensors: Vec<Tensor>) -> Kb<'r> {
        Kb {
            rng,
            lines: vec![],
            depth: 1,
            scopes: vec![vec![]],
            tile,
            tensors,
            scalars: vec![],
            consts: vec![],
            budget: 0,
            feats: Features::default(),
            mags: Default::default(),
            next: 0,
        }
    }

    /// A fresh value name with prefix `p`.
    pub fn fresh(&mut self, p: &str) -> String {
        self.next += 1;
        format!("{p}{}", self.next)
    }

    /// Writes a line at the current depth.
    pub fn line(&mut self, s: impl AsRef<str>) {
        let ind = "  ".repeat(self.depth);
        self.lines.push(format!("{ind}{}", s.as_ref()));
    }

    /// Writes `%v = RHS : TY` and adds `%v` to the innermost scope.
    pub fn op(&mut self, mnemonic: &'static str, rhs: &str, ty: Ty, facts: Facts) -> Val {
        let name = self.fresh("t");
        self.line(format!("%{name} = {rhs} : {}", ty.text()));
        self.feats.add(mnemonic);
        self.budget = self.budget.saturating_sub(1);
        let v = Val { name, ty, facts };
        self.push(v.clone());
        v
    }

    /// Adds a value to the innermost scope.
    pub fn push(&mut self, v: Val) {
        if let Some(s) = self.scopes.last_mut() {
            s.push(v);
        }
    }

    /// The magnitude estimate of a float value (unknown values count as the limit).
    pub fn mag(&self, v: &Val) -> f64 {
        if !v.ty.dt().is_float() {
            return 0.0;
        }
        *self.mags.get(&v.name).unwrap_or(&MAG_LIMIT)
    }

    /// Records a magnitude estimate.
    pub fn set_mag(&mut self, v: &Val, m: f64) {
        self.mags.insert(v.name.clone(), m);
    }

    /// A random value in scope satisfying `pred`, biased toward recent values.
    pub fn pick(&mut self, pred: impl Fn(&Val) -> bool) -> Option<Val> {
        let all: Vec<&Val> = self.scopes.iter().flatten().filter(|v| pred(v)).collect();
        if all.is_empty() {
            return None;
        }
        let n = all.len();
        // Half of the time one of the last four candidates: keeps chains deep.
        let i = if self.rng.range(0, 2) == 0 {
            n - 1 - self.rng.range(0, n.min(4))
        } else {
            self.rng.range(0, n)
        };
        Some(all[i].clone())
    }

    /// A random element of `xs`.
    pub fn choose<T: Clone>(&mut self, xs: &[T]) -> T {
        xs[self.rng.range(0, xs.len())].clone()
    }

    /// True with probability p.
    pub fn chance(&mut self, p: f64) -> bool {
        self.rng.uniform() < p
    }

    /// The main tile type of dtype `d`.
    pub fn main(&self, d: Dtype) -> Ty {
        Ty::tile(&self.tile, d)
    }

    /// A scalar constant of dtype `d` (random interesting value).
    pub fn const_scalar(&mut self, d: Dtype) -> Val {
        let x = self.const_value(d);
        self.konst(Ty::Scalar(d), x)
    }

    /// A constant of type `ty` with value `x`.
    pub fn konst(&mut self, ty: Ty, x: f64) -> Val {
        let rhs = format!("const {}", lit(ty.dt(), x));
        let f = Facts {
            constant: true,
            index: ty == Ty::Scalar(Dtype::I32) && (0.0..=64.0).contains(&x),
        };
        let v = self.op("const", &rhs, ty, f);
        if x.is_finite() {
            self.set_mag(&v, x.abs());
        } else {
            self.set_mag(&v, 0.0);
        }
        v
    }

    /// A random constant value for dtype `d`: small integers, edges, and for floats also ±0,
    /// fractions, large magnitudes, ±inf and NaN.
    pub fn const_value(&mut self, d: Dtype) -> f64 {
        match d {
            Dtype::I1 => self.rng.range(0, 2) as f64,
            Dtype::U8 => self.choose(&[0.0, 1.0, 2.0, 7.0, 15.0, 128.0, 255.0]),
            Dtype::I32 => self.choose(&[
                0.0,
                1.0,
                -1.0,
                2.0,
                3.0,
                -7.0,
                16.0,
                100.0,
                65535.0,
                -2147483648.0,
                2147483647.0,
            ]),
            Dtype::I64 => self.choose(&[0.0, 1.0, -1.0, 5.0, -12.0, 4096.0, 1e12, -3e15]),
            // (A literal must be finite in its dtype: f16's largest is 65504.)
            Dtype::F16 => self.choose(&[
                0.0,
                -0.0,
                1.0,
                -1.0,
                0.5,
                2.0,
                -3.0,
                0.125,
                1.5,
                100.0,
                -1e4,
                65504.0,
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::NAN,
            ]),
            _ => self.choose(&[
                0.0,
                -0.0,
                1.0,
                -1.0,
                0.5,
                2.0,
                -3.0,
                0.125,
                1.5,
                100.0,
                -1e4,
                3.0e5,
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::NAN,
            ]),
        }
    }

    /// Some value of type `ty`: one in scope, or a new constant / splat / iota.
    pub fn value_of(&mut self, ty: &Ty) -> Val {
        if self.chance(0.85) {
            let t = ty.clone();
            if let Some(v) = self.pick(|v| v.ty == t) {
                return v;
            }
        }
        self.make(ty)
    }

    /// A new value of type `ty` from sources (constant, splat of a scalar, iota, cast).
    pub fn make(&mut self, ty: &Ty) -> Val {
        match ty {
            Ty::Scalar(d) => {
                let d = *d;
                if d == Dtype::I1 && self.chance(0.7) {
                    let a = self.value_of(&Ty::Scalar(Dtype::I32));
                    let b = self.value_of(&Ty::Scalar(Dtype::I32));
                    let p = self.choose(&["lt", "le", "eq", "ne", "gt", "ge"]);
                    return self.op(
                        "cmp",
                        &format!("cmp {p} {}, {}", a.r(), b.r()),
                        ty.clone(),
                        Facts::default(),
                    );
                }
                if d == Dtype::I32 && self.chance(0.3) {
                    // Launch facts: a grid size or a tensor dim.
                    let dims: Vec<&'static str> = self
                        .tensors
                        .iter()
                        .flat_map(|t| t.dims.iter().copied())
                        .collect();
                    if self.chance(0.5) || dims.is_empty() {
                        let axis = self.rng.range(0, 3);
                        return self.op(
                            "num_programs",
                            &format!("num_programs {axis}"),
                            ty.clone(),
                            Facts::default(),
                        );
                    }
                    let n = self.choose(&dims);
                    return self.op("dim", &format!("dim {n}"), ty.clone(), Facts::default());
                }
                if let Some(p) = self.scalars.iter().find(|(_, pd)| *pd == d).cloned() {
                    if self.chance(0.5) {
                        let v = self.op(
                            "param",
                            &format!("param {}", p.0),
                            ty.clone(),
                            Facts::default(),
                        );
                        self.set_mag(&v, 8.0);
                        return v;
                    }
                }
                self.const_scalar(d)
            }
            Ty::Tile(shape, d) => {
                let d = *d;
                let r = self.rng.range(0, 10);
                if d.is_int() && d != Dtype::I1 && r < 3 {
                    let axis = self.rng.range(0, shape.len());
                    return self.op(
                        "iota",
                        &format!("iota axis {axis}"),
                        ty.clone(),
                        Facts::default(),
                    );
                }
                if r < 6 {
                    let s = self.value_of(&Ty::Scalar(d));
                    let m = self.mag(&s);
                    let v = self.op("splat", &format!("splat {}", s.r()), ty.clone(), s.facts);
                    self.set_mag(&v, m);
                    return v;
                }
                let x = self.const_value(d);
                self.konst(ty.clone(), x)
            }
        }
    }

    /// Clamps an f32/f16/bf16 value whose magnitude estimate passed [`MAG_LIMIT`] into ±1e6.
    pub fn tame(&mut self, v: Val) -> Val {
        self.tame_to(v, MAG_LIMIT)
    }

    /// Clamps an f32 or bf16 value whose magnitude estimate is above `limit` into ±1e6 (f16
    /// cannot exceed 65504).
    pub fn tame_to(&mut self, v: Val, limit: f64) -> Val {
        if !matches!(v.ty.dt(), Dtype::F32 | Dtype::Bf16) || self.mag(&v) <= limit {
            return v;
        }
        let d = v.ty.dt();
        let hi = self.konst(Ty::Scalar(d), 1e6);
        let lo = self.konst(Ty::Scalar(d), -1e6);
        let a = self.op(
            "min",
            &format!("min {}, {}", v.r(), hi.r()),
            v.ty.clone(),
            Facts::default(),
        );
        let b = self.op(
            "max",
            &format!("max {}, {}", a.r(), lo.r()),
            v.ty.clone(),
            Facts::default(),
        );
        self.set_mag(&b, 1e6);
        b
    }

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
            _ => {
                let ty = self.random_type();
                Some(self.make(&ty))
            }
        };
    }

    /// A random type among the main tile, its row/column shapes and scalars.
    pub fn random_type(&mut self) -> Ty {
        let d = self.random_dt();
        let [bm, bn] = self.tile;
        match self.rng.range(0, 10) {
            0..=5 => Ty::tile(&[bm, bn], d),
            6 => Ty::tile(&[bm, 1], d),
            7 => Ty::tile(&[1, bn], d),
            _ => Ty::Scalar(d),
        }
    }

    /// A random dtype, floats most often.
    pub fn random_dt(&mut self) -> Dtype {
        self.choose(&[
            Dtype::F32,
            Dtype::F32,
            Dtype::F32,
            Dtype::F16,
            Dtype::Bf16,
            Dtype::I32,
            Dtype::I32,
            Dtype::I64,
            Dtype::U8,
            Dtype::I1,
        ])
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

    /// A float literal for `other` (any, specials included).
    pub fn other_lit(&mut self, d: Dtype) -> String {
        let x = self.const_value(d);
        if d.is_float() {
            float_lit(x)
        } else {
            lit(d, x)
        }
    }
}
