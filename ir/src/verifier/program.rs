//! The entry program: params, temps, and launches (the kernel exists; each kernel param is
//! bound exactly once to a buffer of a compatible kind, dtype, rank and access).

use super::common::{elem_eq, err, err_note, list, lit_int, Errs};
use super::names::{check_elem, check_params, param_dims, unconditional, Scope};
use crate::module::{Access, Module, Param, ParamKind, Program, TempDecl};
use crate::span::Span;

/// What a launch argument names.
enum Buffer<'a> {
    Param(&'a Param),
    Temp(&'a TempDecl),
}

/// Program params and temps, then every launch: the kernel exists and each of its params is
/// bound once to a compatible buffer.
pub(crate) fn check_program(m: &Module, p: &Program, errs: &mut Errs) {
    let dims = param_dims(m, &p.params);
    check_params(m, &p.params, &dims, "the program", errs);
    for (i, t) in p.temps.iter().enumerate() {
        if p.params.iter().any(|q| q.name == t.name)
            || p.temps[..i].iter().any(|q| q.name == t.name)
        {
            err(
                errs,
                t.span,
                format!(
                    "temp `{}` has the name of another program param or temp",
                    t.name
                ),
            );
        }
        if m.const_decl(&t.name).is_some() {
            err(
                errs,
                t.span,
                format!("temp `{}` has the same name as a constant", t.name),
            );
        }
        check_elem(m, &t.ty.elem, errs);
        if t.ty.dims.is_empty() {
            err(errs, t.span, format!("temp `{}` has no dims", t.name));
        }
        let s = Scope::new(m, &dims, "a temp dim");
        t.ty.dims.iter().for_each(|d| s.check(d, errs));
        if let Some(st) = &t.ty.strides {
            st.iter().for_each(|d| s.check(d, errs));
        }
    }
    for l in &p.launches {
        let Some((_, k)) = m.kernel(&l.kernel) else {
            let names: Vec<String> = m.kernels.values().map(|k| format!("@{}", k.name)).collect();
            err_note(
                errs,
                l.span,
                format!("launch of unknown kernel `@{}`", l.kernel),
                format!("kernels in this module: {}", list(&names)),
            );
            continue;
        };
        for (i, b) in l.args.iter().enumerate() {
            if l.args[..i].iter().any(|a| a.param == b.param) {
                err(
                    errs,
                    b.span,
                    format!(
                        "param `{}` of `@{}` is bound more than once",
                        b.param, k.name
                    ),
                );
                continue;
            }
            let variants: Vec<&Param> = k.params.iter().filter(|q| q.name == b.param).collect();
            if variants.is_empty() {
                let names: Vec<&str> = k.params.iter().map(|q| q.name.as_str()).collect();
                err_note(
                    errs,
                    b.span,
                    format!("kernel `@{}` has no param `{}`", k.name, b.param),
                    format!("its params are: {}", list(&names)),
                );
                continue;
            }
            let buf = match (
                p.params.iter().find(|q| q.name == b.arg),
                p.temps.iter().find(|t| t.name == b.arg),
            ) {
                (Some(q), _) => Buffer::Param(q),
                (None, Some(t)) => Buffer::Temp(t),
                (None, None) => {
                    err_note(
                        errs,
                        b.span,
                        format!("unknown buffer `{}` bound to `{}`", b.arg, b.param),
                        "expected a program param or a temp",
                    );
                    continue;
                }
            };
            // With several conditional declarations, one compatible declaration suffices.
            let mut first = None;
            for kp in variants {
                let mut found = Vec::new();
                check_binding(kp, &k.name, &b.arg, &buf, b.span, &mut found);
                if found.is_empty() {
                    first = None;
                    break;
                }
                first.get_or_insert(found);
            }
            errs.extend(first.unwrap_or_default());
        }
        for kp in &k.params {
            if unconditional(kp) && !l.args.iter().any(|a| a.param == kp.name) {
                err(
                    errs,
                    l.span,
                    format!(
                        "launch of `@{}` does not bind its param `{}`",
                        k.name, kp.name
                    ),
                );
            }
        }
    }
}

/// Kind, dtype, rank and access compatibility of one binding.
fn check_binding(kp: &Param, kname: &str, arg: &str, buf: &Buffer, span: Span, errs: &mut Errs) {
    let (pk, what) = match buf {
        Buffer::Param(q) => (q.kind.clone(), "program param"),
        Buffer::Temp(t) => (ParamKind::Tensor(Access::InOut, t.ty.clone()), "temp"),
    };
    match (&kp.kind, &pk) {
        (ParamKind::Tensor(ka, kt), ParamKind::Tensor(pa, pt)) => {
            let dims_differ =
                kt.dims.len() != pt.dims.len()
                    || kt.dims.iter().zip(&pt.dims).any(
                        |(a, b)| matches!((lit_int(a), lit_int(b)), (Some(x), Some(y)) if x != y),
                    );
            if elem_eq(&kt.elem, &pt.elem) == Some(false) || dims_differ {
                err(
                    errs,
                    span,
                    format!(
                        "param `{}` of `@{kname}` is {kt} but {what} `{arg}` is {pt}",
                        kp.name
                    ),
                );
            }
            if ka.writes() && !pa.writes() {
                err(
                    errs,
                    span,
                    format!(
                        "param `{}` of `@{kname}` is `{}` but {what} `{arg}` is `in` (read-only)",
                        kp.name,
                        ka.name()
                    ),
                );
            }
        }
        (ParamKind::Scalar(ke), ParamKind::Scalar(pe)) => {
            if elem_eq(ke, pe) == Some(false) {
                err(
                    errs,
                    span,
                    format!(
                        "scalar param `{}` of `@{kname}` is {ke} but {what} `{arg}` is {pe}",
                        kp.name
                    ),
                );
            }
        }
        (ParamKind::Tensor(..), ParamKind::Scalar(_)) => err(
            errs,
            span,
            format!(
                "param `{}` of `@{kname}` is a tensor but {what} `{arg}` is a scalar",
                kp.name
            ),
        ),
        (ParamKind::Scalar(_), ParamKind::Tensor(..)) => err(
            errs,
            span,
            format!(
                "param `{}` of `@{kname}` is a scalar but {what} `{arg}` is a tensor",
                kp.name
            ),
        ),
    }
}
