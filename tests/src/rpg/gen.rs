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

use super::ty::{float_lit, lit, Facts, Ty, Val};
use crate::Rng;
use kir_ir::Dtype;

/// Mixes a seed so neighbouring seeds give unrelated streams (the module shapes, the inputs and
/// the ordered sections each draw from their own).
pub fn mix(seed: u64, salt: u64) -> u64 {
    let mut r = Rng::seeded(seed ^ salt.wrapping_mul(0xA24B_AED4_963E_E407));
    r.next_u64()
}

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

    /// A loop's induction variable (an i32 index named with prefix `iv`) and one block argument
    /// per carried value (prefix `c`, in order), with the limit each argument's magnitude is
    /// assumed to keep: max(its initial value's estimate, 1e6) (what the body yields is clamped to
    /// it). Fresh names are taken in that order.
    pub fn loop_header(&mut self, iv: &str, carried: &[Val]) -> (Val, Vec<Val>, Vec<f64>) {
        let iv = Val {
            name: self.fresh(iv),
            ty: Ty::Scalar(Dtype::I32),
            facts: Facts {
                index: true,
                constant: false,
            },
        };
        let args: Vec<Val> = carried
            .iter()
            .map(|v| Val {
                name: self.fresh("c"),
                ty: v.ty.clone(),
                facts: Facts::default(),
            })
            .collect();
        let limits: Vec<f64> = carried.iter().map(|v| self.mag(v).max(1e6)).collect();
        for (a, l) in args.iter().zip(&limits) {
            self.set_mag(a, *l);
        }
        (iv, args, limits)
    }

    /// One fresh result value (prefix `r`) per carried value, of its type.
    pub fn loop_results(&mut self, carried: &[Val]) -> Vec<Val> {
        carried
            .iter()
            .map(|v| Val {
                name: self.fresh("r"),
                ty: v.ty.clone(),
                facts: Facts::default(),
            })
            .collect()
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
