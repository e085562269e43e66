//! Tests of the editing toolkit on parsed kernels: def-use queries, use rewriting, building ops,
//! CSE, DCE and loop merging, each checked by the verifier afterwards.

use super::*;
use crate::entities::Value;
use crate::module::{Kernel, Module};
use crate::ops::Opcode;
use crate::text::parse;
use crate::verifier::verify;
use std::collections::HashSet;

const SRC: &str = r#"
module edit

kernel @k(x: in tensor<f32>[64], y: inout tensor<f32>[64]) grid [1, 1, 1] {
  %zero = const 0 : i32
  %one = const 1 : i32
  %four = const 4 : i32
  %a = load x[0] : tile<64xf32>
  %b = add %a, %a : tile<64xf32>
  %c = add %a, %a : tile<64xf32>
  %dead = mul %b, %b : tile<64xf32>
  %s = for %i = %zero to %four step %one iter(%acc = %b) : tile<64xf32> {
    %n = add %acc, %c : tile<64xf32>
    yield %n
  }
  %t = for %j = %zero to %four step %one iter(%acc2 = %c) : tile<64xf32> {
    %n2 = mul %acc2, %a : tile<64xf32>
    yield %n2
  }
  %sum = add %s, %t : tile<64xf32>
  store y[0], %sum
}
"#;

fn module() -> Module {
    let m = parse(SRC).unwrap_or_else(|e| panic!("parse failed: {e:?}"));
    verify(&m).expect("the test kernel verifies");
    m
}

fn kernel(m: &mut Module) -> &mut Kernel {
    m.kernels.values_mut().next().expect("one kernel")
}

/// The value named `%name`.
fn named(k: &Kernel, name: &str) -> Value {
    k.dfg
        .values
        .iter()
        .find(|(_, d)| d.name.as_deref() == Some(name))
        .map(|(v, _)| v)
        .unwrap_or_else(|| panic!("no %{name}"))
}

fn count(k: &Kernel, opc: Opcode) -> usize {
    let mut ops = HashSet::new();
    ops_in(&k.dfg, k.body, &mut ops);
    ops.iter().filter(|&&o| k.dfg.ops[o].opcode == opc).count()
}

#[test]
fn def_use_queries() {
    let mut m = module();
    let k = kernel(&mut m);
    let (a, b, s, acc) = (named(k, "a"), named(k, "b"), named(k, "s"), named(k, "acc"));
    assert_eq!(def_data(&k.dfg, a).map(|d| d.opcode), Some(Opcode::Load));
    assert_eq!(
        def_op(&k.dfg, acc),
        None,
        "a block argument has no defining op"
    );
    // %a: twice by %b, twice by %c, once by %n2.
    assert_eq!(use_count(&k.dfg, a), 5);
    assert_eq!(users(&k.dfg, a).len(), 3);
    let l = def_op(&k.dfg, s).expect("the loop");
    assert_eq!(parent_block(&k.dfg, l), k.body);
    let inner = k.dfg.ops[l].regions[0];
    assert!(reads_deep(&k.dfg, l, named(k, "c")));
    assert!(!reads_deep(&k.dfg, l, a));
    assert!(uses_deep(&k.dfg, l).contains(&b));
    // The loop body reads %c from outside (its own %acc and %n are defined inside).
    assert_eq!(region_inputs(&k.dfg, inner), vec![named(k, "c"),]);
    assert!(contains(&k.dfg, k.body, &|od| od.opcode == Opcode::Yield));
    assert!(!writes_memory(&k.dfg, inner));
    assert!(writes_memory(&k.dfg, k.body));
    let top = k.dfg.blocks[k.body].ops.clone();
    let forbid = HashSet::new();
    let slice = slice_among(k, &[named(k, "dead")], &top, &forbid).expect("pure");
    assert_eq!(slice.len(), 3, "load, add, mul");
    assert!(slice_among(k, &[named(k, "dead")], &top, &HashSet::from([a])).is_none());
}

#[test]
fn cse_dce_and_replace() {
    let mut m = module();
    let k = kernel(&mut m);
    let (b, c) = (named(k, "b"), named(k, "c"));
    cse(k);
    assert_eq!(use_count(&k.dfg, c), 0, "%c merged into %b");
    assert!(use_count(&k.dfg, b) > 0);
    let muls = count(k, Opcode::Mul);
    dce(k);
    assert_eq!(count(k, Opcode::Mul), muls - 1, "the unused %dead is gone");
    assert_eq!(count(k, Opcode::Store), 1, "stores stay");
    let a = named(k, "a");
    let fresh = iconst(k, k.body, 7);
    let last = k.dfg.blocks[k.body].ops.pop().expect("the const");
    k.dfg.blocks[k.body].ops.insert(0, last);
    replace_uses(&mut k.dfg, a, a, None);
    assert_eq!(
        def_data(&k.dfg, fresh).map(|d| d.opcode),
        Some(Opcode::Const)
    );
    verify(&m).expect("still verifies");
}

#[test]
fn merging_loops() {
    let mut m = module();
    let k = kernel(&mut m);
    assert_eq!(merge_loops(k), 1);
    assert_eq!(count(k, Opcode::For), 1);
    let l = def_op(&k.dfg, named(k, "s")).expect("the merged loop");
    assert_eq!(k.dfg.ops[l].results.len(), 2);
    verify(&m).expect("the merged loop verifies");
}

#[test]
fn building_and_cloning() {
    let mut m = module();
    let k = kernel(&mut m);
    let (zero, one) = (named(k, "zero"), named(k, "one"));
    let body = k.body;
    let pos = k.dfg.blocks[body].ops.len() - 1;
    let r = insert_op(
        &mut k.dfg,
        body,
        pos,
        simple(Opcode::Add, vec![zero, one], None),
        vec![(crate::types::Type::scalar(crate::dtype::Dtype::I32), None)],
    );
    let lt = op2(
        k,
        body,
        Opcode::Cmp,
        Some(crate::ops::CmpPred::Lt),
        r[0],
        one,
        crate::dtype::Dtype::I1,
    );
    let then = yield_block(&mut k.dfg, vec![], vec![]);
    let els = yield_block(&mut k.dfg, vec![], vec![]);
    let iff = append_if(&mut k.dfg, body, lt, then, els, vec![]);
    // Keep the body's terminator last.
    let ops = &mut k.dfg.blocks[body].ops;
    let moved: Vec<_> = ops.drain(ops.len() - 2..).collect();
    let term = ops.pop().expect("the terminator");
    ops.extend(moved);
    ops.push(term);
    assert_eq!(parent_block(&k.dfg, iff), body);
    let l = def_op(&k.dfg, named(k, "s")).expect("the loop");
    let init = named(k, "b");
    let ty = k.dfg.ty(init).clone();
    let (arg, res) = add_carried(&mut k.dfg, l, init, ty, Some("extra".into()));
    let y = *k.dfg.blocks[k.dfg.ops[l].regions[0]]
        .ops
        .last()
        .expect("yield");
    k.dfg.ops[y].operands.push(arg);
    assert_eq!(k.dfg.ops[l].results.last(), Some(&res));
    verify(&m).expect("built ops verify");
    // Clone the first loop into a copy of the kernel, renaming nothing.
    let src = kernel(&mut m).clone();
    let mut dst = src.clone();
    let mut cl = Cloner::new(&src.dfg);
    let body = dst.body;
    let before = dst.dfg.ops.len();
    let l = def_op(&src.dfg, named(&src, "s")).expect("the loop");
    let new = cl.op(&mut dst.dfg, body, l);
    assert!(dst.dfg.ops.len() > before);
    assert_eq!(dst.dfg.ops[new].opcode, Opcode::For);
    assert_eq!(cl.vmap.len(), 6, "3 block args, %n and 2 results");
}

#[test]
fn renaming_expressions() {
    let e = crate::expr::Expr {
        kind: crate::expr::ExprKind::Ident("N".into()),
        span: Default::default(),
    };
    let r = rename_expr(&e, &|n| (n == "N").then(|| "M".to_string()));
    assert_eq!(format!("{r}"), "M");
}
