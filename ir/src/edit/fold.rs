//! Constant folding of i32/i1 scalars: the value of an op on known operands ([`apply`]) and of
//! a value from known values and constants through foldable ops ([`eval`]). The PTX backend's
//! ring unroller folds the stage index of each unrolled copy with it.

use crate::{Attr, Dtype, Kernel, OpData, Opcode, Value, ValueDef};

/// The value of scalar i32/i1 op `op` of result dtype `d` on the known operand values `a`
/// (i32 arithmetic wraps); `None` for ops that do not fold.
pub fn apply(op: &OpData, d: Dtype, a: &[i64]) -> Option<i64> {
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
pub fn int_scalar(k: &Kernel, v: Value) -> Option<Dtype> {
    let t = k.dfg.ty(v);
    match t.dtype() {
        Some(d @ (Dtype::I32 | Dtype::I1)) if t.is_scalar() => Some(d),
        _ => None,
    }
}

/// An integer constant op's value.
pub fn const_int(op: &OpData) -> Option<i64> {
    match &op.lead {
        Some(Attr::Expr(e)) => e.as_int(),
        _ => None,
    }
}

/// The value of `v` if it follows from `known` and integer constants through foldable ops
/// (at most 64 ops deep).
pub fn eval(
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
