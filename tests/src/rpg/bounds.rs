//! How far the `egraph` pass may move each output of a module, derived from the module alone
//! (before the pass), from the error bounds docs/passes.md states for its inexact f32 rules.
//!
//! Every value gets a [`Bound`]: exact (bit-identical expected), a relative error bound, or
//! unbounded (the rewrite's error may be amplified without limit: a sum that cancels, a
//! comparison or a floor that flips, a control decision). An op is an *inexact site* when one
//! of the rules may rewrite it, judged conservatively from the op and its operands:
//! - f32 `exp`: `exp-to-exp2`, relative ≤ |x|·2⁻²³ + 2 ulp, ≤ 1.3e-5 + 2⁻²² where exp(x) is a
//!   normal f32 (|x| ≤ 104; beyond, both sides are 0 or inf);
//! - f32 `mul T, s` (tile times scalar): `mul-scalars-reassoc`, 2 ulp;
//! - f32 `div` whose divisor is (or is an identity away from) a scalar, a broadcast, a splat or a
//!   `sqrt`, unless it is a power-of-two constant (exact): `div-scalar-to-recip-mul`,
//!   `div-broadcast-to-recip-mul`, `div-sqrt-to-mul-rsqrt`, 1.5 ulp each (3 ulp counted). These
//!   bounds hold for divisors of magnitude in [2⁻¹²⁶, 2¹²⁶]; the divisor must be provably at
//!   least 2⁻⁶⁰ (a constant, or `abs(y) + c`, through broadcasts and reshapes), else the value is
//!   unbounded. The upper end is the generator's magnitude discipline (values clamped below 2⁶⁰).
//!
//! Inexact inputs then propagate: rounding ops add 1 ulp (f32) or the f16/bf16 rounding unit,
//! `exp`/`exp2`/`sigmoid`/`silu` amplify by at most 104 (beyond, both sides saturate), `sqrt`
//! and `rsqrt` halve; `add`, `sub`, float `reduce sum`, `dot`, `log`, `floor`, `cmp`, casts to
//! integers, bitcasts and float `atomic_add` make them unbounded, as does any control decision
//! (`if` condition, loop bounds, offsets, masks) taken on an inexact value.
//!
//! `add-zero-*` and `sub-zero` are exact up to the sign of a zero (x + 0 for x = −0): a float
//! `add`/`sub` with an operand computed from constants only marks the value `zero_sign`
//! (compared with +0 = −0); dividing by it, `recip`, `rsqrt` or a bitcast of it is unbounded.

use kir_ir::{
    Attr, Block, Dtype, ExprKind, Kernel, Module, Offset, OpData, Opcode, ParamKind, Type, Value,
    ValueDef,
};
use std::collections::{BTreeMap, HashMap};

/// One f32 unit in the last place, relative (2⁻²³).
pub const ULP: f64 = 1.1920928955078125e-7;

/// An error bound on a value or an output.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bound {
    /// Relative error bound: 0 exact, `f64::INFINITY` unbounded.
    pub rel: f64,
    /// May differ in the sign of a zero.
    pub zero_sign: bool,
}

impl Bound {
    /// Bit-identical.
    pub const EXACT: Bound = Bound {
        rel: 0.0,
        zero_sign: false,
    };
    /// No bound.
    pub const UNBOUNDED: Bound = Bound {
        rel: f64::INFINITY,
        zero_sign: false,
    };

    /// The larger of two bounds.
    pub fn join(self, o: Bound) -> Bound {
        Bound {
            rel: self.rel.max(o.rel),
            zero_sign: self.zero_sign || o.zero_sign,
        }
    }

    /// True when nothing may differ (the sign of a zero included).
    pub fn is_exact(self) -> bool {
        self.rel == 0.0 && !self.zero_sign
    }

    /// True when there is no usable bound.
    pub fn is_unbounded(self) -> bool {
        self.rel.is_infinite()
    }

    fn rel(rel: f64) -> Bound {
        Bound {
            rel,
            zero_sign: false,
        }
    }
}

/// The relative rounding unit of a float dtype's storage (one ulp at the bottom of a binade).
fn unit(d: Dtype) -> f64 {
    match d {
        Dtype::Bf16 => 2f64.powi(-7),
        Dtype::F16 => 2f64.powi(-10),
        _ => ULP,
    }
}

/// Whose deviations from the interpreter a bound describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    /// The `egraph` pass; `sites: false` means its exact rules only.
    Egraph {
        /// Whether the inexact rules run.
        sites: bool,
    },
    /// The GPU running the backends' code (PTX or CUDA C) against the interpreter running the
    /// same module: see [`gpu_bounds`].
    Gpu,
}

#[derive(Clone, Copy, Debug)]
struct Info {
    b: Bound,
    /// The value of a `const` op (a uniform literal).
    kval: Option<f64>,
    /// An f32 product the assembler may contract with a following add into an FMA.
    product: bool,
    /// Computed from constants only.
    konst: bool,
    /// A lower bound on |x| (0 when unknown).
    floor: f64,
}

const EXACT: Info = Info {
    b: Bound::EXACT,
    kval: None,
    product: false,
    konst: false,
    floor: 0.0,
};

struct Walk<'a> {
    k: &'a Kernel,
    /// Whose deviations are bounded.
    model: Model,
    vals: HashMap<Value, Info>,
    /// Bound of what each tensor param holds (by kernel param name).
    bufs: BTreeMap<String, Bound>,
}

fn dt(k: &Kernel, v: Value) -> Option<Dtype> {
    k.dfg.ty(v).dtype()
}

fn is_scalar(k: &Kernel, v: Value) -> bool {
    k.dfg.ty(v).is_scalar()
}

fn def(k: &Kernel, v: Value) -> Option<&OpData> {
    match k.dfg.values[v].def {
        ValueDef::Result(op, _) => Some(&k.dfg.ops[op]),
        ValueDef::Arg(..) => None,
    }
}

fn const_of(d: &OpData) -> Option<f64> {
    fn ev(e: &kir_ir::Expr) -> Option<f64> {
        match &e.kind {
            ExprKind::Int(i) => Some(*i as f64),
            ExprKind::Float(f) => Some(f.0),
            ExprKind::Unary(kir_ir::UnOp::Neg, x) => ev(x).map(|v| -v),
            _ => None,
        }
    }
    match (&d.opcode, &d.lead) {
        (Opcode::Const, Some(Attr::Expr(e))) => ev(e),
        _ => None,
    }
}

/// Whether the e-class of `v` may hold a scalar, a broadcast, a splat or a sqrt (so a `div`
/// by it may be rewritten inexactly): looks through ops that identity rules may erase.
fn may_be_special_divisor(k: &Kernel, v: Value, depth: usize) -> bool {
    if is_scalar(k, v) {
        return true;
    }
    let Some(d) = def(k, v) else { return false };
    match d.opcode {
        Opcode::Broadcast | Opcode::Splat | Opcode::Sqrt => true,
        Opcode::Add
        | Opcode::Sub
        | Opcode::Mul
        | Opcode::Div
        | Opcode::Max
        | Opcode::Min
        | Opcode::Select
        | Opcode::Neg
        | Opcode::Cast
            if depth < 6 =>
        {
            d.operands
                .iter()
                .any(|&o| may_be_special_divisor(k, o, depth + 1))
        }
        Opcode::Const => false,
        _ => depth >= 6,
    }
}

impl<'a> Walk<'a> {
    fn get(&self, v: Value) -> Info {
        self.vals.get(&v).copied().unwrap_or(EXACT)
    }

    fn taint(&self, d: &OpData) -> Bound {
        let mut b = Bound::EXACT;
        if let Some(t) = &d.tensor {
            for o in &t.offsets {
                if let Offset::Value(v) = o {
                    b = b.join(self.get(*v).b);
                }
            }
        }
        if let Some(Attr::Value(m)) = d.attr("mask") {
            b = b.join(self.get(*m).b);
        }
        if b.is_exact() {
            Bound::EXACT
        } else {
            Bound::UNBOUNDED
        }
    }

    fn block(&mut self, b: Block, ctl: Bound) -> Vec<Bound> {
        let ops = self.k.dfg.blocks[b].ops.clone();
        let mut yielded = vec![];
        for op in ops {
            let d = &self.k.dfg.ops[op];
            if d.opcode == Opcode::Yield {
                yielded = d.operands.iter().map(|&v| self.get(v).b).collect();
                continue;
            }
            self.op(d, ctl);
        }
        yielded
    }

    fn set(&mut self, v: Value, i: Info) {
        self.vals.insert(v, i);
    }

    fn store_into(&mut self, name: &str, b: Bound) {
        let e = self.bufs.entry(name.to_string()).or_insert(Bound::EXACT);
        *e = e.join(b);
    }

    fn op(&mut self, d: &OpData, ctl: Bound) {
        let k = self.k;
        let ins: Vec<Info> = d.operands.iter().map(|&v| self.get(v)).collect();
        let inb = ins.iter().fold(Bound::EXACT, |a, i| a.join(i.b));
        let rd = d.results.first().and_then(|&r| dt(k, r));
        let f32r = rd == Some(Dtype::F32);
        let float_r = rd.is_some_and(|x| x.is_float());
        let konst = !ins.is_empty() && ins.iter().all(|i| i.konst);
        // Rounding on a perturbed input: one more unit of the result's dtype.
        let round = |b: Bound| -> Bound {
            if b.rel == 0.0 {
                b
            } else {
                Bound {
                    rel: b.rel + rd.map_or(ULP, unit),
                    zero_sign: b.zero_sign,
                }
            }
        };
        let unb_if_inexact = |b: Bound| if b.rel > 0.0 { Bound::UNBOUNDED } else { b };
        let gpu = self.model == Model::Gpu;
        let sites = self.model == Model::Egraph { sites: true };
        let mut floor = 0.0;
        // The GPU's approximations (PTX ISA: ex2.approx, rsqrt.approx within 2⁻²² relative;
        // lg2.approx and tanh.approx have absolute error bounds only).
        const APPROX: f64 = 2.384185791015625e-7;
        let b: Bound = match d.opcode {
            Opcode::Exp | Opcode::Exp2 | Opcode::Sigmoid | Opcode::Silu if gpu => {
                if inb.is_unbounded() {
                    Bound::UNBOUNDED
                } else {
                    Bound::rel(
                        104.0 * (inb.rel + ULP) + 2.0 * APPROX + 2.0 * ULP + rd.map_or(ULP, unit),
                    )
                }
            }
            Opcode::Rsqrt if gpu => {
                if inb.is_unbounded() || inb.zero_sign {
                    Bound::UNBOUNDED
                } else {
                    Bound::rel(inb.rel / 2.0 + APPROX + rd.map_or(ULP, unit))
                }
            }
            Opcode::Log | Opcode::Log2 | Opcode::Tanh if gpu => Bound::UNBOUNDED,
            Opcode::Add | Opcode::Sub if gpu && f32r && ins.iter().any(|i| i.product) => {
                Bound::UNBOUNDED
            }
            Opcode::Dot | Opcode::DotAsync | Opcode::DotWait if gpu => Bound::UNBOUNDED,
            Opcode::Reduce
                if gpu && float_r && matches!(d.reduce_kind(), Some(kir_ir::ReduceKind::Sum)) =>
            {
                Bound::UNBOUNDED
            }
            Opcode::ProgramId
            | Opcode::NumPrograms
            | Opcode::Dim
            | Opcode::Param
            | Opcode::Iota => Bound::EXACT,
            Opcode::Const => {
                floor = const_of(d).map_or(0.0, f64::abs);
                let i = Info {
                    b: Bound::EXACT,
                    kval: const_of(d),
                    product: false,
                    konst: true,
                    floor: if floor.is_finite() { floor } else { 0.0 },
                };
                for &r in &d.results {
                    self.set(r, i);
                }
                return;
            }
            Opcode::Splat | Opcode::Broadcast | Opcode::Reshape | Opcode::Transpose => {
                floor = ins.first().map_or(0.0, |i| i.floor);
                inb
            }
            Opcode::Load => {
                let t = d
                    .tensor
                    .as_ref()
                    .map(|t| t.param.clone())
                    .unwrap_or_default();
                self.bufs
                    .get(&t)
                    .copied()
                    .unwrap_or(Bound::EXACT)
                    .join(self.taint(d))
            }
            Opcode::Store | Opcode::AtomicAdd => {
                let t = d
                    .tensor
                    .as_ref()
                    .map(|t| t.param.clone())
                    .unwrap_or_default();
                let v = ins.first().map_or(Bound::EXACT, |i| i.b);
                let float_atomic = d.opcode == Opcode::AtomicAdd
                    && d.operands
                        .first()
                        .and_then(|&x| dt(k, x))
                        .is_some_and(|x| x.is_float());
                // Float atomics add in whatever order the GPU's instances run.
                let v = if float_atomic && gpu {
                    Bound::UNBOUNDED
                } else if float_atomic {
                    unb_if_inexact(v)
                } else {
                    v
                };
                let c = if ctl.is_exact() {
                    Bound::EXACT
                } else {
                    Bound::UNBOUNDED
                };
                let all = v.join(self.taint(d)).join(c);
                self.store_into(&t, all);
                return;
            }
            Opcode::Neg | Opcode::Abs | Opcode::Max | Opcode::Min => {
                if d.opcode == Opcode::Abs || d.opcode == Opcode::Neg {
                    floor = ins.first().map_or(0.0, |i| i.floor);
                }
                if d.opcode == Opcode::Max {
                    floor = ins.iter().map(|i| i.floor).fold(0.0, f64::max);
                }
                inb
            }
            Opcode::Exp if f32r && sites => {
                if inb.is_unbounded() {
                    Bound::UNBOUNDED
                } else {
                    Bound {
                        rel: 104.0 * inb.rel + 1.3e-5 + 2.0 * ULP,
                        zero_sign: false,
                    }
                }
            }
            Opcode::Exp | Opcode::Exp2 | Opcode::Sigmoid | Opcode::Tanh => {
                if inb.rel == 0.0 {
                    Bound {
                        rel: 0.0,
                        zero_sign: inb.zero_sign && d.opcode == Opcode::Tanh,
                    }
                } else {
                    round(Bound::rel(104.0 * inb.rel))
                }
            }
            Opcode::Silu => {
                if inb.rel == 0.0 {
                    inb
                } else {
                    round(Bound::rel(105.0 * inb.rel))
                }
            }
            Opcode::Sqrt => {
                floor = ins.first().map_or(0.0, |i| i.floor.sqrt());
                round(Bound {
                    rel: inb.rel / 2.0,
                    zero_sign: inb.zero_sign,
                })
            }
            Opcode::Rsqrt | Opcode::Recip => {
                if inb.zero_sign {
                    Bound::UNBOUNDED
                } else if d.opcode == Opcode::Rsqrt {
                    round(Bound::rel(inb.rel / 2.0))
                } else {
                    round(inb)
                }
            }
            Opcode::Log | Opcode::Log2 | Opcode::Floor => unb_if_inexact(Bound {
                rel: inb.rel,
                zero_sign: false,
            }),
            Opcode::Add | Opcode::Sub if float_r => {
                // `add-zero-*` / `sub-zero` fire before constant folding, so a fully constant
                // operation counts too.
                let zs = ins
                    .iter()
                    .any(|i| i.konst && i.kval.map_or(true, |v| v == 0.0));
                let b = unb_if_inexact(inb);
                if d.opcode == Opcode::Add {
                    floor = ins.iter().map(|i| i.floor).fold(0.0, f64::max)
                        * (ins.iter().all(|i| i.floor > 0.0) as u8 as f64);
                    // abs(y) + c ≥ c
                    if let (Some(a), Some(c)) = (d.operands.first(), ins.get(1)) {
                        if def(k, *a).is_some_and(|x| x.opcode == Opcode::Abs) && c.konst {
                            floor = floor.max(c.floor);
                        }
                    }
                }
                Bound {
                    rel: b.rel,
                    zero_sign: b.zero_sign || zs,
                }
            }
            Opcode::Mul if f32r => {
                floor = ins.iter().map(|i| i.floor).product();
                let site = d.operands.len() == 2
                    && !is_scalar(k, d.operands[0])
                    && is_scalar(k, d.operands[1]);
                let b = round(inb);
                if site && sites && !b.is_unbounded() {
                    Bound {
                        rel: b.rel + 2.0 * ULP,
                        zero_sign: b.zero_sign,
                    }
                } else {
                    b
                }
            }
            Opcode::Div if f32r => {
                let y = d.operands[1];
                let yi = self.get(y);
                let pow2 = def(k, y)
                    .and_then(const_of)
                    .is_some_and(|c| c != 0.0 && c.is_finite() && c.abs().log2().fract() == 0.0);
                if yi.b.zero_sign {
                    Bound::UNBOUNDED
                } else if pow2 {
                    round(inb)
                } else if sites && may_be_special_divisor(k, y, 0) {
                    if yi.floor < 2f64.powi(-60) {
                        Bound::UNBOUNDED
                    } else {
                        let b = round(inb);
                        Bound {
                            rel: b.rel + 3.0 * ULP,
                            zero_sign: b.zero_sign,
                        }
                    }
                } else {
                    round(inb)
                }
            }
            Opcode::Div if float_r && ins.get(1).is_some_and(|i| i.b.zero_sign) => Bound::UNBOUNDED,
            Opcode::Mul | Opcode::Div => round(inb),
            Opcode::Add
            | Opcode::Sub
            | Opcode::Rem
            | Opcode::And
            | Opcode::Or
            | Opcode::Xor
            | Opcode::Shl
            | Opcode::Shr
            | Opcode::Not => unb_if_inexact(inb),
            Opcode::Cmp => {
                if inb.rel > 0.0 {
                    Bound::UNBOUNDED
                } else {
                    Bound::EXACT
                }
            }
            Opcode::Select => {
                let c = ins.first().map_or(Bound::EXACT, |i| i.b);
                if c.rel > 0.0 {
                    Bound::UNBOUNDED
                } else {
                    ins[1].b.join(ins[2].b)
                }
            }
            Opcode::Cast => {
                let from = d.operands.first().and_then(|&x| dt(k, x));
                match (from.is_some_and(|x| x.is_float()), float_r) {
                    (true, false) => unb_if_inexact(Bound::rel(inb.rel)),
                    (_, true) => round(inb),
                    _ => inb,
                }
            }
            Opcode::Bitcast | Opcode::Nf4 => {
                if inb.is_exact() {
                    Bound::EXACT
                } else {
                    Bound::UNBOUNDED
                }
            }
            Opcode::Reduce => {
                let sum = matches!(d.reduce_kind(), Some(kir_ir::ReduceKind::Sum));
                if sum && float_r {
                    unb_if_inexact(inb)
                } else {
                    inb
                }
            }
            Opcode::Dot | Opcode::DotAsync | Opcode::DotWait => unb_if_inexact(inb),
            Opcode::SmemRead => {
                let src = d.operands.first().copied();
                src.map_or(Bound::UNBOUNDED, |s| self.get(s).b)
            }
            Opcode::AsyncCopy => {
                // The stage buffer holds what the tensor holds.
                let t = d
                    .tensor
                    .as_ref()
                    .map(|t| t.param.clone())
                    .unwrap_or_default();
                let src = self
                    .bufs
                    .get(&t)
                    .copied()
                    .unwrap_or(Bound::EXACT)
                    .join(self.taint(d));
                if let Some(&buf) = d.operands.first() {
                    let cur = self.get(buf);
                    self.set(
                        buf,
                        Info {
                            b: cur.b.join(src),
                            ..cur
                        },
                    );
                }
                return;
            }
            Opcode::For => {
                let bounds = ins[..3.min(ins.len())]
                    .iter()
                    .fold(Bound::EXACT, |a, i| a.join(i.b));
                let inner = if bounds.is_exact() {
                    ctl
                } else {
                    Bound::UNBOUNDED
                };
                let body = d.regions[0];
                let args = self.k.dfg.blocks[body].args.clone();
                let mut carried: Vec<Bound> = ins.iter().skip(3).map(|i| i.b).collect();
                let mut out = carried.clone();
                for round_no in 0..3 {
                    if let Some(&iv) = args.first() {
                        self.set(iv, Info { b: bounds, ..EXACT });
                    }
                    for (a, b) in args.iter().skip(1).zip(&carried) {
                        self.set(*a, Info { b: *b, ..EXACT });
                    }
                    let ys = self.block(body, inner);
                    let next: Vec<Bound> = carried
                        .iter()
                        .zip(ys.iter().chain(std::iter::repeat(&Bound::UNBOUNDED)))
                        .map(|(a, b)| a.join(*b))
                        .collect();
                    if next == carried {
                        out = next;
                        break;
                    }
                    // An error that grows every iteration has no bound.
                    carried = next
                        .iter()
                        .map(|b| {
                            if round_no >= 1 && b.rel > 0.0 {
                                Bound::UNBOUNDED
                            } else {
                                *b
                            }
                        })
                        .collect();
                    out = carried.clone();
                }
                let t = if inner.is_exact() {
                    Bound::EXACT
                } else {
                    Bound::UNBOUNDED
                };
                for (r, b) in d.results.iter().zip(&out) {
                    self.set(
                        *r,
                        Info {
                            b: b.join(t),
                            ..EXACT
                        },
                    );
                }
                return;
            }
            Opcode::If => {
                let c = ins.first().map_or(Bound::EXACT, |i| i.b);
                let inner = if c.is_exact() && ctl.is_exact() {
                    ctl
                } else {
                    Bound::UNBOUNDED
                };
                let mut res = vec![Bound::EXACT; d.results.len()];
                for &r in &d.regions {
                    let ys = self.block(r, inner);
                    for (a, b) in res.iter_mut().zip(ys) {
                        *a = a.join(b);
                    }
                }
                let t = if inner.is_exact() {
                    Bound::EXACT
                } else {
                    Bound::UNBOUNDED
                };
                for (r, b) in d.results.iter().zip(&res) {
                    self.set(
                        *r,
                        Info {
                            b: b.join(t),
                            ..EXACT
                        },
                    );
                }
                return;
            }
            _ => {
                for &r in &d.regions {
                    self.block(r, ctl);
                }
                inb
            }
        };
        // Integers and masks have no partial error: exact or unbounded.
        let b = match rd {
            Some(x) if !x.is_float() && b.rel > 0.0 => Bound::UNBOUNDED,
            Some(x) if !x.is_float() => Bound::EXACT,
            _ => b,
        };
        let product = gpu && f32r && d.opcode == Opcode::Mul;
        let i = Info {
            b,
            kval: None,
            product,
            konst,
            floor,
        };
        for &r in &d.results {
            self.set(r, i);
        }
    }
}

/// The bound of every `out`/`inout` entry param of the specialized module `m` under the e-graph
/// pass (see the module doc); with `sites` false, under its exact rules only (the sign of a
/// zero may still differ). Entry params that are never written are exact.
pub fn egraph_bounds(m: &Module, sites: bool) -> BTreeMap<String, Bound> {
    bounds(m, Model::Egraph { sites })
}

/// The bound of every `out`/`inout` entry param of module `m` (the front end's output, what the
/// backends lower) for a GPU run against the interpreter's run of `m`. Exact: integer and
/// mask arithmetic, comparisons, selects, min/max, casts, `floor`, and the correctly rounded
/// `sqrt.rn`, `div.rn`, `rcp.rn`. Bounded: `exp`, `exp2`, `sigmoid`, `silu` (`ex2.approx`,
/// amplified by |x| ≤ 104 as above), `rsqrt` (`rsqrt.approx`). Unbounded: `log`, `log2`, `tanh`
/// (absolute error bounds only), an f32 `add`/`sub` of a product (the assembler may contract
/// them into an FMA), `dot`, float `reduce sum` and float `atomic_add` (order and precision
/// of accumulation). A zero's sign is never compared on the GPU (`max.NaN`/`min.NaN` of ±0).
pub fn gpu_bounds(m: &Module) -> BTreeMap<String, Bound> {
    bounds(m, Model::Gpu)
        .into_iter()
        .map(|(k, b)| {
            (
                k,
                Bound {
                    zero_sign: true,
                    ..b
                },
            )
        })
        .collect()
}

fn bounds(m: &Module, model: Model) -> BTreeMap<String, Bound> {
    let mut bufs: BTreeMap<String, Bound> = BTreeMap::new();
    // (kernel, binding kernel param -> buffer) in launch order.
    let launches: Vec<(&Kernel, Vec<(String, String)>)> = match &m.program {
        Some(p) => p
            .launches
            .iter()
            .filter_map(|l| {
                let (_, k) = m.kernel(&l.kernel)?;
                Some((
                    k,
                    l.args
                        .iter()
                        .map(|a| (a.param.clone(), a.arg.clone()))
                        .collect(),
                ))
            })
            .collect(),
        None => m
            .kernels
            .values()
            .map(|k| {
                let b = k
                    .params
                    .iter()
                    .map(|p| (p.name.clone(), p.name.clone()))
                    .collect();
                (k, b)
            })
            .collect(),
    };
    for _ in 0..2 {
        for (k, bind) in &launches {
            let map: HashMap<&str, &str> =
                bind.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
            let mut w = Walk {
                k,
                model,
                vals: HashMap::new(),
                bufs: BTreeMap::new(),
            };
            for p in &k.params {
                if let ParamKind::Tensor(..) = p.kind {
                    let buf = map.get(p.name.as_str()).copied().unwrap_or(p.name.as_str());
                    w.bufs.insert(
                        p.name.clone(),
                        bufs.get(buf).copied().unwrap_or(Bound::EXACT),
                    );
                }
            }
            w.block(k.body, Bound::EXACT);
            for (p, b) in w.bufs {
                let buf = map
                    .get(p.as_str())
                    .copied()
                    .unwrap_or(p.as_str())
                    .to_string();
                let e = bufs.entry(buf).or_insert(Bound::EXACT);
                *e = e.join(b);
            }
        }
    }
    let mut out = BTreeMap::new();
    if let Some(ps) = m.entry_params() {
        for p in ps {
            if let ParamKind::Tensor(acc, _) = &p.kind {
                if acc.writes() {
                    out.insert(
                        p.name.clone(),
                        bufs.get(&p.name).copied().unwrap_or(Bound::EXACT),
                    );
                }
            }
        }
    }
    out
}

/// Whether a type is a float tile or scalar (for callers deciding what to compare).
pub fn is_float_type(t: &Type) -> bool {
    t.dtype().is_some_and(|d| d.is_float())
}
