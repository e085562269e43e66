//! Lazy index and mask tiles: `iota`, splats of scalars and integer/comparison chains on them
//! are not kept in registers; they are recomputed wherever they are used, in the layout the use
//! needs, per slot or per runtime coordinate (`values.rs`). This module decides which ops are
//! lazy and answers questions about a lazy tile's chain (constant along an axis, a row-prefix
//! mask) that let a use read one element for many.

use super::ctx::Ctx;
use super::ctx::{dtype, place};
use crate::ptx::plan::layout::{Layout, Place};
use kir_ir::{Attr, CmpPred, Dtype, OpData, Opcode, Value};

/// True for cheap integer/mask tile ops (iota, index arithmetic, comparisons of indices)
/// whose operands are scalars or lazy: they are recomputed where used.
pub(super) fn lazy_ok(c: &Ctx, op: &OpData) -> bool {
    let Some(&r) = op.results.first() else {
        return false;
    };
    if !matches!(place(c, r), Place::Reg(_)) {
        return false;
    }
    let int_result = matches!(dtype(c, r), Dtype::I32 | Dtype::I1);
    match op.opcode {
        Opcode::Iota => int_result,
        Opcode::Splat => {
            int_result
                && op
                    .operands
                    .first()
                    .is_some_and(|a| c.k.dfg.ty(*a).is_scalar())
        }
        Opcode::Add
        | Opcode::Sub
        | Opcode::Mul
        | Opcode::Min
        | Opcode::Max
        | Opcode::And
        | Opcode::Or
        | Opcode::Xor
        | Opcode::Not
        | Opcode::Cmp => {
            int_result
                && op.operands.iter().all(|a| {
                    c.values.lazy.contains_key(a)
                        || (c.k.dfg.ty(*a).is_scalar()
                            && matches!(dtype(c, *a), Dtype::I32 | Dtype::I1))
                })
        }
        _ => false,
    }
}

/// True if `v` is a lazy tile of `shape` placed in `layout`.
pub fn is_lazy_tile(c: &Ctx, v: Value, layout: Layout, shape: &[usize]) -> bool {
    c.values.lazy.contains_key(&v)
        && place(c, v) == Place::Reg(layout)
        && shape == &c.k.dfg.ty(v).shape().unwrap_or_default()[..]
}

/// True if lazy value `v` is constant along dim `axis` (its chain never reads an iota along that
/// axis), so one element per row of a chunk decides all of them.
pub fn lazy_uniform_along(c: &Ctx, v: Value, axis: usize, depth: usize) -> bool {
    let Some(&o) = c.values.lazy.get(&v) else {
        return false;
    };
    let op = &c.k.dfg.ops[o];
    if depth > 32 {
        return false;
    }
    match op.opcode {
        Opcode::Iota => {
            let a = match op.attr("axis") {
                Some(Attr::Expr(e)) => e.as_int().unwrap_or(0) as usize,
                _ => 0,
            };
            a != axis
        }
        _ => op
            .operands
            .iter()
            .all(|&a| c.k.dfg.ty(a).is_scalar() || lazy_uniform_along(c, a, axis, depth + 1)),
    }
}

/// True if lazy mask `v` holds on a prefix of the rows of its tile, the same in every column:
/// `cmp lt|le X, Y` (or `cmp gt|ge Y, X`) with X the row index plus terms that do not depend on
/// the position (`iota axis 0`, `add`/`sub` of such terms) and Y position-free, or an `and` of
/// two such masks. Then the mask is true on the whole tile iff it is true at the last row
/// (how a pipelined loop's key-range mask reads).
pub fn lazy_row_prefix(c: &Ctx, v: Value) -> bool {
    let Some(&o) = c.values.lazy.get(&v) else {
        return false;
    };
    let op = &c.k.dfg.ops[o];
    match (op.opcode, op.cmp_pred(), op.operands.as_slice()) {
        (Opcode::And, _, [a, b]) => lazy_row_prefix(c, *a) && lazy_row_prefix(c, *b),
        (Opcode::Cmp, Some(CmpPred::Lt | CmpPred::Le), [x, y]) => {
            row_increasing(c, *x, 0) && position_free(c, *y)
        }
        (Opcode::Cmp, Some(CmpPred::Gt | CmpPred::Ge), [y, x]) => {
            row_increasing(c, *x, 0) && position_free(c, *y)
        }
        _ => false,
    }
}

/// True if `v` does not depend on the position in the tile: a scalar, or a lazy value whose
/// chain reads no `iota`.
fn position_free(c: &Ctx, v: Value) -> bool {
    c.k.dfg.ty(v).is_scalar() || (lazy_uniform_along(c, v, 0, 0) && lazy_uniform_along(c, v, 1, 0))
}

/// True if lazy `v` is the row index plus position-free terms (see [`lazy_row_prefix`]).
fn row_increasing(c: &Ctx, v: Value, depth: usize) -> bool {
    let Some(&o) = c.values.lazy.get(&v) else {
        return false;
    };
    let op = &c.k.dfg.ops[o];
    if depth > 32 {
        return false;
    }
    match (op.opcode, op.operands.as_slice()) {
        (Opcode::Iota, _) => {
            matches!(op.attr("axis"), Some(Attr::Expr(e)) if e.as_int() == Some(0))
        }
        (Opcode::Add, [a, b]) => {
            (row_increasing(c, *a, depth + 1) && position_free(c, *b))
                || (position_free(c, *a) && row_increasing(c, *b, depth + 1))
        }
        (Opcode::Sub, [a, b]) => row_increasing(c, *a, depth + 1) && position_free(c, *b),
        _ => false,
    }
}
