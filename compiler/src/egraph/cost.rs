//! The extraction cost model: instructions issued plus bytes moved, per program instance.
//!
//! A node costs `elems × weight(op)` where `elems` is its result's element count (1 for a
//! scalar, which runs once per program rather than once per element). Weights count issued
//! instructions: plain ALU ops 1, special-function ops (MUFU: `exp2`, `log2`, `rsqrt`, `recip`,
//! `sqrt`) 4, ops that expand to a MUFU op plus ALU work (`exp`, `log`, `tanh`, `sigmoid`, `silu`)
//! 6, and IEEE float division (a Newton sequence) 8; integer division and remainder 20; `pow`
//! and `erf`, which expand to about 30 and 80 instructions, as much. Ops that
//! only move data (`broadcast`, `reshape`, `transpose`) cost the bytes they move; sources cost 1.
//! Leaves cost nothing (they are computed by anchors outside the e-graph).

use super::analysis::TileGraph;
use super::lang::{Head, TileNode};
use egg::{CostFunction, Id, Language};
use kir_ir::Opcode;

/// Issue weight of one element of `op` (see the module doc); `is_float` picks float division.
pub fn weight(op: Opcode, is_float: bool) -> f64 {
    match op {
        Opcode::ProgramId | Opcode::NumPrograms | Opcode::Dim | Opcode::Param => 0.0,
        Opcode::Const | Opcode::Splat => 0.25,
        Opcode::Iota => 1.0,
        Opcode::Broadcast | Opcode::Reshape | Opcode::Transpose => 0.5,
        Opcode::Exp2 | Opcode::Log2 | Opcode::Rsqrt | Opcode::Recip | Opcode::Sqrt => 4.0,
        Opcode::Exp | Opcode::Log | Opcode::Tanh | Opcode::Sigmoid | Opcode::Silu => 6.0,
        // Branch-free expansions with several divisions and a MUFU op (PTX, `special.rs`).
        Opcode::Pow => 30.0,
        Opcode::Erf => 80.0,
        Opcode::Div | Opcode::Rem if is_float => 8.0,
        Opcode::Div | Opcode::Rem => 20.0,
        Opcode::Nf4 => 2.0,
        // Every other elementwise op (neg, abs, floor, not, add, sub, mul, max, min, the logic
        // and shift ops, cast, bitcast, select, cmp, fma) is one ALU instruction; a new op lands here
        // until it gets an arm above.
        kir_ir::elementwise_ops!() => 1.0,
        Opcode::Reduce => 1.0,
        Opcode::Dot => 2.0,
        // Anchors never enter the e-graph; should one appear, it must never look cheap.
        Opcode::Load
        | Opcode::Store
        | Opcode::AtomicAdd
        | Opcode::SemWait
        | Opcode::SemSignal
        | Opcode::For
        | Opcode::If
        | Opcode::StaticIf
        | Opcode::Yield
        | Opcode::Print
        | kir_ir::schedule_ops!() => 1.0e6,
    }
}

/// The cost of one node alone (without its children).
pub fn node_cost(n: &TileNode) -> f64 {
    let Some(sig) = &n.sig else { return 0.0 };
    let Head::Op(op) = n.head else { return 0.0 };
    let elems: usize = sig.shape.iter().product();
    let elems = elems.max(1) as f64;
    let w = weight(op, sig.dtype.is_float());
    match op {
        // Data movement is charged by bytes moved.
        Opcode::Broadcast | Opcode::Reshape | Opcode::Transpose => {
            elems * w * sig.dtype.size_bytes() as f64
        }
        // Sources are issued once whatever their shape.
        Opcode::ProgramId | Opcode::NumPrograms | Opcode::Dim | Opcode::Param => 1.0,
        _ => elems * w + 0.01,
    }
}

/// The egg cost function over [`node_cost`]; the total is the tree cost (shared subterms are
/// counted once per use, the standard bottom-up extraction).
#[derive(Clone, Copy, Debug, Default)]
pub struct TileCost;

impl CostFunction<TileNode> for TileCost {
    type Cost = f64;

    fn cost<C>(&mut self, enode: &TileNode, mut costs: C) -> f64
    where
        C: FnMut(Id) -> f64,
    {
        enode.fold(node_cost(enode), |sum, id| sum + costs(id))
    }
}

/// The DAG cost of the classes `roots` under the choice `pick` (each class counted once).
pub fn dag_cost(g: &TileGraph, roots: &[Id], pick: &dyn Fn(Id) -> TileNode) -> f64 {
    let mut seen = std::collections::HashSet::new();
    let mut stack: Vec<Id> = roots.iter().map(|&r| g.find(r)).collect();
    let mut total = 0.0;
    while let Some(c) = stack.pop() {
        if !seen.insert(c) {
            continue;
        }
        let n = pick(c);
        total += node_cost(&n);
        stack.extend(n.args.iter().map(|&a| g.find(a)));
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use kir_ir::Dtype;

    #[test]
    fn special_functions_weigh_more_and_scalars_are_cheap() {
        let exp = TileNode::op(Opcode::Exp, "", Dtype::F32, &[64, 64], vec![]);
        let exp2 = TileNode::op(Opcode::Exp2, "", Dtype::F32, &[64, 64], vec![]);
        let mul = TileNode::op(Opcode::Mul, "", Dtype::F32, &[64, 64], vec![]);
        let smul = TileNode::op(Opcode::Mul, "", Dtype::F32, &[], vec![]);
        assert!(node_cost(&exp) > node_cost(&exp2) + node_cost(&mul));
        assert!(node_cost(&smul) < 2.0);
    }
}
