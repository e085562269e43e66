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
        // Every read of the buffer must reach dots the same ways this one does (`dot_overlap`
        // reads K's stages twice: its peeled first dot and its `dot_async`).
        Opcode::SmemRead => o.operands.first().is_some_and(|&buf| {
            let role = |x: &OpData| x.results.first().and_then(|&r| dot_reads(k, r));
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

/// How a tile `v` reaches dots: one (through a `transpose`, operand index) per use, sorted, when
/// every use is operand 0 or 1 of a `dot` or `dot_async` (once per dot), directly or through a
/// `transpose` whose one use is such an operand; `None` when some use is anything else. A tile
/// may reach several dots in several ways (attention_bwd's q: the B of qᵀ through a transpose
/// and the B of dSᵀ·q directly): the 128B-swizzled core layout of a [rows, cols] tile does not
/// depend on how a dot reads it, only the descriptors do.
pub fn dot_reads(k: &Kernel, v: Value) -> Option<Vec<(bool, usize)>> {
    let users = |v: Value| -> Vec<&OpData> {
        k.dfg
            .ops
            .values()
            .filter(|o| o.uses().contains(&v))
            .collect()
    };
    let as_operand = |u: &OpData, v: Value| -> Option<usize> {
        let i = u.operands.iter().position(|&x| x == v)?;
        (matches!(u.opcode, Opcode::Dot | Opcode::DotAsync)
            && i < 2
            && u.uses().iter().filter(|&&x| x == v).count() == 1)
            .then_some(i)
    };
    let mut out = Vec::new();
    for u in users(v) {
        let read = match u.opcode {
            Opcode::Transpose => {
                let t = *u.results.first()?;
                match users(t).as_slice() {
                    [d] => (true, as_operand(d, t)?),
                    _ => return None,
                }
            }
            _ => (false, as_operand(u, v)?),
        };
        out.push(read);
    }
    out.sort_unstable();
    (!out.is_empty()).then_some(out)
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
