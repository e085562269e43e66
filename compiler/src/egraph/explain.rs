//! Rewrite chains for `kirc explain`, from egg's explanations.
//!
//! Explanations are off in the compiler pipeline (they keep every e-node ever added and slow the
//! runner); [`crate::egraph::optimize_kernel_explained`] turns them on for one run. For every
//! root — a class an anchor (store, load offset, loop bound, ...) reads — whose extracted
//! expression differs from the original one, [`rewrite_chains`] asks egg why the two are equal
//! and prints the proof as a chain of steps: the rule applied at each step (`constant-fold` for
//! the analysis' folding) and the subterm it produced. Output is capped: at most [`MAX_ROOTS`]
//! roots per kernel, [`MAX_STEPS`] steps per root and [`MAX_TERM`] characters per subterm.

pub use super::analysis::FOLD_REASON;

use super::analysis::TileGraph;
use super::cost::TileCost;
use super::lang::TileNode;
use egg::{Extractor, FlatTerm, Id, RecExpr};
use std::fmt::Write;

/// Most roots whose chain is printed per kernel.
pub const MAX_ROOTS: usize = 8;
/// Most steps printed per root.
pub const MAX_STEPS: usize = 12;
/// Most characters of a subterm printed per step.
pub const MAX_TERM: usize = 96;

/// Writes `t` as an s-expression into `out`, stopping once `out` exceeds [`MAX_TERM`].
fn term(t: &FlatTerm<TileNode>, out: &mut String) {
    if out.len() > MAX_TERM {
        return;
    }
    if t.children.is_empty() {
        let _ = write!(out, "{}", t.node);
        return;
    }
    let _ = write!(out, "({}", t.node);
    for c in &t.children {
        out.push(' ');
        term(c, out);
        if out.len() > MAX_TERM {
            return;
        }
    }
    out.push(')');
}

/// The first rewritten position of a proof step: `(rule, forward, subterm)`.
fn rewrite_of(t: &FlatTerm<TileNode>) -> Option<(String, bool, &FlatTerm<TileNode>)> {
    if let Some(r) = t.forward_rule {
        return Some((r.to_string(), true, t));
    }
    if let Some(r) = t.backward_rule {
        return Some((r.to_string(), false, t));
    }
    t.children.iter().find_map(rewrite_of)
}

/// One printed line per step of the proof that `a` equals `b` (already capped).
fn chain(g: &mut TileGraph, a: &RecExpr<TileNode>, b: &RecExpr<TileNode>) -> Vec<String> {
    let mut ex = g.explain_equivalence(a, b);
    let flat = ex.make_flat_explanation();
    let steps: Vec<String> = flat
        .iter()
        .skip(1)
        .filter_map(rewrite_of)
        .map(|(rule, fwd, t)| {
            let mut s = String::new();
            term(t, &mut s);
            if s.len() > MAX_TERM {
                let cut = (0..=MAX_TERM)
                    .rev()
                    .find(|&i| s.is_char_boundary(i))
                    .unwrap_or(0);
                s.truncate(cut);
                s.push('…');
            }
            let dir = if fwd { "" } else { " (backwards)" };
            format!("{rule}{dir} ⇒ {s}")
        })
        .collect();
    let n = steps.len();
    let mut out: Vec<String> = steps.into_iter().take(MAX_STEPS).collect();
    if n > MAX_STEPS {
        out.push(format!("… {} more step(s)", n - MAX_STEPS));
    }
    out
}

/// The rewrite chain of every root whose extracted form differs from its original expression.
/// `roots` are `(label, original id)` pairs; `g` must have explanations enabled. Returns the
/// lines `kirc explain` prints (unindented), capped as the module doc says.
pub fn rewrite_chains(g: &mut TileGraph, roots: &[(String, Id)]) -> Vec<String> {
    if !g.are_explanations_enabled() {
        return vec![];
    }
    let changed: Vec<(String, RecExpr<TileNode>, RecExpr<TileNode>)> = {
        let ext = Extractor::new(&*g, TileCost);
        roots
            .iter()
            .filter_map(|(label, id)| {
                let orig = g.id_to_expr(*id);
                let (_, best) = ext.find_best(*id);
                (orig.to_string() != best.to_string()).then(|| (label.clone(), orig, best))
            })
            .collect()
    };
    let mut out = vec![];
    for (label, orig, best) in changed.iter().take(MAX_ROOTS) {
        let steps = chain(g, orig, best);
        out.push(format!("{label}: {} step(s)", steps.len().min(MAX_STEPS)));
        out.extend(steps.into_iter().map(|s| format!("  {s}")));
    }
    if changed.len() > MAX_ROOTS {
        out.push(format!(
            "… {} more rewritten root(s)",
            changed.len() - MAX_ROOTS
        ));
    }
    out
}
