//! The verifier's shared leaf helpers: diagnostics (`Errs`, `err`, `err_note`, `list`,
//! `list_span`) and decidable facts about expressions and types (`lit_int`, `dim_eq`, `ty_eq` and
//! the rest), each `Some` when decidable now and `None` while a fact is still symbolic.

use crate::dtype::Dtype;
use crate::error::Diagnostic;
use crate::expr::{Expr, ExprKind};
use crate::span::Span;
use crate::types::{ElemType, Type};

/// Collected diagnostics of one verification run.
pub(crate) type Errs = Vec<Diagnostic>;

/// Pushes an error at `span`.
pub(crate) fn err(errs: &mut Errs, span: Span, msg: impl Into<String>) {
    errs.push(Diagnostic::new(span, msg));
}

/// Pushes an error with a note.
pub(crate) fn err_note(
    errs: &mut Errs,
    span: Span,
    msg: impl Into<String>,
    note: impl Into<String>,
) {
    errs.push(Diagnostic::new(span, msg).with_note(note));
}

/// The integer an expression folds to without looking up any name (`3`, `-1`, `2*2`), if any.
pub(crate) fn lit_int(e: &Expr) -> Option<i64> {
    let mut closed = true;
    e.for_each_ident(&mut |_, _| closed = false);
    if !closed || contains_float(e) {
        return None;
    }
    e.eval_int(&|_| None).ok()
}

/// True if the expression contains a float literal anywhere.
pub(crate) fn contains_float(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Float(_) => true,
        ExprKind::Int(_) | ExprKind::Ident(_) => false,
        ExprKind::Unary(_, a) => contains_float(a),
        ExprKind::Binary(_, a, b) => contains_float(a) || contains_float(b),
        ExprKind::Call(_, args) => args.iter().any(contains_float),
    }
}

/// Whether two tile dims are equal: `Some` when decidable now, `None` while symbolic.
pub(crate) fn dim_eq(a: &Expr, b: &Expr) -> Option<bool> {
    match (lit_int(a), lit_int(b)) {
        (Some(x), Some(y)) => Some(x == y),
        _ if a == b => Some(true), // structural (spans never compare unequal)
        _ => None,
    }
}

/// Whether two element types are equal: `Some` when decidable now, `None` while symbolic.
pub(crate) fn elem_eq(a: &ElemType, b: &ElemType) -> Option<bool> {
    match (a, b) {
        (ElemType::Known(x), ElemType::Known(y)) => Some(x == y),
        (ElemType::Named(x, _), ElemType::Named(y, _)) if x == y => Some(true),
        _ => None,
    }
}

/// Combines decidable facts: false if any is false, true if all are true, else unknown.
pub(crate) fn all_of(facts: impl IntoIterator<Item = Option<bool>>) -> Option<bool> {
    let mut res = Some(true);
    for f in facts {
        match f {
            Some(false) => return Some(false),
            None => res = None,
            Some(true) => {}
        }
    }
    res
}

/// Whether two shapes (dim lists) are equal, ignoring element types.
pub(crate) fn dims_eq(a: &[Expr], b: &[Expr]) -> Option<bool> {
    if a.len() != b.len() {
        return Some(false);
    }
    all_of(a.iter().zip(b).map(|(x, y)| dim_eq(x, y)))
}

/// Whether two types have the same shape (scalar vs tile, rank, dims), ignoring element types.
pub(crate) fn shape_eq(a: &Type, b: &Type) -> Option<bool> {
    match (a, b) {
        (Type::Scalar(_), Type::Scalar(_)) => Some(true),
        (Type::Tile(x, _), Type::Tile(y, _)) | (Type::Smem(x, _), Type::Smem(y, _)) => {
            dims_eq(x, y)
        }
        (Type::Mbar(x), Type::Mbar(y)) => dim_eq(x, y),
        _ => Some(false),
    }
}

/// Whether two types are equal: `Some` when decidable now, `None` while symbolic.
pub(crate) fn ty_eq(a: &Type, b: &Type) -> Option<bool> {
    all_of([shape_eq(a, b), elem_eq(a.elem(), b.elem())])
}

/// The dims of a type (empty for a scalar).
pub(crate) fn dims_of(t: &Type) -> &[Expr] {
    match t {
        Type::Scalar(_) | Type::Mbar(_) => &[],
        Type::Tile(d, _) | Type::Smem(d, _) => d,
    }
}

/// Whether a known dtype satisfies `pred`; `None` while the element type is symbolic.
pub(crate) fn dtype_is(t: &Type, pred: impl Fn(Dtype) -> bool) -> Option<bool> {
    t.dtype().map(pred)
}

/// A list of names for notes: `a, b, c`.
pub(crate) fn list<S: AsRef<str>>(items: &[S]) -> String {
    items
        .iter()
        .map(|s| s.as_ref())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A span covering a list of expressions (or the default span for an empty list).
pub(crate) fn list_span(es: &[Expr]) -> Span {
    es.iter()
        .map(|e| e.span)
        .reduce(|a, b| a.to(b))
        .unwrap_or_default()
}
