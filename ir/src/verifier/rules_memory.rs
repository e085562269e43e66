//! Type rules of memory ops (`load`, `store`, `atomic_add`): the tensor reference names a tensor
//! param of the right access, one offset per tensor dim (i32/i64 scalars or constants), the data
//! tile matches the tensor's dtype and rank, the mask is i1 of the data's shape, and a masked
//! `load` says what masked-off elements read (`other`, a literal). Semaphores (`sem_wait`,
//! `sem_signal`): the same reference rules on one i32 element of an `inout` tensor, and the
//! count a wait expects is an i32 scalar.

use super::body::Body;
use super::body::{check_literal, opd, res};
use super::common::{dims_of, dtype_is, elem_eq, err, err_note, list, shape_eq, Errs};
use crate::dtype::Dtype;
use crate::module::{Access, Offset, OpData, Param, ParamKind};
use crate::ops::{Attr, Opcode};
use crate::types::Type;

/// Memory ops: checked against every declaration of the tensor name (params with exclusive `if`
/// conditions may share a name); errors are reported only if no declaration fits.
pub(crate) fn memory(b: &mut Body, d: &OpData) {
    let Some(tr) = &d.tensor else { return };
    let variants: Vec<&Param> = b.k.params.iter().filter(|p| p.name == tr.param).collect();
    if variants.len() <= 1 {
        memory_against(b, d, variants.first().copied());
        return;
    }
    let saved = std::mem::take(b.errs);
    let mut first: Option<Errs> = None;
    for p in variants {
        memory_against(b, d, Some(p));
        let found = std::mem::take(b.errs);
        if found.is_empty() {
            first = None;
            break;
        }
        first.get_or_insert(found);
    }
    *b.errs = saved;
    b.errs.extend(first.unwrap_or_default());
}

/// `sem_wait` and `sem_signal`: the reference rules of [`memory`] (one offset per dim, a tensor
/// the op may write), on one element of an i32 tensor that the kernel both reads and writes
/// (`inout`), and for a wait an i32 scalar count.
pub(crate) fn semaphore(b: &mut Body, d: &OpData) {
    memory(b, d);
    let name = d.opcode.name();
    let Some(tr) = &d.tensor else { return };
    let decl = b.k.params.iter().find(|p| p.name == tr.param);
    if let Some(ParamKind::Tensor(acc, tt)) = decl.map(|p| &p.kind) {
        if *acc != Access::InOut {
            err_note(
                b.errs,
                tr.span,
                format!(
                    "`{name}` reads and writes `{}`, which is not an `inout` param",
                    tr.param
                ),
                "declare the counters `inout`: a wait reads what other programs' signals wrote",
            );
        }
        if elem_eq(&tt.elem, &crate::types::ElemType::Known(Dtype::I32)) == Some(false) {
            err(
                b.errs,
                tr.span,
                format!(
                    "`{name}` counts in an i32 element, but `{}` holds {}",
                    tr.param, tt.elem
                ),
            );
        }
    }
    if d.opcode == Opcode::SemWait {
        if let Some(t) = opd(b, d, 0) {
            if !t.is_scalar() || dtype_is(t, |x| x == Dtype::I32) == Some(false) {
                err(
                    b.errs,
                    d.span,
                    format!("the count `sem_wait` expects must be an i32 scalar, found {t}"),
                );
            }
        }
    }
}

fn memory_against(b: &mut Body, d: &OpData, decl: Option<&Param>) {
    let name = d.opcode.name();
    let Some(tr) = &d.tensor else { return };
    let tt = match decl.map(|p| &p.kind) {
        None => {
            let ts: Vec<&str> =
                b.k.params
                    .iter()
                    .filter(|p| matches!(p.kind, ParamKind::Tensor(..)))
                    .map(|p| p.name.as_str())
                    .collect();
            err_note(
                b.errs,
                tr.span,
                format!("unknown tensor `{}`", tr.param),
                format!("tensor params of `@{}`: {}", b.k.name, list(&ts)),
            );
            return;
        }
        Some(ParamKind::Scalar(_)) => {
            err_note(
                b.errs,
                tr.span,
                format!("`{}` is a scalar param, not a tensor", tr.param),
                format!("use `param {}`", tr.param),
            );
            return;
        }
        Some(ParamKind::Tensor(acc, tt)) => {
            if !matches!(d.opcode, Opcode::Load | Opcode::AsyncCopy) && *acc == Access::In {
                err_note(
                    b.errs,
                    tr.span,
                    format!("`{name}` writes `{}`, which is an `in` param", tr.param),
                    "declare the param `out` or `inout` to write it",
                );
            }
            tt
        }
    };
    let rank = tt.dims.len();
    if tr.offsets.len() != rank {
        err(
            b.errs,
            tr.span,
            format!(
                "`{}` has rank {rank} but `{name}` gives {} offset(s)",
                tr.param,
                tr.offsets.len()
            ),
        );
    }
    for (i, o) in tr.offsets.iter().enumerate() {
        if let Offset::Value(v) = o {
            let Some(t) = b.vty(*v) else { continue };
            let ok = t.is_scalar()
                && dtype_is(t, |x| matches!(x, Dtype::I32 | Dtype::I64)) != Some(false);
            if !ok {
                err(
                    b.errs,
                    tr.span,
                    format!(
                        "offset {i} into `{}` must be an i32 or i64 scalar, found {t}",
                        tr.param
                    ),
                );
            }
        }
    }
    // The tile the access moves: a load's result, an async copy's stage, a store's value.
    let stage = match d.opcode {
        Opcode::AsyncCopy => opd(b, d, 0).and_then(|t| t.stage()).map(|(_, t)| t),
        _ => None,
    };
    let data = match d.opcode {
        Opcode::Load => res(b, d, 0),
        Opcode::AsyncCopy => stage.as_ref(),
        _ => opd(b, d, 0),
    };
    let what = match d.opcode {
        Opcode::Load => "result",
        Opcode::AsyncCopy => "stage",
        _ => "value",
    };
    if let Some(t) = data {
        if dims_of(t).len() > rank {
            err(
                b.errs,
                d.span,
                format!(
                    "the {what} of `{name}` is {t}, of higher rank than `{}` (rank {rank})",
                    tr.param
                ),
            );
        }
        if elem_eq(&tt.elem, t.elem()) == Some(false) {
            err(
                b.errs,
                d.span,
                format!(
                    "the {what} of `{name}` is {t} but `{}` holds {} (use `cast`)",
                    tr.param, tt.elem
                ),
            );
        }
    }
    if let Some(Attr::Value(mv)) = d.attr("mask") {
        if let (Some(m), Some(t)) = (b.vty(*mv), data) {
            let shape_ok = m.is_scalar() || shape_eq(m, t) != Some(false);
            if !shape_ok || dtype_is(m, |x| x == Dtype::I1) == Some(false) {
                err(b.errs, d.span, format!("the mask of `{name}` must be i1 of the {what}'s shape ({t}) or a scalar i1, found {m}"));
            }
        }
        if matches!(d.opcode, Opcode::Load | Opcode::AsyncCopy) && d.attr("other").is_none() {
            err_note(
                b.errs,
                d.span,
                "`load` with a `mask` needs `other`",
                "`other` gives the value of masked-off elements, e.g. `other 0.0`",
            );
        }
    }
    if let (Some(Attr::Expr(e)), Some(t)) = (d.attr("other"), data) {
        check_literal(b.errs, e, &Type::Scalar(t.elem().clone()), "`other`");
    }
}
