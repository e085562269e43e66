//! Type rules, part 2: compute ops (cast, bitcast, select, cmp, fma, reduce, dot, nf4), `print`,
//! and structured control flow (`for`, `if`, `static_if`, with the values their regions `yield`).

use super::body::Body;
use super::body::{binary_operands, expect_ty, opd, res};
use super::common::{dim_eq, dims_of, dtype_is, elem_eq, err, err_note, lit_int, shape_eq, ty_eq};
use crate::dtype::Dtype;
use crate::entities::Block;
use crate::expr::Expr;
use crate::module::OpData;
use crate::ops::{Attr, CmpPred, Opcode, ReduceKind};
use crate::types::{ElemType, Type};

/// `eq, ne, …, ge` or `a, b or c` from a list of names, for messages.
fn one_of(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => one.to_string(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// `t`'s shape with a known element type.
fn with_dtype(t: &Type, dt: Dtype) -> Type {
    match t {
        Type::Scalar(_) => Type::scalar(dt),
        Type::Tile(d, _) => Type::Tile(d.clone(), ElemType::Known(dt)),
        Type::Smem(d, _) => Type::Smem(d.clone(), ElemType::Known(dt)),
        Type::Mbar(n) => Type::Mbar(n.clone()),
    }
}

/// Reports a `cmp` predicate or `reduce` kind stored as a plain name: unknown (from text), or
/// known but built by code that should have stored the typed attribute.
fn named_keyword(
    b: &mut Body,
    sp: crate::span::Span,
    what: &str,
    n: &str,
    known: &[&str],
    typed: &str,
) {
    if known.contains(&n) {
        err(
            b.errs,
            sp,
            format!("internal: {what} `{n}` is stored as a name, not as `{typed}`"),
        );
    } else {
        err_note(
            b.errs,
            sp,
            format!("unknown {what} `{n}`"),
            format!("expected {}", one_of(known)),
        );
    }
}

/// `cast`: any dtypes, same shape.
pub(crate) fn cast(b: &mut Body, d: &OpData) {
    let (Some(x), Some(r)) = (opd(b, d, 0), res(b, d, 0)) else {
        return;
    };
    if shape_eq(x, r) == Some(false) {
        err(b.errs, d.span, format!("`cast` keeps the shape: {x} → {r}"));
    }
}

/// `bitcast`: same shape, and both dtypes (when known) of one bit width and not i1: f32↔i32,
/// f16↔bf16, or a dtype to itself.
pub(crate) fn bitcast(b: &mut Body, d: &OpData) {
    let (Some(x), Some(r)) = (opd(b, d, 0), res(b, d, 0)) else {
        return;
    };
    if shape_eq(x, r) == Some(false) {
        err(
            b.errs,
            d.span,
            format!("`bitcast` keeps the shape: {x} → {r}"),
        );
    }
    let (Some(from), Some(to)) = (x.dtype(), r.dtype()) else {
        return;
    };
    if from == Dtype::I1 || to == Dtype::I1 {
        err_note(
            b.errs,
            d.span,
            format!("`bitcast` does not apply to i1: {x} → {r}"),
            "use `cast` to convert booleans",
        );
    } else if from.size_bytes() != to.size_bytes() {
        err_note(
            b.errs,
            d.span,
            format!(
                "`bitcast` needs dtypes of one width: {from} has {} bits, {to} has {}",
                8 * from.size_bytes(),
                8 * to.size_bytes()
            ),
            "same-width pairs: f32↔i32, f16↔bf16; use `cast` to convert values",
        );
    }
}

/// `select c, x, y`: c is i1 (scalar or x's shape), x and y and the result share one type.
pub(crate) fn select(b: &mut Body, d: &OpData) {
    let (Some(c), Some(x), Some(y)) = (opd(b, d, 0), opd(b, d, 1), opd(b, d, 2)) else {
        return;
    };
    if dtype_is(c, |t| t == Dtype::I1) == Some(false) {
        err(
            b.errs,
            d.span,
            format!("the condition of `select` must be i1, found {c}"),
        );
    }
    if !c.is_scalar() && shape_eq(c, x) == Some(false) {
        err(b.errs, d.span, format!("the condition of `select` is {c} but the values are {x}: use a scalar or the same shape"));
    }
    if ty_eq(x, y) == Some(false) {
        err(
            b.errs,
            d.span,
            format!("`select` values differ: {x} vs {y}"),
        );
    }
    if let Some(r) = res(b, d, 0) {
        expect_ty(b.errs, d, "the result of `select`", x, r);
    }
}

/// `cmp KIND x, y`: operands as for binary ops, result i1 of their shape.
pub(crate) fn cmp(b: &mut Body, d: &OpData) {
    // The parser keeps a predicate it does not know as a name.
    if let Some(Attr::Name(n, sp)) = &d.lead {
        let known: Vec<&str> = CmpPred::ALL.iter().map(|p| p.name()).collect();
        named_keyword(b, *sp, "comparison", n, &known, "Attr::Cmp");
    }
    let Some(t) = binary_operands(b, d) else {
        return;
    };
    if let Some(r) = res(b, d, 0) {
        expect_ty(
            b.errs,
            d,
            "the result of `cmp`",
            &with_dtype(t, Dtype::I1),
            r,
        );
    }
}

/// `reduce KIND x axis A`: the axis is required and in range; the result keeps the rank with
/// that dim 1, and the dtype.
pub(crate) fn reduce(b: &mut Body, d: &OpData) {
    let kind = match &d.lead {
        Some(Attr::Reduce(k)) => Some(*k),
        // The parser keeps a kind it does not know as a name.
        Some(Attr::Name(n, sp)) => {
            let known: Vec<&str> = ReduceKind::ALL.iter().map(|k| k.name()).collect();
            named_keyword(b, *sp, "reduction", n, &known, "Attr::Reduce");
            None
        }
        _ => None,
    };
    let Some(x) = opd(b, d, 0) else { return };
    let Type::Tile(xd, xe) = x else {
        err(
            b.errs,
            d.span,
            format!("`reduce` needs a tile operand, found {x}"),
        );
        return;
    };
    if kind == Some(ReduceKind::Sum) && dtype_is(x, |t| t == Dtype::I1) == Some(true) {
        err(
            b.errs,
            d.span,
            format!("`reduce sum` does not apply to {x} (cast to an integer first)"),
        );
    }
    let axis = match d.attr("axis") {
        None => {
            err_note(
                b.errs,
                d.span,
                "`reduce` needs an `axis`",
                "write the axis to reduce, e.g. `reduce sum %x axis 1`",
            );
            return;
        }
        Some(Attr::Expr(e)) => e,
        Some(_) => return,
    };
    let Some(a) = lit_int(axis) else { return };
    if a < 0 || a as usize >= xd.len() {
        err(
            b.errs,
            axis.span,
            format!(
                "axis {a} of `reduce` is out of range for {x} (rank {})",
                xd.len()
            ),
        );
        return;
    }
    let mut dims = xd.clone();
    dims[a as usize] = Expr::int(1);
    if let Some(r) = res(b, d, 0) {
        expect_ty(
            b.errs,
            d,
            &format!("the result of `reduce` along axis {a} of {x}"),
            &Type::Tile(dims, xe.clone()),
            r,
        );
    }
}

/// `dot a, b, acc`: a [M,K] and b [K,N] of one float dtype; acc and the result f32 [M,N].
pub(crate) fn dot(b: &mut Body, d: &OpData) {
    let (Some(a), Some(bt), Some(acc)) = (opd(b, d, 0), opd(b, d, 1), opd(b, d, 2)) else {
        return;
    };
    let mut ok = true;
    for (t, which) in [(a, "a"), (bt, "b"), (acc, "acc")] {
        if dims_of(t).len() != 2 {
            err(
                b.errs,
                d.span,
                format!("`dot` operand {which} must be a 2-D tile, found {t}"),
            );
            ok = false;
        }
    }
    for (t, which) in [(a, "a"), (bt, "b")] {
        if dtype_is(t, Dtype::is_float) == Some(false) {
            err(
                b.errs,
                d.span,
                format!("`dot` operand {which} must be a float tile, found {t}"),
            );
        }
    }
    if super::common::elem_eq(a.elem(), bt.elem()) == Some(false) {
        err(
            b.errs,
            d.span,
            format!("`dot` operands a and b differ in dtype: {a} vs {bt} (use `cast`)"),
        );
    }
    if !ok {
        return;
    }
    let (ad, bd) = (dims_of(a), dims_of(bt));
    if dim_eq(&ad[1], &bd[0]) == Some(false) {
        err(
            b.errs,
            d.span,
            format!(
                "`dot` inner dims differ: a is {a} (K = {}) but b is {bt} (K = {})",
                ad[1], bd[0]
            ),
        );
    }
    let mn = Type::Tile(
        vec![ad[0].clone(), bd[1].clone()],
        ElemType::Known(Dtype::F32),
    );
    expect_ty(
        b.errs,
        d,
        &format!("the accumulator of `dot` on {a} and {bt}"),
        &mn,
        acc,
    );
    if let Some(r) = res(b, d, 0) {
        expect_ty(b.errs, d, "the result of `dot`", &mn, r);
    }
}

/// `nf4 x`: u8 codes to f32 values of the same shape.
pub(crate) fn nf4(b: &mut Body, d: &OpData) {
    let Some(x) = opd(b, d, 0) else { return };
    if dtype_is(x, |t| t == Dtype::U8) == Some(false) {
        err(b.errs, d.span, format!("`nf4` needs u8 codes, found {x}"));
    }
    if let Some(r) = res(b, d, 0) {
        expect_ty(
            b.errs,
            d,
            "the result of `nf4`",
            &with_dtype(x, Dtype::F32),
            r,
        );
    }
}

/// `fma a, b, c`: three float operands of one dtype, each a scalar or a tile of one shape (a
/// scalar broadcasts); the result has that dtype and the tiles' shape (a scalar when all are).
pub(crate) fn fma(b: &mut Body, d: &OpData) {
    let (Some(x), Some(y), Some(z)) = (opd(b, d, 0), opd(b, d, 1), opd(b, d, 2)) else {
        return;
    };
    let combined = [x, y, z].into_iter().find(|t| !t.is_scalar()).unwrap_or(x);
    for (i, t) in [x, y, z].into_iter().enumerate() {
        if dtype_is(t, Dtype::is_float) == Some(false) {
            err(
                b.errs,
                d.span,
                format!("`fma` needs float operands, found {t} (operand {i})"),
            );
        } else if elem_eq(t.elem(), combined.elem()) == Some(false) {
            err(
                b.errs,
                d.span,
                format!("`fma` operands differ: {t} vs {combined} (use `cast`)"),
            );
        } else if !t.is_scalar() && ty_eq(t, combined) == Some(false) {
            err(
                b.errs,
                d.span,
                format!("`fma` operands differ: {t} vs {combined} (use `broadcast`)"),
            );
        }
    }
    if let Some(r) = res(b, d, 0) {
        expect_ty(b.errs, d, "the result of `fma`", combined, r);
    }
}

/// The longest prefix `print` takes (the PTX backend keeps it in a format string).
pub const MAX_PRINT_PREFIX: usize = 200;

/// `print "PREFIX" %v…`: a prefix of printable ASCII (at most [`MAX_PRINT_PREFIX`] characters)
/// and any number of scalar or tile values (resources are rejected for every op).
pub(crate) fn print(b: &mut Body, d: &OpData) {
    if let Some(Attr::Str(s)) = &d.lead {
        if let Some(c) = s.chars().find(|c| !(' '..='~').contains(c)) {
            err(
                b.errs,
                d.span,
                format!(
                    "the prefix of `print` holds `{}`: it must be printable ASCII",
                    c.escape_default()
                ),
            );
        }
        if s.len() > MAX_PRINT_PREFIX {
            err(
                b.errs,
                d.span,
                format!(
                    "the prefix of `print` has {} characters; at most {MAX_PRINT_PREFIX} are allowed",
                    s.len()
                ),
            );
        }
    }
}

/// Checks the final `yield` of region `r` of `d` against `expected` (one type per value).
fn check_yield(b: &mut Body, d: &OpData, r: Block, expected: &[Option<&Type>], which: &str) {
    let dfg = &b.k.dfg;
    let name = d.opcode.name();
    let Some(y) = dfg
        .blocks
        .get(r)
        .and_then(|bd| bd.ops.last())
        .and_then(|&l| dfg.ops.get(l))
    else {
        return;
    };
    if y.opcode != Opcode::Yield {
        return; // reported by the body walk
    }
    if y.operands.len() != expected.len() {
        let types: Vec<String> = expected
            .iter()
            .map(|t| t.map_or("?".into(), |t| t.to_string()))
            .collect();
        let mut note = format!("expected types: ({})", super::common::list(&types));
        if which.contains("else") && y.operands.is_empty() {
            note += "; an op with results needs an `else` region that yields them";
        }
        err_note(
            b.errs,
            y.span,
            format!(
                "`yield` in {which} of `{name}` gives {} value(s); expected {}",
                y.operands.len(),
                expected.len()
            ),
            note,
        );
        return;
    }
    for (i, (&v, e)) in y.operands.iter().zip(expected).enumerate() {
        if let (Some(t), Some(e)) = (b.vty(v), e) {
            if ty_eq(t, e) == Some(false) {
                err(
                    b.errs,
                    y.span,
                    format!("value {i} yielded by {which} of `{name}` is {t}, expected {e}"),
                );
            }
        }
    }
}

/// Regions of `if`/`static_if` take no block arguments and yield the op's result types.
fn check_branches(b: &mut Body, d: &OpData) {
    let expected: Vec<Option<&Type>> = (0..d.results.len()).map(|i| res(b, d, i)).collect();
    for (&r, which) in d.regions.iter().zip(["the then region", "the else region"]) {
        if b.k.dfg.blocks.get(r).is_some_and(|bd| !bd.args.is_empty()) {
            err(
                b.errs,
                d.span,
                format!(
                    "{which} of `{}` must take no block arguments",
                    d.opcode.name()
                ),
            );
        }
        check_yield(b, d, r, &expected, which);
    }
}

/// `for iv = lo to hi step s iter(...)`: i32 scalar bounds; block args [iv, carried...] with the
/// init types; results and yielded values of the init types.
pub(crate) fn for_(b: &mut Body, d: &OpData) {
    if d.operands.len() < 3 {
        err(
            b.errs,
            d.span,
            format!(
                "`for` needs lo, hi and step operands, found {} operand(s)",
                d.operands.len()
            ),
        );
        return;
    }
    let i32s = Type::scalar(Dtype::I32);
    for (i, which) in ["lower bound", "upper bound", "step"]
        .into_iter()
        .enumerate()
    {
        if let Some(t) = opd(b, d, i) {
            expect_ty(b.errs, d, &format!("the {which} of `for`"), &i32s, t);
        }
    }
    let inits: Vec<Option<&Type>> = (3..d.operands.len()).map(|i| opd(b, d, i)).collect();
    if d.results.len() != inits.len() {
        err(
            b.errs,
            d.span,
            format!(
                "`for` has {} loop-carried value(s) but {} result(s)",
                inits.len(),
                d.results.len()
            ),
        );
    } else {
        for (i, init) in inits.iter().enumerate() {
            if let (Some(init), Some(r)) = (init, res(b, d, i)) {
                if ty_eq(init, r) == Some(false) {
                    err(
                        b.errs,
                        d.span,
                        format!("result {i} of `for` is {r} but its initial value is {init}"),
                    );
                }
            }
        }
    }
    let Some(&body) = d.regions.first() else {
        return;
    };
    if let Some(bd) = b.k.dfg.blocks.get(body) {
        if bd.args.len() != 1 + inits.len() {
            err(
                b.errs,
                d.span,
                format!(
                    "the body of `for` has {} block argument(s); expected {} (the induction variable and one per carried value)",
                    bd.args.len(),
                    1 + inits.len()
                ),
            );
        } else {
            if let Some(t) = bd.args.first().and_then(|&v| b.vty(v)) {
                expect_ty(b.errs, d, "the induction variable of `for`", &i32s, t);
            }
            for (i, init) in inits.iter().enumerate() {
                if let (Some(init), Some(t)) = (init, bd.args.get(i + 1).and_then(|&v| b.vty(v))) {
                    if ty_eq(init, t) == Some(false) {
                        err(b.errs, d.span, format!("carried value {i} of `for` is {t} in the body but starts as {init}"));
                    }
                }
            }
        }
    }
    check_yield(b, d, body, &inits, "the body");
}

/// `if %c`: one scalar i1 operand, two regions yielding the result types.
pub(crate) fn if_(b: &mut Body, d: &OpData) {
    if d.operands.len() != 1 {
        err(
            b.errs,
            d.span,
            format!(
                "`if` takes one condition operand, found {}",
                d.operands.len()
            ),
        );
    }
    if let Some(c) = opd(b, d, 0) {
        if !c.is_scalar() || dtype_is(c, |t| t == Dtype::I1) == Some(false) {
            err(
                b.errs,
                d.span,
                format!("the condition of `if` must be a scalar i1, found {c}"),
            );
        }
    }
    check_branches(b, d);
}

/// `static_if EXPR`: a constant condition (names checked by the body walk), two regions
/// yielding the result types.
pub(crate) fn static_if(b: &mut Body, d: &OpData) {
    check_branches(b, d);
}
