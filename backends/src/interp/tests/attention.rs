//! Attention end to end: one-head online-softmax attention built with the `Dfg` API, checked
//! against an f64 oracle. (Interpreter timing is a measurement, not a test:
//! `cargo run --release -p kir-compiler --example interp_timing`.)

use super::*;
use kir_ir::Dtype::*;

const BM: usize = 64;
const BN: usize = 64;
const D: usize = 128;

/// One-head attention, online softmax: q, k, v bf16 [S, D]; o f32 [S, D]; BM query rows per
/// program, BN keys per loop step.
fn attention_module() -> Module {
    let mut b = B::new();
    let body = b.body;
    let p = b.pid(body, 0);
    let cbm = b.int(body, BM as i64, sc(I32));
    let row0 = b.op(body, Opcode::Mul, &[p, cbm], sc(I32));
    let z0 = b.int(body, 0, sc(I32));
    let q = b.load(body, "q", &[row0, z0], vec![], tile(&[BM, D], Bf16));
    let m0 = b.float(body, f64::NEG_INFINITY, tile(&[BM, 1], F32));
    let l0 = b.float(body, 0.0, tile(&[BM, 1], F32));
    let acc0 = b.float(body, 0.0, tile(&[BM, D], F32));
    let zero_s = b.float(body, 0.0, tile(&[BM, BN], F32));
    let scale = b.float(body, 1.0 / (D as f64).sqrt(), sc(F32));
    let (s_dim, step) = (b.dim(body, "S"), b.int(body, BN as i64, sc(I32)));
    let res = b.for_loop(body, z0, s_dim, step, &[m0, l0, acc0], |b, k, j, c| {
        let (m, l, acc) = (c[0], c[1], c[2]);
        let kt = b.load(k, "k", &[j, z0], vec![], tile(&[BN, D], Bf16));
        let ktt = b.op(k, Opcode::Transpose, &[kt], tile(&[D, BN], Bf16));
        let s = b.op(k, Opcode::Dot, &[q, ktt, zero_s], tile(&[BM, BN], F32));
        let s = b.op(k, Opcode::Mul, &[s, scale], tile(&[BM, BN], F32));
        let axis1 = || vec![("axis", Attr::Expr(Expr::int(1)))];
        let mx = b.op_lead(
            k,
            Opcode::Reduce,
            red("max"),
            &[s],
            axis1(),
            tile(&[BM, 1], F32),
        );
        let mn = b.op(k, Opcode::Max, &[m, mx], tile(&[BM, 1], F32));
        let mnb = b.op(k, Opcode::Broadcast, &[mn], tile(&[BM, BN], F32));
        let sh = b.op(k, Opcode::Sub, &[s, mnb], tile(&[BM, BN], F32));
        let pr = b.op(k, Opcode::Exp, &[sh], tile(&[BM, BN], F32));
        let dm = b.op(k, Opcode::Sub, &[m, mn], tile(&[BM, 1], F32));
        let alpha = b.op(k, Opcode::Exp, &[dm], tile(&[BM, 1], F32));
        let ls = b.op_lead(
            k,
            Opcode::Reduce,
            red("sum"),
            &[pr],
            axis1(),
            tile(&[BM, 1], F32),
        );
        let la = b.op(k, Opcode::Mul, &[l, alpha], tile(&[BM, 1], F32));
        let l2 = b.op(k, Opcode::Add, &[la, ls], tile(&[BM, 1], F32));
        let ab = b.op(k, Opcode::Broadcast, &[alpha], tile(&[BM, D], F32));
        let accs = b.op(k, Opcode::Mul, &[acc, ab], tile(&[BM, D], F32));
        let v = b.load(k, "v", &[j, z0], vec![], tile(&[BN, D], Bf16));
        let vf = b.op(k, Opcode::Cast, &[v], tile(&[BN, D], F32));
        let acc2 = b.op(k, Opcode::Dot, &[pr, vf, accs], tile(&[BM, D], F32));
        vec![mn, l2, acc2]
    });
    let lb = b.op(body, Opcode::Broadcast, &[res[1]], tile(&[BM, D], F32));
    let o = b.op(body, Opcode::Div, &[res[2], lb], tile(&[BM, D], F32));
    b.store(body, Opcode::Store, "o", &[row0, z0], o, vec![]);
    let ps = vec![
        tparam("q", Access::In, Bf16, ids(&["S", "D"])),
        tparam("k", Access::In, Bf16, ids(&["S", "D"])),
        tparam("v", Access::In, Bf16, ids(&["S", "D"])),
        tparam("o", Access::Out, F32, ids(&["S", "D"])),
    ];
    let grid = [
        ebin(BinOp::Div, Expr::ident("S"), Expr::int(BM as i64)),
        Expr::int(1),
        Expr::int(1),
    ];
    let req = vec![
        ebin(
            BinOp::Eq,
            ebin(BinOp::Rem, Expr::ident("S"), Expr::int(BM as i64)),
            Expr::int(0),
        ),
        ebin(BinOp::Eq, Expr::ident("D"), Expr::int(D as i64)),
    ];
    module(vec![kernel("attention", ps, grid, req, b)], None)
}

fn attention_ref(q: &[f64], k: &[f64], v: &[f64], s: usize) -> Vec<f64> {
    let mut o = vec![0.0; s * D];
    let scale = 1.0 / (D as f64).sqrt();
    for i in 0..s {
        let sc: Vec<f64> = (0..s)
            .map(|j| (0..D).map(|d| q[i * D + d] * k[j * D + d]).sum::<f64>() * scale)
            .collect();
        let mx = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let p: Vec<f64> = sc.iter().map(|x| (x - mx).exp()).collect();
        let l: f64 = p.iter().sum();
        for d in 0..D {
            o[i * D + d] = (0..s).map(|j| p[j] * v[j * D + d]).sum::<f64>() / l;
        }
    }
    o
}

fn attention_args(s: usize) -> Vec<(&'static str, HostArg)> {
    let mut args = vec![];
    for (i, n) in ["q", "k", "v"].into_iter().enumerate() {
        // Larger q so the softmax is not flat.
        let vals: Vec<f64> = rand_vals(s * D, 10 + i as u64, true)
            .iter()
            .map(|x| if n == "q" { x * 4.0 } else { *x })
            .collect();
        args.push((n, ht(Bf16, &[s, D], vals)));
    }
    args
}

fn data(a: &[(&str, HostArg)], n: &str) -> Vec<f64> {
    match a.iter().find(|(k, _)| *k == n) {
        Some((_, HostArg::Tensor(t))) => t.data.f64s().to_vec(),
        _ => vec![],
    }
}

#[test]
fn attention_matches_f64_oracle() {
    let s = 256;
    let md = attention_module();
    let args = attention_args(s);
    let want = attention_ref(&data(&args, "q"), &data(&args, "k"), &data(&args, "v"), s);
    let out = go(&md, args.clone(), true).unwrap();
    let err = out["o"]
        .data
        .f64s()
        .iter()
        .zip(&want)
        .map(|(g, w)| (g - w).abs())
        .fold(0.0, f64::max);
    assert!(err < 2e-5, "max abs error {err}");
    assert_eq!(go(&md, args, false).unwrap(), out);
    // requires: S % 64 == 0
    let bad = vec![
        ("q", ht(Bf16, &[100, D], vec![0.0; 100 * D])),
        ("k", ht(Bf16, &[100, D], vec![0.0; 100 * D])),
        ("v", ht(Bf16, &[100, D], vec![0.0; 100 * D])),
    ];
    let e = go(&md, bad, true).unwrap_err();
    assert!(
        e.message
            .contains("requirement `S % 64 == 0` does not hold (D = 128, S = 100)"),
        "{}",
        e.message
    );
}
