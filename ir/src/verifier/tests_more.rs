//! Verifier tests on parsed text: a concrete kernel using every op verifies, the op library
//! verifies, each error-case file of `tests/in/errors` gives exactly its error, and the verifier
//! survives mutated IR without panicking.

use super::verify;
use crate::module::Offset;
use crate::ops::Attr;
use crate::text::parse;
use cranelift_entity::EntityRef;

fn errs(src: &str) -> Vec<String> {
    let m = parse(src).unwrap_or_else(|e| panic!("parse failed: {e:?}\n{src}"));
    match verify(&m) {
        Ok(()) => vec![],
        Err(d) => d.0.into_iter().map(|d| d.message).collect(),
    }
}

/// A specialized kernel that uses every opcode once, correctly.
const EVERY_OP: &str = r#"
module every_op

const B: int = 64

kernel @k(x: in tensor<f32>[R, 64], w: in tensor<bf16>[64, 64], q: in tensor<u8>[R, 64],
          y: inout tensor<f32>[R, 64], s: f32) grid [R, 1, 1] requires [R >= 1] {
  %r = program_id 0 : i32
  %np = num_programs 0 : i32
  %rows = dim R : i32
  %s = param s : f32
  %zero = const 0 : i32
  %idx = iota axis 1 : tile<1x64xi32>
  %lim = splat %rows : tile<1x64xi32>
  %inb = cmp lt %idx, %lim : tile<1x64xi1>
  %x = load x[%r, 0] mask %inb other 0.0 : tile<1x64xf32>
  %xs = mul %x, %s : tile<1x64xf32>
  %xi = bitcast %x : tile<1x64xi32>
  %xb = broadcast %xs : tile<64x64xf32>
  %xt = transpose %xb perm [1, 0] : tile<64x64xf32>
  %xr = reshape %xt : tile<4096xf32>
  %x2 = reshape %xr : tile<64x64xf32>
  %a = cast %x2 : tile<64x64xbf16>
  %wt = load w[0, 0] : tile<64x64xbf16>
  %acc0 = const 0.0 : tile<64x64xf32>
  %d = dot %a, %wt, %acc0 : tile<64x64xf32>
  %n = neg %d : tile<64x64xf32>
  %e = exp2 %n : tile<64x64xf32>
  %m = max %e, %d : tile<64x64xf32>
  %red = reduce sum %m axis 0 : tile<1x64xf32>
  %codes = load q[%r, 0] : tile<1x64xu8>
  %f = nf4 %codes : tile<1x64xf32>
  %sh = shr %codes, %codes : tile<1x64xu8>
  %bits = xor %inb, %inb : tile<1x64xi1>
  %nb = not %bits : tile<1x64xi1>
  %sel = select %nb, %f, %red : tile<1x64xf32>
  %er = erf %sel : tile<1x64xf32>
  %pw = pow %er, %s : tile<1x64xf32>
  %fm = fma %pw, %s, %sel : tile<1x64xf32>
  print "fm, r" %fm, %r
  %one = const 1 : i32
  %four = const 4 : i32
  %big = cmp gt %rows, %four : i1
  %acc = for %i = %zero to %four step %one iter(%c = %sel) : tile<1x64xf32> {
    %c2 = add %c, %sel : tile<1x64xf32>
    yield %c2
  }
  %out = if %big : tile<1x64xf32> {
    yield %acc
  } else {
    %z = const 0.0 : tile<1x64xf32>
    yield %z
  }
  %fin = static_if B == 64 : tile<1x64xf32> {
    yield %out
  } else {
    yield %acc
  }
  atomic_add y[%r, 0], %fin mask %inb
  store y[%r, 0], %fin guard
}
"#;

#[test]
fn kernel_using_every_op_verifies() {
    assert_eq!(errs(EVERY_OP), Vec::<String>::new());
}

/// The type rules of `fma` and `print`, and what the parser says of a bad string.
#[test]
fn fma_and_print_rules() {
    let k = |body: &str| {
        format!(
            "module m\nkernel @k(x: in tensor<f32>[64], h: in tensor<f16>[64]) grid [1, 1, 1] {{\n\
             %a = load x[0] : tile<64xf32>\n%b = load x[0] : tile<32xf32>\n\
             %c = load h[0] : tile<64xf16>\n%s = const 2.0 : f32\n{body}\n}}\n"
        )
    };
    assert_eq!(
        errs(&k("%f = fma %s, %a, %s : tile<64xf32>")),
        Vec::<String>::new()
    );
    assert_eq!(errs(&k("%f = fma %s, %s, %s : f32")), Vec::<String>::new());
    assert_eq!(
        errs(&k("%f = fma %a, %b, %a : tile<64xf32>")),
        ["`fma` operands differ: tile<32xf32> vs tile<64xf32> (use `broadcast`)"]
    );
    assert_eq!(
        errs(&k("%f = fma %a, %c, %a : tile<64xf32>")),
        ["`fma` operands differ: tile<64xf16> vs tile<64xf32> (use `cast`)"]
    );
    assert_eq!(
        errs(&k("%f = fma %s, %s, %a : f32")),
        ["the result of `fma` must be tile<64xf32>, found f32"]
    );
    assert_eq!(errs(&k("print \"ok\" %a, %b, %s")), Vec::<String>::new());
    assert_eq!(errs(&k("print \"\"")), Vec::<String>::new());
    // Built by code: a prefix that is not printable ASCII, and one too long.
    let mut m = parse(&k("print \"x\" %a")).expect("parse");
    for (prefix, want) in [
        (
            "tab\there",
            "the prefix of `print` holds `\\t`: it must be printable ASCII",
        ),
        (
            &"y".repeat(201)[..],
            "the prefix of `print` has 201 characters; at most 200 are allowed",
        ),
    ] {
        let kern = m.kernels.values_mut().next().expect("kernel");
        for (_, od) in kern.dfg.ops.iter_mut() {
            if od.opcode == crate::ops::Opcode::Print {
                od.lead = Some(Attr::Str(prefix.to_string()));
            }
        }
        let d = verify(&m).expect_err("bad prefix");
        assert_eq!(d.0.len(), 1);
        assert_eq!(d.0[0].message, want);
    }
    for (src, want) in [
        ("print \"a %a", "unterminated string"),
        ("print \"a\\q\"", "unknown escape in a string"),
        ("print \"caf\u{e9}\"", "strings hold printable ASCII only"),
        ("print %a", "expected a string"),
    ] {
        let e = parse(&k(src)).expect_err(src);
        assert!(e.0[0].message.contains(want), "{src}: {}", e.0[0].message);
    }
    // A `print` without values before an op with results (one, or several) does not take them.
    let src = k(
        "print \"here\"\n%f = fma %s, %s, %s : f32\nprint \"there\"\n// doc\n\
                 %r, %q = for %i = %n to %n step %n iter(%u = %s, %w = %s) : f32, f32 {\n\
                 yield %u, %w\n}",
    );
    let src = src.replace(
        "%s = const 2.0 : f32",
        "%s = const 2.0 : f32\n%n = const 1 : i32",
    );
    assert_eq!(errs(&src), Vec::<String>::new());
    let text = crate::text::print(&parse(&src).expect("parse"));
    assert!(text.contains("print \"here\"\n") && text.contains("print \"there\"\n"));
    assert_eq!(crate::text::print(&parse(&text).expect("reparse")), text);
    // Escapes round-trip through the printer.
    let m = parse(&k(r#"print "say \"hi\" \\ 100%" %a"#)).expect("parse");
    let text = crate::text::print(&m);
    assert!(text.contains(r#"print "say \"hi\" \\ 100%" %a"#), "{text}");
    assert_eq!(crate::text::print(&parse(&text).expect("reparse")), text);
}

#[test]
fn op_library_verifies() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../compiler/ops");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let src = std::fs::read_to_string(&p).unwrap();
        let m =
            parse(&src).unwrap_or_else(|d| panic!("{}", d.render(&p.display().to_string(), &src)));
        if let Err(d) = verify(&m) {
            panic!("{}", d.render(&p.display().to_string(), &src));
        }
    }
}

/// `// what it checks; expect: MESSAGE` on the first line of an error-case file.
fn expected(src: &str) -> &str {
    src.lines()
        .next()
        .and_then(|l| l.split_once("; expect: "))
        .map_or("", |(_, e)| e.trim())
}

#[test]
fn error_case_files() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/in/errors");
    let mut seen = 0;
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "kir"))
    {
        let src = std::fs::read_to_string(&p).unwrap();
        let file = p.file_name().unwrap().to_string_lossy().to_string();
        let want = expected(&src);
        assert!(
            !want.is_empty(),
            "{file}: first line must say `; expect: MESSAGE`"
        );
        let got = match parse(&src) {
            Err(d) => {
                assert!(
                    file.starts_with("parse_"),
                    "{file}: unexpected parse error\n{}",
                    d.render(&file, &src)
                );
                d
            }
            Ok(m) => {
                assert!(
                    !file.starts_with("parse_"),
                    "{file}: parses, but a parse error is expected"
                );
                verify(&m).expect_err(&format!("{file}: verifies, but `{want}` is expected"))
            }
        };
        let shown = got.render(&file, &src);
        // `SHOW=1 cargo test -p kir-ir error_case_files -- --nocapture` prints every diagnostic.
        if std::env::var("SHOW").is_ok() {
            eprint!("{shown}");
        }
        assert!(
            got.0.len() == 1 && got.0[0].message.contains(want),
            "{file}: expected exactly one error containing `{want}`, got:\n{shown}"
        );
        seen += 1;
    }
    assert!(seen >= 20, "only {seen} error-case files");
}

#[test]
fn bitcast_needs_one_width_and_no_i1() {
    let src = |ty: &str| {
        format!(
            "module bc\nkernel @k(x: in tensor<f32>[64], h: in tensor<f16>[64]) grid [1, 1, 1] {{\n\
             %x = load x[0] : tile<64xf32>\n  %h = load h[0] : tile<64xf16>\n  {ty}\n}}\n"
        )
    };
    for ok in [
        "%y = bitcast %x : tile<64xi32>",
        "%y = bitcast %x : tile<64xf32>",
        "%y = bitcast %h : tile<64xbf16>",
    ] {
        assert_eq!(errs(&src(ok)), Vec::<String>::new(), "{ok}");
    }
    for (bad, want) in [
        (
            "%y = bitcast %x : tile<64xf16>",
            "`bitcast` needs dtypes of one width: f32 has 32 bits, f16 has 16",
        ),
        (
            "%y = bitcast %h : tile<64xi32>",
            "f16 has 16 bits, i32 has 32",
        ),
        (
            "%y = bitcast %x : tile<32xi32>",
            "`bitcast` keeps the shape",
        ),
        (
            "%c = cmp lt %x, %x : tile<64xi1>\n  %y = bitcast %c : tile<64xu8>",
            "`bitcast` does not apply to i1",
        ),
    ] {
        let e = errs(&src(bad));
        assert!(e.len() == 1 && e[0].contains(want), "{bad}: {e:#?}");
    }
}

#[test]
fn symbolic_facts_are_not_errors_but_structure_is() {
    let src = r#"
module generic
const DTYPE: {f32, bf16} = bf16
const BM: int = 64
const BN: int = 32
kernel @k(x: in tensor<DTYPE>[M, N], y: out tensor<DTYPE>[M, N]) grid [cdiv(M, BM), 1, 1] {
  %r = program_id 0 : i32
  %a = load x[%r, 0] other 0.0 : tile<BM x BN x DTYPE>
  %b = load x[%r, 0] other 0.0 : tile<BN x BM x DTYPE>
  %c = add %a, %b : tile<BM x BN x DTYPE>
  %d = add %c : tile<BM x BN x DTYPE>
  store y[%r, 0], %c
}
"#;
    // BM vs BN is undecided before specialization; the missing operand is not.
    assert_eq!(
        errs(src),
        vec!["`add` takes 2 operands, found 1".to_string()]
    );
}

#[test]
fn conditional_params_share_a_name() {
    let src = r#"
module cond
const T: int = 0
kernel @k(b: in tensor<f32>[K, N] if T == 0, b: in tensor<f32>[N] if T == 1, o: out tensor<f32>[N]) grid [1, 1, 1] {
  %t = static_if T == 1 : tile<64xf32> {
    %v = load b[0] other 0.0 : tile<64xf32>
    yield %v
  } else {
    %w = load b[0, 0] other 0.0 : tile<64xf32>
    yield %w
  }
  store o[0], %t guard
}
"#;
    assert_eq!(errs(src), Vec::<String>::new());
    let bad = src.replace("load b[0] other", "load b[0, 0, 0] other");
    let e = errs(&bad);
    assert!(e.len() == 1 && e[0].contains("gives 3 offset(s)"), "{e:#?}");
}

#[test]
fn several_errors_in_one_file_are_all_reported() {
    let src = r#"
module many
const B: int = Q
kernel @k(x: in tensor<f32>[N], x2: in tensor<f32>[N]) grid [1, 1, Z] {
  %a = load x[0] other 0.0 : tile<64xf32>
  %i = iota axis 0 : tile<64xi32>
  %s = add %a, %i : tile<64xf32>
  %l = log %i : tile<64xi32>
  store x2[0], %a
  %bad = reduce sum %a : tile<1xf32>
}
"#;
    let e = errs(src);
    for needle in [
        "unknown name `Q` in the default of `B`",
        "unknown name `Z` in the grid",
        "`add` operands differ: tile<64xf32> vs tile<64xi32> (use `cast`)",
        "`log` needs a float operand",
        "`store` writes `x2`",
        "`reduce` needs an `axis`",
    ] {
        assert!(
            e.iter().any(|m| m.contains(needle)),
            "missing {needle:?} in {e:#?}"
        );
    }
    assert_eq!(e.len(), 6, "{e:#?}");
}

/// Deterministic mutations of a valid module (operands, regions, attributes, tensor refs swapped
/// around and pointed out of range) must give diagnostics, never a panic.
#[test]
fn mutated_ir_never_panics() {
    let base = parse(EVERY_OP).unwrap();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n.max(1) as u64) as usize
    };
    for _ in 0..3000 {
        let mut m = base.clone();
        let k = m.kernels.values_mut().next().unwrap();
        let (nops, nvals, nblocks) = (k.dfg.ops.len(), k.dfg.values.len(), k.dfg.blocks.len());
        for _ in 0..1 + next(3) {
            let o = crate::entities::Op::new(next(nops));
            let v = crate::entities::Value::new(next(nvals + 3));
            let d = &mut k.dfg.ops[o];
            match next(9) {
                0 if !d.operands.is_empty() => {
                    let i = next(d.operands.len());
                    d.operands[i] = v;
                }
                1 => d
                    .regions
                    .push(crate::entities::Block::new(next(nblocks + 2))),
                2 => {
                    d.regions.clear();
                }
                3 => d.attrs.push(("mask".into(), Attr::Value(v))),
                4 => d
                    .tensor
                    .iter_mut()
                    .for_each(|t| t.offsets.push(Offset::Value(v))),
                5 => d.results.push(v),
                6 => {
                    let b = crate::entities::Block::new(next(nblocks));
                    k.dfg.blocks[b].ops.push(o);
                }
                7 => d.lead = Some(Attr::Flag),
                _ => d.operands.push(v),
            }
        }
        if let Err(d) = verify(&m) {
            let _ = d.render("mutated.kir", EVERY_OP);
        }
    }
}

#[test]
fn binding_checks_literal_dims_and_temps() {
    let src = r#"
module bind
kernel @k(x: in tensor<f32>[N, 64], y: out tensor<f32>[N, 64]) grid [N, 1, 1] {
  %r = program_id 0 : i32
  %t = load x[%r, 0] : tile<1x64xf32>
  store y[%r, 0], %t
}
program(a: in tensor<f32>[M, 128], b: out tensor<f32>[M, 64]) {
  temp t: tensor<f32>[M, 64]
  launch @k(x = a, y = t)
  launch @k(x = t, y = b)
}
"#;
    let e = errs(src);
    assert!(
        e.len() == 1
            && e[0].contains("is tensor<f32>[N, 64] but program param `a` is tensor<f32>[M, 128]"),
        "{e:#?}"
    );
    assert_eq!(
        errs(&src.replace("[M, 128]", "[M, 64]")),
        Vec::<String>::new()
    );
}
