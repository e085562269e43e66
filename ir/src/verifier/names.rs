//! Module-level checks: constants, kernel signatures and params, and the name resolution of every
//! constant expression (grids, requirements, tensor dims, strides, conditions). The program's
//! launches are checked in `program`.

use super::common::{err, err_note, list, list_span, lit_int, Errs};
use super::limits::MAX_GRID;
use crate::dtype::Dtype;
use crate::expr::{BinOp, Expr, ExprKind};
use crate::module::{ConstDecl, ConstKind, Kernel, Module, Param, ParamKind};
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
    /// Whether an enum constant may stand alone (the default of another enum constant); elsewhere
    /// it may only be compared with `==`/`!=`.
    pub enum_ok: bool,
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
            enum_ok: false,
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
                Some(ConstDecl {
                    name,
                    kind: ConstKind::Enum(vs),
                    ..
                }) => Some((name, vs)),
                _ => None,
            },
            _ => None,
        }
    }

    /// Checks `E == variant` / `variant != E` / `E == F`; returns true if the pair was handled.
    fn enum_cmp(&self, a: &Expr, b: &Expr, errs: &mut Errs) -> bool {
        for (en, other) in [(a, b), (b, a)] {
            let (Some((cname, vs)), ExprKind::Ident(v)) = (self.enum_variants(en), &other.kind)
            else {
                continue;
            };
            if self.enum_variants(other).is_some() {
                return true;
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
                    err(
                        errs,
                        e.span,
                        format!(
                            "float literal `{e}` in {}: only integers are allowed here",
                            self.ctx
                        ),
                    );
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
                    err(
                        errs,
                        e.span,
                        format!(
                            "`{}` takes {} arguments, found {}",
                            f.name(),
                            f.arity(),
                            args.len()
                        ),
                    );
                }
                args.iter().for_each(|a| self.check(a, errs));
            }
        }
    }

    fn ident(&self, n: &str, span: Span, errs: &mut Errs) {
        if let Some(ConstDecl {
            kind: ConstKind::Enum(vs),
            ..
        }) = self.visible(n)
        {
            if !self.enum_ok {
                err_note(
                    errs,
                    span,
                    format!(
                        "`{n}` is an enum constant and has no numeric value in {}",
                        self.ctx
                    ),
                    format!(
                        "compare it with one of its variants, e.g. `{n} == {}`",
                        vs.first().map_or("...", |v| v)
                    ),
                );
            }
            return;
        }
        if self.knows(n) {
            return;
        }
        if self.all.iter().any(|c| c.name == n) {
            err(
                errs,
                span,
                format!(
                    "constant `{n}` is used in {} before its declaration",
                    self.ctx
                ),
            );
        } else if self.hint_dims.iter().any(|d| d == n) {
            err_note(
                errs,
                span,
                format!(
                    "`{n}` is a runtime dim, but {} must be a constant expression",
                    self.ctx
                ),
                format!(
                    "read the dim as a value with `%{} = dim {n} : i32`",
                    n.to_lowercase()
                ),
            );
        } else {
            let what = if self.dims.is_empty() {
                "a constant"
            } else {
                "a constant or a dim of the tensor params"
            };
            err_note(
                errs,
                span,
                format!("unknown name `{n}` in {}", self.ctx),
                format!("expected {what}"),
            );
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
        Some(ConstDecl {
            kind: ConstKind::Int,
            ..
        }) => err(
            errs,
            *span,
            format!("`{n}` is an integer constant, not an element type"),
        ),
        Some(ConstDecl {
            kind: ConstKind::Enum(vs),
            ..
        }) => {
            let bad: Vec<&String> = vs
                .iter()
                .filter(|v| Dtype::from_name(v).is_none())
                .collect();
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
            err(
                errs,
                c.span,
                format!("constant `{}` is declared more than once", c.name),
            );
        }
        if Dtype::from_name(&c.name).is_some() {
            err(
                errs,
                c.span,
                format!("constant `{}` has the name of a dtype", c.name),
            );
        }
        let variants: &[String] = match &c.kind {
            ConstKind::Int => &[],
            ConstKind::Enum(vs) => vs,
        };
        if let ConstKind::Enum(vs) = &c.kind {
            if vs.is_empty() {
                err(
                    errs,
                    c.span,
                    format!("enum constant `{}` has no variants", c.name),
                );
            }
            for (j, v) in vs.iter().enumerate() {
                if vs[..j].contains(v) {
                    err(
                        errs,
                        c.span,
                        format!(
                            "variant `{v}` of constant `{}` is listed more than once",
                            c.name
                        ),
                    );
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
                err(
                    errs,
                    c.default.span,
                    format!("constant `{n}` is defined in terms of itself"),
                );
            }
        }
        let ctx = format!("the default of `{}`", c.name);
        let enum_ok = matches!(c.kind, ConstKind::Enum(_));
        let scope = Scope {
            consts: &m.consts[..i],
            own_variants: variants,
            enum_ok,
            ..Scope::new(m, &[], &ctx)
        };
        if !matches!(&c.default.kind, ExprKind::Ident(n) if *n == c.name) {
            scope.check(&c.default, errs);
        }
        if let Some(w) = &c.require {
            let ctx = format!("the `where` of `{}`", c.name);
            let scope = Scope {
                consts: &m.consts[..=i],
                own_variants: variants,
                ..Scope::new(m, &[], &ctx)
            };
            scope.check(w, errs);
        }
    }
    for (i, (_, k)) in m.kernels.iter().enumerate() {
        if m.kernels.values().take(i).any(|p| p.name == k.name) {
            err(
                errs,
                k.span,
                format!("kernel `@{}` is defined more than once", k.name),
            );
        }
    }
    if m.program.is_none() && m.kernels.len() != 1 {
        let span = m
            .kernels
            .values()
            .next()
            .map_or(Span::default(), |k| k.span);
        err_note(
            errs,
            span,
            format!(
                "module `{}` has no program and {} kernels",
                m.name,
                m.kernels.len()
            ),
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

/// A grid dimension that is a constant (no name left in it, as after specialization) must be
/// in [1, [`MAX_GRID`]] for its axis: a constant 0 or negative grid never runs a program (and
/// a launcher would be handed a negative count), and one over the limit cannot be launched.
fn constant_grid(k: &Kernel, errs: &mut Errs) {
    for (axis, e) in k.grid.iter().take(3).enumerate() {
        let Some(v) = lit_int(e) else { continue };
        let name = ["x", "y", "z"][axis];
        if v < 1 {
            err(
                errs,
                e.span,
                format!(
                    "grid dimension {name} of kernel `@{}` is {v}; a constant grid dimension must be at least 1",
                    k.name
                ),
            );
        } else if v > MAX_GRID[axis] {
            err_note(
                errs,
                e.span,
                format!(
                    "grid dimension {name} of kernel `@{}` is {v}, over the limit of {} for axis {name}",
                    k.name, MAX_GRID[axis]
                ),
                "a launch takes x up to 2^31 - 1 and y, z up to 65535 programs",
            );
        }
    }
}

/// Grid arity and names, requirements, and the kernel's params.
pub(crate) fn check_kernel_signature(m: &Module, k: &Kernel, dims: &[String], errs: &mut Errs) {
    if k.grid.len() != 3 {
        let span = if k.grid.is_empty() {
            k.span
        } else {
            list_span(&k.grid)
        };
        err(
            errs,
            span,
            format!(
                "kernel `@{}` has a grid of {} expression(s); expected 3 (x, y, z)",
                k.name,
                k.grid.len()
            ),
        );
    }
    let grid = Scope::new(m, dims, "the grid");
    k.grid.iter().for_each(|g| grid.check(g, errs));
    constant_grid(k, errs);
    // Requirements may also compare the kernel's scalar params (`scale > 0.0`): checked at
    // launch, where their values are known.
    let mut req_names = dims.to_vec();
    req_names.extend(k.params.iter().filter_map(|p| match p.kind {
        ParamKind::Scalar(_) => Some(p.name.clone()),
        ParamKind::Tensor(..) => None,
    }));
    let req = Scope {
        allow_float: true,
        ..Scope::new(m, &req_names, "`requires`")
    };
    k.requires.iter().for_each(|r| req.check(r, errs));
    check_params(m, &k.params, dims, &format!("kernel `@{}`", k.name), errs);
}

/// Params of a kernel or of the program: unique names, no clash with constants, valid element
/// types, resolvable dims/strides/conditions, one stride per dim.
pub(crate) fn check_params(
    m: &Module,
    params: &[Param],
    dims: &[String],
    owner: &str,
    errs: &mut Errs,
) {
    for (i, p) in params.iter().enumerate() {
        if params[..i]
            .iter()
            .any(|q| q.name == p.name && (unconditional(q) || unconditional(p)))
        {
            err_note(
                errs,
                p.span,
                format!("param `{}` of {owner} is declared more than once", p.name),
                "one name may be declared several times only if every declaration has an `if` condition",
            );
        }
        if m.const_decl(&p.name).is_some() {
            err(
                errs,
                p.span,
                format!(
                    "param `{}` of {owner} has the same name as a constant",
                    p.name
                ),
            );
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
                        err(
                            errs,
                            d.span,
                            format!("tensor dim `{d}` of `{}` is negative", p.name),
                        );
                    }
                }
                if let Some(st) = &t.strides {
                    if st.len() != t.dims.len() {
                        err(
                            errs,
                            if st.is_empty() { p.span } else { list_span(st) },
                            format!(
                                "tensor param `{}` has {} dims but {} strides",
                                p.name,
                                t.dims.len(),
                                st.len()
                            ),
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
pub(crate) fn unconditional(p: &Param) -> bool {
    match &p.cond {
        None => true,
        Some(c) => lit_int(c).is_some_and(|v| v != 0),
    }
}
