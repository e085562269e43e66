//! Module-level checks: constants, kernel signatures, the program and its launches, and the name
//! resolution of every constant expression (grids, requirements, tensor dims, strides, conditions).

use super::{elem_eq, err, err_note, lit_int, list, Errs};
use crate::dtype::Dtype;
use crate::expr::{BinOp, Expr, ExprKind};
use crate::module::{ConstDecl, ConstKind, Kernel, Module, Param, ParamKind, Program};
use crate::span::Span;
use crate::types::ElemType;

/// What the identifiers of one expression may name, and how to word errors about it.
pub(crate) struct Scope<'a> {
    /// Constants visible here (all of them, or those declared earlier).
    pub consts: &'a [ConstDecl],
    /// Every constant of the module, to tell "declared later" from "unknown".
    pub all: &'a [ConstDecl],
    /// Runtime dims allowed here.
    pub dims: &'a [String],
    /// Runtime dims that are *not* allowed here but deserve a hint (op attributes, tile dims).
    pub hint_dims: &'a [String],
    /// Bare names allowed here (an enum constant's own variants in its default and `where`).
    pub own_variants: &'a [String],
    /// Where the expression is, for messages ("the grid", "a tile dim").
    pub ctx: &'a str,
    /// Whether float literals may appear (op literals only).
    pub allow_float: bool,
}

impl<'a> Scope<'a> {
    /// A scope of every module constant plus `dims`, for kernel/program-level expressions.
    pub fn new(m: &'a Module, dims: &'a [String], ctx: &'a str) -> Scope<'a> {
        Scope {
            consts: &m.consts,
            all: &m.consts,
            dims,
            hint_dims: &[],
            own_variants: &[],
            ctx,
            allow_float: false,
        }
    }

    fn visible(&self, n: &str) -> Option<&'a ConstDecl> {
        self.consts.iter().find(|c| c.name == n)
    }

    fn knows(&self, n: &str) -> bool {
        self.visible(n).is_some()
            || self.dims.iter().any(|d| d == n)
            || self.own_variants.iter().any(|v| v == n)
    }

    /// The variants of `e` if it is an identifier naming a visible enum constant.
    fn enum_variants(&self, e: &Expr) -> Option<(&'a str, &'a [String])> {
        match &e.kind {
            ExprKind::Ident(n) => match self.visible(n) {
                Some(ConstDecl { name, kind: ConstKind::Enum(vs), .. }) => Some((name, vs)),
                _ => None,
            },
            _ => None,
        }
    }

    /// Checks `E == variant` / `variant != E`; returns true if the pair was handled.
    fn enum_cmp(&self, a: &Expr, b: &Expr, errs: &mut Errs) -> bool {
        for (en, other) in [(a, b), (b, a)] {
            let (Some((cname, vs)), ExprKind::Ident(v)) = (self.enum_variants(en), &other.kind) else {
                continue;
            };
            if self.knows(v) {
                return false;
            }
            if !vs.iter().any(|x| x == v) {
                err_note(
                    errs,
                    other.span,
                    format!("`{v}` is not a variant of the constant `{cname}`"),
                    format!("`{cname}` is one of: {}", list(vs)),
                );
            }
            return true;
        }
        false
    }

    /// Reports every identifier of `e` that this scope does not resolve, every misplaced float
    /// literal and every call with the wrong number of arguments.
    pub fn check(&self, e: &Expr, errs: &mut Errs) {
        match &e.kind {
            ExprKind::Int(_) => {}
            ExprKind::Float(_) => {
                if !self.allow_float {
                    err(errs, e.span, format!("float literal `{e}` in {}: only integers are allowed here", self.ctx));
                }
            }
            ExprKind::Ident(n) => self.ident(n, e.span, errs),
            ExprKind::Unary(_, a) => self.check(a, errs),
            ExprKind::Binary(op, a, b) => {
                if matches!(op, BinOp::Eq | BinOp::Ne) && self.enum_cmp(a, b, errs) {
                    // The enum side is a visible constant; nothing else to resolve.
                    return;
                }
                self.check(a, errs);
                self.check(b, errs);
            }
            ExprKind::Call(f, args) => {
                if args.len() != f.arity() {
                    err(errs, e.span, format!("`{}` takes {} arguments, found {}", f.name(), f.arity(), args.len()));
                }
                args.iter().for_each(|a| self.check(a, errs));
            }
        }
    }

    fn ident(&self, n: &str, span: Span, errs: &mut Errs) {
        if self.knows(n) {
            return;
        }
        if self.all.iter().any(|c| c.name == n) {
            err(errs, span, format!("constant `{n}` is used in {} before its declaration", self.ctx));
        } else if self.hint_dims.iter().any(|d| d == n) {
            err_note(
                errs,
                span,
                format!("`{n}` is a runtime dim, but {} must be a constant expression", self.ctx),
                format!("read the dim as a value with `%{} = dim {n} : i32`", n.to_lowercase()),
            );
        } else {
            let what = if self.dims.is_empty() { "a constant" } else { "a constant or a dim of the tensor params" };
            err_note(errs, span, format!("unknown name `{n}` in {}", self.ctx), format!("expected {what}"));
        }
    }
}

/// Checks an element type: a `Named` one must name an enum constant whose variants are dtypes.
pub(crate) fn check_elem(m: &Module, e: &ElemType, errs: &mut Errs) {
    let ElemType::Named(n, span) = e else { return };
    match m.const_decl(n) {
        None => err_note(
            errs,
            *span,
            format!("unknown element type `{n}`"),
            "expected f32, f16, bf16, i32, i64, u8, i1 or a constant whose variants are dtypes",
        ),
        Some(ConstDecl { kind: ConstKind::Int, .. }) => {
            err(errs, *span, format!("`{n}` is an integer constant, not an element type"))
        }
        Some(ConstDecl { kind: ConstKind::Enum(vs), .. }) => {
            let bad: Vec<&String> = vs.iter().filter(|v| Dtype::from_name(v).is_none()).collect();
            if !bad.is_empty() {
                err(
                    errs,
                    *span,
                    format!("constant `{n}` is used as an element type, but its variant(s) {} are not dtypes", list(&bad)),
                );
            }
        }
    }
}

/// Constants: unique names, well-formed enums, defaults and `where`s that name only earlier
/// constants; kernels: unique names; an entry exists (a program, or exactly one kernel).
pub(crate) fn check_module(m: &Module, errs: &mut Errs) {
    for (i, c) in m.consts.iter().enumerate() {
        if m.consts[..i].iter().any(|p| p.name == c.name) {
            err(errs, c.span, format!("constant `{}` is declared more than once", c.name));
        }
        if Dtype::from_name(&c.name).is_some() {
            err(errs, c.span, format!("constant `{}` has the name of a dtype", c.name));
        }
        let variants: &[String] = match &c.kind {
            ConstKind::Int => &[],
            ConstKind::Enum(vs) => vs,
        };
        if let ConstKind::Enum(vs) = &c.kind {
            if vs.is_empty() {
                err(errs, c.span, format!("enum constant `{}` has no variants", c.name));
            }
            for (j, v) in vs.iter().enumerate() {
                if vs[..j].contains(v) {
                    err(errs, c.span, format!("variant `{v}` of constant `{}` is listed more than once", c.name));
                }
            }
            if matches!(c.default.kind, ExprKind::Int(_) | ExprKind::Float(_)) {
                err_note(
                    errs,
                    c.default.span,
                    format!("the default of enum constant `{}` is a number", c.name),
                    format!("expected one of: {}", list(vs)),
                );
            }
        }
        if let ExprKind::Ident(n) = &c.default.kind {
            if *n == c.name {
                err(errs, c.default.span, format!("constant `{n}` is defined in terms of itself"));
            }
        }
        let ctx = format!("the default of `{}`", c.name);
        let scope = Scope { consts: &m.consts[..i], own_variants: variants, ..Scope::new(m, &[], &ctx) };
        if !matches!(&c.default.kind, ExprKind::Ident(n) if *n == c.name) {
            scope.check(&c.default, errs);
        }
        if let Some(w) = &c.require {
            let ctx = format!("the `where` of `{}`", c.name);
            let scope = Scope { consts: &m.consts[..=i], own_variants: variants, ..Scope::new(m, &[], &ctx) };
            scope.check(w, errs);
        }
    }
    for (i, (_, k)) in m.kernels.iter().enumerate() {
        if m.kernels.values().take(i).any(|p| p.name == k.name) {
            err(errs, k.span, format!("kernel `@{}` is defined more than once", k.name));
        }
    }
    if m.program.is_none() && m.kernels.len() != 1 {
        let span = m.kernels.values().next().map_or(Span::default(), |k| k.span);
        err_note(
            errs,
            span,
            format!("module `{}` has no program and {} kernels", m.name, m.kernels.len()),
            "a module without a `program` must hold exactly one kernel, its entry",
        );
    }
}

/// The runtime dims of a param list: identifiers written as a whole dim of a tensor param that do
/// not name a constant (a constant there is checked against the argument's shape instead).
pub(crate) fn param_dims(m: &Module, params: &[Param]) -> Vec<String> {
    let mut dims: Vec<String> = Vec::new();
    for p in params {
        if let ParamKind::Tensor(_, t) = &p.kind {
            for d in &t.dims {
                if let ExprKind::Ident(n) = &d.kind {
                    if m.const_decl(n).is_none() && !dims.contains(n) {
                        dims.push(n.clone());
                    }
                }
            }
        }
    }
    dims
}

/// The runtime dims of a kernel (see [`param_dims`]).
pub(crate) fn kernel_dims(m: &Module, k: &Kernel) -> Vec<String> {
    param_dims(m, &k.params)
}

/// Grid arity and names, requirements, and the kernel's params.
pub(crate) fn check_kernel_signature(m: &Module, k: &Kernel, dims: &[String], errs: &mut Errs) {
    if k.grid.len() != 3 {
        err(errs, k.span, format!("kernel `@{}` has a grid of {} expression(s); expected 3 (x, y, z)", k.name, k.grid.len()));
    }
    let grid = Scope::new(m, dims, "the grid");
    k.grid.iter().for_each(|g| grid.check(g, errs));
    let req = Scope::new(m, dims, "`requires`");
    k.requires.iter().for_each(|r| req.check(r, errs));
    check_params(m, &k.params, dims, &format!("kernel `@{}`", k.name), errs);
}

/// Params of a kernel or of the program: unique names, no clash with constants, valid element
/// types, resolvable dims/strides/conditions, one stride per dim.
fn check_params(m: &Module, params: &[Param], dims: &[String], owner: &str, errs: &mut Errs) {
    for (i, p) in params.iter().enumerate() {
        if params[..i].iter().any(|q| q.name == p.name) {
            err(errs, p.span, format!("param `{}` of {owner} is declared more than once", p.name));
        }
        if m.const_decl(&p.name).is_some() {
            err(errs, p.span, format!("param `{}` of {owner} has the same name as a constant", p.name));
        }
        match &p.kind {
            ParamKind::Tensor(_, t) => {
                check_elem(m, &t.elem, errs);
                if t.dims.is_empty() {
                    err(errs, p.span, format!("tensor param `{}` has no dims; a tensor has rank ≥ 1 (use a scalar param)", p.name));
                }
                let ds = Scope::new(m, dims, "a tensor dim");
                for d in &t.dims {
                    ds.check(d, errs);
                    if lit_int(d).is_some_and(|v| v < 0) {
                        err(errs, d.span, format!("tensor dim `{d}` of `{}` is negative", p.name));
                    }
                }
                if let Some(st) = &t.strides {
                    if st.len() != t.dims.len() {
                        err(
                            errs,
                            p.span,
                            format!("tensor param `{}` has {} dims but {} strides", p.name, t.dims.len(), st.len()),
                        );
                    }
                    let ss = Scope::new(m, dims, "a stride");
                    st.iter().for_each(|s| ss.check(s, errs));
                }
            }
            ParamKind::Scalar(e) => check_elem(m, e, errs),
        }
        if let Some(c) = &p.cond {
            Scope::new(m, dims, "a param condition").check(c, errs);
        }
    }
}

/// True if a param exists in every specialization (no condition, or a literal true one).
fn unconditional(p: &Param) -> bool {
    p.cond.as_ref().map_or(true, |c| lit_int(c).is_some_and(|v| v != 0))
}

/// What a launch argument names.
enum Buffer<'a> {
    Param(&'a Param),
    Temp(&'a crate::module::TempDecl),
}

/// Program params and temps, then every launch: the kernel exists and each of its params is
/// bound once to a compatible buffer.
pub(crate) fn check_program(m: &Module, p: &Program, errs: &mut Errs) {
    let dims = param_dims(m, &p.params);
    check_params(m, &p.params, &dims, "the program", errs);
    for (i, t) in p.temps.iter().enumerate() {
        if p.params.iter().any(|q| q.name == t.name) || p.temps[..i].iter().any(|q| q.name == t.name) {
            err(errs, t.span, format!("temp `{}` has the name of another program param or temp", t.name));
        }
        if m.const_decl(&t.name).is_some() {
            err(errs, t.span, format!("temp `{}` has the same name as a constant", t.name));
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
            err_note(errs, l.span, format!("launch of unknown kernel `@{}`", l.kernel), format!("kernels in this module: {}", list(&names)));
            continue;
        };
        for (i, b) in l.args.iter().enumerate() {
            if l.args[..i].iter().any(|a| a.param == b.param) {
                err(errs, b.span, format!("param `{}` of `@{}` is bound more than once", b.param, k.name));
                continue;
            }
            let Some(kp) = k.param(&b.param) else {
                let names: Vec<&str> = k.params.iter().map(|q| q.name.as_str()).collect();
                err_note(errs, b.span, format!("kernel `@{}` has no param `{}`", k.name, b.param), format!("its params are: {}", list(&names)));
                continue;
            };
            let buf = match (p.params.iter().find(|q| q.name == b.arg), p.temps.iter().find(|t| t.name == b.arg)) {
                (Some(q), _) => Buffer::Param(q),
                (None, Some(t)) => Buffer::Temp(t),
                (None, None) => {
                    err_note(errs, b.span, format!("unknown buffer `{}` bound to `{}`", b.arg, b.param), "expected a program param or a temp");
                    continue;
                }
            };
            check_binding(kp, &k.name, &b.arg, buf, b.span, errs);
        }
        for kp in &k.params {
            if unconditional(kp) && !l.args.iter().any(|a| a.param == kp.name) {
                err(errs, l.span, format!("launch of `@{}` does not bind its param `{}`", k.name, kp.name));
            }
        }
    }
}

/// Kind, dtype, rank and access compatibility of one binding.
fn check_binding(kp: &Param, kname: &str, arg: &str, buf: Buffer, span: Span, errs: &mut Errs) {
    let (pk, what) = match buf {
        Buffer::Param(q) => (q.kind.clone(), "program param"),
        Buffer::Temp(t) => (ParamKind::Tensor(crate::module::Access::InOut, t.ty.clone()), "temp"),
    };
    match (&kp.kind, &pk) {
        (ParamKind::Tensor(ka, kt), ParamKind::Tensor(pa, pt)) => {
            if elem_eq(&kt.elem, &pt.elem) == Some(false) || kt.dims.len() != pt.dims.len() {
                err(errs, span, format!("param `{}` of `@{kname}` is {kt} but {what} `{arg}` is {pt}", kp.name));
            }
            if ka.writes() && !pa.writes() {
                err(
                    errs,
                    span,
                    format!("param `{}` of `@{kname}` is `{}` but {what} `{arg}` is `in` (read-only)", kp.name, ka.name()),
                );
            }
        }
        (ParamKind::Scalar(ke), ParamKind::Scalar(pe)) => {
            if elem_eq(ke, pe) == Some(false) {
                err(errs, span, format!("scalar param `{}` of `@{kname}` is {ke} but {what} `{arg}` is {pe}", kp.name));
            }
        }
        (ParamKind::Tensor(..), ParamKind::Scalar(_)) => {
            err(errs, span, format!("param `{}` of `@{kname}` is a tensor but {what} `{arg}` is a scalar", kp.name))
        }
        (ParamKind::Scalar(_), ParamKind::Tensor(..)) => {
            err(errs, span, format!("param `{}` of `@{kname}` is a scalar but {what} `{arg}` is a tensor", kp.name))
        }
    }
}
