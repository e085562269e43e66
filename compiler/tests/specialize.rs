//! Specialization: constant evaluation (defaults, `-D` overrides, `where` checks, errors),
//! folding into types and expressions, param conditions, `static_if` removal, and the
//! round trip `parse(print(specialized)) == specialized`, also for every built-in op.

use kir_compiler::internal::passes::{const_values, specialize};
use kir_compiler::internal::{oplib, pipeline};
use kir_ir::{text, verifier, Attr, Dtype, EvalVal, Module, Opcode, ParamKind, Type};

const SRC: &str = "module t

const DTYPE: {f32, f16, bf16} = bf16
const HEAD_DIM: int = 64 where HEAD_DIM == 64 || HEAD_DIM == 128
const BLOCK: int = HEAD_DIM / 2
const CAUSAL: int = 0 where CAUSAL == 0 || CAUSAL == 1
const MODE: {plain, scaled} = plain

kernel @k(
  x: in tensor<DTYPE>[R, HEAD_DIM],
  y: out tensor<DTYPE>[R, HEAD_DIM],
  s: f32 if MODE == scaled,
) grid [cdiv(R, BLOCK), 1, 1] requires [R % BLOCK == 0, BLOCK > 0] {
  %i = program_id 0 : i32
  %bm = const BLOCK : i32
  %r0 = mul %i, %bm : i32
  %t = load x[%r0, 0] : tile<BLOCK x HEAD_DIM x DTYPE>
  %f = cast %t : tile<BLOCK x HEAD_DIM x f32>
  %g = static_if MODE == scaled : tile<BLOCK x HEAD_DIM x f32> {
    %sv = param s : f32
    %h = static_if CAUSAL == 1 : tile<BLOCK x HEAD_DIM x f32> {
      %neg = neg %f : tile<BLOCK x HEAD_DIM x f32>
      yield %neg
    } else {
      yield %f
    }
    %m = mul %h, %sv : tile<BLOCK x HEAD_DIM x f32>
    yield %m
  } else {
    %e = exp %f : tile<BLOCK x HEAD_DIM x f32>
    yield %e
  }
  %o = cast %g : tile<BLOCK x HEAD_DIM x DTYPE>
  store y[%r0, 0], %o
}
";

fn defs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

fn parsed() -> Module {
    let m = text::parse(SRC).unwrap_or_else(|e| panic!("{}", e.render("t.kir", SRC)));
    verifier::verify(&m).unwrap_or_else(|e| panic!("{}", e.render("t.kir", SRC)));
    m
}

/// Specializes, verifies, and checks the printed text reparses to an equal module.
fn spec(pairs: &[(&str, &str)]) -> (Module, String) {
    let s = specialize(&parsed(), &defs(pairs))
        .unwrap_or_else(|e| panic!("{}", e.render("t.kir", SRC)));
    let txt = text::print(&s);
    verifier::verify(&s).unwrap_or_else(|e| panic!("{}\n{txt}", e.render("t.kir", SRC)));
    let back = text::parse(&txt).unwrap_or_else(|e| panic!("{}\n{txt}", e.render("printed", &txt)));
    assert_eq!(back, s, "parse(print(specialized)) differs:\n{txt}");
    (s, txt)
}

fn opcodes(m: &Module) -> Vec<Opcode> {
    let k = &m.kernels.values().next().unwrap();
    let mut v = Vec::new();
    let mut stack = vec![k.body];
    while let Some(b) = stack.pop() {
        for &o in &k.dfg.blocks[b].ops {
            v.push(k.dfg.ops[o].opcode);
            stack.extend(k.dfg.ops[o].regions.iter().copied());
        }
    }
    v
}

#[test]
fn defaults() {
    let vals = const_values(&parsed(), &[]).unwrap();
    let get = |n: &str| {
        vals.iter()
            .find(|(c, _)| c == n)
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    assert_eq!(get("DTYPE"), EvalVal::Sym("bf16".into()));
    assert_eq!(get("HEAD_DIM"), EvalVal::Int(64));
    assert_eq!(get("BLOCK"), EvalVal::Int(32));
    let (s, txt) = spec(&[]);
    assert!(s.consts.is_empty());
    let k = s.kernels.values().next().unwrap();
    assert_eq!(
        k.params.len(),
        2,
        "`s` is dropped when MODE != scaled:\n{txt}"
    );
    assert!(k.params.iter().all(|p| p.cond.is_none()));
    let ParamKind::Tensor(_, tt) = &k.params[0].kind else {
        panic!()
    };
    assert_eq!(tt.elem.known(), Some(Dtype::Bf16));
    assert_eq!(tt.dims[1].as_int(), Some(64));
    assert_eq!(k.grid[0].to_string(), "cdiv(R, 32)");
    // `BLOCK > 0` folds to true and is dropped; `R % 32 == 0` stays.
    assert_eq!(k.requires.len(), 1, "{txt}");
    assert!(txt.contains("tile<32x64xbf16>"), "{txt}");
    assert!(txt.contains("const 32 : i32"), "{txt}");
    assert!(!opcodes(&s).contains(&Opcode::StaticIf), "{txt}");
    assert!(opcodes(&s).contains(&Opcode::Exp), "{txt}");
    // Every value's type is concrete.
    assert!(k.dfg.values.values().all(|v| v.ty.is_concrete()));
}

#[test]
fn overrides_and_nested_static_if() {
    let (s, txt) = spec(&[
        ("DTYPE", "f16"),
        ("HEAD_DIM", "128"),
        ("MODE", "scaled"),
        ("CAUSAL", "1"),
        ("CAUSAL", "0"), // the last -D wins
    ]);
    let k = s.kernels.values().next().unwrap();
    assert_eq!(k.params.len(), 3, "{txt}");
    assert!(txt.contains("tile<64x128xf16>"), "{txt}");
    let ops = opcodes(&s);
    assert!(
        !ops.contains(&Opcode::StaticIf)
            && !ops.contains(&Opcode::Exp)
            && !ops.contains(&Opcode::Neg),
        "{txt}"
    );
    // %m = mul %f, %sv: the inner static_if's result became %f, the outer's became %m.
    assert!(txt.contains("%m = mul %f, %sv"), "{txt}");
    assert!(txt.contains("%o = cast %m"), "{txt}");
    let (_, txt) = spec(&[("MODE", "scaled"), ("CAUSAL", "1")]);
    assert!(
        txt.contains("%neg = neg %f") && txt.contains("%m = mul %neg, %sv"),
        "{txt}"
    );
}

#[test]
fn where_violation_names_constant_value_and_condition() {
    let e = specialize(&parsed(), &defs(&[("HEAD_DIM", "100")])).unwrap_err();
    assert_eq!(e.0.len(), 1, "{e:?}");
    let msg = &e.0[0].message;
    assert!(
        msg.contains("HEAD_DIM")
            && msg.contains("100")
            && msg.contains("HEAD_DIM == 64 || HEAD_DIM == 128"),
        "{msg}"
    );
    let rendered = e.render("t.kir", SRC);
    assert!(rendered.starts_with("t.kir:4:"), "{rendered}");
}

#[test]
fn bad_values_and_unknown_names_are_all_reported() {
    let e = specialize(
        &parsed(),
        &defs(&[
            ("HEAD_DIM", "abc"),
            ("NOPE", "1"),
            ("DTYPE", "f64"),
            ("NOPE", "2"),
        ]),
    )
    .unwrap_err();
    let msgs: Vec<&str> = e.0.iter().map(|d| d.message.as_str()).collect();
    assert_eq!(msgs.len(), 3, "{msgs:?}");
    assert!(
        msgs.iter()
            .any(|m| m.contains("NOPE") && m.contains("unknown constant")),
        "{msgs:?}"
    );
    let unknown = e.0.iter().find(|d| d.message.contains("NOPE")).unwrap();
    assert!(
        unknown
            .note
            .as_deref()
            .unwrap_or("")
            .contains("DTYPE, HEAD_DIM, BLOCK, CAUSAL, MODE"),
        "{unknown:?}"
    );
    assert!(
        msgs.iter().any(|m| m.contains("`abc` is not an integer")),
        "{msgs:?}"
    );
    assert!(
        msgs.iter()
            .any(|m| m.contains("`f64` is not one of {f32, f16, bf16}")),
        "{msgs:?}"
    );
    // BLOCK depends on the failed HEAD_DIM: no cascade error for it.
    assert!(!msgs.iter().any(|m| m.contains("BLOCK")), "{msgs:?}");
}

#[test]
fn false_requirement_is_an_error() {
    let src = SRC.replace(
        "requires [R % BLOCK == 0, BLOCK > 0]",
        "requires [BLOCK > 40]",
    );
    let m = text::parse(&src).unwrap();
    let e = specialize(&m, &[]).unwrap_err();
    assert!(e.0[0].message.contains("BLOCK > 40"), "{e:?}");
    assert!(specialize(&m, &defs(&[("HEAD_DIM", "128")])).is_ok());
}

#[test]
fn static_if_must_be_constant() {
    let src = SRC.replace("static_if MODE == scaled", "static_if R == 1");
    let m = text::parse(&src).unwrap();
    let e = specialize(&m, &[]).unwrap_err();
    assert!(e.0.iter().any(|d| d.message.contains("`R`")), "{e:?}");
}

#[test]
fn program_params_and_launch_bindings_follow_conditions() {
    let src = "module p
const BIAS: int = 0
kernel @a(x: in tensor<f32>[N], b: in tensor<f32>[N] if BIAS == 1, y: out tensor<f32>[N]) grid [1, 1, 1] {
  %t = load x[0] : tile<4xf32>
  store y[0], %t guard
}
program(x: in tensor<f32>[N], b: in tensor<f32>[N] if BIAS == 1, y: out tensor<f32>[N]) {
  launch @a(x, b, y)
}
";
    let m = text::parse(src).unwrap();
    let s = specialize(&m, &[]).unwrap();
    let p = s.program.as_ref().unwrap();
    assert_eq!(p.params.len(), 2);
    assert_eq!(
        p.launches[0]
            .args
            .iter()
            .map(|a| a.param.as_str())
            .collect::<Vec<_>>(),
        ["x", "y"]
    );
    verifier::verify(&s).unwrap_or_else(|e| panic!("{}", e.render("p.kir", src)));
    let s = specialize(&m, &defs(&[("BIAS", "1")])).unwrap();
    assert_eq!(s.program.as_ref().unwrap().launches[0].args.len(), 3);
    assert_eq!(s.kernels.values().next().unwrap().params.len(), 3);
}

#[test]
fn names_types_and_spans_survive() {
    let (s, _) = spec(&[]);
    let k = s.kernels.values().next().unwrap();
    let named: Vec<&str> = k
        .dfg
        .values
        .values()
        .filter_map(|v| v.name.as_deref())
        .collect();
    assert!(named.contains(&"r0") && named.contains(&"e"), "{named:?}");
    let e = k
        .dfg
        .values
        .values()
        .find(|v| v.name.as_deref() == Some("e"))
        .unwrap();
    assert_eq!(e.ty, Type::tile(&[32, 64], Dtype::F32));
    assert_eq!(&SRC[e.span.range()], "%e");
    let load = k
        .dfg
        .ops
        .values()
        .find(|o| o.opcode == Opcode::Load)
        .unwrap();
    assert!(SRC[load.span.range()].starts_with("%t = load"));
    let c = k
        .dfg
        .ops
        .values()
        .find(|o| o.opcode == Opcode::Const)
        .unwrap();
    assert!(matches!(&c.lead, Some(Attr::Expr(e)) if e.as_int() == Some(32)));
}

#[test]
fn spliced_names_that_collide_are_made_unique() {
    let src = "module c
const A: int = 1
kernel @k(y: out tensor<i32>[N]) grid [1, 1, 1] {
  %r = static_if A == 1 : i32 {
    %x = const 1 : i32
    yield %x
  } else {
    %x = const 2 : i32
    yield %x
  }
  %x = add %r, %r : i32
  %t = splat %x : tile<4xi32>
  store y[0], %t guard
}
";
    let s = specialize(&text::parse(src).unwrap(), &[]).unwrap();
    let txt = text::print(&s);
    assert!(
        txt.contains("%x = const 1") && txt.contains("%x_1 = add %x, %x"),
        "{txt}"
    );
    assert_eq!(text::parse(&txt).unwrap(), s);
}

#[test]
fn regions_not_taken_are_not_folded() {
    let src = "module d
const B: int = 32
kernel @k(y: out tensor<i32>[N]) grid [1, 1, 1] {
  %r = static_if B == 32 : i32 {
    %a = const 1 : i32
    yield %a
  } else {
    %q = const 64 / (B - 32) : i32
    yield %q
  }
  %t = splat %r : tile<4xi32>
  store y[0], %t guard
}
";
    let m = text::parse(src).unwrap();
    let s = specialize(&m, &[]).unwrap_or_else(|e| panic!("{}", e.render("d.kir", src)));
    assert!(text::print(&s).contains("%t = splat %a"));
    let e = specialize(&m, &defs(&[("B", "0")])).unwrap();
    assert!(
        text::print(&e).contains("%q = const -2 : i32"),
        "{}",
        text::print(&e)
    );
}

#[test]
fn every_builtin_round_trips_after_specialization() {
    for (name, src) in oplib::builtins() {
        let (_, s) =
            pipeline::frontend(src, &[]).unwrap_or_else(|e| panic!("{}", e.render(name, src)));
        let txt = text::print(&s);
        let back =
            text::parse(&txt).unwrap_or_else(|e| panic!("{name}: {}", e.render("printed", &txt)));
        assert_eq!(back, s, "{name}: parse(print(specialized)) differs:\n{txt}");
    }
}
