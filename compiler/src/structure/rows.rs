//! The classification of kernels without dots (docs/configs.md, "Classes"): a row reduction
//! (a norm's statistics: one row per program, its columns walked in chunks whose one-row tiles
//! are summed along the row) and an elementwise tile (one 2-D tile per program, loaded,
//! combined and stored, with no loop and no reduction). As for the dot classes, only the IR's
//! structure is read: the tiles' dims name the constants that play the roles.

use super::types::{Features, Found, KernelKind, Role};
use super::view::View;
use kir_ir::{Attr, Block, Expr, Op, Opcode};
use std::collections::BTreeSet;

/// The class of a kernel with no dot, if it has one of the two shapes.
pub fn classify(v: &View) -> Option<Found> {
    let ops = live_ops(v, v.kernel.body);
    if ops.iter().any(|o| v.op(*o).opcode == Opcode::Dot) {
        return None;
    }
    row_reduce(v, &ops).or_else(|| elementwise(v, &ops))
}

/// Every live op of block `b` and of the regions nested in it, in program order.
fn live_ops(v: &View, b: Block) -> Vec<Op> {
    let mut out = Vec::new();
    for &op in v.ops(b) {
        out.push(op);
        for &r in &v.op(op).regions {
            out.extend(live_ops(v, r));
        }
    }
    out
}

/// A dim that is the literal 1 (not a constant that happens to be 1).
fn literal_one(v: &View, e: &Expr) -> bool {
    v.const_name(e).is_none() && v.int(e) == Some(1)
}

/// The loaded tensors and the dtype of the first tile loaded.
fn loads(v: &View, ops: &[Op]) -> (usize, String) {
    let mut tensors = BTreeSet::new();
    let mut dtype = None;
    for &o in ops {
        let d = v.op(o);
        if d.opcode != Opcode::Load {
            continue;
        }
        if let Some(t) = &d.tensor {
            tensors.insert(t.param.clone());
        }
        if dtype.is_none() && v.dims(d.results[0]).len() == 2 {
            dtype = v.dtype(d.results[0]);
        }
    }
    (tensors.len(), dtype.unwrap_or_default())
}

/// Row reduction: at least one reduction along axis 1, every one of them of a tile whose
/// rows are the literal 1 (one row per program) or the same bare constant (the row block: rows
/// per program) and whose columns are the same constant (the column block, a chunk of the
/// row). Reductions along axis 0 of tiles of the same dims (a backward's partial column sums)
/// may sit beside them. A reduction of a loop's result is a running sum over the row's chunks;
/// any other takes a chunk on its own ([`Features::whole_row`]).
fn row_reduce(v: &View, ops: &[Op]) -> Option<Found> {
    // (rows: None for the literal 1, else the constant; columns)
    let mut tile: Option<(Option<String>, Option<String>)> = None;
    let mut axis0: Vec<Vec<Expr>> = vec![];
    let mut whole_row = false;
    let mut chained = false;
    for &o in ops {
        let d = v.op(o);
        if d.opcode != Opcode::Reduce {
            continue;
        }
        let axis = match d.attr("axis") {
            Some(Attr::Expr(e)) => v.int(e),
            _ => None,
        };
        let dims = v.dims(d.operands[0]);
        if dims.len() != 2 {
            return None;
        }
        match axis {
            Some(1) => {}
            Some(0) => {
                axis0.push(dims);
                continue;
            }
            _ => return None,
        }
        let rows = if literal_one(v, &dims[0]) {
            None
        } else {
            Some(v.const_name(&dims[0])?)
        };
        let own = v.opcode(d.operands[0]) != Some(Opcode::For);
        whole_row |= own;
        chained |= own && fed_by_reduce(v, d.operands[0]);
        let this = (rows, v.const_name(&dims[1]));
        match &tile {
            None => tile = Some(this),
            Some(prev) if *prev == this => {}
            Some(_) => return None,
        }
    }
    let (rows, columns) = tile?;
    // Column sums only of the row tile itself.
    let named = |e: &Expr| v.const_name(e);
    if axis0
        .iter()
        .any(|d| named(&d[0]) != rows || named(&d[1]) != columns)
    {
        return None;
    }
    let (inputs, dtype) = loads(v, ops);
    let features = Features {
        dtype,
        inputs,
        whole_row,
        chained,
        row_block: rows.is_some(),
        ..Features::default()
    };
    let mut roles = vec![(Role::ColumnBlock, columns)];
    if let Some(r) = rows {
        roles.insert(0, (Role::RowBlock, Some(r)));
    }
    Some((KernelKind::RowReduce, roles, features))
}

/// Whether value `x` is computed, in straight-line code, from the result of a reduction (the
/// operands of its defining ops followed back, not through loops or block arguments).
fn fed_by_reduce(v: &View, x: kir_ir::Value) -> bool {
    let mut seen = BTreeSet::new();
    let mut stack = vec![x];
    while let Some(x) = stack.pop() {
        if !seen.insert(x) || seen.len() > 256 {
            continue;
        }
        let Some((_, d)) = v.def(x) else { continue };
        match d.opcode {
            Opcode::Reduce => return true,
            Opcode::For | Opcode::If | Opcode::Load => {}
            _ => stack.extend(d.operands.iter().copied()),
        }
    }
    false
}

/// Elementwise: no loop and no reduction; every load and store moves a 2-D tile of the same
/// dims, whose rows and columns are the row and column blocks.
fn elementwise(v: &View, ops: &[Op]) -> Option<Found> {
    let mut tile: Option<Vec<Expr>> = None;
    let mut moves = 0;
    for &o in ops {
        let d = v.op(o);
        let dims = match d.opcode {
            Opcode::For
            | Opcode::Reduce
            | Opcode::AtomicAdd
            | Opcode::SemWait
            | Opcode::SemSignal => return None,
            Opcode::Load => v.dims(d.results[0]),
            Opcode::Store => v.dims(*d.operands.first()?),
            _ => continue,
        };
        if dims.len() != 2 {
            return None;
        }
        moves += 1;
        match &tile {
            None => tile = Some(dims),
            Some(t) if same_dims(v, t, &dims) => {}
            Some(_) => return None,
        }
    }
    let tile = tile?;
    if moves < 2 {
        return None;
    }
    let (inputs, dtype) = loads(v, ops);
    let roles = vec![
        (Role::RowBlock, v.const_name(&tile[0])),
        (Role::ColumnBlock, v.const_name(&tile[1])),
    ];
    let features = Features {
        dtype,
        inputs,
        ..Features::default()
    };
    Some((KernelKind::Elementwise, roles, features))
}

/// Whether two tiles' dims name the same constants (or the same literals).
fn same_dims(v: &View, a: &[Expr], b: &[Expr]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| match (v.const_name(x), v.const_name(y)) {
                (Some(p), Some(q)) => p == q,
                (None, None) => v.int(x).is_some() && v.int(x) == v.int(y),
                _ => false,
            })
}
