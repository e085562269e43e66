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
    /// The kernel's K loop if the pass can split it (the module doc's conditions), else why
    /// not (a phrase that follows "cannot share out its last tiles by K iterations: ").
    pub(super) fn of(k: &Kernel) -> Result<Shape, String> {
        let body = &k.dfg.blocks[k.body].ops;
        let fors: Vec<usize> = (0..body.len())
            .filter(|&i| k.dfg.ops[body[i]].opcode == Opcode::For)
            .collect();
        let [pos] = fors[..] else {
            return Err(format!(
                "its body holds {} top-level loops, not one K loop",
                fors.len()
            ));
        };
        let lp = body[pos];
        let d = &k.dfg.ops[lp];
        if body[..pos].iter().any(|&o| effects(k, o)) {
            return Err("an op before its K loop writes memory or prints".into());
        }
        let lb = d.regions[0];
        if edit::writes_memory(&k.dfg, lb) || edit::prints(&k.dfg, lb) {
            return Err("its K loop writes memory or prints".into());
        }
        if !uniform(k, d.operands[0]) || !uniform(k, d.operands[1]) {
            return Err("its K loop's bounds depend on the tile".into());
        }
        let step = edit::def_data(&k.dfg, d.operands[2]).and_then(kir_ir::edit::fold::const_int);
        if step.is_none_or(|s| s <= 0) {
            return Err("its K loop's step is not a positive constant".into());
        }
        let Some(&last) = k.dfg.blocks[lb].ops.last() else {
            return Err("its K loop has no body".into());
        };
        let yield_vals = k.dfg.ops[last].operands.clone();
        let not_sum = |i: usize| {
            let name = d
                .results
                .get(i)
                .and_then(|&r| k.dfg.values[r].name.clone())
                .map_or(format!("value {i}"), |n| format!("`%{n}`"));
            format!(
                "its K loop carries {name}, which is not a zero f32 tile that only one `dot` \
                 accumulates into (a sum over the loop's iterations)"
            )
        };
        let mut accs = vec![];
        for (i, &res) in d.results.iter().enumerate() {
            let arg = k.dfg.blocks[lb].args[i + 1];
            let Some(&next) = yield_vals.get(i) else {
                return Err(not_sum(i));
            };
            let used = edit::use_count(&k.dfg, res) > 0;
            if next == arg {
                if used {
                    return Err(not_sum(i));
                }
                continue;
            }
            // next = dot(a, b, arg), and arg has no other use.
            let summed = edit::def_data(&k.dfg, next).is_some_and(|nd| {
                nd.opcode == Opcode::Dot
                    && nd.operands.get(2) == Some(&arg)
                    && edit::def_op(&k.dfg, next)
                        .is_some_and(|o| edit::parent_block(&k.dfg, o) == lb)
                    && edit::use_count(&k.dfg, arg) == 1
                    && edit::use_count(&k.dfg, next) == 1
            });
            let zero = edit::def_data(&k.dfg, d.operands[3 + i]).is_some_and(|init| {
                init.opcode == Opcode::Const
                    && match &init.lead {
                        Some(Attr::Expr(e)) => match &e.kind {
                            ExprKind::Int(0) => true,
                            ExprKind::Float(f) => f.0 == 0.0,
                            _ => false,
                        },
                        _ => false,
                    }
            });
            let ty = &k.dfg.values[res].ty;
            let shape = ty.shape().filter(|s| !s.is_empty());
            let Some(shape) = shape.filter(|_| summed && zero && ty.dtype() == Some(Dtype::F32))
            else {
                return Err(not_sum(i));
            };
            if used {
                accs.push((i, shape));
            }
        }
        if accs.is_empty() {
            return Err("its epilogue reads no accumulator of its K loop".into());
        }
        Ok(Shape { pos, lp, accs })
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
