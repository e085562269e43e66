//! The walk of the bound analysis (`bounds`): per value an [`Info`] (its bound, whether it is
//! computed from constants, a lower bound on its magnitude, whether the GPU may contract it
//! into an FMA), per tensor the bound of what it holds, and the control-flow ops (`for` to a
//! fixpoint, `if`), whose decisions on inexact values leave their results unbounded.

use super::bounds::{Bound, Model, ULP};
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
}

pub(super) const EXACT: Info = Info {
    b: Bound::EXACT,
    kval: None,
    product: false,
    konst: false,
    floor: 0.0,
};

pub(super) struct Walk<'a> {
    pub(super) k: &'a Kernel,
    /// Whose deviations are bounded.
    pub(super) model: Model,
    pub(super) vals: HashMap<Value, Info>,
    /// Bound of what each tensor param holds (by kernel param name).
    pub(super) bufs: BTreeMap<String, Bound>,
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

pub(super) fn const_of(d: &OpData) -> Option<f64> {
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
pub(super) fn may_be_special_divisor(k: &Kernel, v: Value, depth: usize) -> bool {
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
    pub(super) fn get(&self, v: Value) -> Info {
        self.vals.get(&v).copied().unwrap_or(EXACT)
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

    pub(super) fn block(&mut self, b: Block, ctl: Bound) -> Vec<Bound> {
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

    pub(super) fn set(&mut self, v: Value, i: Info) {
        self.vals.insert(v, i);
    }

    pub(super) fn store_into(&mut self, name: &str, b: Bound) {
        let e = self.bufs.entry(name.to_string()).or_insert(Bound::EXACT);
        *e = e.join(b);
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
    }

    pub(super) fn if_op(&mut self, d: &OpData, ins: &[Info], ctl: Bound) {
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
    }
}
