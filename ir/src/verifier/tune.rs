//! The `tune {…}` sets of constants (docs/tuning.md): only int constants are tunable, a set is
//! non-empty and its values distinct, and every value satisfies the constant's own `where`
//! with the earlier constants at their defaults.
//!
//! The last rule is the one a module can check on its own: a value that fails it is wrong in
//! the module's default configuration, whatever a user overrides. A `where` that holds at the
//! defaults may still fail under other `-D` values; the tuner drops such candidates when it
//! specializes them. When a default or the `where` cannot be evaluated (a default naming an
//! unknown constant, a division by zero), the value check is skipped: those errors are the
//! name checks' and specialization's to report.

use super::common::{err, err_note, Errs};
use crate::expr::EvalVal;
use crate::module::{ConstKind, Module};
use std::collections::BTreeSet;

/// Checks the tune sets of `m`'s constants.
pub(crate) fn check_tune(m: &Module, errs: &mut Errs) {
    let variants: BTreeSet<&str> = m
        .consts
        .iter()
        .flat_map(|c| match &c.kind {
            ConstKind::Int => &[][..],
            ConstKind::Enum(vs) => &vs[..],
        })
        .map(String::as_str)
        .collect();
    // The defaults evaluated so far (a constant whose default fails is left out, and any
    // expression naming it is not evaluated).
    let mut env: Vec<(&str, EvalVal)> = Vec::new();
    for c in &m.consts {
        let lookup = |env: &[(&str, EvalVal)], n: &str| -> Option<EvalVal> {
            env.iter()
                .rev()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.clone())
                .or_else(|| variants.contains(n).then(|| EvalVal::Sym(n.to_string())))
        };
        if let Some(t) = &c.tune {
            match &c.kind {
                ConstKind::Enum(_) => err_note(
                    errs,
                    t.span,
                    format!(
                        "constant `{}` is an enum: only int constants are tunable",
                        c.name
                    ),
                    "`-D` chooses an enum's variant; `kirc tune` searches int constants only",
                ),
                ConstKind::Int => {
                    if t.values.is_empty() {
                        err(
                            errs,
                            t.span,
                            format!("the tune set of `{}` is empty", c.name),
                        );
                    }
                    for (j, (v, sp)) in t.values.iter().zip(&t.spans).enumerate() {
                        if t.values[..j].contains(v) {
                            err(
                                errs,
                                *sp,
                                format!(
                                    "tune value {v} of constant `{}` is listed more than once",
                                    c.name
                                ),
                            );
                            continue;
                        }
                        let Some(cond) = &c.require else { continue };
                        let own = |n: &str| {
                            if n == c.name {
                                Some(EvalVal::Int(*v))
                            } else {
                                lookup(&env, n)
                            }
                        };
                        let holds = match cond.eval(&own, false) {
                            Ok(EvalVal::Bool(b)) => b,
                            Ok(EvalVal::Int(i)) => i != 0,
                            Ok(EvalVal::Float(_) | EvalVal::Sym(_)) | Err(_) => continue,
                        };
                        if !holds {
                            err_note(
                                errs,
                                *sp,
                                format!(
                                    "tune value {v} of constant `{}` does not satisfy `where {cond}`",
                                    c.name
                                ),
                                "checked with the earlier constants at their defaults",
                            );
                        }
                    }
                }
            }
        }
        let value = c.default.eval(&|n| lookup(&env, n), false);
        let value = match (&c.kind, value) {
            (ConstKind::Int, Ok(EvalVal::Int(i))) => Some(EvalVal::Int(i)),
            (ConstKind::Int, Ok(EvalVal::Bool(b))) => Some(EvalVal::Int(b as i64)),
            (ConstKind::Enum(_), Ok(EvalVal::Sym(s))) => Some(EvalVal::Sym(s)),
            (_, Ok(_) | Err(_)) => None,
        };
        if let Some(v) = value {
            env.push((&c.name, v));
        }
    }
}
