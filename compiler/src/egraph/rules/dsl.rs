//! The rule language every family writes in: [`rule`] builds a directional rule from a name, a
//! left-hand pattern over op names of the table and a builder, and the shared [`Build`] applier
//! merges only type-equal results. The helpers read a match's classes (`var`, `facts`, `konst`,
//! `if_const`, `has_dtype`) and add typed nodes (`add_like`, `add_scalar`).

use crate::egraph::analysis::{Facts, TileAnalysis, TileGraph};
use crate::egraph::lang::TileNode;
use egg::{Applier, Id, Pattern, PatternAst, Rewrite, Subst, Symbol, Var};
use kir_ir::{Dtype, Opcode};

/// A rewrite rule over the tile language.
pub type Rule = Rewrite<TileNode, TileAnalysis>;

/// Builds the right-hand side of a match: `(graph, matched class, substitution)`.
pub type BuildFn = fn(&mut TileGraph, Id, &Subst) -> Option<Id>;

/// The applier behind every rule: runs the builder and merges only type-equal results.
pub struct Build(pub BuildFn);

impl Applier<TileNode, TileAnalysis> for Build {
    fn apply_one(
        &self,
        g: &mut TileGraph,
        eclass: Id,
        subst: &Subst,
        _ast: Option<&PatternAst<TileNode>>,
        rule: Symbol,
    ) -> Vec<Id> {
        let Some(new) = (self.0)(g, eclass, subst) else {
            return vec![];
        };
        let (a, b) = (&g[eclass].data, &g[new].data);
        if a.dtype != b.dtype || a.shape != b.shape {
            return vec![];
        }
        // With explanations on, record the rule's name as the reason (for `kirc explain`).
        let merged = if g.are_explanations_enabled() {
            g.union_trusted(eclass, new, rule)
        } else {
            g.union(eclass, new)
        };
        if merged {
            vec![eclass]
        } else {
            vec![]
        }
    }
}

/// One rule: a name, a left-hand pattern over op names of the table, and a builder.
/// The pattern is a constant of the rule file; the `rules_build` test parses every one.
pub fn rule(name: &str, lhs: &str, build: BuildFn) -> Rule {
    let pat: Pattern<TileNode> = lhs
        .parse()
        .unwrap_or_else(|e| panic!("rule {name}: bad pattern {lhs}: {e}"));
    Rewrite::new(name, pat, Build(build)).unwrap_or_else(|e| panic!("rule {name}: {e}"))
}

/// The class bound to pattern variable `name` (`"?x"`).
pub fn var(s: &Subst, name: &str) -> Option<Id> {
    let v: Var = name.parse().ok()?;
    s.get(v).copied()
}

/// The facts of the class bound to `name`.
pub fn facts<'g>(g: &'g TileGraph, s: &Subst, name: &str) -> Option<&'g Facts> {
    var(s, name).map(|id| &g[id].data)
}

/// The uniform constant value of the class bound to `name`, if it is one.
pub fn konst(g: &TileGraph, s: &Subst, name: &str) -> Option<f64> {
    facts(g, s, name).and_then(|f| f.konst)
}

/// `var(name)` when the class bound to `c` holds the constant `value` everywhere.
pub fn if_const(g: &TileGraph, s: &Subst, c: &str, value: f64, name: &str) -> Option<Id> {
    (konst(g, s, c)? == value).then(|| var(s, name))?
}

/// True when the class bound to `name` has dtype `d`.
pub fn has_dtype(g: &TileGraph, s: &Subst, name: &str, d: Dtype) -> bool {
    facts(g, s, name).is_some_and(|f| f.dtype == d)
}

/// Adds `op` with no attributes over `args`, typed like `like` (dtype and shape).
pub fn add_like(g: &mut TileGraph, op: Opcode, like: Id, args: Vec<Id>) -> Id {
    let f = g[like].data.clone();
    g.add(TileNode::op(op, "", f.dtype, &f.shape, args))
}

/// Adds a scalar constant of dtype `d`.
pub fn add_scalar(g: &mut TileGraph, value: f64, d: Dtype) -> Id {
    g.add(TileNode::constant(value, d, &[]))
}

#[cfg(test)]
pub(crate) mod testing {
    //! Helpers for the per-rule unit tests: build the smallest expression, run one rule.
    use super::*;
    use egg::Runner;

    /// Runs `rules` to saturation on `g` and reports whether `a` and `b` ended in one class.
    pub fn fires(g: TileGraph, rules: &[Rule], a: Id, b: Id) -> bool {
        let r = Runner::default()
            .with_egraph(g)
            .with_iter_limit(4)
            .with_node_limit(1000)
            .run(rules);
        r.egraph.find(a) == r.egraph.find(b)
    }

    /// The rules named `name` in `rules`.
    pub fn named(rules: Vec<Rule>, name: &str) -> Vec<Rule> {
        let v: Vec<Rule> = rules
            .into_iter()
            .filter(|r| r.name.as_str() == name)
            .collect();
        assert_eq!(v.len(), 1, "no rule {name}");
        v
    }

    /// A leaf of the given type.
    pub fn leaf(g: &mut TileGraph, n: u32, d: Dtype, shape: &[usize]) -> Id {
        g.add(TileNode {
            head: crate::egraph::lang::Head::Leaf,
            sig: Some(std::sync::Arc::new(crate::egraph::lang::Sig {
                attrs: format!("v{n}"),
                dtype: d,
                shape: shape.to_vec(),
                konst: None,
            })),
            args: vec![],
        })
    }

    /// An op of the given type.
    pub fn op(g: &mut TileGraph, o: Opcode, d: Dtype, shape: &[usize], args: Vec<Id>) -> Id {
        g.add(TileNode::op(o, "", d, shape, args))
    }
}
