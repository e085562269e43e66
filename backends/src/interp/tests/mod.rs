//! Unit tests of the interpreter, with a small builder that makes kernels through the `Dfg` API
//! (independent of the text parser). Oracles are plain loops in f64 (or f32 where the exact
//! order of operations is the point).

mod attention;
mod ops;
mod programs;

use super::{run_with, HostArg, HostData, HostTensor, InterpError, RunOptions};
use cranelift_entity::PrimaryMap;
use kir_ir::*;
use std::collections::BTreeMap;

/// Builds one kernel body op by op.
pub(crate) struct B {
    pub dfg: Dfg,
    pub body: Block,
}

/// An expression `a op b`.
pub(crate) fn ebin(op: BinOp, a: Expr, b: Expr) -> Expr {
    Expr {
        kind: ExprKind::Binary(op, Box::new(a), Box::new(b)),
        span: Span::default(),
    }
}

/// `cdiv(a, b)`.
pub(crate) fn cdiv(a: Expr, b: Expr) -> Expr {
    Expr {
        kind: ExprKind::Call(Func::Cdiv, vec![a, b]),
        span: Span::default(),
    }
}

/// A float literal expression.
pub(crate) fn efloat(x: f64) -> Expr {
    Expr {
        kind: ExprKind::Float(expr::F64Bits(x)),
        span: Span::default(),
    }
}

pub(crate) fn tile(shape: &[usize], d: Dtype) -> Type {
    Type::tile(shape, d)
}

pub(crate) fn sc(d: Dtype) -> Type {
    Type::scalar(d)
}

pub(crate) fn name(s: &str) -> Attr {
    Attr::Name(s.into(), Span::default())
}

/// The lead of a `cmp` (`lt`).
pub(crate) fn pred(s: &str) -> Attr {
    Attr::Cmp(kir_ir::CmpPred::from_name(s).expect("a cmp predicate"))
}

/// The lead of a `reduce` (`sum`).
pub(crate) fn red(s: &str) -> Attr {
    Attr::Reduce(kir_ir::ReduceKind::from_name(s).expect("a reduce kind"))
}

impl B {
    pub(crate) fn new() -> B {
        let mut dfg = Dfg::default();
        let body = dfg.new_block();
        B { dfg, body }
    }

    /// Appends a general op to block `b`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn op_full(
        &mut self,
        b: Block,
        opcode: Opcode,
        operands: &[Value],
        lead: Option<Attr>,
        tensor: Option<TensorRef>,
        attrs: Vec<(&str, Attr)>,
        regions: Vec<Block>,
        results: Vec<Type>,
    ) -> Vec<Value> {
        let data = OpData {
            opcode,
            results: vec![],
            operands: operands.to_vec(),
            lead,
            tensor,
            attrs: attrs.into_iter().map(|(k, a)| (k.to_string(), a)).collect(),
            regions,
            doc: vec![],
            span: Span::default(),
        };
        let op = self
            .dfg
            .append_op(b, data, results.into_iter().map(|t| (t, None)).collect());
        self.dfg.ops[op].results.clone()
    }

    /// An op with operands and one result.
    pub(crate) fn op(&mut self, b: Block, opcode: Opcode, operands: &[Value], ty: Type) -> Value {
        self.op_full(b, opcode, operands, None, None, vec![], vec![], vec![ty])[0]
    }

    /// An op with a lead attribute, operands and one result.
    pub(crate) fn op_lead(
        &mut self,
        b: Block,
        opcode: Opcode,
        lead: Attr,
        operands: &[Value],
        attrs: Vec<(&str, Attr)>,
        ty: Type,
    ) -> Value {
        self.op_full(
            b,
            opcode,
            operands,
            Some(lead),
            None,
            attrs,
            vec![],
            vec![ty],
        )[0]
    }

    pub(crate) fn int(&mut self, b: Block, v: i64, ty: Type) -> Value {
        self.op_lead(b, Opcode::Const, Attr::Expr(Expr::int(v)), &[], vec![], ty)
    }

    pub(crate) fn float(&mut self, b: Block, v: f64, ty: Type) -> Value {
        self.op_lead(b, Opcode::Const, Attr::Expr(efloat(v)), &[], vec![], ty)
    }

    pub(crate) fn pid(&mut self, b: Block, axis: i64) -> Value {
        self.op_lead(
            b,
            Opcode::ProgramId,
            Attr::Expr(Expr::int(axis)),
            &[],
            vec![],
            sc(Dtype::I32),
        )
    }

    pub(crate) fn dim(&mut self, b: Block, n: &str) -> Value {
        self.op_lead(b, Opcode::Dim, name(n), &[], vec![], sc(Dtype::I32))
    }

    fn tref(tensor: &str, offsets: &[Value]) -> TensorRef {
        TensorRef {
            param: tensor.into(),
            offsets: offsets.iter().map(|&v| Offset::Value(v)).collect(),
            span: Span::default(),
        }
    }

    pub(crate) fn load(
        &mut self,
        b: Block,
        tensor: &str,
        offsets: &[Value],
        attrs: Vec<(&str, Attr)>,
        ty: Type,
    ) -> Value {
        self.op_full(
            b,
            Opcode::Load,
            &[],
            None,
            Some(B::tref(tensor, offsets)),
            attrs,
            vec![],
            vec![ty],
        )[0]
    }

    pub(crate) fn store(
        &mut self,
        b: Block,
        opcode: Opcode,
        tensor: &str,
        offsets: &[Value],
        value: Value,
        attrs: Vec<(&str, Attr)>,
    ) {
        self.op_full(
            b,
            opcode,
            &[value],
            None,
            Some(B::tref(tensor, offsets)),
            attrs,
            vec![],
            vec![],
        );
    }

    /// `for iv = lo to hi step st iter(inits)`: `body(builder, block, iv, carried) -> yielded`.
    pub(crate) fn for_loop(
        &mut self,
        b: Block,
        lo: Value,
        hi: Value,
        st: Value,
        inits: &[Value],
        body: impl FnOnce(&mut B, Block, Value, &[Value]) -> Vec<Value>,
    ) -> Vec<Value> {
        let blk = self.dfg.new_block();
        let iv = self
            .dfg
            .add_block_arg(blk, sc(Dtype::I32), Some("iv".into()), Span::default());
        let tys: Vec<Type> = inits.iter().map(|&v| self.dfg.ty(v).clone()).collect();
        let carried: Vec<Value> = tys
            .iter()
            .map(|t| {
                self.dfg
                    .add_block_arg(blk, t.clone(), None, Span::default())
            })
            .collect();
        let ys = body(self, blk, iv, &carried);
        self.op_full(blk, Opcode::Yield, &ys, None, None, vec![], vec![], vec![]);
        let mut ops = vec![lo, hi, st];
        ops.extend_from_slice(inits);
        self.op_full(b, Opcode::For, &ops, None, None, vec![], vec![blk], tys)
    }
}

/// A tensor param with identifier or literal dims.
pub(crate) fn tparam(n: &str, acc: Access, d: Dtype, dims: Vec<Expr>) -> Param {
    Param::tensor(n, acc, d, dims)
}

/// A scalar param.
pub(crate) fn sparam(n: &str, d: Dtype) -> Param {
    Param {
        name: n.into(),
        kind: ParamKind::Scalar(ElemType::Known(d)),
        cond: None,
        span: Span::default(),
    }
}

pub(crate) fn ids(names: &[&str]) -> Vec<Expr> {
    names.iter().map(|n| Expr::ident(n)).collect()
}

/// A kernel from a finished builder.
pub(crate) fn kernel(
    n: &str,
    params: Vec<Param>,
    grid: [Expr; 3],
    requires: Vec<Expr>,
    b: B,
) -> Kernel {
    Kernel {
        name: n.into(),
        params,
        grid: grid.to_vec(),
        requires,
        body: b.body,
        dfg: b.dfg,
        doc: vec![],
        span: Span::default(),
    }
}

/// A module with the given kernels and optional program.
pub(crate) fn module(kernels: Vec<Kernel>, program: Option<Program>) -> Module {
    let mut ks = PrimaryMap::new();
    for k in kernels {
        ks.push(k);
    }
    Module {
        doc: vec![],
        name: "test".into(),
        consts: vec![],
        kernels: ks,
        program,
    }
}

/// A host tensor argument.
pub(crate) fn ht(d: Dtype, shape: &[usize], data: Vec<f64>) -> HostArg {
    HostArg::Tensor(HostTensor {
        dtype: d,
        shape: shape.to_vec(),
        data: HostData::F64(data),
    })
}

/// Reading results as f64 in tests: every dtype but i64 comes back as f64.
pub(crate) trait F64s {
    /// The f64 elements; panics on i64 data (read with `as_i64`).
    fn f64s(&self) -> &[f64];
}

impl F64s for HostData {
    fn f64s(&self) -> &[f64] {
        self.as_f64()
            .expect("f64 data (an i64 result is read with `as_i64`)")
    }
}

/// Verifies `m` (the builder must make valid IR), then runs it with the given args.
pub(crate) fn go(
    m: &Module,
    args: Vec<(&str, HostArg)>,
    parallel: bool,
) -> Result<BTreeMap<String, HostTensor>, InterpError> {
    if let Err(d) = kir_ir::verifier::verify(m) {
        panic!("the test module does not verify: {:#?}", d.0);
    }
    go_unverified(m, args, parallel)
}

/// Runs with the given args and parallelism, without verifying first.
pub(crate) fn go_unverified(
    m: &Module,
    args: Vec<(&str, HostArg)>,
    parallel: bool,
) -> Result<BTreeMap<String, HostTensor>, InterpError> {
    let args: BTreeMap<String, HostArg> =
        args.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    run_with(
        m,
        &args,
        &RunOptions {
            parallel,
            ..Default::default()
        },
    )
}

/// Deterministic pseudo-random values in [-1, 1), exactly representable in f32 (and in bf16
/// when `bf16` is set).
pub(crate) fn rand_vals(n: usize, seed: u64, bf16: bool) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let x = ((s >> 40) as f64 / (1u64 << 24) as f64) * 2.0 - 1.0;
            if bf16 {
                half::bf16::from_f32(x as f32).to_f64()
            } else {
                x as f32 as f64
            }
        })
        .collect()
}
