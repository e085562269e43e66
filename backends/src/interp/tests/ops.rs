//! Op-level tests: dot, rounding, loads and stores, loops, atomics, integer and shape ops.

use super::*;
use kir_ir::Dtype::*;

fn grid1() -> [Expr; 3] {
    [Expr::int(1), Expr::int(1), Expr::int(1)]
}

/// C = A·B with 16x16 output tiles and an 8-wide k loop; loads pad with 0, the store is guarded.
fn gemm_module() -> Module {
    let mut b = B::new();
    let body = b.body;
    let (pm, pn) = (b.pid(body, 0), b.pid(body, 1));
    let c16 = b.int(body, 16, sc(I32));
    let m0 = b.op(body, Opcode::Mul, &[pm, c16], sc(I32));
    let n0 = b.op(body, Opcode::Mul, &[pn, c16], sc(I32));
    let (zero, kdim, st) = (
        b.int(body, 0, sc(I32)),
        b.dim(body, "K"),
        b.int(body, 8, sc(I32)),
    );
    let acc0 = b.float(body, 0.0, tile(&[16, 16], F32));
    let res = b.for_loop(body, zero, kdim, st, &[acc0], |b, blk, k, c| {
        let other = vec![("other", Attr::Expr(efloat(0.0)))];
        let a = b.load(blk, "a", &[m0, k], other.clone(), tile(&[16, 8], F32));
        let bt = b.load(blk, "b", &[k, n0], other, tile(&[8, 16], F32));
        vec![b.op(blk, Opcode::Dot, &[a, bt, c[0]], tile(&[16, 16], F32))]
    });
    b.store(
        body,
        Opcode::Store,
        "c",
        &[m0, n0],
        res[0],
        vec![("guard", Attr::Flag)],
    );
    let params = vec![
        tparam("a", Access::In, F32, ids(&["M", "K"])),
        tparam("b", Access::In, F32, ids(&["K", "N"])),
        tparam("c", Access::Out, F32, ids(&["M", "N"])),
    ];
    let grid = [
        cdiv(Expr::ident("M"), Expr::int(16)),
        cdiv(Expr::ident("N"), Expr::int(16)),
        Expr::int(1),
    ];
    module(vec![kernel("gemm", params, grid, vec![], b)], None)
}

#[test]
fn tiled_dot_matches_f64_and_exact_f32_order() {
    let (m, k, n) = (37, 45, 29);
    let (a, bm) = (rand_vals(m * k, 1, false), rand_vals(k * n, 2, false));
    let md = gemm_module();
    let args = || {
        vec![
            ("a", ht(F32, &[m, k], a.clone())),
            ("b", ht(F32, &[k, n], bm.clone())),
        ]
    };
    let out = go(&md, args(), true).unwrap();
    let c = &out["c"];
    assert_eq!((c.dtype, &c.shape[..]), (F32, &[m, n][..]));
    for i in 0..m {
        for j in 0..n {
            let (mut r64, mut r32, mut mag) = (0.0f64, 0.0f32, 0.0f64);
            for kk in 0..k {
                r64 += a[i * k + kk] * bm[kk * n + j];
                r32 += (a[i * k + kk] as f32) * (bm[kk * n + j] as f32);
                mag += (a[i * k + kk] * bm[kk * n + j]).abs();
            }
            let got = c.data.f64s()[i * n + j];
            assert!(
                (got - r64).abs() <= 1e-6 * mag + 1e-7,
                "c[{i}][{j}] = {got}, f64 {r64}"
            );
            assert_eq!(
                got, r32 as f64,
                "c[{i}][{j}] differs from the k-ascending f32 loop"
            );
        }
    }
    assert_eq!(
        go(&md, args(), false).unwrap(),
        out,
        "parallel and sequential runs differ"
    );
}

/// z = x + y elementwise on bf16 [4].
fn add_module(d: Dtype) -> Module {
    let mut b = B::new();
    let body = b.body;
    let z0 = b.int(body, 0, sc(I32));
    let x = b.load(body, "x", &[z0], vec![], tile(&[4], d));
    let y = b.load(body, "y", &[z0], vec![], tile(&[4], d));
    let s = b.op(body, Opcode::Add, &[x, y], tile(&[4], d));
    b.store(body, Opcode::Store, "z", &[z0], s, vec![]);
    let ps = vec![
        tparam("x", Access::In, d, vec![Expr::int(4)]),
        tparam("y", Access::In, d, vec![Expr::int(4)]),
        tparam("z", Access::Out, d, vec![Expr::int(4)]),
    ];
    module(vec![kernel("add", ps, grid1(), vec![], b)], None)
}

#[test]
fn bf16_add_rounds_to_nearest_even() {
    let e = |p: i32| 2f64.powi(p);
    // x[0] = 1 + 2^-8 arrives as a host value: a tie, so it rounds to 1.0 on input.
    let x = vec![1.0 + e(-8), 1.0 + e(-7), 1.0, 256.0];
    let y = vec![e(-8), e(-8), 3.0 * e(-9), 1.0];
    let out = go(
        &add_module(Bf16),
        vec![("x", ht(Bf16, &[4], x)), ("y", ht(Bf16, &[4], y))],
        true,
    )
    .unwrap();
    // 1 + 2^-8: tie → 1.0 (even); 1 + 3·2^-8: tie → 1 + 2^-6 (even); 1 + 3·2^-9 → 1 + 2^-7;
    // 257: tie between 256 and 258 → 256.
    assert_eq!(
        out["z"].data.f64s(),
        vec![1.0, 1.0 + e(-6), 1.0 + e(-7), 256.0]
    );
    assert_eq!(out["z"].dtype, Bf16);
    // f16: 2048 + 1 is a tie between 2048 and 2050 → 2048; 1 + 2^-11 + 2^-11 is exact.
    let out = go(
        &add_module(F16),
        vec![
            ("x", ht(F16, &[4], vec![2048.0, 1.0, 0.5, -1.0])),
            ("y", ht(F16, &[4], vec![1.0, e(-10), 0.25, 1.0])),
        ],
        false,
    )
    .unwrap();
    assert_eq!(out["z"].data.f64s(), vec![2048.0, 1.0 + e(-10), 0.75, 0.0]);
}

/// y[4p .. 4p+4] = x[4p .. 4p+4], with `other` or without.
fn copy_module(other: bool) -> Module {
    let mut b = B::new();
    let body = b.body;
    let p = b.pid(body, 0);
    let c4 = b.int(body, 4, sc(I32));
    let off = b.op(body, Opcode::Mul, &[p, c4], sc(I32));
    let attrs = if other {
        vec![("other", Attr::Expr(efloat(-1.0)))]
    } else {
        vec![]
    };
    let t = b.load(body, "x", &[off], attrs, tile(&[4], F32));
    b.store(body, Opcode::Store, "y", &[off], t, vec![]);
    let ps = vec![
        tparam("x", Access::In, F32, ids(&["N"])),
        tparam("y", Access::Out, F32, vec![Expr::int(8)]),
    ];
    module(
        vec![kernel(
            "copy",
            ps,
            [Expr::int(2), Expr::int(1), Expr::int(1)],
            vec![],
            b,
        )],
        None,
    )
}

#[test]
fn load_other_pads_and_oob_is_an_error() {
    let x = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    let out = go(
        &copy_module(true),
        vec![("x", ht(F32, &[6], x.clone()))],
        true,
    )
    .unwrap();
    assert_eq!(
        out["y"].data.f64s(),
        vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, -1.0, -1.0]
    );
    for par in [true, false] {
        let e = go(
            &copy_module(false),
            vec![("x", ht(F32, &[6], x.clone()))],
            par,
        )
        .unwrap_err();
        assert_eq!(e.kernel.as_deref(), Some("copy"));
        assert!(e.span.is_some());
        assert!(
            e.message.contains("program (1, 0, 0)") && e.message.contains("out of bounds"),
            "{}",
            e.message
        );
        assert!(
            e.message.contains("`x` index [6] is outside shape [6]"),
            "{}",
            e.message
        );
    }
}

#[test]
fn masked_store_leaves_poison() {
    let mut b = B::new();
    let body = b.body;
    let z0 = b.int(body, 0, sc(I32));
    let x = b.load(body, "x", &[z0], vec![], tile(&[8], F32));
    let i = b.op_full(
        body,
        Opcode::Iota,
        &[],
        None,
        None,
        vec![],
        vec![],
        vec![tile(&[8], I32)],
    )[0];
    let five = b.int(body, 5, sc(I32));
    let m = b.op_lead(
        body,
        Opcode::Cmp,
        pred("lt"),
        &[i, five],
        vec![],
        tile(&[8], I1),
    );
    b.store(
        body,
        Opcode::Store,
        "y",
        &[z0],
        x,
        vec![("mask", Attr::Value(m))],
    );
    let ps = vec![
        tparam("x", Access::In, F32, ids(&["N"])),
        tparam("y", Access::Out, F32, ids(&["N"])),
        tparam("yi", Access::Out, I32, vec![Expr::int(2)]),
        tparam("yu", Access::Out, U8, vec![Expr::int(1)]),
        tparam("yl", Access::Out, I64, vec![Expr::int(1)]),
    ];
    let md = module(vec![kernel("masked", ps, grid1(), vec![], b)], None);
    let out = go(
        &md,
        vec![("x", ht(F32, &[8], (0..8).map(|v| v as f64).collect()))],
        true,
    )
    .unwrap();
    let y = out["y"].data.f64s();
    assert_eq!(&y[..5], &[0.0, 1.0, 2.0, 3.0, 4.0]);
    assert!(y[5..].iter().all(|v| v.is_nan()), "{y:?}");
    assert_eq!(out["yi"].data.f64s(), vec![-0x5A5A5A5A as f64; 2]);
    assert_eq!(out["yu"].data.f64s(), vec![165.0]);
    assert_eq!(out["yl"].data.as_i64().unwrap(), [-0x5A5A5A5A_i64]);
}

#[test]
fn for_loop_carries_a_scalar_sum() {
    let mut b = B::new();
    let body = b.body;
    let (z0, n, one) = (
        b.int(body, 0, sc(I32)),
        b.dim(body, "N"),
        b.int(body, 1, sc(I32)),
    );
    let acc0 = b.float(body, 0.0, sc(F32));
    let r = b.for_loop(body, z0, n, one, &[acc0], |b, blk, i, c| {
        let v = b.load(blk, "x", &[i], vec![], sc(F32));
        vec![b.op(blk, Opcode::Add, &[c[0], v], sc(F32))]
    });
    b.store(body, Opcode::Store, "s", &[z0], r[0], vec![]);
    let ps = vec![
        tparam("x", Access::In, F32, ids(&["N"])),
        tparam("s", Access::Out, F32, vec![Expr::int(1)]),
    ];
    let md = module(vec![kernel("sum", ps, grid1(), vec![], b)], None);
    let x = rand_vals(1000, 7, false);
    let out = go(&md, vec![("x", ht(F32, &[1000], x.clone()))], true).unwrap();
    let want = x.iter().fold(0.0f32, |a, &v| a + v as f32);
    assert_eq!(out["s"].data.f64s(), vec![want as f64]);
    assert!((out["s"].data.f64s()[0] - x.iter().sum::<f64>()).abs() < 1e-3);
}

#[test]
fn atomic_add_is_deterministic() {
    const G: usize = 64;
    let mut b = B::new();
    let body = b.body;
    let (p, z0) = (b.pid(body, 0), b.int(body, 0, sc(I32)));
    let t = b.load(body, "x", &[p, z0], vec![], tile(&[8], F32));
    b.store(body, Opcode::AtomicAdd, "acc", &[z0], t, vec![]);
    let ps = vec![
        tparam("x", Access::In, F32, ids(&["G", "E"])),
        tparam("acc", Access::InOut, F32, ids(&["E"])),
    ];
    let md = module(
        vec![kernel(
            "atomic",
            ps,
            [Expr::ident("G"), Expr::int(1), Expr::int(1)],
            vec![],
            b,
        )],
        None,
    );
    let x: Vec<f64> = rand_vals(G * 8, 3, false)
        .iter()
        .enumerate()
        .map(|(i, v)| (v * 10f64.powi((i / 8 % 7) as i32 - 3)) as f32 as f64)
        .collect();
    let args = || {
        vec![
            ("x", ht(F32, &[G, 8], x.clone())),
            ("acc", ht(F32, &[8], vec![0.5; 8])),
        ]
    };
    let par = go(&md, args(), true).unwrap();
    let seq = go(&md, args(), false).unwrap();
    assert_eq!(par, seq);
    let mut want = [0.5f32; 8];
    for g in 0..G {
        for j in 0..8 {
            want[j] += x[g * 8 + j] as f32;
        }
    }
    assert_eq!(
        par["acc"].data.f64s(),
        want.iter().map(|&v| v as f64).collect::<Vec<_>>()
    );
}

/// One kernel storing `f(b, body)` scalars into `r: out tensor<d>[n]` at 0, 1, ...
fn scalar_results(
    d: Dtype,
    f: impl FnOnce(&mut B, Block) -> Vec<Value>,
) -> Result<Vec<f64>, InterpError> {
    let mut b = B::new();
    let body = b.body;
    let vals = f(&mut b, body);
    let n = vals.len();
    for (i, v) in vals.into_iter().enumerate() {
        let off = b.int(body, i as i64, sc(I32));
        b.store(body, Opcode::Store, "r", &[off], v, vec![]);
    }
    let md = module(
        vec![kernel(
            "k",
            vec![tparam("r", Access::Out, d, vec![Expr::int(n as i64)])],
            grid1(),
            vec![],
            b,
        )],
        None,
    );
    go(&md, vec![], true).map(|o| o["r"].data.f64s().to_vec())
}

#[test]
fn integer_semantics() {
    let r = scalar_results(I32, |b, k| {
        let (m7, two, m16, one, big) = (
            b.int(k, -7, sc(I32)),
            b.int(k, 2, sc(I32)),
            b.int(k, -16, sc(I32)),
            b.int(k, 1, sc(I32)),
            b.int(k, i32::MAX as i64, sc(I32)),
        );
        let thirty1 = b.int(k, 31, sc(I32));
        let f = b.float(k, -2.7, sc(F32));
        let nan = b.float(k, f64::NAN, sc(F32));
        let huge = b.float(k, 1e20, sc(F32));
        vec![
            b.op(k, Opcode::Div, &[m7, two], sc(I32)),
            b.op(k, Opcode::Rem, &[m7, two], sc(I32)),
            b.op(k, Opcode::Shr, &[m16, two], sc(I32)),
            b.op(k, Opcode::Shl, &[one, thirty1], sc(I32)),
            b.op(k, Opcode::Add, &[big, one], sc(I32)),
            b.op(k, Opcode::Cast, &[f], sc(I32)),
            b.op(k, Opcode::Cast, &[nan], sc(I32)),
            b.op(k, Opcode::Cast, &[huge], sc(I32)),
            b.op(k, Opcode::Not, &[two], sc(I32)),
            b.op(k, Opcode::Abs, &[m7], sc(I32)),
        ]
    })
    .unwrap();
    assert_eq!(
        r,
        vec![
            -3.0,
            -1.0,
            -4.0,
            i32::MIN as f64,
            i32::MIN as f64,
            -2.0,
            0.0,
            i32::MAX as f64,
            -3.0,
            7.0
        ]
    );
    let r = scalar_results(U8, |b, k| {
        let (f0, four, three, five) = (
            b.int(k, 0xF0, sc(U8)),
            b.int(k, 4, sc(U8)),
            b.int(k, 3, sc(U8)),
            b.int(k, 5, sc(U8)),
        );
        let f = b.float(k, 300.0, sc(F32));
        let i = b.int(k, 300, sc(I32));
        vec![
            b.op(k, Opcode::Shr, &[f0, four], sc(U8)),
            b.op(k, Opcode::Sub, &[three, five], sc(U8)),
            b.op(k, Opcode::Cast, &[f], sc(U8)),
            b.op(k, Opcode::Cast, &[i], sc(U8)),
            b.op(k, Opcode::Not, &[f0], sc(U8)),
            b.op(k, Opcode::Shl, &[f0, four], sc(U8)),
        ]
    })
    .unwrap();
    assert_eq!(r, vec![15.0, 254.0, 255.0, 44.0, 15.0, 0.0]);
    let e = scalar_results(I32, |b, k| {
        let (one, zero) = (b.int(k, 1, sc(I32)), b.int(k, 0, sc(I32)));
        vec![b.op(k, Opcode::Div, &[one, zero], sc(I32))]
    })
    .unwrap_err();
    assert!(e.message.contains("division by zero"), "{}", e.message);
    let e = scalar_results(I32, |b, k| {
        let (one, s) = (b.int(k, 1, sc(I32)), b.int(k, 32, sc(I32)));
        vec![b.op(k, Opcode::Shl, &[one, s], sc(I32))]
    })
    .unwrap_err();
    assert!(e.message.contains("shift amount 32"), "{}", e.message);
}

#[test]
fn float_semantics() {
    let r = scalar_results(F32, |b, k| {
        let (x, nan, one) = (
            b.float(k, 0.75, sc(F32)),
            b.float(k, f64::NAN, sc(F32)),
            b.float(k, 1.0, sc(F32)),
        );
        let neg = b.float(k, -1.5, sc(F32));
        let c = b.op_lead(k, Opcode::Cmp, pred("lt"), &[nan, one], vec![], sc(I1));
        let cne = b.op_lead(k, Opcode::Cmp, pred("ne"), &[nan, one], vec![], sc(I1));
        let both = b.op(k, Opcode::Or, &[c, cne], sc(I1));
        vec![
            b.op(k, Opcode::Exp, &[x], sc(F32)),
            b.op(k, Opcode::Sigmoid, &[x], sc(F32)),
            b.op(k, Opcode::Silu, &[x], sc(F32)),
            b.op(k, Opcode::Rsqrt, &[x], sc(F32)),
            b.op(k, Opcode::Tanh, &[x], sc(F32)),
            b.op(k, Opcode::Max, &[nan, one], sc(F32)),
            b.op(k, Opcode::Min, &[one, x], sc(F32)),
            b.op(k, Opcode::Floor, &[neg], sc(F32)),
            b.op(k, Opcode::Cast, &[c], sc(F32)),
            b.op(k, Opcode::Cast, &[both], sc(F32)),
            b.op(k, Opcode::Select, &[cne, x, one], sc(F32)),
        ]
    })
    .unwrap();
    let s = |v: f64| 1.0 / (1.0 + (-v).exp());
    let want = [
        0.75f64.exp(),
        s(0.75),
        0.75 * s(0.75),
        1.0 / 0.75f64.sqrt(),
        0.75f64.tanh(),
    ];
    for (g, w) in r.iter().zip(want) {
        assert!((g - w).abs() < 1e-6, "{g} vs {w}");
    }
    assert!(r[5].is_nan());
    assert_eq!(&r[6..], &[0.75, -2.0, 0.0, 1.0, 0.75]);
    // bf16 unary ops round the f32 result.
    let r = scalar_results(Bf16, |b, k| {
        let x = b.float(k, 0.3, sc(Bf16));
        vec![x, b.op(k, Opcode::Exp, &[x], sc(Bf16))]
    })
    .unwrap();
    let x = half::bf16::from_f32(0.3f32).to_f32();
    assert_eq!(r, vec![x as f64, half::bf16::from_f32(x.exp()).to_f64()]);
}

#[test]
fn shape_ops_and_reductions() {
    let mut b = B::new();
    let body = b.body;
    let z0 = b.int(body, 0, sc(I32));
    let x = b.load(body, "x", &[z0, z0], vec![], tile(&[2, 3], F32));
    let t = b.op(body, Opcode::Transpose, &[x], tile(&[3, 2], F32));
    let r = b.op(body, Opcode::Reshape, &[x], tile(&[6], F32));
    let s = b.op_lead(
        body,
        Opcode::Reduce,
        red("sum"),
        &[x],
        vec![("axis", Attr::Expr(Expr::int(1)))],
        tile(&[2, 1], F32),
    );
    let m = b.op_lead(
        body,
        Opcode::Reduce,
        red("max"),
        &[x],
        vec![("axis", Attr::Expr(Expr::int(0)))],
        tile(&[1, 3], F32),
    );
    let mb = b.op(body, Opcode::Broadcast, &[m], tile(&[2, 3], F32));
    let d = b.op(body, Opcode::Sub, &[x, mb], tile(&[2, 3], F32));
    let io = b.op_full(
        body,
        Opcode::Iota,
        &[],
        None,
        None,
        vec![("axis", Attr::Expr(Expr::int(1)))],
        vec![],
        vec![tile(&[2, 3], I32)],
    )[0];
    let codes = b.op(body, Opcode::Cast, &[io], tile(&[2, 3], U8));
    let nf = b.op(body, Opcode::Nf4, &[codes], tile(&[2, 3], F32));
    for (n, v) in [("t", t), ("r", r), ("s", s), ("d", d), ("nf", nf)] {
        if n == "r" {
            b.store(body, Opcode::Store, n, &[z0], v, vec![]);
        } else {
            b.store(body, Opcode::Store, n, &[z0, z0], v, vec![]);
        }
    }
    let lit = |v: &[i64]| v.iter().map(|&n| Expr::int(n)).collect::<Vec<_>>();
    let ps = vec![
        tparam("x", Access::In, F32, lit(&[2, 3])),
        tparam("t", Access::Out, F32, lit(&[3, 2])),
        tparam("r", Access::Out, F32, lit(&[6])),
        tparam("s", Access::Out, F32, lit(&[2, 1])),
        tparam("d", Access::Out, F32, lit(&[2, 3])),
        tparam("nf", Access::Out, F32, lit(&[2, 3])),
    ];
    let md = module(vec![kernel("shapes", ps, grid1(), vec![], b)], None);
    let xv = vec![1.0, 5.0, 2.0, 4.0, -1.0, 8.0];
    let o = go(&md, vec![("x", ht(F32, &[2, 3], xv.clone()))], true).unwrap();
    assert_eq!(o["t"].data.f64s(), vec![1.0, 4.0, 5.0, -1.0, 2.0, 8.0]);
    assert_eq!(o["r"].data.f64s(), xv);
    assert_eq!(o["s"].data.f64s(), vec![8.0, 11.0]);
    assert_eq!(o["d"].data.f64s(), vec![-3.0, 0.0, -6.0, 0.0, -6.0, 0.0]);
    let nf4 = |i: usize| NF4_TABLE[i] as f64;
    assert_eq!(
        o["nf"].data.f64s(),
        vec![nf4(0), nf4(1), nf4(2), nf4(0), nf4(1), nf4(2)]
    );
}

#[test]
fn bitcast_reinterprets_bits() {
    // f32 → i32, masked, → f32 truncates to bf16: 1 + 2⁻⁸ + 2⁻²⁰ becomes 1.0 (rounding to nearest
    // would give 1 + 2⁻⁷, since the dropped part exceeds half a bf16 ulp).
    let x = 1.0 + 2f64.powi(-8) + 2f64.powi(-20);
    let r = scalar_results(F32, |b, k| {
        let xv = b.float(k, x, sc(F32));
        let bits = b.op(k, Opcode::Bitcast, &[xv], sc(I32));
        let mask = b.int(k, -65536, sc(I32));
        let hi = b.op(k, Opcode::And, &[bits, mask], sc(I32));
        let neg = b.int(k, -0x4080_0000, sc(I32)); // 0xBF80_0000 = −1.0
        vec![
            b.op(k, Opcode::Bitcast, &[hi], sc(F32)),
            b.op(k, Opcode::Bitcast, &[neg], sc(F32)),
            b.op(k, Opcode::Bitcast, &[xv], sc(F32)),
        ]
    })
    .unwrap();
    assert_eq!(r, vec![1.0, -1.0, x as f32 as f64]);
    let r = scalar_results(I32, |b, k| {
        let one = b.float(k, 1.5, sc(F32));
        vec![b.op(k, Opcode::Bitcast, &[one], sc(I32))]
    })
    .unwrap();
    assert_eq!(r, vec![0x3FC0_0000 as f64]);
    // f16 1.0 is 0x3C00, which as bf16 is 2^(120−127)·(1 + 0) = 2⁻⁷.
    let r = scalar_results(Bf16, |b, k| {
        let one = b.float(k, 1.0, sc(F16));
        vec![b.op(k, Opcode::Bitcast, &[one], sc(Bf16))]
    })
    .unwrap();
    assert_eq!(r, vec![2f64.powi(-7)]);
    // A width mismatch (the verifier rejects it too) is an error, not a reinterpretation.
    let t = crate::interp::tile::Tile::filled(F32, vec![2], crate::interp::tile::Scalar::F(1.0));
    let e = crate::interp::math::bitcast(&t, F16).unwrap_err();
    assert!(e.contains("one width"), "{e}");
}
