//! The walk of the bound analysis (`bounds`): per value an [`Info`] (its bound, whether it is
//! computed from constants, a lower bound on its magnitude, whether the GPU may contract it
//! into an FMA, which NaNs it may hold), per tensor the bound of what it holds and its NaNs, and
//! the control-flow ops (`for` to a fixpoint, `if`), whose decisions on inexact values leave
//! their results unbounded.

use super::bound::{Bound, Model, ULP};
use kir_ir::{Attr, Block, Dtype, ExprKind, Kernel, Offset, OpData, Opcode, Value, ValueDef};
use std::collections::{BTreeMap, HashMap};

/// The relative rounding unit of a float dtype's storage (one ulp at the bottom of a binade).
pub(super) fn unit(d: Dtype) -> f64 {
    match d {
        Dtype::Bf16 => 2f64.powi(-7),
        Dtype::F16 => 2f64.powi(-10),
        _ => ULP,
    }
}

/// Which NaNs a float value may hold. The sign and payload of a NaN an op produces are
/// unspecified (docs/ir.md): the reference and a pass or backend may give different bits, which
/// only a `bitcast` shows (every other op and the output comparison treat all NaNs alike).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Nan {
    /// Never a NaN (integers and masks too).
    No,
    /// An f32 NaN only with bits given from outside the kernel's arithmetic (an input tensor or
    /// scalar param, the runner's poison, a bitcast of integer bits), moved by ops that keep
    /// bits (loads, stores, copies, selects, shape ops): the same on every side.
    Given,
    /// Possibly a NaN that an op produced (arithmetic, a NaN literal): unspecified bits.
    Any,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Info {
    pub(super) b: Bound,
    /// The value of a `const` op (a uniform literal).
    pub(super) kval: Option<f64>,
    /// An f32 product the assembler may contract with a following add into an FMA.
    pub(super) product: bool,
    /// Computed from constants only.
    pub(super) konst: bool,
    /// A lower bound on |x| (0 when unknown).
    pub(super) floor: f64,
    /// Which NaNs it may hold.
    pub(super) nan: Nan,
}

/// What nothing is known about: exact (no rewrite touched it) but possibly any NaN.
pub(super) const EXACT: Info = Info {
    b: Bound::EXACT,
    kval: None,
    product: false,
    konst: false,
    floor: 0.0,
    nan: Nan::Any,
};

pub(super) struct Walk<'a> {
    pub(super) k: &'a Kernel,
    /// Whose deviations are bounded.
    pub(super) model: Model,
    pub(super) vals: HashMap<Value, Info>,
    /// Bound of what each tensor param holds (by kernel param name).
    pub(super) bufs: BTreeMap<String, Bound>,
    /// The NaNs each tensor param may hold (by kernel param name).
    pub(super) nans: BTreeMap<String, Nan>,
    /// With `Some`, a division site whose divisor has no proven floor is bounded and its
    /// divisor recorded here, to be checked at run time (the guarded analysis of bounds.rs).
    pub(super) guards: Option<Vec<Value>>,
}

pub(super) fn dt(k: &Kernel, v: Value) -> Option<Dtype> {
    k.dfg.ty(v).dtype()
}

pub(super) fn is_scalar(k: &Kernel, v: Value) -> bool {
    k.dfg.ty(v).is_scalar()
}

pub(super) fn def(k: &Kernel, v: Value) -> Option<&OpData> {
    match k.dfg.values[v].def {
        ValueDef::Result(op, _) => Some(&k.dfg.ops[op]),
        ValueDef::Arg(..) => None,
    }
}

/// The value of a literal expression (a number, maybe negated).
pub(super) fn literal(e: &kir_ir::Expr) -> Option<f64> {
    match &e.kind {
        ExprKind::Int(i) => Some(*i as f64),
        ExprKind::Float(f) => Some(f.0),
        ExprKind::Unary(kir_ir::UnOp::Neg, x) => literal(x).map(|v| -v),
        _ => None,
    }
}

pub(super) fn const_of(d: &OpData) -> Option<f64> {
    match (&d.opcode, &d.lead) {
        (Opcode::Const, Some(Attr::Expr(e))) => literal(e),
        _ => None,
    }
}

/// The NaNs a load's or copy's `other` literal fills in: none without `other` or with a number,
/// an op-made NaN for `other nan` (or anything not a plain literal).
pub(super) fn other_nan(d: &OpData) -> Nan {
    match d.attr("other") {
        None => Nan::No,
        Some(Attr::Expr(e)) if literal(e).is_some_and(|v| !v.is_nan()) => Nan::No,
        Some(_) => Nan::Any,
    }
}

/// Whether the e-class of `v` may hold a scalar, a broadcast, a splat or a sqrt (so a `div`
/// by it may be rewritten inexactly): looks through ops that identity rules may erase.
pub(super) fn may_be_special_divisor(k: &Kernel, v: Value, depth: usize) -> bool {
    if is_scalar(k, v) {
        return true;
    }
    let Some(d) = def(k, v) else { return false };
    match d.opcode {
        Opcode::Broadcast | Opcode::Splat | Opcode::Sqrt => true,
        op if identity_away(op) && depth < 6 => d
            .operands
            .iter()
            .any(|&o| may_be_special_divisor(k, o, depth + 1)),
        Opcode::Const => false,
        _ => depth >= 6,
    }
}

/// The ops whose e-class an exact rule may merge with one of their operands' (`mul-one`,
/// `add-zero`, `sub-zero`, `div-one`, `max`/`min` with ∓inf or twice the same value, `select`
/// with a constant mask or equal branches, `neg-neg`, the cast rules).
fn identity_away(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::Add
            | Opcode::Sub
            | Opcode::Mul
            | Opcode::Div
            | Opcode::Max
            | Opcode::Min
            | Opcode::Select
            | Opcode::Neg
            | Opcode::Cast
    )
}

impl<'a> Walk<'a> {
    pub(super) fn get(&self, v: Value) -> Info {
        self.vals.get(&v).copied().unwrap_or(EXACT)
    }

    /// Whether the e-class of the f32 tile `v` may hold `mul(x, a)` for a tile x and a scalar a,
    /// the inner product `mul-scalars-reassoc` needs (`mul (mul ?x ?a) ?b`): `v` is such a
    /// product, a division by a scalar (`div-scalar-to-recip-mul`, `div-pow2-to-mul` and
    /// `div-sqrt-to-mul-rsqrt` turn it into one), an identity away from one, or computed from
    /// constants only (constant folding merges every class of one value). Any other class
    /// gains a product only as `mul(v, 1)` (through `mul-one`), which reassociates exactly.
    pub(super) fn may_hold_scaled(&self, v: Value, depth: usize) -> bool {
        let k = self.k;
        if self.get(v).konst {
            return true;
        }
        let Some(d) = def(k, v) else { return false };
        let tile_by_scalar =
            d.operands.len() == 2 && !is_scalar(k, d.operands[0]) && is_scalar(k, d.operands[1]);
        if matches!(d.opcode, Opcode::Mul | Opcode::Div) && tile_by_scalar {
            return true;
        }
        if !identity_away(d.opcode) {
            return false;
        }
        depth >= 6
            || d.operands
                .iter()
                .any(|&o| dt(k, o) == Some(Dtype::F32) && self.may_hold_scaled(o, depth + 1))
    }

    pub(super) fn taint(&self, d: &OpData) -> Bound {
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

    /// Walks block `b` under control bound `ctl`; returns what its `yield` yields.
    pub(super) fn block(&mut self, b: Block, ctl: Bound) -> Vec<(Bound, Nan)> {
        let ops = self.k.dfg.blocks[b].ops.clone();
        let mut yielded = vec![];
        for op in ops {
            let d = &self.k.dfg.ops[op];
            if d.opcode == Opcode::Yield {
                yielded = d
                    .operands
                    .iter()
                    .map(|&v| (self.get(v).b, self.get(v).nan))
                    .collect();
                continue;
            }
            self.op(d, ctl);
        }
        yielded
    }

    pub(super) fn set(&mut self, v: Value, i: Info) {
        self.vals.insert(v, i);
    }

    pub(super) fn store_into(&mut self, name: &str, b: Bound, nan: Nan) {
        let e = self.bufs.entry(name.to_string()).or_insert(Bound::EXACT);
        *e = e.join(b);
        let n = self.nans.entry(name.to_string()).or_insert(Nan::Any);
        *n = (*n).max(nan);
    }

    pub(super) fn for_op(&mut self, d: &OpData, ins: &[Info], ctl: Bound) {
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
        let mut carried: Vec<(Bound, Nan)> = ins.iter().skip(3).map(|i| (i.b, i.nan)).collect();
        let mut out = carried.clone();
        for round_no in 0..3 {
            if let Some(&iv) = args.first() {
                self.set(
                    iv,
                    Info {
                        b: bounds,
                        nan: Nan::No,
                        ..EXACT
                    },
                );
            }
            for (a, &(b, nan)) in args.iter().skip(1).zip(&carried) {
                self.set(*a, Info { b, nan, ..EXACT });
            }
            let ys = self.block(body, inner);
            let next: Vec<(Bound, Nan)> = carried
                .iter()
                .zip(
                    ys.iter()
                        .chain(std::iter::repeat(&(Bound::UNBOUNDED, Nan::Any))),
                )
                .map(|(a, b)| (a.0.join(b.0), a.1.max(b.1)))
                .collect();
            if next == carried {
                out = next;
                break;
            }
            // An error that grows every iteration has no bound.
            carried = next
                .iter()
                .map(|&(b, nan)| {
                    if round_no >= 1 && b.rel > 0.0 {
                        (Bound::UNBOUNDED, nan)
                    } else {
                        (b, nan)
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
        for (r, &(b, nan)) in d.results.iter().zip(&out) {
            self.set(
                *r,
                Info {
                    b: b.join(t),
                    nan,
                    ..EXACT
                },
            );
        }
    }

    pub(super) fn if_op(&mut self, d: &OpData, ins: &[Info], ctl: Bound) {
        let c = ins.first().map_or(Bound::EXACT, |i| i.b);
        let inner = if c.is_exact() && ctl.is_exact() {
            ctl
        } else {
            Bound::UNBOUNDED
        };
        let mut res = vec![(Bound::EXACT, Nan::No); d.results.len()];
        for &r in &d.regions {
            let ys = self.block(r, inner);
            for (a, b) in res.iter_mut().zip(ys) {
                *a = (a.0.join(b.0), a.1.max(b.1));
            }
        }
        let t = if inner.is_exact() {
            Bound::EXACT
        } else {
            Bound::UNBOUNDED
        };
        for (r, &(b, nan)) in d.results.iter().zip(&res) {
            self.set(
                *r,
                Info {
                    b: b.join(t),
                    nan,
                    ..EXACT
                },
            );
        }
    }
}
