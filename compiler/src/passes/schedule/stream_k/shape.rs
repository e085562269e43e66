//! What `stream_k` takes (the module doc of `stream_k`): a kernel whose body is a prologue
//! without memory writes, one K loop with tile-independent bounds whose epilogue-read carried
//! values are zero-initialised f32 `dot` accumulators, and an epilogue.

use kir_ir::edit;
use kir_ir::{Attr, Dtype, Effect, ExprKind, Kernel, Op, Opcode, Type, Value};

/// The K loop of a kernel the pass splits.
pub(super) struct Shape {
    /// Index of the loop among the body's ops.
    pub(super) pos: usize,
    /// The loop op.
    pub(super) lp: Op,
    /// The carried values whose results the epilogue reads (indices among the carried values)
    /// and their tile shapes.
    pub(super) accs: Vec<(usize, Vec<usize>)>,
}

impl Shape {
    /// The kernel's K loop if the pass can split it (the module doc's conditions).
    pub(super) fn of(k: &Kernel) -> Option<Shape> {
        let body = &k.dfg.blocks[k.body].ops;
        let fors: Vec<usize> = (0..body.len())
            .filter(|&i| k.dfg.ops[body[i]].opcode == Opcode::For)
            .collect();
        let [pos] = fors[..] else { return None };
        let lp = body[pos];
        let d = &k.dfg.ops[lp];
        if body[..pos].iter().any(|&o| effects(k, o)) {
            return None;
        }
        let lb = d.regions[0];
        if edit::writes_memory(&k.dfg, lb) || edit::prints(&k.dfg, lb) {
            return None;
        }
        // lo, hi: tile-independent; step: a positive constant.
        if !uniform(k, d.operands[0]) || !uniform(k, d.operands[1]) {
            return None;
        }
        let step = edit::def_data(&k.dfg, d.operands[2]).and_then(kir_ir::edit::fold::const_int)?;
        if step <= 0 {
            return None;
        }
        let yield_vals = k.dfg.ops[*k.dfg.blocks[lb].ops.last()?].operands.clone();
        let mut accs = vec![];
        for (i, &res) in d.results.iter().enumerate() {
            let arg = k.dfg.blocks[lb].args[i + 1];
            let next = *yield_vals.get(i)?;
            let used = edit::use_count(&k.dfg, res) > 0;
            if next == arg {
                if used {
                    return None;
                }
                continue;
            }
            // next = dot(a, b, arg), and arg has no other use.
            let nd = edit::def_data(&k.dfg, next)?;
            if nd.opcode != Opcode::Dot
                || nd.operands.get(2) != Some(&arg)
                || edit::parent_block(&k.dfg, edit::def_op(&k.dfg, next)?) != lb
                || edit::use_count(&k.dfg, arg) != 1
                || edit::use_count(&k.dfg, next) != 1
            {
                return None;
            }
            let init = edit::def_data(&k.dfg, d.operands[3 + i])?;
            let zero = match &init.lead {
                Some(Attr::Expr(e)) => match &e.kind {
                    ExprKind::Int(0) => true,
                    ExprKind::Float(f) => f.0 == 0.0,
                    _ => false,
                },
                _ => false,
            };
            let ty = &k.dfg.values[res].ty;
            if init.opcode != Opcode::Const || !zero || ty.dtype() != Some(Dtype::F32) {
                return None;
            }
            let shape = ty.shape().filter(|s| !s.is_empty())?;
            if used {
                accs.push((i, shape));
            }
        }
        if accs.is_empty() {
            return None;
        }
        Some(Shape { pos, lp, accs })
    }
}

/// Whether op `o` (or an op nested in it) writes memory or prints: a prologue op that every
/// unit of a tile would repeat.
fn effects(k: &Kernel, o: Op) -> bool {
    let d = &k.dfg.ops[o];
    matches!(d.opcode.effect(), Effect::WritesMemory | Effect::Output)
        || d.regions
            .iter()
            .any(|&r| edit::writes_memory(&k.dfg, r) || edit::prints(&k.dfg, r))
}

/// Whether value `v` is the same in every program: built only from constants, dims, scalar
/// params and pure scalar arithmetic of the kernel body.
fn uniform(k: &Kernel, v: Value) -> bool {
    let Some(o) = edit::def_op(&k.dfg, v) else {
        return false;
    };
    let d = &k.dfg.ops[o];
    let leaf = matches!(d.opcode, Opcode::Const | Opcode::Dim | Opcode::Param);
    let arith = matches!(
        d.opcode,
        Opcode::Add
            | Opcode::Sub
            | Opcode::Mul
            | Opcode::Div
            | Opcode::Rem
            | Opcode::Min
            | Opcode::Max
            | Opcode::Cast
            | Opcode::Shl
            | Opcode::Shr
            | Opcode::And
    );
    let scalar = matches!(k.dfg.values[v].ty, Type::Scalar(_));
    scalar
        && edit::parent_block(&k.dfg, o) == k.body
        && (leaf || (arith && d.operands.iter().all(|&x| uniform(k, x))))
}
