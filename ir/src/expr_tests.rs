//! Tests of expression evaluation and substitution: decided conditions short-circuit, and float
//! scalars (a `requires` over a scalar param) compare in f64 — NaN compares false — while float
//! arithmetic stays an error.

use super::*;

fn parse(src: &str) -> Expr {
    let text = format!("module m\nconst X: int = {src}\n");
    let m = crate::text::parse(&text).expect("parses");
    m.consts[0].default.clone()
}

#[test]
fn substitute_short_circuits_decided_conditions() {
    // (expression, the constant substituted, what remains: a literal or the undecided rest).
    let cases: [(&str, (&str, i64), &str); 8] = [
        ("MASK == 0 || P == 1 || P == B", ("MASK", 0), "1"),
        (
            "MASK == 0 || P == 1 || P == B",
            ("MASK", 1),
            "P == 1 || P == B",
        ),
        ("F == 1 && N > 2", ("F", 0), "0"),
        ("F == 1 && N > 2", ("F", 1), "N > 2"),
        ("select(D == 0, B, 0)", ("D", 1), "0"),
        ("select(D == 0, B, 0)", ("D", 0), "B"),
        // A neutral literal next to a non-condition keeps the operator (its value is 0 or 1).
        ("F || N", ("F", 0), "0 || N"),
        ("N && F", ("F", 1), "N && 1"),
    ];
    for (src, (name, value), want) in cases {
        let got = parse(src)
            .substitute(&vals(vec![(name, EvalVal::Int(value))]))
            .unwrap_or_else(|e| panic!("{src}: {e:?}"));
        assert_eq!(got.to_string(), want, "{src} with {name} = {value}");
    }
}

/// A lookup of fixed values.
fn vals(v: Vec<(&'static str, EvalVal)>) -> impl Fn(&str) -> Option<EvalVal> {
    move |n: &str| v.iter().find(|(k, _)| *k == n).map(|(_, x)| x.clone())
}

#[test]
fn float_scalars_compare_in_f64() {
    let e = parse("S > 0.0");
    let at = |x: f64| {
        e.eval(&vals(vec![("S", EvalVal::Float(x))]), false)
            .expect("a comparison evaluates")
    };
    assert_eq!(at(0.125), EvalVal::Bool(true));
    assert_eq!(at(1e-30), EvalVal::Bool(true));
    assert_eq!(at(0.0), EvalVal::Bool(false));
    assert_eq!(at(-0.0), EvalVal::Bool(false));
    assert_eq!(at(-2.0), EvalVal::Bool(false));
    assert_eq!(at(f64::NAN), EvalVal::Bool(false));
    assert_eq!(at(f64::INFINITY), EvalVal::Bool(true));
    // Mixed with an integer dim, every comparison operator.
    for (src, want) in [
        ("S < N", true),
        ("S <= N", true),
        ("S > N", false),
        ("S >= N", false),
        ("S == 2.5", true),
        ("S != 2.5", false),
    ] {
        let v = vals(vec![("S", EvalVal::Float(2.5)), ("N", EvalVal::Int(3))]);
        assert_eq!(
            parse(src).eval(&v, false).unwrap(),
            EvalVal::Bool(want),
            "{src}"
        );
    }
    // NaN: every comparison is false but `!=`.
    let nan = || vals(vec![("S", EvalVal::Float(f64::NAN))]);
    assert_eq!(
        parse("S == S").eval(&nan(), false).unwrap(),
        EvalVal::Bool(false)
    );
    assert_eq!(
        parse("S != S").eval(&nan(), false).unwrap(),
        EvalVal::Bool(true)
    );
}

#[test]
fn float_arithmetic_is_an_error() {
    for src in ["S * 2 > 0", "S + 1 > 0", "S / 2 > 0", "S && 1"] {
        let e = parse(src).eval(&vals(vec![("S", EvalVal::Float(0.5))]), false);
        assert!(
            matches!(&e, Err(EvalError::Type(m, _)) if m.contains("only comparisons")),
            "{src}: {e:?}"
        );
    }
}
