//! exp → exp2 with log2(e) folded into a multiplier (FlashAttention's trick), and the scalar
//! reassociation that lets the multiplier join the score scale.
//!
//! Error bound of `exp-to-exp2` (f32 only): with t = x·log2(e), the product and the f32 value of
//! log2(e) each round with relative error ≤ 2⁻²⁴, so |Δt| ≤ |t|·2⁻²³ and exp2 amplifies an
//! argument error by ln 2, giving a relative error ≤ |x|·2⁻²³ on top of the two functions' own
//! error: ≤ 1.9e-6 for |x| ≤ 16 and ≤ 1.3e-5 over the whole range where exp(x) is a normal
//! f32 (|x| ≤ 104). `mul-scalars-reassoc` changes the rounding of one product: ≤ 2 ulp (2⁻²³
//! relative). bf16/f16 are left alone: their intermediate roundings are far coarser.

use super::dsl::{add_like, add_scalar, facts, rule, var, Rule};
use kir_ir::{Dtype, Opcode};

/// log2(e) as an f64; rounded to f32 when it becomes a `const`.
pub const LOG2_E: f64 = std::f64::consts::LOG2_E;

/// The rules of this family.
pub fn rules() -> Vec<Rule> {
    vec![
        // exp(x) = exp2(x · log2 e), f32 (bound in the module doc).
        rule("exp-to-exp2", "(exp ?x)", |g, r, s| {
            let x = var(s, "?x")?;
            (g[x].data.dtype == Dtype::F32).then_some(())?;
            let c = add_scalar(g, LOG2_E, Dtype::F32);
            let m = add_like(g, Opcode::Mul, x, vec![x, c]);
            Some(add_like(g, Opcode::Exp2, r, vec![m]))
        }),
        // (x · a) · b = x · (a · b) for a tile x and scalars a, b (f32): one tile multiply
        // instead of two; the scalar product folds when a and b are constants.
        rule("mul-scalars-reassoc", "(mul (mul ?x ?a) ?b)", |g, r, s| {
            let (fa, fb, fx) = (facts(g, s, "?a")?, facts(g, s, "?b")?, facts(g, s, "?x")?);
            let ok = fa.is_scalar() && fb.is_scalar() && !fx.is_scalar();
            let f32s = [fa.dtype, fb.dtype, fx.dtype]
                .iter()
                .all(|&d| d == Dtype::F32);
            (ok && f32s).then_some(())?;
            let (x, a, b) = (var(s, "?x")?, var(s, "?a")?, var(s, "?b")?);
            let ab = add_like(g, Opcode::Mul, a, vec![a, b]);
            Some(add_like(g, Opcode::Mul, r, vec![x, ab]))
        }),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::dsl::testing::{fires, leaf, named, op};
    use super::*;
    use crate::egraph::analysis::TileGraph;
    use crate::egraph::lang::{Head, TileNode};

    #[test]
    fn exp_to_exp2_fires_on_f32_only() {
        let mut g = TileGraph::default();
        let x = leaf(&mut g, 0, Dtype::F32, &[4]);
        let e = op(&mut g, Opcode::Exp, Dtype::F32, &[4], vec![x]);
        let mut h = g.clone();
        let c = h.add(TileNode::constant(LOG2_E, Dtype::F32, &[]));
        let m = op(&mut h, Opcode::Mul, Dtype::F32, &[4], vec![x, c]);
        let e2 = op(&mut h, Opcode::Exp2, Dtype::F32, &[4], vec![m]);
        assert!(fires(h, &named(rules(), "exp-to-exp2"), e, e2));
        let mut b = TileGraph::default();
        let x = leaf(&mut b, 0, Dtype::Bf16, &[4]);
        let e = op(&mut b, Opcode::Exp, Dtype::Bf16, &[4], vec![x]);
        let r = egg::Runner::default().with_egraph(b).run(&rules());
        assert!(r.egraph[e]
            .nodes
            .iter()
            .all(|n| n.head != Head::Op(Opcode::Exp2)));
    }

    #[test]
    fn scalar_multipliers_reassociate() {
        let mut g = TileGraph::default();
        let x = leaf(&mut g, 0, Dtype::F32, &[4, 4]);
        let a = leaf(&mut g, 1, Dtype::F32, &[]);
        let b = leaf(&mut g, 2, Dtype::F32, &[]);
        let xa = op(&mut g, Opcode::Mul, Dtype::F32, &[4, 4], vec![x, a]);
        let e = op(&mut g, Opcode::Mul, Dtype::F32, &[4, 4], vec![xa, b]);
        let ab = op(&mut g, Opcode::Mul, Dtype::F32, &[], vec![a, b]);
        let want = op(&mut g, Opcode::Mul, Dtype::F32, &[4, 4], vec![x, ab]);
        assert!(fires(g, &named(rules(), "mul-scalars-reassoc"), e, want));
    }
}
