//! Reading a score mask as linear constraints, part of the `mask_split` pass (see `mod.rs`).
//!
//! [`Reader`] walks a loop body's dataflow: an i32 value becomes a [`Lin`], an affine form in the
//! row index, the column index, the loop variable and loop-invariant scalars (constants, iotas,
//! splats, broadcasts, add, sub, neg and multiplication by a constant are looked through; any
//! other scalar that does not change across iterations stays one opaque term), and an i1 value
//! becomes a [`B`], an and/or tree of comparisons `lin ≤ 0` (`not` pushed down to the leaves,
//! `lt gt ge` rewritten over the integers). It also tells whether a tile is computed from a `dot`
//! inside the loop, which is what makes a select a score mask.

use kir_ir::edit::def_data;
use kir_ir::{Attr, Block, CmpPred, Dfg, Dtype, Effect, Op, Opcode, Value, ValueDef};
use std::collections::{BTreeMap, HashSet};

/// The sentinel bound of an unbounded interval end (|values| stay far below it).
pub(super) const S: i64 = 1 << 30;

/// An affine integer expression: `iv·iv + r·row + c·col + Σ coef·value + k`.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Lin {
    pub(super) iv: i64,
    pub(super) r: i64,
    pub(super) c: i64,
    pub(super) terms: BTreeMap<Value, i64>,
    pub(super) k: i64,
}

impl Lin {
    pub(super) fn konst(k: i64) -> Lin {
        Lin {
            k,
            ..Lin::default()
        }
    }
    pub(super) fn add(mut self, o: &Lin, sign: i64) -> Lin {
        self.iv += sign * o.iv;
        self.r += sign * o.r;
        self.c += sign * o.c;
        self.k += sign * o.k;
        for (&v, &c) in &o.terms {
            *self.terms.entry(v).or_default() += sign * c;
        }
        self.terms.retain(|_, c| *c != 0);
        self
    }
    pub(super) fn scale(mut self, f: i64) -> Lin {
        self.iv *= f;
        self.r *= f;
        self.c *= f;
        self.k *= f;
        for c in self.terms.values_mut() {
            *c *= f;
        }
        self.terms.retain(|_, c| *c != 0);
        self
    }
}

/// A mask: comparisons `lin ≤ 0` under and/or, or a constant.
#[derive(Clone, Debug)]
pub(super) enum B {
    Atom(Lin),
    And(Vec<B>),
    Or(Vec<B>),
    Const(bool),
}

impl B {
    pub(super) fn not(self) -> B {
        match self {
            // ¬(f ≤ 0) ⇔ f ≥ 1 ⇔ 1 − f ≤ 0 (integers).
            B::Atom(f) => B::Atom(Lin::konst(1).add(&f, -1)),
            B::And(v) => B::Or(v.into_iter().map(B::not).collect()),
            B::Or(v) => B::And(v.into_iter().map(B::not).collect()),
            B::Const(b) => B::Const(!b),
        }
    }
    pub(super) fn has_iv(&self) -> bool {
        match self {
            B::Atom(f) => f.iv != 0,
            B::And(v) | B::Or(v) => v.iter().any(B::has_iv),
            B::Const(_) => false,
        }
    }
    pub(super) fn atoms<'a>(&'a self, out: &mut Vec<&'a Lin>) {
        match self {
            B::Atom(f) => out.push(f),
            B::And(v) | B::Or(v) => v.iter().for_each(|b| b.atoms(out)),
            B::Const(_) => {}
        }
    }
}

/// Reads the loop body's dataflow.
pub(super) struct Reader<'a> {
    pub(super) d: &'a Dfg,
    /// Ops inside the loop (any depth).
    pub(super) inside: HashSet<Op>,
    pub(super) body: Block,
    pub(super) iv: Value,
}

impl Reader<'_> {
    /// True when `v` does not change across iterations (a scalar from outside, or computed in
    /// the loop from such scalars by pure scalar ops).
    fn invariant(&self, v: Value) -> bool {
        if v == self.iv {
            return false;
        }
        match self.d.values[v].def {
            ValueDef::Arg(..) => !self.arg_inside(v),
            ValueDef::Result(o, _) => {
                if !self.inside.contains(&o) {
                    return true;
                }
                let od = &self.d.ops[o];
                od.regions.is_empty()
                    && od.opcode.effect() == Effect::Pure
                    && od.uses().iter().all(|&u| self.invariant(u))
            }
        }
    }
    fn arg_inside(&self, v: Value) -> bool {
        match self.d.values[v].def {
            ValueDef::Arg(b, _) => {
                b == self.body
                    || self
                        .inside
                        .iter()
                        .any(|&o| self.d.ops[o].regions.contains(&b))
            }
            _ => false,
        }
    }
    pub(super) fn int_lit(&self, v: Value) -> Option<i64> {
        let od = def_data(self.d, v)?;
        if od.opcode != Opcode::Const {
            return None;
        }
        match &od.lead {
            Some(Attr::Expr(e)) => e.as_int(),
            _ => None,
        }
    }
    pub(super) fn float_lit(&self, v: Value) -> Option<f64> {
        let od = def_data(self.d, v)?;
        if od.opcode != Opcode::Const {
            return None;
        }
        match &od.lead {
            Some(Attr::Expr(e)) => match e.eval(&|_| None, false).ok()? {
                kir_ir::EvalVal::Float(x) => Some(x),
                kir_ir::EvalVal::Int(i) => Some(i as f64),
                _ => None,
            },
            _ => None,
        }
    }

    /// The affine form of an i32 value, if it has one.
    fn lin(&self, v: Value) -> Option<Lin> {
        if v == self.iv {
            return Some(Lin {
                iv: 1,
                ..Lin::default()
            });
        }
        let ty = self.d.ty(v);
        if ty.dtype() != Some(Dtype::I32) {
            return None;
        }
        // A scalar from outside the loop stays one term (the bounds then name it).
        let outside = match self.d.values[v].def {
            ValueDef::Result(o, _) => !self.inside.contains(&o),
            ValueDef::Arg(..) => !self.arg_inside(v),
        };
        let def = if outside && ty.is_scalar() && self.int_lit(v).is_none() {
            None
        } else {
            def_data(self.d, v)
        };
        if let Some(od) = def {
            match od.opcode {
                Opcode::Const => {
                    if let Some(i) = self.int_lit(v) {
                        return Some(Lin::konst(i));
                    }
                }
                Opcode::Iota => {
                    let axis = match od.attr("axis") {
                        Some(Attr::Expr(e)) => e.as_int()?,
                        None => 0,
                        _ => return None,
                    };
                    let shape = ty.shape()?;
                    if shape.len() != 2 || shape[axis as usize] == 1 {
                        return (shape.get(axis as usize) == Some(&1)).then(Lin::default);
                    }
                    return Some(if axis == 0 {
                        Lin {
                            r: 1,
                            ..Lin::default()
                        }
                    } else {
                        Lin {
                            c: 1,
                            ..Lin::default()
                        }
                    });
                }
                Opcode::Splat | Opcode::Broadcast => return self.lin(od.operands[0]),
                Opcode::Add | Opcode::Sub => {
                    let a = self.lin(od.operands[0])?;
                    let b = self.lin(od.operands[1])?;
                    return Some(a.add(&b, if od.opcode == Opcode::Add { 1 } else { -1 }));
                }
                Opcode::Neg => return Some(self.lin(od.operands[0])?.scale(-1)),
                Opcode::Mul => {
                    let (a, b) = (od.operands[0], od.operands[1]);
                    if let Some(f) = self.int_lit(b) {
                        return Some(self.lin(a)?.scale(f));
                    }
                    if let Some(f) = self.int_lit(a) {
                        return Some(self.lin(b)?.scale(f));
                    }
                }
                _ => {}
            }
        }
        // Anything else: an opaque scalar, if it does not change across iterations.
        if ty.is_scalar() && self.invariant(v) {
            let mut terms = BTreeMap::new();
            terms.insert(v, 1);
            return Some(Lin {
                terms,
                ..Lin::default()
            });
        }
        None
    }

    /// The mask tree of an i1 value.
    pub(super) fn mask(&self, v: Value) -> Option<B> {
        let od = def_data(self.d, v)?;
        match od.opcode {
            Opcode::And | Opcode::Or => {
                let a = self.mask(od.operands[0])?;
                let b = self.mask(od.operands[1])?;
                Some(if od.opcode == Opcode::And {
                    B::And(vec![a, b])
                } else {
                    B::Or(vec![a, b])
                })
            }
            Opcode::Not => Some(self.mask(od.operands[0])?.not()),
            Opcode::Splat | Opcode::Broadcast => self.mask(od.operands[0]),
            Opcode::Const => match &od.lead {
                Some(Attr::Expr(e)) => match e.eval(&|_| None, false).ok()? {
                    kir_ir::EvalVal::Int(i) => Some(B::Const(i != 0)),
                    kir_ir::EvalVal::Bool(b) => Some(B::Const(b)),
                    _ => None,
                },
                _ => None,
            },
            Opcode::Cmp => {
                let a = self.lin(od.operands[0])?;
                let b = self.lin(od.operands[1])?;
                let d = a.add(&b, -1); // a − b
                let one = Lin::konst(1);
                Some(B::Atom(match od.cmp_pred()? {
                    CmpPred::Le => d,
                    CmpPred::Lt => d.add(&one, 1),
                    CmpPred::Ge => d.scale(-1),
                    CmpPred::Gt => d.scale(-1).add(&one, 1),
                    CmpPred::Eq | CmpPred::Ne => return None,
                }))
            }
            _ => None,
        }
    }

    /// True when `v` is computed inside the loop from a `dot` (through any ops of the loop, and
    /// the values nested loops and `if`s yield).
    pub(super) fn computed_from_dot(&self, v: Value, seen: &mut HashSet<Value>) -> bool {
        if !seen.insert(v) {
            return false;
        }
        let ValueDef::Result(o, _) = self.d.values[v].def else {
            return false;
        };
        if !self.inside.contains(&o) {
            return false;
        }
        let od = &self.d.ops[o];
        // A loop or `if` inside the body: what its regions yield.
        let yielded = od.regions.iter().flat_map(|&r| {
            let last = self.d.blocks[r].ops.last().map(|&y| &self.d.ops[y]);
            last.filter(|y| y.opcode == Opcode::Yield)
                .map(|y| y.operands.clone())
                .unwrap_or_default()
        });
        od.opcode == Opcode::Dot
            || od
                .uses()
                .into_iter()
                .chain(yielded)
                .any(|u| self.computed_from_dot(u, seen))
    }
}
