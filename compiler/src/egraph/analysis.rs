//! The e-class analysis: dtype, shape and uniform-constant facts, with constant folding.
//!
//! Every e-class has one type (all of its nodes compute the same dtype and shape); rules keep
//! that invariant by checking types in their conditions. `konst` is the value every element of
//! the class holds, when known: a `const`, or a `splat`/`broadcast`/`reshape`/`transpose` of one,
//! or a fold of constant operands. Folding is exact with respect to the interpreter: it is done
//! only for f32 (computed in f32, as the interpreter does) and for i32/i64 with wrapping, and
//! never for integer division or shifts (which can fail at run time).

use super::lang::{Head, TileNode};
use egg::{merge_option, DidMerge, EGraph, Id};
use kir_ir::{Dtype, Opcode};

/// The justification recorded for unions made by the constant folding below (the step name
/// `kirc explain` prints for them).
pub const FOLD_REASON: &str = "constant-fold";

/// Facts about one e-class.
#[derive(Clone, Debug, PartialEq)]
pub struct Facts {
    /// Element type.
    pub dtype: Dtype,
    /// Shape; empty for a scalar.
    pub shape: Vec<usize>,
    /// The value of every element, when it is a known constant (already rounded to `dtype`).
    pub konst: Option<f64>,
}

impl Facts {
    /// Number of elements (1 for a scalar).
    pub fn elems(&self) -> usize {
        self.shape.iter().product()
    }

    /// True for a scalar.
    pub fn is_scalar(&self) -> bool {
        self.shape.is_empty()
    }
}

/// The analysis of [`TileNode`] e-graphs.
#[derive(Clone, Debug, Default)]
pub struct TileAnalysis;

/// The e-graph type used by every rule and pass.
pub type TileGraph = EGraph<TileNode, TileAnalysis>;

/// Rounds `x` to what a `dtype` literal holds; `None` where this module does not model it.
fn round_to(dtype: Dtype, x: f64) -> Option<f64> {
    match dtype {
        Dtype::F32 => Some(x as f32 as f64),
        Dtype::F16 => Some(half::f16::from_f32(x as f32).to_f64()),
        Dtype::Bf16 => Some(half::bf16::from_f32(x as f32).to_f64()),
        Dtype::I32 if x.fract() == 0.0 && x.abs() < 2.0e9 => Some(x),
        Dtype::I64 if x.fract() == 0.0 && x.abs() < 9.0e15 => Some(x),
        Dtype::U8 if x.fract() == 0.0 && (0.0..256.0).contains(&x) => Some(x),
        Dtype::I1 if x == 0.0 || x == 1.0 => Some(x),
        Dtype::I32 | Dtype::I64 | Dtype::U8 | Dtype::I1 => None,
    }
}

/// Folds `op` over constant operands of dtype `d`, exactly as the interpreter computes it.
fn fold(op: Opcode, d: Dtype, a: &[f64]) -> Option<f64> {
    let f32op = |f: fn(f32, f32) -> f32| Some(f(a[0] as f32, a[1] as f32) as f64);
    let int = |f: fn(i64, i64) -> i64| {
        let r = f(a[0] as i64, a[1] as i64);
        match d {
            Dtype::I32 => Some(r as i32 as f64),
            _ => Some(r as f64),
        }
    };
    let r = match (d, op) {
        (Dtype::F32, Opcode::Add) => f32op(|x, y| x + y),
        (Dtype::F32, Opcode::Sub) => f32op(|x, y| x - y),
        (Dtype::F32, Opcode::Mul) => f32op(|x, y| x * y),
        (Dtype::F32, Opcode::Neg) => Some(-a[0]),
        (Dtype::F32, Opcode::Abs) => Some(a[0].abs()),
        (Dtype::I32 | Dtype::I64, Opcode::Add) => int(i64::wrapping_add),
        (Dtype::I32 | Dtype::I64, Opcode::Sub) => int(i64::wrapping_sub),
        (Dtype::I32 | Dtype::I64, Opcode::Mul) => int(i64::wrapping_mul),
        (Dtype::I32 | Dtype::I64, Opcode::Max) => int(i64::max),
        (Dtype::I32 | Dtype::I64, Opcode::Min) => int(i64::min),
        _ => None,
    }?;
    round_to(d, r)
}

impl egg::Analysis<TileNode> for TileAnalysis {
    type Data = Facts;

    fn make(egraph: &mut TileGraph, enode: &TileNode, _id: Id) -> Facts {
        let Some(sig) = &enode.sig else {
            // Pattern nodes never enter an e-graph; give a harmless default.
            return Facts {
                dtype: Dtype::F32,
                shape: vec![],
                konst: None,
            };
        };
        let arg = |i: usize| enode.args.get(i).and_then(|&c| egraph[c].data.konst);
        let konst = match enode.head {
            Head::Leaf => None,
            Head::Op(Opcode::Const) => sig
                .konst
                .and_then(|b| round_to(sig.dtype, f64::from_bits(b))),
            Head::Op(Opcode::Splat | Opcode::Broadcast | Opcode::Reshape | Opcode::Transpose) => {
                arg(0)
            }
            Head::Op(op) => {
                let vals: Option<Vec<f64>> = (0..enode.args.len()).map(arg).collect();
                let same_dtype = enode
                    .args
                    .iter()
                    .all(|&c| egraph[c].data.dtype == sig.dtype);
                match vals {
                    Some(v) if !v.is_empty() && same_dtype => fold(op, sig.dtype, &v),
                    _ => None,
                }
            }
        };
        Facts {
            dtype: sig.dtype,
            shape: sig.shape.clone(),
            konst,
        }
    }

    fn merge(&mut self, a: &mut Facts, b: Facts) -> DidMerge {
        // Two constants of one class must agree (rules preserve values); keep the first.
        merge_option(&mut a.konst, b.konst, |_, _| DidMerge(false, true))
    }

    fn modify(egraph: &mut TileGraph, id: Id) {
        let f = &egraph[id].data;
        let Some(v) = f.konst else { return };
        let has_const = egraph[id]
            .nodes
            .iter()
            .any(|n| n.head == Head::Op(Opcode::Const));
        if has_const {
            return;
        }
        let node = TileNode::constant(v, f.dtype, &f.shape.clone());
        let c = egraph.add(node);
        if egraph.are_explanations_enabled() {
            egraph.union_trusted(id, c, FOLD_REASON);
        } else {
            egraph.union(id, c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_f32_in_f32_and_adds_a_const_node() {
        let mut g = TileGraph::default();
        let a = g.add(TileNode::constant(0.1, Dtype::F32, &[]));
        let b = g.add(TileNode::constant(0.2, Dtype::F32, &[]));
        let s = g.add(TileNode::op(Opcode::Add, "", Dtype::F32, &[], vec![a, b]));
        g.rebuild();
        assert_eq!(g[s].data.konst, Some((0.1f32 + 0.2f32) as f64));
        assert!(g[s].nodes.iter().any(|n| n.head == Head::Op(Opcode::Const)));
    }

    #[test]
    fn does_not_fold_integer_division_or_bf16_arithmetic() {
        let mut g = TileGraph::default();
        let a = g.add(TileNode::constant(1.0, Dtype::I32, &[]));
        let z = g.add(TileNode::constant(0.0, Dtype::I32, &[]));
        let d = g.add(TileNode::op(Opcode::Div, "", Dtype::I32, &[], vec![a, z]));
        let h = g.add(TileNode::constant(1.0, Dtype::Bf16, &[]));
        let hh = g.add(TileNode::op(Opcode::Add, "", Dtype::Bf16, &[], vec![h, h]));
        g.rebuild();
        assert_eq!(g[d].data.konst, None);
        assert_eq!(g[hh].data.konst, None);
    }
}
