//! Program-level tests: programs with temps and several launches, argument binding errors,
//! specialization checks, `if`, strided params, and a module parsed from text.

use super::*;
use kir_ir::Dtype::*;
/// y = 2x + 1 as two launches through a temp; `scale` is a scalar param of the program.
fn two_launch_module() -> Module {
    let mk = |kname: &str, src: &str, dst: &str, op: Opcode| {
        let mut b = B::new();
        let body = b.body;
        let p = b.pid(body, 0);
        let c4 = b.int(body, 4, sc(I32));
        let off = b.op(body, Opcode::Mul, &[p, c4], sc(I32));
        let x = b.load(body, src, &[off], vec![], tile(&[4], F32));
        let f = b.op_lead(body, Opcode::Param, name("f"), &[], vec![], sc(F32));
        let y = b.op(body, op, &[x, f], tile(&[4], F32));
        b.store(body, Opcode::Store, dst, &[off], y, vec![]);
        let ps = vec![
            tparam(src, Access::In, F32, ids(&["L"])),
            tparam(dst, Access::Out, F32, ids(&["L"])),
            sparam("f", F32),
        ];
        kernel(
            kname,
            ps,
            [
                cdiv(Expr::ident("L"), Expr::int(4)),
                Expr::int(1),
                Expr::int(1),
            ],
            vec![],
            b,
        )
    };
    let bind = |p: &str, a: &str| ArgBinding {
        param: p.into(),
        arg: a.into(),
        span: Span::default(),
    };
    let launch = |k: &str, bs: Vec<ArgBinding>| Launch {
        kernel: k.into(),
        args: bs,
        span: Span::default(),
    };
    let tt = TensorType {
        elem: ElemType::Known(F32),
        dims: ids(&["N"]),
        strides: None,
    };
    let prog = Program {
        params: vec![
            tparam("x", Access::In, F32, ids(&["N"])),
            sparam("scale", F32),
            sparam("one", F32),
            tparam("y", Access::Out, F32, ids(&["N"])),
        ],
        temps: vec![TempDecl {
            name: "t".into(),
            ty: tt,
            span: Span::default(),
        }],
        launches: vec![
            launch(
                "mul",
                vec![bind("a", "x"), bind("b", "t"), bind("f", "scale")],
            ),
            launch(
                "add",
                vec![bind("a", "t"), bind("b", "y"), bind("f", "one")],
            ),
        ],
        doc: vec![],
        span: Span::default(),
    };
    module(
        vec![
            mk("mul", "a", "b", Opcode::Mul),
            mk("add", "a", "b", Opcode::Add),
        ],
        Some(prog),
    )
}

#[test]
fn program_runs_launches_through_temps() {
    let md = two_launch_module();
    let x: Vec<f64> = (0..8).map(|i| i as f64 * 0.5).collect();
    let args = || {
        vec![
            ("x", ht(F32, &[8], x.clone())),
            ("scale", HostArg::Scalar(2.0)),
            ("one", HostArg::Scalar(1.0)),
        ]
    };
    let out = go(&md, args(), true).unwrap();
    assert_eq!(out.keys().collect::<Vec<_>>(), vec!["y"]);
    assert_eq!(
        out["y"].data.f64s(),
        x.iter().map(|v| 2.0 * v + 1.0).collect::<Vec<_>>()
    );
    // Out-of-bounds in the second launch: N = 6 is not a multiple of 4.
    let e = go(
        &md,
        vec![
            ("x", ht(F32, &[6], vec![0.0; 6])),
            ("scale", HostArg::Scalar(2.0)),
            ("one", HostArg::Scalar(1.0)),
        ],
        true,
    )
    .unwrap_err();
    assert_eq!(e.kernel.as_deref(), Some("mul"));
    assert!(
        e.message
            .contains("`a` (buffer `x`) index [6] is outside shape [6]"),
        "{}",
        e.message
    );
    // Missing and unknown arguments.
    let e = go(
        &md,
        vec![
            ("x", ht(F32, &[8], x.clone())),
            ("scale", HostArg::Scalar(2.0)),
        ],
        true,
    )
    .unwrap_err();
    assert!(
        e.message.contains("missing argument `one`"),
        "{}",
        e.message
    );
    let mut a = args();
    a.push(("z", HostArg::Scalar(1.0)));
    assert!(go(&md, a, true)
        .unwrap_err()
        .message
        .contains("unknown argument `z`"));
    let mut a = args();
    a.push(("y", ht(F32, &[8], x.clone())));
    assert!(go(&md, a, true)
        .unwrap_err()
        .message
        .contains("`y` is an `out` param"));
    let mut a = args();
    a[0] = ("x", ht(F32, &[2, 4], x.clone()));
    assert!(go(&md, a, true)
        .unwrap_err()
        .message
        .contains("`x` has rank 1"));
}

#[test]
fn dims_must_agree_between_params() {
    let md = gemm_like_dims();
    let e = go(
        &md,
        vec![
            ("a", ht(F32, &[2, 3], vec![0.0; 6])),
            ("b", ht(F32, &[4, 2], vec![0.0; 8])),
        ],
        true,
    )
    .unwrap_err();
    assert!(
        e.message.contains("dim `K` is 3 from `a` but 4 from `b`"),
        "{}",
        e.message
    );
    let e = go(
        &md,
        vec![
            ("a", ht(F32, &[2, 3], vec![0.0; 6])),
            ("b", ht(F32, &[3, 2], vec![0.0; 5])),
        ],
        true,
    )
    .unwrap_err();
    assert!(
        e.message.contains("6 elements) but 5 values"),
        "{}",
        e.message
    );
    let e = go(
        &md,
        vec![
            ("a", ht(F32, &[2, 3], vec![0.5; 6])),
            ("b", ht(I32, &[3, 2], vec![0.0; 6])),
        ],
        true,
    );
    assert!(e.is_ok(), "host dtype is informational");
    let e = go(
        &md,
        vec![
            ("a", ht(F32, &[2, 3], vec![0.0; 6])),
            ("b", ht(F32, &[3, 5], vec![0.0; 15])),
        ],
        true,
    )
    .unwrap_err();
    assert!(
        e.message.contains("must have size `K - 1` = 2 in dim 1"),
        "{}",
        e.message
    );
}

/// a: [M, K], b: [K, K - 1], c: out [M]; the kernel (one program) does nothing.
fn gemm_like_dims() -> Module {
    let b = B::new();
    let ps = vec![
        tparam("a", Access::In, F32, ids(&["M", "K"])),
        tparam(
            "b",
            Access::In,
            F32,
            vec![
                Expr::ident("K"),
                ebin(BinOp::Sub, Expr::ident("K"), Expr::int(1)),
            ],
        ),
        tparam("c", Access::Out, F32, ids(&["M"])),
    ];
    module(
        vec![kernel(
            "k",
            ps,
            // One program (a constant grid dimension of 0 is a verifier error).
            [Expr::int(1), Expr::int(1), Expr::int(1)],
            vec![],
            b,
        )],
        None,
    )
}

#[test]
fn unspecialized_modules_are_rejected() {
    let mut md = gemm_like_dims();
    md.consts.push(ConstDecl {
        name: "BLOCK".into(),
        kind: ConstKind::Int,
        default: Expr::int(4),
        tune: None,
        require: None,
        doc: vec![],
        span: Span::default(),
    });
    assert!(go_unverified(&md, vec![], true)
        .unwrap_err()
        .message
        .contains("still has constants (BLOCK)"));

    let mut b = B::new();
    let (t, e) = (b.dfg.new_block(), b.dfg.new_block());
    let body = b.body;
    b.op_full(
        body,
        Opcode::StaticIf,
        &[],
        Some(Attr::Expr(Expr::int(1))),
        None,
        vec![],
        vec![t, e],
        vec![],
    );
    let md = module(
        vec![kernel(
            "k",
            vec![],
            [Expr::int(1), Expr::int(1), Expr::int(1)],
            vec![],
            b,
        )],
        None,
    );
    assert!(go_unverified(&md, vec![], true)
        .unwrap_err()
        .message
        .contains("static_if"));

    let mut b = B::new();
    let body = b.body;
    b.op_lead(
        body,
        Opcode::Const,
        Attr::Expr(Expr::int(0)),
        &[],
        vec![],
        Type::Tile(vec![Expr::ident("BLOCK")], ElemType::Known(F32)),
    );
    let md = module(
        vec![kernel(
            "k",
            vec![],
            [Expr::int(1), Expr::int(1), Expr::int(1)],
            vec![],
            b,
        )],
        None,
    );
    assert!(go_unverified(&md, vec![], true)
        .unwrap_err()
        .message
        .contains("not concrete"));
}

#[test]
fn if_picks_a_region_and_strided_params_work() {
    // y[i] = x[i] if flag else -x[i], with x column-major [2, 3].
    let mut b = B::new();
    let body = b.body;
    let z0 = b.int(body, 0, sc(I32));
    let x = b.load(body, "x", &[z0, z0], vec![], tile(&[2, 3], F32));
    let f = b.op_lead(body, Opcode::Param, name("flag"), &[], vec![], sc(I1));
    let (tb, eb) = (b.dfg.new_block(), b.dfg.new_block());
    b.op_full(tb, Opcode::Yield, &[x], None, None, vec![], vec![], vec![]);
    let nx = b.op(eb, Opcode::Neg, &[x], tile(&[2, 3], F32));
    b.op_full(eb, Opcode::Yield, &[nx], None, None, vec![], vec![], vec![]);
    let r = b.op_full(
        body,
        Opcode::If,
        &[f],
        None,
        None,
        vec![],
        vec![tb, eb],
        vec![tile(&[2, 3], F32)],
    )[0];
    b.store(body, Opcode::Store, "y", &[z0, z0], r, vec![]);
    let mut xp = tparam("x", Access::In, F32, ids(&["M", "N"]));
    if let ParamKind::Tensor(_, tt) = &mut xp.kind {
        tt.strides = Some(vec![Expr::int(1), Expr::ident("M")]);
    }
    let ps = vec![
        xp,
        sparam("flag", I1),
        tparam("y", Access::Out, F32, ids(&["M", "N"])),
    ];
    let md = module(
        vec![kernel(
            "k",
            ps,
            [Expr::int(1), Expr::int(1), Expr::int(1)],
            vec![],
            b,
        )],
        None,
    );
    let xv = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    let o = go(
        &md,
        vec![
            ("x", ht(F32, &[2, 3], xv.clone())),
            ("flag", HostArg::Scalar(1.0)),
        ],
        true,
    )
    .unwrap();
    assert_eq!(o["y"].data.f64s(), xv);
    let o = go(
        &md,
        vec![
            ("x", ht(F32, &[2, 3], xv.clone())),
            ("flag", HostArg::Scalar(0.0)),
        ],
        true,
    )
    .unwrap();
    assert_eq!(
        o["y"].data.f64s(),
        xv.iter().map(|v| -v).collect::<Vec<_>>()
    );
    let e = go(
        &md,
        vec![("x", ht(F32, &[2, 3], xv)), ("flag", HostArg::Scalar(2.0))],
        true,
    )
    .unwrap_err();
    assert!(
        e.message
            .contains("scalar `flag`: 2 is not in the range of i1"),
        "{}",
        e.message
    );
}

#[test]
fn text_softmax_runs() {
    let src = r#"module softmax
kernel @softmax(x: in tensor<f32>[R, N], y: out tensor<f32>[R, N]) grid [R, 1, 1] requires [N <= 16] {
  %r = program_id 0 : i32
  %z = const 0 : i32
  %t = load x[%r, %z] other -inf : tile<16xf32>
  %t2 = reshape %t : tile<1x16xf32>
  %m = reduce max %t2 axis 1 : tile<1x1xf32>
  %mb = broadcast %m : tile<1x16xf32>
  %d = sub %t2, %mb : tile<1x16xf32>
  %e = exp %d : tile<1x16xf32>
  %s = reduce sum %e axis 1 : tile<1x1xf32>
  %sb = broadcast %s : tile<1x16xf32>
  %p = div %e, %sb : tile<1x16xf32>
  %p1 = reshape %p : tile<16xf32>
  store y[%r, %z], %p1 guard
}
"#;
    let md = kir_ir::text::parse(src).unwrap_or_else(|e| panic!("{}", e.render("softmax", src)));
    let (r, n) = (3, 11);
    let x: Vec<f64> = rand_vals(r * n, 5, false).iter().map(|v| v * 5.0).collect();
    let out = go(&md, vec![("x", ht(F32, &[r, n], x.clone()))], true).unwrap();
    for i in 0..r {
        let row = &x[i * n..][..n];
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
        for (j, v) in row.iter().enumerate() {
            let want = (v - m).exp() / s;
            assert!((out["y"].data.f64s()[i * n + j] - want).abs() < 1e-6);
        }
    }
    let e = go(&md, vec![("x", ht(F32, &[1, 17], vec![0.0; 17]))], true).unwrap_err();
    assert!(
        e.message
            .contains("requirement `N <= 16` does not hold (N = 17, R = 1)"),
        "{}",
        e.message
    );
}
