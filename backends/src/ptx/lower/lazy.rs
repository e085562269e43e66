//! Lazy index and mask tiles: `iota`, splats of scalars and integer/comparison chains on them
//! are not kept in registers; they are recomputed wherever they are used, in the layout the use
//! needs, per slot or per runtime coordinate.

use super::arith::scalar_op;
use super::ctx::{dtype, place};
use super::ctx::{Ctx, Val};
use super::dispatch::{elementwise_val, regs_in};
use super::PtxError;
use crate::ptx::emit::{PtxInst, Reg, RegClass};
use crate::ptx::plan::layout::{Layout, Place};
use kir_ir::{Attr, CmpPred, Dtype, OpData, Opcode, Span, Value};

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

/// The register of slot `s` of value `v` in `layout` (a tile of `shape`): a lazy value is
/// recomputed for that slot alone (its chain is elementwise), others are taken from their
/// registers (converted if needed).
pub fn slot_value(
    c: &mut Ctx,
    v: Value,
    layout: Layout,
    shape: &[usize],
    s: usize,
    sp: Span,
) -> Result<Reg, PtxError> {
    if is_lazy_tile(c, v, layout, shape) {
        let sc = c.slot_coord(layout, shape, s);
        return coord_value(c, v, &sc.idx, sp);
    }
    Ok(regs_in(c, v, layout, shape, sp)?[s])
}

/// True if `v` is a lazy tile of `shape` placed in `layout`.
pub fn is_lazy_tile(c: &Ctx, v: Value, layout: Layout, shape: &[usize]) -> bool {
    c.values.lazy.contains_key(&v)
        && place(c, v) == Place::Reg(layout)
        && shape == &c.k.dfg.ty(v).shape().unwrap_or_default()[..]
}

/// The element of lazy tile `v` at tile coordinates `idx` (registers, possibly computed at run
/// time), by re-running its elementwise chain for that element.
pub fn coord_value(c: &mut Ctx, v: Value, idx: &[Reg], sp: Span) -> Result<Reg, PtxError> {
    let Some(&o) = c.values.lazy.get(&v) else {
        return Err(PtxError::at(sp, "internal: not a lazy value"));
    };
    let k = c.k;
    let op = &k.dfg.ops[o];
    if op.opcode == Opcode::Iota {
        let axis = match op.attr("axis") {
            Some(Attr::Expr(e)) => e.as_int().unwrap_or(0) as usize,
            _ => 0,
        };
        return Ok(idx.get(axis).copied().unwrap_or(idx[0]));
    }
    if op.opcode == Opcode::Splat {
        let a = *op
            .operands
            .first()
            .ok_or_else(|| PtxError::at(sp, "splat needs an operand"))?;
        return match c.val(a, sp)? {
            Val::Scalar(r) => Ok(r),
            _ => Err(PtxError::at(sp, "internal: splat of a tile")),
        };
    }
    let od = op
        .operands
        .first()
        .map(|&a| dtype(c, a))
        .unwrap_or(Dtype::I32);
    let rd = dtype(c, v);
    let mut args = Vec::new();
    for &a in &op.operands {
        args.push(if c.k.dfg.ty(a).is_scalar() {
            match c.val(a, sp)? {
                Val::Scalar(r) => r,
                _ => return Err(PtxError::at(sp, "internal: scalar operand")),
            }
        } else {
            coord_value(c, a, idx, sp)?
        });
    }
    scalar_op(c, op, od, rd, &args)
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

/// Computes a lazy value at the current point.
pub fn materialize(c: &mut Ctx, o: kir_ir::Op) -> Result<Val, PtxError> {
    let k = c.k;
    let op = &k.dfg.ops[o];
    match op.opcode {
        Opcode::Iota => super::tile::iota_val(c, op),
        Opcode::Splat => {
            let r = op
                .results
                .first()
                .copied()
                .ok_or_else(|| PtxError::at(op.span, "splat without a result"))?;
            let (l, shape) = match place(c, r) {
                Place::Reg(l) => (l, c.k.dfg.ty(r).shape().unwrap_or_default()),
                _ => return Err(PtxError::at(op.span, "internal: lazy splat placement")),
            };
            let regs = regs_in(c, r, l, &shape, op.span)?;
            Ok(Val::Tile {
                layout: l,
                shape,
                dtype: dtype(c, r),
                regs,
            })
        }
        _ => elementwise_val(c, op),
    }
}

impl Ctx<'_> {
    /// The lowered form of `v`.
    pub fn val(&mut self, v: Value, span: Span) -> Result<Val, PtxError> {
        if let Some(&o) = self.values.lazy.get(&v) {
            return materialize(self, o);
        }
        if let Some(x) = self.values.vals.get(&v) {
            return Ok(x.clone());
        }
        match self.values.statics.get(&v) {
            // A known scalar lives in a register set in the prologue, one per value (so it
            // dominates every use, wherever it is first used).
            Some(&x) => {
                let pred = self.k.dfg.ty(v).dtype() == Some(Dtype::I1);
                let x = if pred {
                    (x != 0) as i64
                } else {
                    x as i32 as i64
                };
                if let Some(&r) = self.values.imms.get(&(pred, x)) {
                    return Ok(Val::Scalar(r));
                }
                let r = self.b.in_prologue(|b| {
                    if pred {
                        let p = b.reg(RegClass::Pred);
                        b.ins(PtxInst::new("setp.ne.u32").op(p).op(x).op(0));
                        p
                    } else {
                        b.imm32(x)
                    }
                });
                self.values.imms.insert((pred, x), r);
                Ok(Val::Scalar(r))
            }
            None => Err(PtxError::at(
                span,
                format!("internal: value {v} was not lowered"),
            )),
        }
    }
}
