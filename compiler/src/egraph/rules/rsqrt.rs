//! rsqrt forms for the norms: 1/√x and x/√y become one `rsqrt` (f32 only).
//!
//! Error bound: the interpreter computes rsqrt(x) as 1/√x in f32, so `recip-sqrt-to-rsqrt` is
//! bit-exact there; on the GPU `rsqrt.approx.f32` has a relative error ≤ 2⁻²²·⁹ (PTX ISA).
//! `div-sqrt-to-mul-rsqrt` rounds the reciprocal square root and the product instead of the
//! root and the quotient: within 1.5 ulp (relative ≤ 1.8e-7) of the original in the interpreter.

use super::dsl::{add_like, facts, rule, var, Rule};
use kir_ir::{Dtype, Opcode};

/// The rules of this family.
pub fn rules() -> Vec<Rule> {
    vec![
        // recip(sqrt(x)) = rsqrt(x).
        rule("recip-sqrt-to-rsqrt", "(recip (sqrt ?x))", |g, r, s| {
            (facts(g, s, "?x")?.dtype == Dtype::F32).then_some(())?;
            let x = var(s, "?x")?;
            Some(add_like(g, Opcode::Rsqrt, r, vec![x]))
        }),
        // x / sqrt(y) = x · rsqrt(y), for y of x's type or a scalar y.
        rule("div-sqrt-to-mul-rsqrt", "(div ?x (sqrt ?y))", |g, r, s| {
            let f32s =
                facts(g, s, "?x")?.dtype == Dtype::F32 && facts(g, s, "?y")?.dtype == Dtype::F32;
            f32s.then_some(())?;
            let (x, y) = (var(s, "?x")?, var(s, "?y")?);
            let ry = add_like(g, Opcode::Rsqrt, y, vec![y]);
            Some(add_like(g, Opcode::Mul, r, vec![x, ry]))
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
    fn recip_of_sqrt() {
        let mut g = TileGraph::default();
        let x = leaf(&mut g, 0, F32, &[4, 1]);
        let q = op(&mut g, Opcode::Sqrt, F32, &[4, 1], vec![x]);
        let e = op(&mut g, Opcode::Recip, F32, &[4, 1], vec![q]);
        let want = op(&mut g, Opcode::Rsqrt, F32, &[4, 1], vec![x]);
        assert!(fires(g, &named(rules(), "recip-sqrt-to-rsqrt"), e, want));
    }

    #[test]
    fn div_by_sqrt() {
        let mut g = TileGraph::default();
        let x = leaf(&mut g, 0, F32, &[4]);
        let y = leaf(&mut g, 1, F32, &[]);
        let q = op(&mut g, Opcode::Sqrt, F32, &[], vec![y]);
        let e = op(&mut g, Opcode::Div, F32, &[4], vec![x, q]);
        let ry = op(&mut g, Opcode::Rsqrt, F32, &[], vec![y]);
        let want = op(&mut g, Opcode::Mul, F32, &[4], vec![x, ry]);
        assert!(fires(g, &named(rules(), "div-sqrt-to-mul-rsqrt"), e, want));
    }
}
