//! The tile count of a grid axis as IR, for `warp_specialize`'s split consumers: a grid
//! expression (integer literals and dims after specialization, with the operators of the
//! expression language, docs/ir.md) lowered to i64 scalar ops that compute exactly what the
//! expression means when the launch evaluates it, so a consumer can tell whether its tile is
//! inside the original grid.

use kir_ir::edit::{op2, simple};
use kir_ir::{
    Attr, BinOp, Block, CmpPred, Dtype, Expr, ExprKind, Func, Kernel, Opcode, Span, Type, UnOp,
    Value,
};

/// Whether [`expr_value`] can compute `e` (integer literals, dims, and the operators of the
/// expression language; no floats).
pub(super) fn lowerable(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Int(_) | ExprKind::Ident(_) => true,
        ExprKind::Float(_) => false,
        ExprKind::Unary(_, x) => lowerable(x),
        ExprKind::Binary(_, a, b) => lowerable(a) && lowerable(b),
        ExprKind::Call(_, args) => args.iter().all(lowerable),
    }
}

/// Whether `e` is a positive integer literal.
fn positive(e: &Expr) -> bool {
    e.as_int().is_some_and(|v| v > 0)
}

/// Appends ops computing the integer expression `e` (over literals and the kernel's dims, as
/// specialization leaves a grid) to block `b`, as an i64 scalar, with the expression
/// language's meaning: floor division and remainder, `cdiv` rounding up, comparisons and logic
/// giving 0 or 1.
pub(super) fn expr_value(k: &mut Kernel, b: Block, e: &Expr) -> Value {
    let i = Dtype::I64;
    let int = |k: &mut Kernel, v: i64| {
        let op = simple(Opcode::Const, vec![], Some(Attr::Expr(Expr::int(v))));
        let id = k.dfg.append_op(b, op, vec![(Type::scalar(i), None)]);
        k.dfg.ops[id].results[0]
    };
    let un = |k: &mut Kernel, o: Opcode, x: Value, d: Dtype| {
        let id = k
            .dfg
            .append_op(b, simple(o, vec![x], None), vec![(Type::scalar(d), None)]);
        k.dfg.ops[id].results[0]
    };
    let bin = |k: &mut Kernel, o: Opcode, x: Value, y: Value| op2(k, b, o, None, x, y, i);
    let sel = |k: &mut Kernel, c: Value, x: Value, y: Value| {
        let id = k.dfg.append_op(
            b,
            simple(Opcode::Select, vec![c, x, y], None),
            vec![(Type::scalar(i), None)],
        );
        k.dfg.ops[id].results[0]
    };
    let cmp = |k: &mut Kernel, p: CmpPred, x: Value, y: Value| {
        let c = op2(k, b, Opcode::Cmp, Some(p), x, y, Dtype::I1);
        un(k, Opcode::Cast, c, i)
    };
    // ⌊x / y⌋ for y > 0: the truncated quotient, one less when the remainder is negative.
    let floor_pos = |k: &mut Kernel, x: Value, y: Value| {
        let q = bin(k, Opcode::Div, x, y);
        let r = bin(k, Opcode::Rem, x, y);
        let z = int(k, 0);
        let neg = cmp(k, CmpPred::Lt, r, z);
        bin(k, Opcode::Sub, q, neg)
    };
    match &e.kind {
        ExprKind::Int(v) => int(k, *v),
        ExprKind::Ident(n) => {
            let op = simple(
                Opcode::Dim,
                vec![],
                Some(Attr::Name(n.clone(), Span::default())),
            );
            let id = k
                .dfg
                .append_op(b, op, vec![(Type::scalar(Dtype::I32), None)]);
            let d = k.dfg.ops[id].results[0];
            un(k, Opcode::Cast, d, i)
        }
        ExprKind::Float(_) => int(k, 0), // refused by `lowerable`
        ExprKind::Unary(op, x) => {
            let x = expr_value(k, b, x);
            match op {
                UnOp::Neg => un(k, Opcode::Neg, x, i),
                UnOp::Not => {
                    let z = int(k, 0);
                    cmp(k, CmpPred::Eq, x, z)
                }
            }
        }
        ExprKind::Binary(op, x, y) => {
            let by_pos = positive(y);
            let (x, y) = (expr_value(k, b, x), expr_value(k, b, y));
            let z = int(k, 0);
            match op {
                BinOp::Add => bin(k, Opcode::Add, x, y),
                BinOp::Sub => bin(k, Opcode::Sub, x, y),
                BinOp::Mul => bin(k, Opcode::Mul, x, y),
                BinOp::Div if by_pos => floor_pos(k, x, y),
                BinOp::Div | BinOp::Rem => {
                    // ⌊x / y⌋ = −⌊−x / −y⌋ when y < 0.
                    let yneg = op2(k, b, Opcode::Cmp, Some(CmpPred::Lt), y, z, Dtype::I1);
                    let (nx, ny) = (un(k, Opcode::Neg, x, i), un(k, Opcode::Neg, y, i));
                    let sx = sel(k, yneg, nx, x);
                    let sy = sel(k, yneg, ny, y);
                    let q = floor_pos(k, sx, sy);
                    if *op == BinOp::Div {
                        q
                    } else {
                        let p = bin(k, Opcode::Mul, y, q);
                        bin(k, Opcode::Sub, x, p)
                    }
                }
                BinOp::Eq => cmp(k, CmpPred::Eq, x, y),
                BinOp::Ne => cmp(k, CmpPred::Ne, x, y),
                BinOp::Lt => cmp(k, CmpPred::Lt, x, y),
                BinOp::Le => cmp(k, CmpPred::Le, x, y),
                BinOp::Gt => cmp(k, CmpPred::Gt, x, y),
                BinOp::Ge => cmp(k, CmpPred::Ge, x, y),
                BinOp::And | BinOp::Or => {
                    let (a, c) = (cmp(k, CmpPred::Ne, x, z), cmp(k, CmpPred::Ne, y, z));
                    let o = if *op == BinOp::And {
                        Opcode::And
                    } else {
                        Opcode::Or
                    };
                    bin(k, o, a, c)
                }
            }
        }
        ExprKind::Call(Func::Cdiv, args) if positive(&args[1]) => {
            // ⌈x / y⌉ = ⌊(x + y − 1) / y⌋ for y > 0.
            let (x, y) = (expr_value(k, b, &args[0]), expr_value(k, b, &args[1]));
            let one = int(k, 1);
            let s = bin(k, Opcode::Add, x, y);
            let s1 = bin(k, Opcode::Sub, s, one);
            floor_pos(k, s1, y)
        }
        ExprKind::Call(f, args) => {
            let v: Vec<Value> = args.iter().map(|a| expr_value(k, b, a)).collect();
            match f {
                Func::Min => bin(k, Opcode::Min, v[0], v[1]),
                Func::Max => bin(k, Opcode::Max, v[0], v[1]),
                Func::Select => {
                    let z = int(k, 0);
                    let c = op2(k, b, Opcode::Cmp, Some(CmpPred::Ne), v[0], z, Dtype::I1);
                    sel(k, c, v[1], v[2])
                }
                Func::Cdiv => {
                    // Euclidean quotient (⌊x / |y|⌋, negated for y < 0) plus one when the
                    // remainder is not zero, as the expression language defines `cdiv`.
                    let (x, y) = (v[0], v[1]);
                    let z = int(k, 0);
                    let ay = un(k, Opcode::Abs, y, i);
                    let q = floor_pos(k, x, ay);
                    let p = bin(k, Opcode::Mul, ay, q);
                    let r = bin(k, Opcode::Sub, x, p);
                    let yneg = op2(k, b, Opcode::Cmp, Some(CmpPred::Lt), y, z, Dtype::I1);
                    let nq = un(k, Opcode::Neg, q, i);
                    let qe = sel(k, yneg, nq, q);
                    let up = cmp(k, CmpPred::Ne, r, z);
                    bin(k, Opcode::Add, qe, up)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kir_backends::interp::{run_with, HostArg, HostData, HostTensor, RunOptions};
    use kir_ir::{Offset, TensorRef};
    use std::collections::BTreeMap;

    /// The value of grid expression `src` computed by the lowered ops on the interpreter, and
    /// by the expression language itself, for dims M and N.
    fn both(src: &str, m: usize, n: usize) -> (i64, i64) {
        let text = format!(
            "module g\nkernel @k(x: in tensor<f32>[M, N], y: out tensor<i64>[1]) grid [{src}, 1, 1] {{\n}}\n"
        );
        let mut module = kir_ir::text::parse(&text).expect("parse");
        let k = module.kernels.values_mut().next().expect("kernel");
        let e = k.grid[0].clone();
        k.grid[0] = Expr::int(1);
        let body = k.body;
        let last = k.dfg.blocks[body].ops.pop();
        let v = expr_value(k, body, &e);
        let mut st = simple(Opcode::Store, vec![v], None);
        st.tensor = Some(TensorRef {
            param: "y".into(),
            offsets: vec![Offset::Expr(Expr::int(0))],
            span: Span::default(),
        });
        k.dfg.append_op(body, st, vec![]);
        k.dfg.blocks[body].ops.extend(last);
        kir_ir::verifier::verify(&module).expect("the lowered expression verifies");
        let x = HostTensor {
            dtype: Dtype::F32,
            shape: vec![m, n],
            data: HostData::F64(vec![0.0; m * n]),
        };
        let args: BTreeMap<String, HostArg> = [("x".to_string(), HostArg::Tensor(x))].into();
        let out = run_with(&module, &args, &RunOptions::default()).expect("run");
        let got = match &out["y"].data {
            HostData::I64(v) => v[0],
            HostData::F64(v) => v[0] as i64,
        };
        let dims = [("M", m as i64), ("N", n as i64)];
        let want = e
            .eval_int(&|s| {
                dims.iter()
                    .find(|d| d.0 == s)
                    .map(|d| kir_ir::EvalVal::Int(d.1))
            })
            .expect("eval");
        (got, want)
    }

    #[test]
    fn lowered_grid_expressions_compute_what_the_launch_evaluates() {
        let exprs = [
            "cdiv(M, 8)",
            "cdiv(M, 64) * cdiv(N, 3)",
            "M / 3 + N % 5",
            "(0 - M) / 4",
            "(0 - M) % 4",
            "M / (0 - 3)",
            "M % (0 - 3)",
            "cdiv(M, 0 - 3)",
            "cdiv(0 - M, 4)",
            "cdiv(M, N)",
            "min(M, N) + max(M, 7)",
            "select(M > N, M, N)",
            "(M == N) + (M != N) * 2 + (M < N) * 4 + (M <= 5) * 8 + (N >= 1) * 16",
            "(M && N) + (M || 0) * 2 + !M * 4 - -N",
        ];
        for src in exprs {
            for (m, n) in [(1, 1), (0, 3), (7, 2), (24, 24), (100, 9), (65, 64)] {
                if src == "cdiv(M, N)" && n == 0 {
                    continue;
                }
                let (got, want) = both(src, m, n);
                assert_eq!(got, want, "`{src}` at M = {m}, N = {n}");
            }
        }
    }

    #[test]
    fn only_integer_expressions_are_lowered() {
        let text = "module g\nkernel @k(x: in tensor<f32>[M]) grid [cdiv(M, 4), 1, 1] {\n}\n";
        let m = kir_ir::text::parse(text).expect("parse");
        let k = m.kernels.values().next().expect("kernel");
        assert!(lowerable(&k.grid[0]));
        let f = Expr {
            kind: ExprKind::Float(kir_ir::expr::F64Bits(1.5)),
            span: Span::default(),
        };
        assert!(!lowerable(&f));
    }
}
