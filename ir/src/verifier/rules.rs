//! Type rules, part 1: the one exhaustive dispatch over [`Opcode`], and the rules of source, shape,
//! unary and binary ops (memory ops: `rules_memory`). Each rule checks only what is decidable now: while a dim or an
//! element type is symbolic, the facts that depend on it are skipped.

use super::body::{binary_operands, check_literal, expect_ty, opd, res, Body};
use super::common::{dim_eq, dims_of, dtype_is, elem_eq, err, err_note, list, list_span, lit_int};
use super::rules_compute as rc;
use crate::dtype::Dtype;
use crate::module::{OpData, ParamKind};
use crate::ops::{Attr, ElemTypes, Elementwise, Opcode};
use crate::types::Type;

/// Checks the type rule of one op (its structure was checked by the body walk).
pub(crate) fn check_op(b: &mut Body, _op: crate::entities::Op, d: &OpData) {
    super::rules_sched::no_resources(b, d);
    match d.opcode {
        Opcode::ProgramId | Opcode::NumPrograms => grid_query(b, d),
        Opcode::Dim => dim(b, d),
        Opcode::Param => param(b, d),
        Opcode::Const => constant(b, d),
        Opcode::Iota => iota(b, d),
        Opcode::Splat => splat(b, d),
        Opcode::Broadcast => broadcast(b, d),
        Opcode::Reshape => reshape(b, d),
        Opcode::Transpose => transpose(b, d),
        Opcode::Load | Opcode::Store | Opcode::AtomicAdd => super::rules_memory::memory(b, d),
        Opcode::SemWait | Opcode::SemSignal => super::rules_memory::semaphore(b, d),
        // The dtypes a unary or binary op accepts come from its table row.
        crate::ops::unary_ops!() | crate::ops::binary_ops!() => elementwise(b, d),
        Opcode::Cast => rc::cast(b, d),
        Opcode::Bitcast => rc::bitcast(b, d),
        Opcode::Select => rc::select(b, d),
        Opcode::Cmp => rc::cmp(b, d),
        Opcode::Reduce => rc::reduce(b, d),
        Opcode::Dot => rc::dot(b, d),
        Opcode::Nf4 => rc::nf4(b, d),
        Opcode::Fma => rc::fma(b, d),
        Opcode::Print => rc::print(b, d),
        crate::ops::schedule_ops!() => super::rules_sched::check(b, d),
        Opcode::For => rc::for_(b, d),
        Opcode::If => rc::if_(b, d),
        Opcode::StaticIf => rc::static_if(b, d),
        // Its operands are checked against the enclosing op by that op's rule.
        Opcode::Yield => {}
    }
}

/// A unary or binary op, with the operand dtypes of its table row (`elem=Unary(..)`,
/// `elem=Binary(..)`).
fn elementwise(b: &mut Body, d: &OpData) {
    match d.opcode.elementwise() {
        Some(Elementwise::Unary(types)) => unary(b, d, types),
        Some(Elementwise::Binary(types)) => binary(b, d, types),
        // Other elementwise ops have their own rules (`rules_compute`).
        Some(Elementwise::Other) | None => {}
    }
}

fn i32s() -> Type {
    Type::scalar(Dtype::I32)
}

fn grid_query(b: &mut Body, d: &OpData) {
    let name = d.opcode.name();
    if let Some(r) = res(b, d, 0) {
        expect_ty(b.errs, d, &format!("the result of `{name}`"), &i32s(), r);
    }
    if let Some(Attr::Expr(e)) = &d.lead {
        if let Some(v) = lit_int(e) {
            if !(0..=2).contains(&v) {
                err(
                    b.errs,
                    e.span,
                    format!("grid axis of `{name}` must be 0, 1 or 2, found {v}"),
                );
            }
        }
    }
}

fn dim(b: &mut Body, d: &OpData) {
    if let Some(Attr::Name(n, sp)) = &d.lead {
        if !b.dims.contains(n) {
            if b.m.const_decl(n).is_some() {
                err_note(
                    b.errs,
                    *sp,
                    format!("`{n}` is a constant, not a runtime dim"),
                    format!("use `const {n}` for its value"),
                );
            } else if b.k.param(n).is_some() {
                err_note(
                    b.errs,
                    *sp,
                    format!("`{n}` is a param, not a dim"),
                    format!("use `param {n}` for a scalar param"),
                );
            } else {
                let note = if b.dims.is_empty() {
                    format!("kernel `@{}` has no symbolic dims", b.k.name)
                } else {
                    format!("dims of `@{}`: {}", b.k.name, list(b.dims))
                };
                err_note(b.errs, *sp, format!("unknown dim `{n}`"), note);
            }
        }
    }
    if let Some(r) = res(b, d, 0) {
        expect_ty(b.errs, d, "the result of `dim`", &i32s(), r);
    }
}

fn param(b: &mut Body, d: &OpData) {
    let Some(Attr::Name(n, sp)) = &d.lead else {
        return;
    };
    // Several conditional declarations may share the name: prefer a scalar one.
    let decl =
        b.k.params
            .iter()
            .filter(|p| p.name == *n)
            .min_by_key(|p| matches!(p.kind, ParamKind::Tensor(..)));
    match decl.map(|p| &p.kind) {
        None => {
            let scalars: Vec<&str> =
                b.k.params
                    .iter()
                    .filter(|p| matches!(p.kind, ParamKind::Scalar(_)))
                    .map(|p| p.name.as_str())
                    .collect();
            err_note(
                b.errs,
                *sp,
                format!("unknown param `{n}`"),
                format!("scalar params of `@{}`: {}", b.k.name, list(&scalars)),
            );
        }
        Some(ParamKind::Tensor(..)) => err_note(
            b.errs,
            *sp,
            format!("`{n}` is a tensor param, not a scalar"),
            "read a tensor with `load`",
        ),
        Some(ParamKind::Scalar(e)) => {
            if let Some(r) = res(b, d, 0) {
                expect_ty(
                    b.errs,
                    d,
                    &format!("the result of `param {n}`"),
                    &Type::Scalar(e.clone()),
                    r,
                );
            }
        }
    }
}

fn constant(b: &mut Body, d: &OpData) {
    if let (Some(Attr::Expr(e)), Some(r)) = (&d.lead, res(b, d, 0)) {
        check_literal(b.errs, e, r, "the value of `const`");
    }
}

fn iota(b: &mut Body, d: &OpData) {
    let Some(r) = res(b, d, 0) else { return };
    if r.is_scalar() {
        err(b.errs, d.span, format!("`iota` gives a tile, found {r}"));
        return;
    }
    if dtype_is(r, Dtype::is_int) == Some(false) {
        err(
            b.errs,
            d.span,
            format!("`iota` gives an integer tile (i32, i64 or u8), found {r}"),
        );
    }
    if let Some(Attr::Expr(e)) = d.attr("axis") {
        let rank = dims_of(r).len();
        if let Some(v) = lit_int(e) {
            if v < 0 || v as usize >= rank {
                err(
                    b.errs,
                    e.span,
                    format!("axis {v} of `iota` is out of range for {r} (rank {rank})"),
                );
            }
        }
    }
}

fn splat(b: &mut Body, d: &OpData) {
    let (Some(x), Some(r)) = (opd(b, d, 0), res(b, d, 0)) else {
        return;
    };
    if !x.is_scalar() {
        err(
            b.errs,
            d.span,
            format!(
                "`splat` needs a scalar operand, found {x} (use `broadcast` to stretch a tile)"
            ),
        );
    }
    if r.is_scalar() {
        err(b.errs, d.span, format!("`splat` gives a tile, found {r}"));
    }
    if elem_eq(x.elem(), r.elem()) == Some(false) {
        err(
            b.errs,
            d.span,
            format!("`splat` keeps the dtype: {x} → {r} (use `cast`)"),
        );
    }
}

fn broadcast(b: &mut Body, d: &OpData) {
    let (Some(x), Some(r)) = (opd(b, d, 0), res(b, d, 0)) else {
        return;
    };
    let (Type::Tile(xd, _), Type::Tile(rd, _)) = (x, r) else {
        let hint = if x.is_scalar() {
            " (use `splat` for a scalar)"
        } else {
            ""
        };
        err(
            b.errs,
            d.span,
            format!("`broadcast` maps a tile to a tile, found {x} → {r}{hint}"),
        );
        return;
    };
    if xd.len() != rd.len() {
        err(
            b.errs,
            d.span,
            format!("`broadcast` keeps the rank: {x} → {r} (use `reshape` first)"),
        );
    } else {
        for (i, (a, c)) in xd.iter().zip(rd).enumerate() {
            if dim_eq(a, c) == Some(false) && lit_int(a) != Some(1) {
                err(b.errs, d.span, format!("`broadcast` cannot stretch dim {i} of {x} from {a} to {c}: only size-1 dims stretch"));
            }
        }
    }
    if elem_eq(x.elem(), r.elem()) == Some(false) {
        err(
            b.errs,
            d.span,
            format!("`broadcast` keeps the dtype: {x} → {r} (use `cast`)"),
        );
    }
}

/// Number of elements of a concrete shape (saturating).
fn count(shape: &[usize]) -> u128 {
    shape
        .iter()
        .fold(1u128, |a, &n| a.saturating_mul(n as u128))
}

fn reshape(b: &mut Body, d: &OpData) {
    let (Some(x), Some(r)) = (opd(b, d, 0), res(b, d, 0)) else {
        return;
    };
    if let (Some(xs), Some(rs)) = (x.shape(), r.shape()) {
        if count(&xs) != count(&rs) {
            err(
                b.errs,
                d.span,
                format!(
                    "`reshape` keeps the element count: {x} has {} elements but {r} has {}",
                    count(&xs),
                    count(&rs)
                ),
            );
        }
    }
    if elem_eq(x.elem(), r.elem()) == Some(false) {
        err(
            b.errs,
            d.span,
            format!("`reshape` keeps the dtype: {x} → {r} (use `cast`)"),
        );
    }
}

fn transpose(b: &mut Body, d: &OpData) {
    let (Some(x), Some(r)) = (opd(b, d, 0), res(b, d, 0)) else {
        return;
    };
    let Type::Tile(xd, xe) = x else {
        err(
            b.errs,
            d.span,
            format!("`transpose` needs a tile operand, found {x}"),
        );
        return;
    };
    let rank = xd.len();
    let perm: Vec<usize> = match d.attr("perm") {
        Some(Attr::List(es)) => {
            let Some(p) = es.iter().map(lit_int).collect::<Option<Vec<i64>>>() else {
                return;
            };
            let mut sorted = p.clone();
            sorted.sort_unstable();
            if sorted != (0..rank as i64).collect::<Vec<_>>() {
                let shown: Vec<String> = p.iter().map(|v| v.to_string()).collect();
                let span = if es.is_empty() { d.span } else { list_span(es) };
                err(
                    b.errs,
                    span,
                    format!(
                        "`perm [{}]` is not a permutation of 0..{rank} for {x}",
                        list(&shown)
                    ),
                );
                return;
            }
            p.into_iter().map(|v| v as usize).collect()
        }
        _ => (0..rank).rev().collect(),
    };
    let expected = Type::Tile(
        perm.iter().filter_map(|&i| xd.get(i).cloned()).collect(),
        xe.clone(),
    );
    expect_ty(b.errs, d, &format!("`transpose` of {x}"), &expected, r);
}

fn unary(b: &mut Body, d: &OpData, class: ElemTypes) {
    let name = d.opcode.name();
    let Some(x) = opd(b, d, 0) else { return };
    if dtype_is(x, |t| class.accepts(t)) == Some(false) {
        err(
            b.errs,
            d.span,
            format!("`{name}` needs a {} operand, found {x}", class.desc()),
        );
    }
    if let Some(r) = res(b, d, 0) {
        expect_ty(b.errs, d, &format!("the result of `{name}` on {x}"), x, r);
    }
}

fn binary(b: &mut Body, d: &OpData, class: ElemTypes) {
    let name = d.opcode.name();
    let Some(t) = binary_operands(b, d) else {
        return;
    };
    if dtype_is(t, |x| class.accepts(x)) == Some(false) {
        err(
            b.errs,
            d.span,
            format!("`{name}` needs {} operands, found {t}", class.desc()),
        );
    }
    if let Some(r) = res(b, d, 0) {
        expect_ty(b.errs, d, &format!("the result of `{name}`"), t, r);
    }
}
