//! Building ops and blocks: plain ops, integer constants and binary ops, ops inserted at a
//! position, `if` ops and their `yield`-terminated regions, and values carried by a `for`.

use crate::dtype::Dtype;
use crate::entities::{Block, Op, Value};
use crate::expr::Expr;
use crate::module::{Dfg, Kernel, OpData, ValueData, ValueDef};
use crate::ops::{Attr, CmpPred, Opcode};
use crate::span::Span;
use crate::types::Type;

/// A plain op with operands and optional lead, no tensor, attrs or regions.
pub fn simple(opcode: Opcode, operands: Vec<Value>, lead: Option<Attr>) -> OpData {
    OpData {
        opcode,
        results: vec![],
        operands,
        lead,
        tensor: None,
        attrs: vec![],
        regions: vec![],
        doc: vec![],
        span: Span::default(),
    }
}

/// Appends an i32 scalar `const v` to block `b`; returns its value.
pub fn iconst(k: &mut Kernel, b: Block, v: i64) -> Value {
    let op = simple(Opcode::Const, vec![], Some(Attr::Expr(Expr::int(v))));
    let id = k
        .dfg
        .append_op(b, op, vec![(Type::scalar(Dtype::I32), None)]);
    k.dfg.ops[id].results[0]
}

/// Appends a binary op, or a compare with predicate `lead`, of scalar type `d` to block `b`;
/// returns its value.
pub fn op2(
    k: &mut Kernel,
    b: Block,
    opc: Opcode,
    lead: Option<CmpPred>,
    x: Value,
    y: Value,
    d: Dtype,
) -> Value {
    let l = lead.map(Attr::Cmp);
    let id = k
        .dfg
        .append_op(b, simple(opc, vec![x, y], l), vec![(Type::scalar(d), None)]);
    k.dfg.ops[id].results[0]
}

/// Appends an op to block `b` and moves it to position `pos`; returns its results.
pub fn insert_op(
    dfg: &mut Dfg,
    b: Block,
    pos: usize,
    op: OpData,
    types: Vec<(Type, Option<String>)>,
) -> Vec<Value> {
    let id = dfg.append_op(b, op, types);
    let last = dfg.blocks[b].ops.pop();
    if let Some(last) = last {
        dfg.blocks[b].ops.insert(pos, last);
    }
    dfg.ops[id].results.clone()
}

/// Moves every op of block `from` (a scratch block the caller built) into block `parent`, in
/// order, right before its op `at` (`after`: right after it). Panics if `at` is not in `parent`.
pub fn splice_ops(dfg: &mut Dfg, parent: Block, at: Op, from: Block, after: bool) {
    let ops = std::mem::take(&mut dfg.blocks[from].ops);
    let pos = dfg.blocks[parent]
        .ops
        .iter()
        .position(|&o| o == at)
        .expect("the op is in the block")
        + usize::from(after);
    dfg.blocks[parent].ops.splice(pos..pos, ops);
}

/// Appends `if cond` to block `b` with regions `then` and `els` (each already ending with its
/// `yield`) and one result per type of `types`; returns the op.
pub fn append_if(
    dfg: &mut Dfg,
    b: Block,
    cond: Value,
    then: Block,
    els: Block,
    types: Vec<(Type, Option<String>)>,
) -> Op {
    let mut iff = simple(Opcode::If, vec![cond], None);
    iff.regions = vec![then, els];
    dfg.append_op(b, iff, types)
}

/// A new block holding `ops` (moved in as they are) and ending with `yield vals`.
pub fn yield_block(dfg: &mut Dfg, ops: Vec<Op>, vals: Vec<Value>) -> Block {
    let blk = dfg.new_block();
    dfg.blocks[blk].ops = ops;
    dfg.append_op(blk, simple(Opcode::Yield, vals, None), vec![]);
    blk
}

/// Adds a carried value to `for` op `l`: `init` becomes its initial value, and a new block
/// argument and a new result of type `ty` are created and returned (argument, result). The
/// caller must append the next value to the body's `yield`.
pub fn add_carried(
    dfg: &mut Dfg,
    l: Op,
    init: Value,
    ty: Type,
    name: Option<String>,
) -> (Value, Value) {
    let body = dfg.ops[l].regions[0];
    dfg.ops[l].operands.push(init);
    let arg = dfg.add_block_arg(body, ty.clone(), name.clone(), Span::default());
    let idx = dfg.ops[l].results.len() as u32;
    let res = dfg.values.push(ValueData {
        ty,
        name,
        def: ValueDef::Result(l, idx),
        span: Span::default(),
    });
    dfg.ops[l].results.push(res);
    (arg, res)
}
