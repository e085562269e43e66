//! Unit tests of the verifier on modules built with the `Dfg` API: a well-formed kernel verifies,
//! each structural/scoping/module-level error class is reported, and errors are all collected.

use super::verify;
use crate::entities::{Block, Op, Value};
use crate::expr::Expr;
use crate::module::*;
use crate::ops::{Attr, Opcode};
use crate::span::Span;
use crate::types::{ElemType, Type};
use crate::Dtype::{self, F32, I1, I32};
use cranelift_entity::PrimaryMap;

/// An op with nothing but an opcode and operands.
pub(super) fn op(opcode: Opcode, operands: &[Value]) -> OpData {
    OpData {
        opcode,
        results: vec![],
        operands: operands.to_vec(),
        lead: None,
        tensor: None,
        attrs: vec![],
        regions: vec![],
        doc: vec![],
        span: Span::default(),
    }
}

/// Builds one kernel body.
pub(super) struct Kb {
    pub dfg: Dfg,
    pub body: Block,
}

impl Kb {
    pub fn new() -> Kb {
        let mut dfg = Dfg::default();
        let body = dfg.new_block();
        Kb { dfg, body }
    }

    /// Appends `o` to `blk` with result types `tys`; returns the op and its results.
    pub fn add(&mut self, blk: Block, o: OpData, tys: &[Type]) -> (Op, Vec<Value>) {
        let id = self
            .dfg
            .append_op(blk, o, tys.iter().map(|t| (t.clone(), None)).collect());
        (id, self.dfg.ops[id].results.clone())
    }

    /// Appends a one-result op.
    pub fn one(&mut self, blk: Block, o: OpData, ty: Type) -> Value {
        self.add(blk, o, &[ty]).1[0]
    }

    pub fn yield_(&mut self, blk: Block, vals: &[Value]) -> Op {
        self.add(blk, op(Opcode::Yield, vals), &[]).0
    }

    pub fn pid(&mut self) -> Value {
        let mut o = op(Opcode::ProgramId, &[]);
        o.lead = Some(Attr::Expr(Expr::int(0)));
        self.one(self.body, o, s(I32))
    }

    pub fn konst(&mut self, blk: Block, v: i64, ty: Type) -> Value {
        let mut o = op(Opcode::Const, &[]);
        o.lead = Some(Attr::Expr(Expr::int(v)));
        self.one(blk, o, ty)
    }
}

pub(super) fn s(d: Dtype) -> Type {
    Type::scalar(d)
}

pub(super) fn t(shape: &[usize], d: Dtype) -> Type {
    Type::tile(shape, d)
}

/// A span that identifies a test item.
pub(super) fn at(n: usize) -> Span {
    Span::new(n, n + 1)
}

pub(super) fn tensor(name: &str, acc: Access, d: Dtype, dims: &[&str]) -> Param {
    let dims = dims
        .iter()
        .map(|n| {
            n.parse::<i64>()
                .map(Expr::int)
                .unwrap_or_else(|_| Expr::ident(n))
        })
        .collect();
    Param::tensor(name, acc, d, dims)
}

pub(super) fn kernel(name: &str, params: Vec<Param>, kb: Kb) -> Kernel {
    Kernel {
        name: name.into(),
        params,
        grid: vec![Expr::int(1), Expr::int(1), Expr::int(1)],
        requires: vec![],
        body: kb.body,
        dfg: kb.dfg,
        doc: vec![],
        span: Span::default(),
    }
}

pub(super) fn module(kernels: Vec<Kernel>) -> Module {
    let mut ks = PrimaryMap::new();
    for k in kernels {
        ks.push(k);
    }
    Module {
        doc: vec![],
        name: "m".into(),
        consts: vec![],
        kernels: ks,
        program: None,
    }
}

/// Every error message of `m` (empty when it verifies).
pub(super) fn errors(m: &Module) -> Vec<String> {
    match verify(m) {
        Ok(()) => vec![],
        Err(d) => d.0.into_iter().map(|d| d.message).collect(),
    }
}

/// Asserts exactly one error, containing `needle`.
pub(super) fn one_error(m: &Module, needle: &str) {
    let e = errors(m);
    assert!(
        e.len() == 1 && e[0].contains(needle),
        "expected one error containing {needle:?}, got {e:#?}"
    );
}

pub(super) fn load(kb: &mut Kb, blk: Block, param: &str, offs: Vec<Offset>, ty: Type) -> Value {
    let mut o = op(Opcode::Load, &[]);
    o.tensor = Some(TensorRef {
        param: param.into(),
        offsets: offs,
        span: Span::default(),
    });
    kb.one(blk, o, ty)
}

pub(super) fn store(kb: &mut Kb, blk: Block, param: &str, offs: Vec<Offset>, v: Value) -> Op {
    let mut o = op(Opcode::Store, &[v]);
    o.tensor = Some(TensorRef {
        param: param.into(),
        offsets: offs,
        span: Span::default(),
    });
    kb.add(blk, o, &[]).0
}

/// `y[pid, 0] = exp(x[pid, 0])` on 1x128 f32 tiles, plus a loop summing 4 tiles.
pub(super) fn good() -> (Kb, Vec<Param>) {
    let mut kb = Kb::new();
    let b = kb.body;
    let p = kb.pid();
    let x = load(
        &mut kb,
        b,
        "x",
        vec![Offset::Value(p), Offset::Expr(Expr::int(0))],
        t(&[1, 128], F32),
    );
    let e = kb.one(b, op(Opcode::Exp, &[x]), t(&[1, 128], F32));
    let (lo, hi, st) = (
        kb.konst(b, 0, s(I32)),
        kb.konst(b, 4, s(I32)),
        kb.konst(b, 1, s(I32)),
    );
    let mut f = op(Opcode::For, &[lo, hi, st, e]);
    let body = kb.dfg.new_block();
    let _iv = kb.dfg.add_block_arg(body, s(I32), None, Span::default());
    let acc = kb
        .dfg
        .add_block_arg(body, t(&[1, 128], F32), None, Span::default());
    let a2 = kb.one(body, op(Opcode::Add, &[acc, x]), t(&[1, 128], F32));
    kb.yield_(body, &[a2]);
    f.regions = vec![body];
    let sum = kb.one(b, f, t(&[1, 128], F32));
    store(
        &mut kb,
        b,
        "y",
        vec![Offset::Value(p), Offset::Expr(Expr::int(0))],
        sum,
    );
    let params = vec![
        tensor("x", Access::In, F32, &["R", "128"]),
        tensor("y", Access::Out, F32, &["R", "128"]),
    ];
    (kb, params)
}

#[test]
fn well_formed_kernel_verifies() {
    let (kb, params) = good();
    assert_eq!(
        errors(&module(vec![kernel("k", params, kb)])),
        Vec::<String>::new()
    );
}

#[test]
fn use_before_definition() {
    let mut kb = Kb::new();
    let b = kb.body;
    let p = kb.pid();
    let (user, _) = kb.add(b, op(Opcode::Neg, &[p]), &[s(I32)]);
    // Move the user in front of the definition of its operand.
    kb.dfg.blocks[b].ops.retain(|&o| o != user);
    kb.dfg.blocks[b].ops.insert(0, user);
    one_error(
        &module(vec![kernel("k", vec![], kb)]),
        "before its definition",
    );
}

#[test]
fn value_escaping_its_region() {
    let mut kb = Kb::new();
    let b = kb.body;
    let c = kb.konst(b, 1, s(I1));
    let mut i = op(Opcode::If, &[c]);
    let (then, els) = (kb.dfg.new_block(), kb.dfg.new_block());
    let inner = kb.konst(then, 3, s(I32));
    kb.yield_(then, &[]);
    kb.yield_(els, &[]);
    i.regions = vec![then, els];
    kb.add(b, i, &[]);
    kb.one(b, op(Opcode::Neg, &[inner]), s(I32));
    one_error(
        &module(vec![kernel("k", vec![], kb)]),
        "defined inside the region of `if`",
    );
}

#[test]
fn value_of_another_kernel_and_own_result() {
    let mut kb = Kb::new();
    let b = kb.body;
    let stranger = Value::from_u32(999);
    kb.one(b, op(Opcode::Neg, &[stranger]), s(I32));
    let (me, _) = kb.add(b, op(Opcode::Neg, &[]), &[s(I32)]);
    let own = kb.dfg.ops[me].results[0];
    kb.dfg.ops[me].operands.push(own);
    let e = errors(&module(vec![kernel("k", vec![], kb)]));
    assert_eq!(e.len(), 2, "{e:#?}");
    assert!(e[0].contains("not a value of this kernel"));
    assert!(e[1].contains("uses its own result"));
}

#[test]
fn op_listed_in_two_blocks() {
    let (mut kb, params) = good();
    let first = kb.dfg.blocks[kb.body].ops[0];
    let region = kb
        .dfg
        .ops
        .values()
        .find(|o| o.opcode == Opcode::For)
        .unwrap()
        .regions[0];
    kb.dfg.blocks[region].ops.insert(0, first);
    one_error(
        &module(vec![kernel("k", params, kb)]),
        "listed more than once",
    );
}

#[test]
fn region_shared_by_two_ops_and_dangling_block() {
    let mut kb = Kb::new();
    let b = kb.body;
    let c = kb.konst(b, 1, s(I1));
    let (then, els) = (kb.dfg.new_block(), kb.dfg.new_block());
    kb.yield_(then, &[]);
    kb.yield_(els, &[]);
    let mut i = op(Opcode::If, &[c]);
    i.regions = vec![then, then];
    kb.add(b, i, &[]);
    let mut j = op(Opcode::If, &[c]);
    j.regions = vec![els, Block::from_u32(77)];
    kb.add(b, j, &[]);
    let e = errors(&module(vec![kernel("k", vec![], kb)]));
    assert!(
        e.iter()
            .any(|m| m.contains("already the kernel body or another op's region")),
        "{e:#?}"
    );
    assert!(
        e.iter().any(|m| m.contains("not a block of this kernel")),
        "{e:#?}"
    );
}

#[test]
fn yield_placement() {
    // A region not ending in yield, a yield in the middle of a region, a yield in the body.
    let mut kb = Kb::new();
    let b = kb.body;
    let c = kb.konst(b, 1, s(I1));
    let (then, els) = (kb.dfg.new_block(), kb.dfg.new_block());
    kb.konst(then, 2, s(I32));
    kb.yield_(els, &[]);
    kb.konst(els, 2, s(I32));
    kb.yield_(els, &[]);
    let mut i = op(Opcode::If, &[c]);
    i.regions = vec![then, els];
    kb.add(b, i, &[]);
    kb.yield_(b, &[c]); // the body may end with an empty `yield` only
    let e = errors(&module(vec![kernel("k", vec![], kb)]));
    assert_eq!(e.len(), 3, "{e:#?}");
    assert!(e[0].contains("does not end with `yield`"));
    assert!(e[1].contains("must be the last op"));
    assert!(e[2].contains("kernel body cannot `yield` values"));
}

#[test]
fn op_table_conformance() {
    let mut kb = Kb::new();
    let b = kb.body;
    let p = kb.pid();
    kb.one(b, op(Opcode::Add, &[p]), s(I32)); // 1 operand of 2
    kb.one(b, op(Opcode::ProgramId, &[]), s(I32)); // no lead
    let mut r = op(Opcode::Reduce, &[p]);
    r.lead = Some(Attr::Expr(Expr::int(0))); // wrong lead kind
    r.attrs = vec![
        ("axis".into(), Attr::Expr(Expr::int(0))),
        ("bogus".into(), Attr::Flag),
    ];
    kb.one(b, r, s(I32));
    let mut st = op(Opcode::Store, &[p]); // no tensor ref
    st.attrs = vec![("mask".into(), Attr::Expr(Expr::int(1)))]; // wrong attr kind
    kb.add(b, st, &[s(I32)]); // a result it does not have
    let mut f = op(Opcode::For, &[p, p, p]); // no region
    f.regions = vec![];
    kb.add(b, f, &[]);
    let e = errors(&module(vec![kernel("k", vec![], kb)]));
    for needle in [
        "`add` takes 2 operands, found 1",
        "`program_id` needs a leading a constant expression",
        "leading attribute of `reduce` must be a name",
        "`reduce` has no attribute `bogus`",
        "`store` needs a tensor reference",
        "attribute `mask` of `store` must be an SSA value",
        "`store` produces no results, found 1",
        "`for` has 1 region, found 0",
    ] {
        assert!(
            e.iter().any(|m| m.contains(needle)),
            "missing {needle:?} in {e:#?}"
        );
    }
}

#[test]
fn many_errors_are_all_reported() {
    let (mut kb, mut params) = good();
    let b = kb.body;
    let p = kb.pid();
    let f = kb.konst(b, 0, t(&[64, 64], F32));
    let g = kb.konst(b, 0, t(&[64, 1], F32));
    kb.one(b, op(Opcode::Add, &[f, g]), t(&[64, 64], F32)); // shape mismatch
    kb.one(b, op(Opcode::Exp, &[p]), s(I32)); // exp on i32
    store(
        &mut kb,
        b,
        "x",
        vec![Offset::Value(p), Offset::Expr(Expr::int(0))],
        f,
    ); // `in` + rank/shape fine
    params.push(tensor("x", Access::In, F32, &["R", "128"])); // duplicate param
    let mut m = module(vec![kernel("k", params, kb)]);
    m.kernels.values_mut().next().unwrap().grid.pop(); // 2 grid exprs
    let e = errors(&m);
    for needle in [
        "`add` operands differ: tile<64x64xf32> vs tile<64x1xf32> (use `broadcast`)",
        "`exp` needs a float operand, found i32",
        "`store` writes `x`, which is an `in` param",
        "param `x` of kernel `@k` is declared more than once",
        "grid of 2 expression(s)",
    ] {
        assert!(
            e.iter().any(|m| m.contains(needle)),
            "missing {needle:?} in {e:#?}"
        );
    }
    assert_eq!(e.len(), 5, "{e:#?}");
}

#[test]
fn spans_point_at_the_culprit() {
    let mut kb = Kb::new();
    let b = kb.body;
    let mut o = op(Opcode::ProgramId, &[]);
    o.lead = Some(Attr::Expr(Expr {
        span: at(40),
        ..Expr::int(5)
    }));
    o.span = at(30);
    kb.one(b, o, s(I32));
    let mut d = op(Opcode::Dim, &[]);
    d.lead = Some(Attr::Name("Q".into(), at(50)));
    kb.one(b, d, s(I32));
    let Err(ds) = verify(&module(vec![kernel("k", vec![], kb)])) else {
        panic!("should fail")
    };
    assert_eq!(ds.0.len(), 2);
    assert_eq!((ds.0[0].span.start, ds.0[1].span.start), (40, 50));
    assert!(ds.0[1].message.contains("unknown dim `Q`"));
}

#[test]
fn generic_kernel_with_symbolic_types_verifies() {
    let mut m = module(vec![]);
    m.consts = vec![
        ConstDecl {
            name: "DTYPE".into(),
            kind: ConstKind::Enum(vec!["f32".into(), "bf16".into()]),
            default: Expr::ident("bf16"),
            tune: None,
            require: None,
            doc: vec![],
            span: Span::default(),
        },
        ConstDecl {
            name: "B".into(),
            kind: ConstKind::Int,
            default: Expr::int(64),
            tune: None,
            require: Some(Expr {
                kind: crate::expr::ExprKind::Binary(
                    crate::BinOp::Ge,
                    Box::new(Expr::ident("B")),
                    Box::new(Expr::int(16)),
                ),
                span: Span::default(),
            }),
            doc: vec![],
            span: Span::default(),
        },
    ];
    let named = || ElemType::Named("DTYPE".into(), Span::default());
    let tile = |e: ElemType| Type::Tile(vec![Expr::int(1), Expr::ident("B")], e);
    let mut kb = Kb::new();
    let b = kb.body;
    let p = kb.pid();
    let x = load(
        &mut kb,
        b,
        "x",
        vec![Offset::Value(p), Offset::Expr(Expr::int(0))],
        tile(named()),
    );
    let xf = kb.one(b, op(Opcode::Cast, &[x]), tile(ElemType::Known(F32)));
    // B vs 64 cannot be decided before specialization: not an error.
    let c = kb.konst(b, 0, t(&[1, 64], F32));
    let sum = kb.one(b, op(Opcode::Add, &[xf, c]), tile(ElemType::Known(F32)));
    let back = kb.one(b, op(Opcode::Cast, &[sum]), tile(named()));
    store(
        &mut kb,
        b,
        "y",
        vec![Offset::Value(p), Offset::Expr(Expr::int(0))],
        back,
    );
    let mut px = tensor("x", Access::In, F32, &["R", "N"]);
    let mut py = tensor("y", Access::Out, F32, &["R", "N"]);
    for p in [&mut px, &mut py] {
        if let ParamKind::Tensor(_, tt) = &mut p.kind {
            tt.elem = named();
        }
    }
    m.kernels.push(kernel("k", vec![px, py], kb));
    assert_eq!(errors(&m), Vec::<String>::new());
}

#[test]
fn unreachable_ops_are_ignored() {
    let (mut kb, params) = good();
    // A detached op (e.g. left behind by a pass) with nonsense operands.
    kb.dfg.ops.push(op(Opcode::Dot, &[Value::from_u32(12345)]));
    assert_eq!(
        errors(&module(vec![kernel("k", params, kb)])),
        Vec::<String>::new()
    );
}

#[test]
fn corrupt_value_table_is_reported_not_panicking() {
    let (mut kb, params) = good();
    let v = kb.dfg.ops.values().next().unwrap().results[0];
    kb.dfg.values[v].def = ValueDef::Arg(Block::from_u32(500), 3);
    let e = errors(&module(vec![kernel("k", params.clone(), kb)]));
    assert!(
        e.iter().any(|m| m.contains("corrupt value table")),
        "{e:#?}"
    );
    let (mut kb, _) = good();
    kb.body = Block::from_u32(900);
    one_error(&module(vec![kernel("k", params, kb)]), "body block");
}
