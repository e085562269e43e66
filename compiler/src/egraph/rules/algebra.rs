//! Constant propagation and algebraic simplification. Every rule here is exact in the
//! interpreter's semantics (bit-identical results, up to the sign of a zero for `add-zero-*`).
//! Constant folding itself lives in the analysis (`analysis.rs`), which adds a `const` node to
//! every class whose value it knows; these rules remove the ops that constants make redundant.

use super::dsl::{if_const, konst, rule, var, Rule};
use crate::egraph::analysis::TileGraph;
use crate::egraph::lang::Head;
use egg::Id;
use kir_ir::Opcode;

/// `x` when the class `c` is a cast of something with the matched class's dtype and the cast
/// widens exactly (bf16/f16 → f32, i32 → i64), so casting back recovers `x`.
fn narrow_of_widen(g: &TileGraph, root: Id, c: Id) -> Option<Id> {
    let outer = g[root].data.dtype;
    g[c].nodes.iter().find_map(|n| {
        let x = *n.args.first()?;
        let exact = matches!(
            (g[x].data.dtype, g[c].data.dtype),
            (kir_ir::Dtype::Bf16 | kir_ir::Dtype::F16, kir_ir::Dtype::F32)
                | (kir_ir::Dtype::I32, kir_ir::Dtype::I64)
        );
        (n.head == Head::Op(Opcode::Cast) && exact && g[x].data.dtype == outer).then_some(x)
    })
}

/// The rules of this family.
pub fn rules() -> Vec<Rule> {
    vec![
        // x · 1 = x (exact: 1 is representable in every dtype and x is already rounded).
        rule("mul-one-right", "(mul ?x ?c)", |g, _, s| {
            if_const(g, s, "?c", 1.0, "?x")
        }),
        rule("mul-one-left", "(mul ?c ?x)", |g, _, s| {
            if_const(g, s, "?c", 1.0, "?x")
        }),
        // x + 0 = x (exact, except −0 + 0 = +0).
        rule("add-zero-right", "(add ?x ?c)", |g, _, s| {
            if_const(g, s, "?c", 0.0, "?x")
        }),
        rule("add-zero-left", "(add ?c ?x)", |g, _, s| {
            if_const(g, s, "?c", 0.0, "?x")
        }),
        // x − (+0) = x, exactly; x − (−0) = x + 0 is +0 for x = −0, so only +0 qualifies.
        rule("sub-zero", "(sub ?x ?c)", |g, _, s| {
            (konst(g, s, "?c")?.to_bits() == 0f64.to_bits()).then(|| var(s, "?x"))?
        }),
        // x / 1 = x (exact for floats and integers).
        rule("div-one", "(div ?x ?c)", |g, _, s| {
            if_const(g, s, "?c", 1.0, "?x")
        }),
        // max(x, −inf) = x and min(x, +inf) = x (NaN stays NaN on both sides).
        rule("max-neg-inf-right", "(max ?x ?c)", |g, _, s| {
            if_const(g, s, "?c", f64::NEG_INFINITY, "?x")
        }),
        rule("max-neg-inf-left", "(max ?c ?x)", |g, _, s| {
            if_const(g, s, "?c", f64::NEG_INFINITY, "?x")
        }),
        rule("min-pos-inf-right", "(min ?x ?c)", |g, _, s| {
            if_const(g, s, "?c", f64::INFINITY, "?x")
        }),
        // max(x, x) = x, min(x, x) = x.
        rule("max-same", "(max ?x ?x)", |_, _, s| var(s, "?x")),
        rule("min-same", "(min ?x ?x)", |_, _, s| var(s, "?x")),
        // select(true, x, y) = x, select(false, x, y) = y (a constant mask picks one side).
        rule("select-true", "(select ?c ?x ?y)", |g, _, s| {
            if_const(g, s, "?c", 1.0, "?x")
        }),
        rule("select-false", "(select ?c ?x ?y)", |g, _, s| {
            if_const(g, s, "?c", 0.0, "?y")
        }),
        // select(c, x, x) = x whatever the mask.
        rule("select-same", "(select ?c ?x ?x)", |_, _, s| var(s, "?x")),
        // neg(neg(x)) = x (exact: negation only flips the sign bit).
        rule("neg-neg", "(neg (neg ?x))", |_, _, s| var(s, "?x")),
        // cast(x) to x's own type is the identity (the applier checks the types agree).
        rule("cast-same-type", "(cast ?x)", |_, _, s| var(s, "?x")),
        // cast(cast(x)) back to x's dtype through an exact widening is x.
        rule("cast-widen-narrow", "(cast ?c)", |g, r, s| {
            narrow_of_widen(g, r, var(s, "?c")?)
        }),
        // A tile op of a uniform constant class is that constant (kept for bitwise ops, which
        // the analysis does not fold): and(x, false) = false.
        rule("and-false", "(and ?x ?c)", |g, _, s| {
            (konst(g, s, "?c")? == 0.0).then(|| var(s, "?c"))?
        }),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::dsl::testing::{fires, leaf, named, op};
    use super::*;
    use kir_ir::Dtype::{Bf16, F32, I1};

    fn c(g: &mut TileGraph, v: f64, d: kir_ir::Dtype, shape: &[usize]) -> Id {
        g.add(crate::egraph::lang::TileNode::constant(v, d, shape))
    }

    /// Builds `o(x, k)` (or `o(k, x)` when `left`) and checks rule `name` merges it with x.
    fn binary_identity(name: &str, o: Opcode, k: f64, left: bool) {
        let mut g = TileGraph::default();
        let x = leaf(&mut g, 0, F32, &[4]);
        let k = c(&mut g, k, F32, &[4]);
        let args = if left { vec![k, x] } else { vec![x, k] };
        let e = op(&mut g, o, F32, &[4], args);
        assert!(fires(g, &named(rules(), name), e, x), "{name}");
    }

    #[test]
    fn identities() {
        binary_identity("mul-one-right", Opcode::Mul, 1.0, false);
        binary_identity("mul-one-left", Opcode::Mul, 1.0, true);
        binary_identity("add-zero-right", Opcode::Add, 0.0, false);
        binary_identity("add-zero-left", Opcode::Add, 0.0, true);
        binary_identity("sub-zero", Opcode::Sub, 0.0, false);
        binary_identity("div-one", Opcode::Div, 1.0, false);
        binary_identity("max-neg-inf-right", Opcode::Max, f64::NEG_INFINITY, false);
        binary_identity("max-neg-inf-left", Opcode::Max, f64::NEG_INFINITY, true);
        binary_identity("min-pos-inf-right", Opcode::Min, f64::INFINITY, false);
    }

    #[test]
    fn sub_zero_is_exact_for_a_negative_zero_too() {
        // x − (−0) = x + 0, which is +0 for x = −0: the rule must not fire.
        let mut g = TileGraph::default();
        let x = leaf(&mut g, 0, F32, &[4]);
        let k = c(&mut g, -0.0, F32, &[4]);
        let e = op(&mut g, Opcode::Sub, F32, &[4], vec![x, k]);
        assert!(!fires(g, &named(rules(), "sub-zero"), e, x));
    }

    #[test]
    fn identity_needs_the_constant() {
        let mut g = TileGraph::default();
        let x = leaf(&mut g, 0, F32, &[4]);
        let k = c(&mut g, 2.0, F32, &[4]);
        let e = op(&mut g, Opcode::Mul, F32, &[4], vec![x, k]);
        assert!(!fires(g, &rules(), e, x));
    }

    #[test]
    fn same_operand_rules() {
        for (name, o) in [("max-same", Opcode::Max), ("min-same", Opcode::Min)] {
            let mut g = TileGraph::default();
            let x = leaf(&mut g, 0, F32, &[4]);
            let e = op(&mut g, o, F32, &[4], vec![x, x]);
            assert!(fires(g, &named(rules(), name), e, x), "{name}");
        }
        let mut g = TileGraph::default();
        let m = leaf(&mut g, 1, I1, &[4]);
        let x = leaf(&mut g, 0, F32, &[4]);
        let e = op(&mut g, Opcode::Select, F32, &[4], vec![m, x, x]);
        assert!(fires(g, &named(rules(), "select-same"), e, x));
    }

    #[test]
    fn select_with_constant_mask() {
        for (name, v, pick_x) in [("select-true", 1.0, true), ("select-false", 0.0, false)] {
            let mut g = TileGraph::default();
            let m = c(&mut g, v, I1, &[]);
            let x = leaf(&mut g, 0, F32, &[4]);
            let y = leaf(&mut g, 1, F32, &[4]);
            let e = op(&mut g, Opcode::Select, F32, &[4], vec![m, x, y]);
            let want = if pick_x { x } else { y };
            assert!(fires(g, &named(rules(), name), e, want), "{name}");
        }
    }

    #[test]
    fn neg_neg_and_and_false() {
        let mut g = TileGraph::default();
        let x = leaf(&mut g, 0, F32, &[4]);
        let n = op(&mut g, Opcode::Neg, F32, &[4], vec![x]);
        let nn = op(&mut g, Opcode::Neg, F32, &[4], vec![n]);
        assert!(fires(g, &named(rules(), "neg-neg"), nn, x));
        let mut g = TileGraph::default();
        let b = leaf(&mut g, 0, I1, &[4]);
        let f = c(&mut g, 0.0, I1, &[4]);
        let a = op(&mut g, Opcode::And, I1, &[4], vec![b, f]);
        assert!(fires(g, &named(rules(), "and-false"), a, f));
    }

    #[test]
    fn casts() {
        let mut g = TileGraph::default();
        let x = leaf(&mut g, 0, F32, &[4]);
        let e = op(&mut g, Opcode::Cast, F32, &[4], vec![x]);
        assert!(fires(g, &named(rules(), "cast-same-type"), e, x));
        // bf16 → f32 → bf16 is the identity ...
        let mut g = TileGraph::default();
        let x = leaf(&mut g, 0, Bf16, &[4]);
        let w = op(&mut g, Opcode::Cast, F32, &[4], vec![x]);
        let n = op(&mut g, Opcode::Cast, Bf16, &[4], vec![w]);
        assert!(fires(g, &named(rules(), "cast-widen-narrow"), n, x));
        // ... but f32 → bf16 → f32 rounds and must not be removed.
        let mut g = TileGraph::default();
        let x = leaf(&mut g, 0, F32, &[4]);
        let w = op(&mut g, Opcode::Cast, Bf16, &[4], vec![x]);
        let n = op(&mut g, Opcode::Cast, F32, &[4], vec![w]);
        assert!(!fires(g, &rules(), n, x));
    }

    #[test]
    fn a_scalar_identity_does_not_change_a_tile_type() {
        // mul(scalar x, tile of ones) is a tile; it must not merge with the scalar x.
        let mut g = TileGraph::default();
        let x = leaf(&mut g, 0, F32, &[]);
        let k = c(&mut g, 1.0, F32, &[4]);
        let e = op(&mut g, Opcode::Mul, F32, &[4], vec![x, k]);
        assert!(!fires(g, &rules(), e, x));
    }
}
