//! Facts read off the IR that planning and lowering share: an attribute's literal, and which
//! operand tiles a wgmma can read from shared memory (def-use queries are `kir_ir::edit`'s).

use kir_ir::{Attr, ExprKind, Kernel, OpData, Opcode, Value};

/// The literal value of an `Attr::Expr`.
pub fn lit(a: Option<&Attr>) -> Option<f64> {
    match a {
        Some(Attr::Expr(e)) => match &e.kind {
            ExprKind::Int(i) => Some(*i as f64),
            ExprKind::Float(x) => Some(x.0),
            _ => None,
        },
        _ => None,
    }
}

/// An operand tile a wgmma can read: a `load` (copied into shared memory where it is used),
/// or a `smem_read` of a stage buffer whose every read reaches a dot the same way (the buffer
/// then holds the core layout for every stage).
pub fn tile_source(k: &Kernel, o: &OpData) -> bool {
    match o.opcode {
        Opcode::Load => true,
        // Every read of the buffer must reach a dot the same way this one does (`dot_overlap`
        // reads K's stages twice: its peeled first dot and its `dot_async`).
        Opcode::SmemRead => o.operands.first().is_some_and(|&buf| {
            let role = |x: &OpData| x.results.first().and_then(|&r| dot_role(k, r));
            let mine = role(o);
            mine.is_some()
                && k.dfg
                    .ops
                    .values()
                    .filter(|x| x.opcode == Opcode::SmemRead && x.operands.first() == Some(&buf))
                    .all(|x| role(x) == mine && k.dfg.ty(x.results[0]) == k.dfg.ty(o.results[0]))
        }),
        _ => false,
    }
}

/// How a stage read `v` reaches a dot: (through a `transpose`, operand index), when its one use
/// is a dot or `dot_async` operand, directly or through one single-use `transpose`.
fn dot_role(k: &Kernel, v: Value) -> Option<(bool, usize)> {
    let single_use = |v: Value| {
        let mut uses =
            k.dfg.ops.values().filter(|o| {
                o.operands.contains(&v) || o.attr("mask") == Some(&kir_ir::Attr::Value(v))
            });
        let first = uses.next();
        if uses.next().is_some() {
            return None;
        }
        first
    };
    // An A operand that several dots read alike (`dot_overlap`'s peeled dot and its
    // `dot_async` on q read once in a warp-specialized consumer).
    let users: Vec<&OpData> = k
        .dfg
        .ops
        .values()
        .filter(|o| o.uses().contains(&v))
        .collect();
    if users.len() > 1
        && users.iter().all(|u| {
            matches!(u.opcode, Opcode::Dot | Opcode::DotAsync)
                && u.operands.first() == Some(&v)
                && u.uses().iter().filter(|&&x| x == v).count() == 1
        })
    {
        return Some((false, 0));
    }
    let u = single_use(v)?;
    match u.opcode {
        Opcode::Dot | Opcode::DotAsync => {
            let i = u.operands.iter().position(|&x| x == v)?;
            (i < 2).then_some((false, i))
        }
        Opcode::Transpose => {
            let t = *u.results.first()?;
            let d = single_use(t)?;
            let i = d.operands.iter().position(|&x| x == t)?;
            (matches!(d.opcode, Opcode::Dot | Opcode::DotAsync) && i < 2).then_some((true, i))
        }
        _ => None,
    }
}

/// A load without a mask, or a stage read whose buffer only unmasked copies fill.
pub fn unmasked(k: &Kernel, o: &OpData) -> bool {
    match o.opcode {
        Opcode::SmemRead => k.dfg.ops.values().all(|x| {
            x.opcode != Opcode::AsyncCopy
                || x.operands.first() != o.operands.first()
                || x.attr("mask").is_none()
        }),
        _ => o.attr("mask").is_none(),
    }
}
