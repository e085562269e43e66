//! Division → reciprocal multiply, where it is exact enough (f32 only).
//!
//! Error bound: `x / y` rounds once (≤ 0.5 ulp); `x · recip(y)` rounds the reciprocal and the
//! product (≤ 0.5 ulp each), so the rewritten value is within 1.5 ulp, a relative error
//! ≤ 1.5·2⁻²³ ≈ 1.8e-7, barring overflow of 1/y (|y| < 2⁻¹²⁶ is subnormal territory, which
//! the kernels' divisors — row sums, norms, counts — never reach). Division by a constant power
//! of two is exact either way, so `div-pow2-to-mul` has no error at all. The rewrite pays when
//! one reciprocal serves many elements: a scalar or a broadcast row divisor.

use super::dsl::{add_like, facts, konst, rule, var, Rule};
use crate::egraph::lang::TileNode;
use kir_ir::{Dtype, Opcode};

/// True when the classes bound to the names all have dtype f32.
fn all_f32(g: &crate::egraph::analysis::TileGraph, s: &egg::Subst, names: &[&str]) -> bool {
    names
        .iter()
        .all(|n| facts(g, s, n).is_some_and(|f| f.dtype == Dtype::F32))
}

/// The rules of this family.
pub fn rules() -> Vec<Rule> {
    vec![
        // x / y = x · recip(y) for a tile x and a scalar y (one reciprocal per program).
        rule("div-scalar-to-recip-mul", "(div ?x ?y)", |g, r, s| {
            let (x, y) = (var(s, "?x")?, var(s, "?y")?);
            let ok =
                all_f32(g, s, &["?x", "?y"]) && g[y].data.is_scalar() && !g[x].data.is_scalar();
            ok.then_some(())?;
            let ry = add_like(g, Opcode::Recip, y, vec![y]);
            Some(add_like(g, Opcode::Mul, r, vec![x, ry]))
        }),
        // x / broadcast(y) = x · broadcast(recip(y)): one reciprocal per row, not per element.
        rule(
            "div-broadcast-to-recip-mul",
            "(div ?x (broadcast ?y))",
            |g, r, s| {
                let (x, y) = (var(s, "?x")?, var(s, "?y")?);
                all_f32(g, s, &["?x", "?y"]).then_some(())?;
                let ry = add_like(g, Opcode::Recip, y, vec![y]);
                let b = add_like(g, Opcode::Broadcast, r, vec![ry]);
                Some(add_like(g, Opcode::Mul, r, vec![x, b]))
            },
        ),
        // x / 2ᵏ = x · 2⁻ᵏ, exactly (f32, |k| small enough that 2⁻ᵏ is normal).
        rule("div-pow2-to-mul", "(div ?x ?c)", |g, r, s| {
            let (c, x) = (konst(g, s, "?c")?, var(s, "?x")?);
            let pow2 = c != 0.0
                && c.is_finite()
                && c.abs().log2().fract() == 0.0
                && c.abs().log2().abs() < 100.0;
            (pow2 && all_f32(g, s, &["?x", "?c"])).then_some(())?;
            let f = g[var(s, "?c")?].data.clone();
            let inv = g.add(TileNode::constant(1.0 / c, f.dtype, &f.shape));
            Some(add_like(g, Opcode::Mul, r, vec![x, inv]))
        }),
        // 1 / x = recip(x) (exact: recip is 1/x correctly rounded).
        rule("one-div-to-recip", "(div ?c ?x)", |g, r, s| {
            (konst(g, s, "?c")? == 1.0 && all_f32(g, s, &["?x"])).then_some(())?;
            let x = var(s, "?x")?;
            Some(add_like(g, Opcode::Recip, r, vec![x]))
        }),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::dsl::testing::{fires, leaf, named, op};
    use super::*;
    use crate::egraph::analysis::TileGraph;
    use Dtype::F32;

    #[test]
    fn scalar_divisor() {
        let mut g = TileGraph::default();
        let x = leaf(&mut g, 0, F32, &[4]);
        let y = leaf(&mut g, 1, F32, &[]);
        let e = op(&mut g, Opcode::Div, F32, &[4], vec![x, y]);
        let ry = op(&mut g, Opcode::Recip, F32, &[], vec![y]);
        let want = op(&mut g, Opcode::Mul, F32, &[4], vec![x, ry]);
        assert!(fires(
            g,
            &named(rules(), "div-scalar-to-recip-mul"),
            e,
            want
        ));
    }

    #[test]
    fn broadcast_divisor() {
        let mut g = TileGraph::default();
        let x = leaf(&mut g, 0, F32, &[4, 8]);
        let y = leaf(&mut g, 1, F32, &[4, 1]);
        let yb = op(&mut g, Opcode::Broadcast, F32, &[4, 8], vec![y]);
        let e = op(&mut g, Opcode::Div, F32, &[4, 8], vec![x, yb]);
        let ry = op(&mut g, Opcode::Recip, F32, &[4, 1], vec![y]);
        let rb = op(&mut g, Opcode::Broadcast, F32, &[4, 8], vec![ry]);
        let want = op(&mut g, Opcode::Mul, F32, &[4, 8], vec![x, rb]);
        assert!(fires(
            g,
            &named(rules(), "div-broadcast-to-recip-mul"),
            e,
            want
        ));
    }

    #[test]
    fn power_of_two_divisor_only() {
        let mut g = TileGraph::default();
        let x = leaf(&mut g, 0, F32, &[4]);
        let c = g.add(TileNode::constant(4.0, F32, &[]));
        let e = op(&mut g, Opcode::Div, F32, &[4], vec![x, c]);
        let q = g.add(TileNode::constant(0.25, F32, &[]));
        let want = op(&mut g, Opcode::Mul, F32, &[4], vec![x, q]);
        assert!(fires(
            g.clone(),
            &named(rules(), "div-pow2-to-mul"),
            e,
            want
        ));
        let mut g = TileGraph::default();
        let x = leaf(&mut g, 0, F32, &[4]);
        let c = g.add(TileNode::constant(3.0, F32, &[4]));
        let e = op(&mut g, Opcode::Div, F32, &[4], vec![x, c]);
        let q = g.add(TileNode::constant(1.0 / 3.0, F32, &[4]));
        let want = op(&mut g, Opcode::Mul, F32, &[4], vec![x, q]);
        assert!(!fires(g, &named(rules(), "div-pow2-to-mul"), e, want));
    }

    #[test]
    fn one_over_x() {
        let mut g = TileGraph::default();
        let x = leaf(&mut g, 0, F32, &[4]);
        let c = g.add(TileNode::constant(1.0, F32, &[4]));
        let e = op(&mut g, Opcode::Div, F32, &[4], vec![c, x]);
        let want = op(&mut g, Opcode::Recip, F32, &[4], vec![x]);
        assert!(fires(g, &named(rules(), "one-div-to-recip"), e, want));
    }
}
