//! Boolean mask simplifications, so that a later pass can recognise a fully masked or unmasked
//! tile: a mask that folds to an all-true or all-false constant, or to the one comparison that
//! decides it. Every rule is exact (masks are i1; the idempotence and involution rules also hold
//! bitwise for integers). Rules about comparisons never fire on float operands where a NaN could
//! change the answer: `cmp PRED x, x` is false for a NaN `x` even for `eq`/`le`/`ge`.

use super::dsl::{rule, var, Rule};
use crate::egraph::analysis::TileGraph;
use crate::egraph::lang::{Head, TileNode};
use egg::Id;
use kir_ir::{CmpPred, Dtype, Opcode};

/// An all-`value` i1 constant typed like the class `like` (same shape).
fn mask_const(g: &mut TileGraph, like: Id, value: bool) -> Option<Id> {
    let f = g[like].data.clone();
    (f.dtype == Dtype::I1)
        .then(|| g.add(TileNode::constant(value as u8 as f64, Dtype::I1, &f.shape)))
}

/// True when the class bound to `name` is an i1 constant equal to `value` everywhere.
fn is_mask_const(g: &TileGraph, s: &egg::Subst, name: &str, value: bool) -> bool {
    let Some(id) = var(s, name) else { return false };
    let f = &g[id].data;
    f.dtype == Dtype::I1 && f.konst == Some(value as u8 as f64)
}

/// The predicates of the `cmp` nodes of class `c` whose operands are the classes `(x, y)`.
fn cmp_preds(g: &TileGraph, c: Id, x: Id, y: Id) -> Vec<CmpPred> {
    let (x, y) = (g.find(x), g.find(y));
    g[c].nodes
        .iter()
        .filter(|n| n.head == Head::Op(Opcode::Cmp) && n.args.len() == 2)
        .filter(|n| g.find(n.args[0]) == x && g.find(n.args[1]) == y)
        .filter_map(|n| n.cmp_pred())
        .collect()
}

/// For a class `c` holding `cmp lt x, k` with a known constant `k`: `(x, k)`.
fn lt_const(g: &TileGraph, c: Id) -> Vec<(Id, f64)> {
    g[c].nodes
        .iter()
        .filter(|n| n.head == Head::Op(Opcode::Cmp) && n.args.len() == 2)
        .filter(|n| n.cmp_pred() == Some(CmpPred::Lt))
        .filter_map(|n| Some((g.find(n.args[0]), g[n.args[1]].data.konst?)))
        .filter(|(_, k)| !k.is_nan())
        .collect()
}

/// `and(cmp lt x a, cmp lt x b)` with constants a ≤ b is `cmp lt x a` (returns that class).
fn tighter_lt(g: &TileGraph, p: Id, q: Id) -> Option<Id> {
    for (xp, a) in lt_const(g, p) {
        for (xq, b) in lt_const(g, q) {
            if xp == xq {
                return Some(if a <= b { p } else { q });
            }
        }
    }
    None
}

/// `cmp PRED x, x` over integer `x` (the matched class `r`): the constant it always gives.
fn same_cmp(g: &mut TileGraph, r: Id, s: &egg::Subst, always: bool) -> Option<Id> {
    let x = var(s, "?x")?;
    if g[x].data.dtype.is_float() {
        return None;
    }
    let want: &[CmpPred] = if always {
        &[CmpPred::Eq, CmpPred::Le, CmpPred::Ge]
    } else {
        &[CmpPred::Ne, CmpPred::Lt, CmpPred::Gt]
    };
    let preds = cmp_preds(g, r, x, x);
    preds.iter().any(|p| want.contains(p)).then_some(())?;
    mask_const(g, r, always)
}

/// The rules of this family.
pub fn rules() -> Vec<Rule> {
    vec![
        // and(m, m) = m and or(m, m) = m (idempotent, also bitwise).
        rule("and-same", "(and ?m ?m)", |_, _, s| var(s, "?m")),
        rule("or-same", "(or ?m ?m)", |_, _, s| var(s, "?m")),
        // not(not m) = m (an involution, also bitwise).
        rule("not-not", "(not (not ?m))", |_, _, s| var(s, "?m")),
        // and(m, true) = m, either order (i1 only: for integers "true" would be all ones).
        rule("and-true", "(and ?a ?b)", |g, _, s| {
            match (
                is_mask_const(g, s, "?a", true),
                is_mask_const(g, s, "?b", true),
            ) {
                (_, true) => var(s, "?a"),
                (true, false) => var(s, "?b"),
                (false, false) => None,
            }
        }),
        // and(m, false) = all-false of the result's shape, either order.
        rule("and-false-mask", "(and ?a ?b)", |g, r, s| {
            let f = is_mask_const(g, s, "?a", false) || is_mask_const(g, s, "?b", false);
            f.then(|| mask_const(g, r, false))?
        }),
        // or(m, true) = all-true of the result's shape, either order.
        rule("or-true", "(or ?a ?b)", |g, r, s| {
            let t = is_mask_const(g, s, "?a", true) || is_mask_const(g, s, "?b", true);
            t.then(|| mask_const(g, r, true))?
        }),
        // or(m, false) = m, either order.
        rule("or-false", "(or ?a ?b)", |g, _, s| {
            match (
                is_mask_const(g, s, "?a", false),
                is_mask_const(g, s, "?b", false),
            ) {
                (_, true) => var(s, "?a"),
                (true, false) => var(s, "?b"),
                (false, false) => None,
            }
        }),
        // select(not c, x, y) = select(c, y, x) (drops the `not`; exact).
        rule("select-not-swap", "(select (not ?c) ?x ?y)", |g, r, s| {
            let (c, x, y) = (var(s, "?c")?, var(s, "?x")?, var(s, "?y")?);
            (g[c].data.dtype == Dtype::I1).then_some(())?;
            let f = g[r].data.clone();
            Some(g.add(TileNode::op(
                Opcode::Select,
                "",
                f.dtype,
                &f.shape,
                vec![c, y, x],
            )))
        }),
        // cmp eq/le/ge x, x = true and cmp ne/lt/gt x, x = false, for integer x only (NaN).
        rule("cmp-same-true", "(cmp ?x ?x)", |g, r, s| {
            same_cmp(g, r, s, true)
        }),
        rule("cmp-same-false", "(cmp ?x ?x)", |g, r, s| {
            same_cmp(g, r, s, false)
        }),
        // and(x < a, x < b) = x < min(a, b) for constants a, b (any dtype: a NaN x fails all).
        rule("and-lt-lt-const", "(and ?p ?q)", |g, _, s| {
            tighter_lt(g, var(s, "?p")?, var(s, "?q")?)
        }),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::dsl::testing::{fires, leaf, named, op};
    use super::*;
    use Dtype::{F32, I1, I32};

    fn k(g: &mut TileGraph, v: f64, d: Dtype, shape: &[usize]) -> Id {
        g.add(TileNode::constant(v, d, shape))
    }

    fn cmp(g: &mut TileGraph, pred: CmpPred, x: Id, y: Id, shape: &[usize]) -> Id {
        g.add(TileNode::op(
            Opcode::Cmp,
            pred.name(),
            I1,
            shape,
            vec![x, y],
        ))
    }

    #[test]
    fn idempotence_and_involution() {
        for (name, o) in [("and-same", Opcode::And), ("or-same", Opcode::Or)] {
            let mut g = TileGraph::default();
            let m = leaf(&mut g, 0, I1, &[4]);
            let e = op(&mut g, o, I1, &[4], vec![m, m]);
            assert!(fires(g, &named(rules(), name), e, m), "{name}");
        }
        let mut g = TileGraph::default();
        let m = leaf(&mut g, 0, I1, &[4]);
        let n = op(&mut g, Opcode::Not, I1, &[4], vec![m]);
        let nn = op(&mut g, Opcode::Not, I1, &[4], vec![n]);
        assert!(fires(g.clone(), &named(rules(), "not-not"), nn, m));
        // A single `not` is not the mask.
        assert!(!fires(g, &rules(), n, m));
        // and(m, n) of two different masks stays.
        let mut g = TileGraph::default();
        let m = leaf(&mut g, 0, I1, &[4]);
        let n = leaf(&mut g, 1, I1, &[4]);
        let e = op(&mut g, Opcode::And, I1, &[4], vec![m, n]);
        assert!(!fires(g, &rules(), e, m));
    }

    #[test]
    fn constant_operands() {
        // (rule, op, constant, constant on the left, result is m (else the constant))
        let cases = [
            ("and-true", Opcode::And, 1.0, false, true),
            ("and-true", Opcode::And, 1.0, true, true),
            ("or-false", Opcode::Or, 0.0, false, true),
            ("or-false", Opcode::Or, 0.0, true, true),
            ("and-false-mask", Opcode::And, 0.0, true, false),
            ("or-true", Opcode::Or, 1.0, false, false),
        ];
        for (name, o, v, left, to_m) in cases {
            let mut g = TileGraph::default();
            let m = leaf(&mut g, 0, I1, &[4]);
            // A scalar constant with a tile mask: the all-false/true result has the tile's shape.
            let c = k(&mut g, v, I1, &[]);
            let args = if left { vec![c, m] } else { vec![m, c] };
            let e = op(&mut g, o, I1, &[4], args);
            let want = if to_m { m } else { k(&mut g, v, I1, &[4]) };
            assert!(fires(g, &named(rules(), name), e, want), "{name}");
        }
        // For i32, and(x, 1) keeps only the low bit: not x.
        let mut g = TileGraph::default();
        let x = leaf(&mut g, 0, I32, &[4]);
        let c = k(&mut g, 1.0, I32, &[4]);
        let e = op(&mut g, Opcode::And, I32, &[4], vec![x, c]);
        assert!(!fires(g, &rules(), e, x));
    }

    #[test]
    fn select_of_a_negated_mask_swaps() {
        let mut g = TileGraph::default();
        let m = leaf(&mut g, 0, I1, &[4]);
        let x = leaf(&mut g, 1, F32, &[4]);
        let y = leaf(&mut g, 2, F32, &[4]);
        let n = op(&mut g, Opcode::Not, I1, &[4], vec![m]);
        let e = op(&mut g, Opcode::Select, F32, &[4], vec![n, x, y]);
        let want = op(&mut g, Opcode::Select, F32, &[4], vec![m, y, x]);
        let wrong = op(&mut g, Opcode::Select, F32, &[4], vec![m, x, y]);
        assert!(fires(
            g.clone(),
            &named(rules(), "select-not-swap"),
            e,
            want
        ));
        assert!(!fires(g, &rules(), e, wrong));
    }

    #[test]
    fn comparing_an_integer_with_itself() {
        for (pred, v) in [
            (CmpPred::Eq, 1.0),
            (CmpPred::Le, 1.0),
            (CmpPred::Ge, 1.0),
            (CmpPred::Ne, 0.0),
            (CmpPred::Lt, 0.0),
            (CmpPred::Gt, 0.0),
        ] {
            let name = if v == 1.0 {
                "cmp-same-true"
            } else {
                "cmp-same-false"
            };
            let mut g = TileGraph::default();
            let x = leaf(&mut g, 0, I32, &[4]);
            let e = cmp(&mut g, pred, x, x, &[4]);
            let want = k(&mut g, v, I1, &[4]);
            assert!(fires(g, &named(rules(), name), e, want), "{pred}");
        }
        // Never for floats: cmp eq NaN, NaN is false.
        let mut g = TileGraph::default();
        let x = leaf(&mut g, 0, F32, &[4]);
        let e = cmp(&mut g, CmpPred::Eq, x, x, &[4]);
        let t = k(&mut g, 1.0, I1, &[4]);
        assert!(!fires(g, &rules(), e, t));
    }

    #[test]
    fn two_upper_bounds_keep_the_tighter() {
        for swap in [false, true] {
            let mut g = TileGraph::default();
            let x = leaf(&mut g, 0, I32, &[4]);
            let a = k(&mut g, 64.0, I32, &[]);
            let b = k(&mut g, 100.0, I32, &[]);
            let p = cmp(&mut g, CmpPred::Lt, x, a, &[4]);
            let q = cmp(&mut g, CmpPred::Lt, x, b, &[4]);
            let args = if swap { vec![q, p] } else { vec![p, q] };
            let e = op(&mut g, Opcode::And, I1, &[4], args);
            assert!(fires(g, &named(rules(), "and-lt-lt-const"), e, p), "{swap}");
        }
        // Different operands, or a `le`, do not combine.
        let mut g = TileGraph::default();
        let x = leaf(&mut g, 0, I32, &[4]);
        let y = leaf(&mut g, 1, I32, &[4]);
        let a = k(&mut g, 64.0, I32, &[]);
        let b = k(&mut g, 100.0, I32, &[]);
        let p = cmp(&mut g, CmpPred::Lt, x, a, &[4]);
        let q = cmp(&mut g, CmpPred::Lt, y, b, &[4]);
        let r = cmp(&mut g, CmpPred::Le, x, b, &[4]);
        let e = op(&mut g, Opcode::And, I1, &[4], vec![p, q]);
        let f = op(&mut g, Opcode::And, I1, &[4], vec![p, r]);
        let rs = rules();
        assert!(!fires(g.clone(), &rs, e, p));
        assert!(!fires(g, &rs, f, p));
    }
}
