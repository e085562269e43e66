//! Scalars known while lowering (`Ctx::values.statics`): integer constants, the stage index of
//! the copy of an unrolled ring loop being lowered, and what folds from them — [`fold`] records
//! an op's known result, [`known`] evaluates a value from the known ones.

use super::ctx::Ctx;
use kir_ir::{Attr, Dtype, Kernel, OpData, Opcode, Value, ValueDef};

/// The value of a scalar i32/i1 op on known operands (i32 arithmetic wraps).
fn apply(op: &OpData, d: Dtype, a: &[i64]) -> Option<i64> {
    let w = |x: i64| x as i32 as i64;
    let (x, y) = (a.first().copied(), a.get(1).copied());
    Some(match op.opcode {
        Opcode::Add => w(x?.wrapping_add(y?)),
        Opcode::Sub => w(x?.wrapping_sub(y?)),
        Opcode::Mul => w(x?.wrapping_mul(y?)),
        Opcode::Min => x?.min(y?),
        Opcode::Max => x?.max(y?),
        Opcode::And => x? & y?,
        Opcode::Or => x? | y?,
        Opcode::Xor => x? ^ y?,
        Opcode::Not if d == Dtype::I1 => (x? == 0) as i64,
        Opcode::Not => w(!x?),
        Opcode::Select => {
            if x? != 0 {
                y?
            } else {
                *a.get(2)?
            }
        }
        Opcode::Cmp => op.cmp_pred()?.test(x?, y?) as i64,
        _ => return None,
    })
}

/// The i32/i1 scalar type of `v`, if it has one.
pub(super) fn int_scalar(k: &Kernel, v: Value) -> Option<Dtype> {
    let t = k.dfg.ty(v);
    match t.dtype() {
        Some(d @ (Dtype::I32 | Dtype::I1)) if t.is_scalar() => Some(d),
        _ => None,
    }
}

/// An integer constant's value.
fn const_int(op: &OpData) -> Option<i64> {
    match &op.lead {
        Some(Attr::Expr(e)) => e.as_int(),
        _ => None,
    }
}

/// Records what an i32/i1 scalar op makes known: an integer constant (lowered as before), or an
/// op on known values, which emits nothing: a use gets the value from a prologue register
/// (`Ctx::val`). Returns true when the op needs no lowering.
pub fn fold(c: &mut Ctx, op: &OpData) -> bool {
    let (Some(&r), 1) = (op.results.first(), op.results.len()) else {
        return false;
    };
    let Some(d) = int_scalar(c.k, r) else {
        return false;
    };
    if op.opcode == Opcode::Const {
        let Some(x) = const_int(op) else {
            return false;
        };
        // Still lowered where it stands: moving every constant into the prologue lengthens
        // register live ranges (gemm_nf4: 246 → 254 registers on sm_90a).
        c.values.statics.insert(r, x);
        return false;
    }
    let args: Option<Vec<i64>> = op
        .operands
        .iter()
        .map(|a| c.values.statics.get(a).copied())
        .collect();
    match args.and_then(|a| (!a.is_empty()).then(|| apply(op, d, &a)).flatten()) {
        Some(x) => {
            c.values.statics.insert(r, x);
            c.values.vals.remove(&r);
            true
        }
        None => false,
    }
}

/// The value of `v` if it follows from `known` and constants through foldable ops.
pub(super) fn eval(
    k: &Kernel,
    v: Value,
    known: &dyn Fn(Value) -> Option<i64>,
    depth: usize,
) -> Option<i64> {
    if let Some(x) = known(v) {
        return Some(x);
    }
    let d = int_scalar(k, v)?;
    let ValueDef::Result(o, _) = k.dfg.values.get(v)?.def else {
        return None;
    };
    let od = &k.dfg.ops[o];
    if od.opcode == Opcode::Const {
        return const_int(od);
    }
    if depth > 64 || od.operands.is_empty() {
        return None;
    }
    let args: Option<Vec<i64>> = od
        .operands
        .iter()
        .map(|&a| eval(k, a, known, depth + 1))
        .collect();
    apply(od, d, &args?)
}

/// The value of i32 scalar `v` if it folds from what is known while lowering (constants, the
/// stage index of the unrolled ring copy being lowered), even before its defining op is lowered.
pub fn known(c: &Ctx, v: Value) -> Option<i64> {
    eval(c.k, v, &|x| c.values.statics.get(&x).copied(), 0)
}
