//! Tests of `tune {…}` on constants: parsing, canonical printing and round trips, parse errors
//! with their places, and the verifier's rules (int constants only, non-empty, distinct, each
//! value within the constant's `where` at the earlier constants' defaults).

use super::verify;
use crate::text::{parse, print};

/// A module with one kernel around the given constant lines.
fn module(consts: &str) -> String {
    format!(
        "module t\n\n{consts}\n\nkernel @k(x: in tensor<f32>[N]) grid [1, 1, 1] {{\n  yield\n}}\n"
    )
}

/// The verifier's errors (message, text at the span) for `consts`.
fn errs(consts: &str) -> Vec<(String, String)> {
    let src = module(consts);
    let m = parse(&src).unwrap_or_else(|e| panic!("parse failed: {e:?}\n{src}"));
    match verify(&m) {
        Ok(()) => vec![],
        Err(d) => {
            d.0.into_iter()
                .map(|d| (d.message, src[d.span.range()].to_string()))
                .collect()
        }
    }
}

#[test]
fn tune_sets_parse_print_canonically_and_round_trip() {
    let src = module(
        "const A: int = 64   tune {32,64 , 128,} where A >= 1 && A <= 256\nconst B: int = A tune {-1, 2}\nconst C: int = 4 where C > 0",
    );
    let m = parse(&src).expect("parses");
    let a = m.const_decl("A").expect("A");
    let t = a.tune.as_ref().expect("A is tunable");
    assert_eq!(t.values, vec![32, 64, 128]);
    assert_eq!(&src[t.spans[1].range()], "64");
    assert_eq!(&src[t.span.range()], "tune {32,64 , 128,}");
    let b = m.const_decl("B").and_then(|b| b.tune.as_ref()).expect("B");
    assert_eq!(b.values, vec![-1, 2]);
    assert_eq!(&src[b.spans[0].range()], "-1");
    assert!(m.const_decl("C").expect("C").tune.is_none());
    let text = print(&m);
    assert!(
        text.contains("const A: int = 64 tune {32, 64, 128} where A >= 1 && A <= 256\n"),
        "{text}"
    );
    assert!(text.contains("const B: int = A tune {-1, 2}\n"), "{text}");
    assert!(text.contains("const C: int = 4 where C > 0\n"), "{text}");
    let again = parse(&text).expect("reparses");
    assert!(again == m);
    assert_eq!(print(&again), text);
    // A tune set is part of the module: dropping it changes the module.
    let mut other = m.clone();
    other.consts[0].tune = None;
    assert!(other != m);
    assert!(verify(&m).is_ok(), "{:?}", verify(&m));
}

#[test]
fn malformed_tune_sets_are_parse_errors_at_the_token() {
    for (consts, at, what) in [
        ("const A: int = 4 tune 4", "4\n", "`{`"),
        ("const A: int = 4 tune {4, x}", "x", "an integer literal"),
        ("const A: int = 4 tune {4.0}", "4.0", "an integer literal"),
        ("const A: int = 4 tune {4 8}", "8", "`,`"),
        ("const A: int = 4 tune {--4}", "-4", "an integer literal"),
    ] {
        let src = module(consts);
        let e = parse(&src).expect_err(consts);
        let d = &e.0[0];
        assert!(d.message.contains(what), "{consts}: {}", d.message);
        assert!(
            src[d.span.range().start..].starts_with(at.trim_end_matches('\n')),
            "{consts}: error at `{}`",
            &src[d.span.range().start..]
        );
    }
    // `where` before `tune` is not the grammar's order.
    let src = module("const A: int = 4 where A > 0 tune {4}");
    assert!(parse(&src).is_err());
}

#[test]
fn verifier_checks_tune_sets_with_spans() {
    assert_eq!(errs("const A: int = 4 tune {4, 8} where A <= 8"), vec![]);
    let e = errs("const A: int = 4 tune {}");
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].0.contains("tune set of `A` is empty"), "{e:?}");
    assert_eq!(e[0].1, "tune {}");

    let e = errs("const A: int = 4 tune {4, 8, 4, 8}");
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(e[0]
        .0
        .contains("tune value 4 of constant `A` is listed more than once"));
    assert!(e[1].0.contains("tune value 8"));

    let e = errs("const D: {f32, bf16} = f32 tune {1}");
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].0.contains("only int constants are tunable"), "{e:?}");
    assert_eq!(e[0].1, "tune {1}");

    let e = errs("const A: int = 4 tune {2, 512, -8} where A >= 1 && A <= 256");
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(e[0]
        .0
        .contains("tune value 512 of constant `A` does not satisfy"));
    assert_eq!(e[0].1, "512");
    assert_eq!(e[1].1, "-8");
}

#[test]
fn the_where_of_a_tune_value_sees_the_earlier_defaults() {
    // K's `where` names H: at H's default (128) the value 256 fails, 64 holds.
    let e = errs("const H: int = 128\nconst K: int = 64 tune {64, 256} where K * H <= 16384");
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].1, "256");
    // Enum constants compare by variant.
    let ok =
        "const D: {f32, bf16} = bf16\nconst K: int = 64 tune {64, 128} where D == bf16 || K <= 64";
    assert_eq!(errs(ok), vec![]);
    let bad =
        "const D: {f32, bf16} = f32\nconst K: int = 64 tune {64, 128} where D == bf16 || K <= 64";
    assert_eq!(errs(bad).len(), 1);
    // A default that cannot be evaluated skips the value check (no panic, no extra error).
    let e = errs("const Z: int = 0\nconst H: int = 1 / Z\nconst K: int = 4 tune {4} where K <= H");
    assert!(e.iter().all(|(m, _)| !m.contains("tune value")), "{e:?}");
}
