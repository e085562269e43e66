//! Rewrite rules, one file per family. Every rule is directional, named in kebab-case and
//! written as one line: `rule(NAME, LHS-PATTERN, BUILD)`, where `BUILD` reads the match and
//! returns the e-class of the right-hand side (or `None` when a side condition fails).
//!
//! The rule language is in [`dsl`]; its shared [`Build`] applier enforces the type invariant for
//! every rule: the right-hand side must have the same dtype and shape as the matched class, or
//! nothing is merged.

pub mod algebra;
pub mod dsl;
pub mod exp2;
pub mod masks;
pub mod recip;
pub mod rsqrt;

pub use dsl::{
    add_like, add_scalar, facts, has_dtype, if_const, konst, rule, var, Build, BuildFn, Rule,
};

/// Every rule of every family, in family order.
pub fn all_rules() -> Vec<Rule> {
    let mut v = algebra::rules();
    v.extend(exp2::rules());
    v.extend(recip::rules());
    v.extend(rsqrt::rules());
    v.extend(masks::rules());
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_build_with_unique_kebab_case_names() {
        let rules = all_rules();
        let mut names: Vec<&str> = rules.iter().map(|r| r.name.as_str()).collect();
        for n in &names {
            assert!(
                n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{n}"
            );
        }
        let before = names.len();
        names.sort();
        names.dedup();
        assert_eq!(before, names.len(), "duplicate rule names");
    }
}
