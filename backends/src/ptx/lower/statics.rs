//! Scalars known while lowering (`Ctx::values.statics`): integer constants, the stage index of
//! the copy of an unrolled ring loop being lowered, and what folds from them — [`fold`] records
//! an op's known result, [`known`] evaluates a value from the known ones. The folding itself is
//! the IR's (`kir_ir::edit::fold`), the same the passes may use.

use super::ctx::Ctx;
use kir_ir::edit::fold::{apply, const_int, eval, int_scalar};
use kir_ir::{OpData, Opcode, Value};

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

/// The value of i32 scalar `v` if it folds from what is known while lowering (constants, the
/// stage index of the unrolled ring copy being lowered), even before its defining op is lowered.
pub fn known(c: &Ctx, v: Value) -> Option<i64> {
    eval(c.k, v, &|x| c.values.statics.get(&x).copied(), 0)
}
