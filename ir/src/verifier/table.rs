//! Conformance of every op to its row of the op table: leading attribute, operand and result
//! counts, keyword attributes, tensor reference and regions; and name resolution of the constant
//! expressions an op carries (attributes, offsets).

use super::body::Body;
use super::common::{err, err_note, list};
use crate::module::{Offset, OpData};
use crate::ops::{Arity, Attr, AttrKind, Opcode};

impl Body<'_> {
    /// Conformance to the op table: lead, operands, keyword attributes, results, tensor
    /// reference, regions; and name resolution of every constant expression the op carries.
    pub(crate) fn structure(&mut self, d: &OpData) {
        let info = d.opcode.info();
        let name = info.name;
        match (info.lead, &d.lead) {
            (None, None) => {}
            (None, Some(_)) => err(
                self.errs,
                d.span,
                format!("`{name}` takes no leading attribute"),
            ),
            (Some(k), None) => err(
                self.errs,
                d.span,
                format!("`{name}` needs a leading {}", kind_desc(k)),
            ),
            // A predicate or kind the parser did not know stays a name; the op's type rule
            // reports it.
            (Some(AttrKind::Cmp | AttrKind::Reduce), Some(Attr::Name(..))) => {}
            (Some(k), Some(a)) if attr_kind(a) != k => err(
                self.errs,
                d.span,
                format!(
                    "the leading attribute of `{name}` must be {}, found {}",
                    kind_desc(k),
                    kind_desc(attr_kind(a))
                ),
            ),
            (Some(_), Some(_)) => {}
        }
        if let Arity::Fixed(n) = info.operands {
            if d.operands.len() != n {
                err(
                    self.errs,
                    d.span,
                    format!(
                        "`{name}` takes {}, found {}",
                        plural(n, "operand"),
                        d.operands.len()
                    ),
                );
            }
        }
        if let Arity::Fixed(n) = info.results {
            if d.results.len() != n {
                err(
                    self.errs,
                    d.span,
                    format!(
                        "`{name}` produces {}, found {}",
                        plural(n, "result"),
                        d.results.len()
                    ),
                );
            }
        }
        for (i, (key, a)) in d.attrs.iter().enumerate() {
            if d.attrs[..i].iter().any(|(k2, _)| k2 == key) {
                err(
                    self.errs,
                    d.span,
                    format!("attribute `{key}` of `{name}` is given more than once"),
                );
            }
            match info.keywords.iter().find(|(k, _)| k == key) {
                None if info.keywords.is_empty() => err(
                    self.errs,
                    d.span,
                    format!("`{name}` takes no attribute; found `{key}`"),
                ),
                None => {
                    let keys: Vec<&str> = info.keywords.iter().map(|(k, _)| *k).collect();
                    err_note(
                        self.errs,
                        d.span,
                        format!("`{name}` has no attribute `{key}`"),
                        format!("its attributes are: {}", list(&keys)),
                    );
                }
                Some((_, k)) if attr_kind(a) != *k => err(
                    self.errs,
                    d.span,
                    format!(
                        "attribute `{key}` of `{name}` must be {}, found {}",
                        kind_desc(*k),
                        kind_desc(attr_kind(a))
                    ),
                ),
                Some(_) => {}
            }
        }
        match (info.tensor, &d.tensor) {
            (true, None) => err(
                self.errs,
                d.span,
                format!("`{name}` needs a tensor reference `name[offsets]`"),
            ),
            (false, Some(t)) => err(
                self.errs,
                t.span,
                format!("`{name}` takes no tensor reference"),
            ),
            _ => {}
        }
        if d.regions.len() != info.regions {
            err(
                self.errs,
                d.span,
                format!(
                    "`{name}` has {}, found {}",
                    plural(info.regions, "region"),
                    d.regions.len()
                ),
            );
        }
        // Constant expressions carried by the op name only constants.
        if let Some(Attr::Expr(e)) = &d.lead {
            let ctx = format!("the leading attribute of `{name}`");
            self.check_op_expr(e, &ctx, d.opcode == Opcode::Const);
        }
        for (key, a) in &d.attrs {
            let ctx = format!("attribute `{key}` of `{name}`");
            match a {
                Attr::Expr(e) => self.check_op_expr(e, &ctx, key == "other"),
                Attr::List(es) => es.iter().for_each(|e| self.check_op_expr(e, &ctx, false)),
                Attr::Name(..)
                | Attr::Value(_)
                | Attr::Flag
                | Attr::Cmp(_)
                | Attr::Reduce(_)
                | Attr::Str(_) => {}
            }
        }
        if let Some(t) = &d.tensor {
            let ctx = format!("an offset into `{}`", t.param);
            for o in &t.offsets {
                if let Offset::Expr(e) = o {
                    self.check_op_expr(e, &ctx, false);
                }
            }
        }
    }
}

/// The kind of a stored attribute.
fn attr_kind(a: &Attr) -> AttrKind {
    match a {
        Attr::Expr(_) => AttrKind::Expr,
        Attr::Name(..) => AttrKind::Name,
        Attr::Value(_) => AttrKind::Value,
        Attr::List(_) => AttrKind::List,
        Attr::Flag => AttrKind::Flag,
        Attr::Cmp(_) => AttrKind::Cmp,
        Attr::Reduce(_) => AttrKind::Reduce,
        Attr::Str(_) => AttrKind::Str,
    }
}

/// How an attribute kind is described in messages.
fn kind_desc(k: AttrKind) -> &'static str {
    match k {
        AttrKind::Expr => "a constant expression",
        AttrKind::Name => "a name",
        AttrKind::Value => "an SSA value",
        AttrKind::List => "a bracketed list",
        AttrKind::Flag => "a flag (no value)",
        // Written as names (`cmp lt`, `reduce sum`).
        AttrKind::Cmp | AttrKind::Reduce => "a name",
        AttrKind::Str => "a string",
    }
}

/// `1 operand`, `2 operands`, `no results`.
fn plural(n: usize, what: &str) -> String {
    match n {
        0 => format!("no {what}s"),
        1 => format!("1 {what}"),
        _ => format!("{n} {what}s"),
    }
}
