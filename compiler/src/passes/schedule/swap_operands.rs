//! `swap_operands`: a dot loop whose accumulator has few rows computes the accumulator's
//! transpose instead, so that the matrix units take the operand with many rows as their M.
//!
//! For a `for` whose carried value `c` is read only by one `dot a, b, c` of the body, whose
//! result is yielded back in its place (a GEMM's K loop), the loop carries cᵀ instead: the dot
//! becomes `dot bᵀ, aᵀ, cᵀ` (the transpose of an operand that is itself a `transpose` read by
//! this dot alone is that transpose's operand), the loop starts from `transpose(init)` (a
//! constant init is made again with the transposed type), and the loop's result is
//! transposed back right after the loop for the ops that read it.
//!
//! Why: on sm_90a a warpgroup's wgmma has 64 rows (M) and N from 8 to 256. A GEMM with
//! M = 16 (a decode step's activations times a weight) would run 64-row tiles of which 48 rows
//! are padding; swapped, the weight's columns are the 64-row M and the 16 rows are N. cuBLAS
//! runs such shapes swapped too (docs/benchmarks.md, "GEMM against cuBLAS").
//!
//! Semantics: transposition moves elements and each element of the product is the same sum of
//! the same products in the same order (k ascending), so the module computes exactly what it
//! computed before (tests/tests/swap_operands.rs runs both on the interpreter, bit for bit).
//! Kernels already scheduled (rings, warp roles) are left as they are.

use kir_ir::edit::{def_data, insert_op, replace_uses, simple, use_count};
use kir_ir::{Block, Diagnostics, Kernel, Module, Op, Opcode, Type, Value};

/// `m` with every qualifying dot loop's accumulator transposed (see the module doc).
pub fn swap_operands(m: &Module) -> Result<Module, Diagnostics> {
    let mut out = m.clone();
    for k in out.kernels.values_mut() {
        let scheduled = k.dfg.ops.values().any(|d| {
            matches!(
                d.opcode,
                Opcode::SmemAlloc | Opcode::MbarAlloc | Opcode::WarpSpecialize
            )
        });
        if scheduled {
            continue;
        }
        let found = accumulators(k);
        for &(parent, l, i, dot) in &found {
            swap(k, parent, l, i, dot);
        }
        if !found.is_empty() {
            kir_ir::renumber::renumber_kernel(k);
        }
    }
    Ok(out)
}

/// The reversed dims of a 2-D tile type (`None` for anything else).
fn transposed(t: &Type) -> Option<Type> {
    match t {
        Type::Tile(dims, e) if dims.len() == 2 => Some(Type::Tile(
            vec![dims[1].clone(), dims[0].clone()],
            e.clone(),
        )),
        _ => None,
    }
}

/// Every (block, `for` op, carried index, dot) of the kernel's body whose carried value `i`
/// (1-based among the body's arguments) is read only by that dot's accumulator operand, in the
/// loop's own body, and whose result is read only by the `yield` at position `i − 1`.
fn accumulators(k: &Kernel) -> Vec<(Block, Op, usize, Op)> {
    let mut out = vec![];
    let parent = k.body;
    for &l in &k.dfg.blocks[parent].ops {
        let od = &k.dfg.ops[l];
        if od.opcode != Opcode::For {
            continue;
        }
        let body = od.regions[0];
        let Some(&last) = k.dfg.blocks[body].ops.last() else {
            continue;
        };
        let y = &k.dfg.ops[last];
        if y.opcode != Opcode::Yield {
            continue;
        }
        for i in 1..k.dfg.blocks[body].args.len() {
            let arg = k.dfg.blocks[body].args[i];
            let Some(&yv) = y.operands.get(i - 1) else {
                continue;
            };
            let dot = k.dfg.blocks[body].ops.iter().copied().find(|&o| {
                let d = &k.dfg.ops[o];
                d.opcode == Opcode::Dot && d.results.first() == Some(&yv) && d.operands[2] == arg
            });
            let Some(dot) = dot else { continue };
            let d = &k.dfg.ops[dot];
            let two_d = [d.operands[0], d.operands[1], yv]
                .iter()
                .all(|&v| transposed(k.dfg.ty(v)).is_some());
            if two_d && use_count(&k.dfg, arg) == 1 && use_count(&k.dfg, yv) == 1 {
                out.push((parent, l, i, dot));
            }
        }
    }
    out
}

/// Rewrites carried value `i` of loop `l` (in block `parent`) and its `dot` (see the module doc).
fn swap(k: &mut Kernel, parent: Block, l: Op, i: usize, dot: Op) {
    let body = k.dfg.ops[l].regions[0];
    // The operands, transposed: a transpose read only here is dropped, else one is added.
    let (a, b) = (k.dfg.ops[dot].operands[0], k.dfg.ops[dot].operands[1]);
    let bt = transpose_in(k, body, dot, b);
    let at = transpose_in(k, body, dot, a);
    let arg = k.dfg.blocks[body].args[i];
    let r = k.dfg.ops[dot].results[0];
    for v in [arg, r] {
        let t = transposed(k.dfg.ty(v)).expect("a 2-D accumulator");
        k.dfg.values[v].ty = t;
    }
    k.dfg.ops[dot].operands[0] = bt;
    k.dfg.ops[dot].operands[1] = at;
    // The init: a constant (a splat of one value) is made again with the transposed type, any
    // other value is transposed before the loop.
    let init = k.dfg.ops[l].operands[3 + i - 1];
    let init_t = transposed(k.dfg.ty(init)).expect("a 2-D init");
    let op = match def_data(&k.dfg, init).filter(|d| d.opcode == Opcode::Const) {
        Some(c) => simple(Opcode::Const, vec![], c.lead.clone()),
        None => simple(Opcode::Transpose, vec![init], None),
    };
    let pos = position(k, parent, l);
    let v = insert_op(&mut k.dfg, parent, pos, op, vec![(init_t, None)])[0];
    k.dfg.ops[l].operands[3 + i - 1] = v;
    // The loop's result, transposed back after the loop for its readers.
    let res = k.dfg.ops[l].results[i - 1];
    let orig = k.dfg.ty(res).clone();
    k.dfg.values[res].ty = transposed(&orig).expect("a 2-D result");
    let pos = position(k, parent, l) + 1;
    let back = insert_op(
        &mut k.dfg,
        parent,
        pos,
        simple(Opcode::Transpose, vec![res], None),
        vec![(orig, None)],
    )[0];
    let back_op = k.dfg.blocks[parent].ops[pos];
    replace_uses(&mut k.dfg, res, back, Some(back_op));
}

/// The position of op `o` in block `b`.
fn position(k: &Kernel, b: Block, o: Op) -> usize {
    k.dfg.blocks[b]
        .ops
        .iter()
        .position(|&x| x == o)
        .expect("the op is in its block")
}

/// `v` transposed, for the dot `dot` in block `b`: the operand of a `transpose` that only this
/// dot reads (the transpose is removed), else a new `transpose` right before the dot.
fn transpose_in(k: &mut Kernel, b: Block, dot: Op, v: Value) -> Value {
    let only_here = use_count(&k.dfg, v) == 1;
    if let Some(d) = def_data(&k.dfg, v).filter(|d| d.opcode == Opcode::Transpose && only_here) {
        let src = d.operands[0];
        if let Some(t) = kir_ir::edit::def_op(&k.dfg, v) {
            k.dfg.blocks[b].ops.retain(|&x| x != t);
        }
        return src;
    }
    let t = transposed(k.dfg.ty(v)).expect("a 2-D operand");
    let pos = position(k, b, dot);
    insert_op(
        &mut k.dfg,
        b,
        pos,
        simple(Opcode::Transpose, vec![v], None),
        vec![(t, None)],
    )[0]
}
