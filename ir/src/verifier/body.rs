//! The state of checking one kernel body ([`Body`]), which the walk (`walk.rs`) fills and every
//! type rule reads, and the accessors the rules share: operand and result types, the expected
//! type of a result, the operands of a binary-like op, and the literals written into typed slots.

use super::common::{contains_float, elem_eq, err, lit_int, ty_eq, Errs};
use super::names::Scope;
use crate::dtype::Dtype;
use crate::entities::{Block, Op, Value};
use crate::expr::{Expr, ExprKind, UnOp};
use crate::module::{Kernel, Module, OpData};
use crate::types::Type;
use cranelift_entity::EntityRef;
use std::collections::HashSet;

/// The state of checking one kernel body; shared with the type rules.
pub(crate) struct Body<'a> {
    /// The module (constants, for name resolution).
    pub m: &'a Module,
    /// The kernel being checked.
    pub k: &'a Kernel,
    /// The kernel's runtime dims.
    pub dims: &'a [String],
    /// Where diagnostics go.
    pub errs: &'a mut Errs,
    /// The block each reachable op sits in (by op index).
    pub(super) op_block: Vec<Option<Block>>,
    /// The op owning each region block (by block index); `None` for the body and unreachable blocks.
    pub(super) block_parent: Vec<Option<Op>>,
    /// Blocks reachable from the body.
    pub(super) reachable: Vec<bool>,
    /// Values visible at the current point of the walk (by value index).
    pub(super) in_scope: Vec<bool>,
    /// Ops already walked (an op listed twice is reported once and walked once).
    pub(super) walked: Vec<bool>,
    /// Blocks from the body down to the one being walked.
    pub(super) chain: Vec<Block>,
    /// Type-error messages already reported for value types (one report per distinct problem).
    pub(super) seen_type_errs: HashSet<String>,
}

impl<'a> Body<'a> {
    /// The type of a value, if the value exists.
    pub fn vty(&self, v: Value) -> Option<&'a Type> {
        self.k.dfg.values.get(v).map(|d| &d.ty)
    }

    /// The ops whose regions enclose the op being checked, innermost first.
    pub fn enclosing_ops(&self) -> impl Iterator<Item = &'a OpData> + '_ {
        let dfg = &self.k.dfg;
        self.chain
            .iter()
            .rev()
            .filter_map(move |blk| self.block_parent.get(blk.index()).copied().flatten())
            .filter_map(move |op| dfg.ops.get(op))
    }

    /// A value as written in messages: `%name` or `%vN`.
    pub fn vname(&self, v: Value) -> String {
        match self.k.dfg.values.get(v).and_then(|d| d.name.as_ref()) {
            Some(n) => format!("%{n}"),
            None => format!("{v}"),
        }
    }

    /// Checks the names of a constant expression inside the body (see [`op_scope`]).
    pub fn check_op_expr(&mut self, e: &crate::expr::Expr, ctx: &str, allow_float: bool) {
        op_scope(self.m, self.dims, ctx, allow_float).check(e, self.errs);
    }
}

/// The scope of constant expressions inside a kernel body: constants only, with a hint when a
/// runtime dim of the kernel is named.
pub(crate) fn op_scope<'s>(
    m: &'s Module,
    dims: &'s [String],
    ctx: &'s str,
    allow_float: bool,
) -> Scope<'s> {
    Scope {
        consts: &m.consts,
        all: &m.consts,
        dims: &[],
        hint_dims: dims,
        own_variants: &[],
        ctx,
        allow_float,
        enum_ok: false,
    }
}

/// The type of operand `i`, if both the operand and its value exist.
pub(crate) fn opd<'a>(b: &Body<'a>, d: &OpData, i: usize) -> Option<&'a Type> {
    d.operands.get(i).and_then(|&v| b.vty(v))
}

/// The type of result `i`, if it exists.
pub(crate) fn res<'a>(b: &Body<'a>, d: &OpData, i: usize) -> Option<&'a Type> {
    d.results.get(i).and_then(|&v| b.vty(v))
}

/// Reports `found` unless it may equal `expected`.
pub(crate) fn expect_ty(errs: &mut Errs, d: &OpData, what: &str, expected: &Type, found: &Type) {
    if ty_eq(expected, found) == Some(false) {
        err(
            errs,
            d.span,
            format!("{what} must be {expected}, found {found}"),
        );
    }
}

/// Operands of a binary-like op (binary ops and `cmp`): the same type, or a scalar and a tile of
/// the same dtype. Returns the type they combine to (the tile's, for a mixed pair).
pub(crate) fn binary_operands<'a>(b: &mut Body<'a>, d: &OpData) -> Option<&'a Type> {
    let name = d.opcode.name();
    let (x, y) = (opd(b, d, 0)?, opd(b, d, 1)?);
    let combined = if x.is_scalar() { y } else { x };
    let elem_differs = elem_eq(x.elem(), y.elem()) == Some(false);
    let differs = if x.is_scalar() != y.is_scalar() {
        elem_differs
    } else {
        ty_eq(x, y) == Some(false)
    };
    if differs {
        let hint = if elem_differs {
            "use `cast`"
        } else {
            "use `broadcast`"
        };
        err(
            b.errs,
            d.span,
            format!("`{name}` operands differ: {x} vs {y} ({hint})"),
        );
    }
    Some(combined)
}

/// True for `1.5`, `-inf`: the only float forms a constant expression may take.
fn is_float_literal(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Float(_) => true,
        ExprKind::Unary(UnOp::Neg, a) => matches!(a.kind, ExprKind::Float(_)),
        _ => false,
    }
}

/// The magnitude of a literal (`1e39`, `-70000`, `70000`), if it is one.
fn literal_magnitude(e: &Expr) -> Option<f64> {
    match &e.kind {
        ExprKind::Float(x) => Some(x.0.abs()),
        ExprKind::Unary(UnOp::Neg, a) => literal_magnitude(a),
        _ => lit_int(e).map(|v| v.unsigned_abs() as f64),
    }
}

/// A literal value written into a slot of type `t` (`const` lead, `other` of `load`).
pub(crate) fn check_literal(errs: &mut Errs, e: &Expr, t: &Type, what: &str) {
    if contains_float(e) && !is_float_literal(e) {
        err(errs, e.span, format!("{what} `{e}` mixes a float literal with arithmetic; write the float literal itself"));
        return;
    }
    let Some(dt) = t.dtype() else { return };
    if contains_float(e) && !dt.is_float() {
        err(
            errs,
            e.span,
            format!(
                "{what} is the float literal `{e}`, but the type is {t} (use an integer literal)"
            ),
        );
    }
    if let Some(x) = literal_magnitude(e).filter(|x| x.is_finite()) {
        // Literals round to f32 first, then to the dtype (docs/ir.md).
        let rounded = (x as f32).abs() as f64;
        if let Some(bound) = dt.overflow_bound().filter(|&b| rounded >= b) {
            err(
                errs,
                e.span,
                format!(
                    "{what} `{e}` is out of range for {dt}: it rounds to infinity (finite values \
                     stay below {bound:e} in magnitude; write `inf` for infinity)"
                ),
            );
        }
    }
    if let Some(v) = lit_int(e) {
        let range = match dt {
            Dtype::I1 => Some((0, 1)),
            Dtype::U8 => Some((0, 255)),
            Dtype::I32 => Some((i32::MIN as i64, i32::MAX as i64)),
            Dtype::I64 | Dtype::F32 | Dtype::F16 | Dtype::Bf16 => None,
        };
        if let Some((lo, hi)) = range {
            if v < lo || v > hi {
                err(
                    errs,
                    e.span,
                    format!("{what} `{v}` does not fit in {dt} (range {lo}..={hi})"),
                );
            }
        }
    }
}
