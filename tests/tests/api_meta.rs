//! The typed META.json of the public API (`kir_compiler::KernelMeta`): for every built-in op on
//! every target (PTX, and CUDA C on one), the compiler's META.json text parses into it and
//! serializes back to the same JSON value; and `grid(&dims)` agrees, on fresh random dims, with
//! the launch-grid computation of the interpreter (the kernel's grid expressions of the lowered
//! module evaluated by `Expr::eval_int`, then CUDA's limits) and with an independent f64
//! evaluator of the formula text written here. Hand-written cdiv forms are checked against i64
//! and f64 arithmetic, and each typed grid error (a missing dim, overflow, out of range, a
//! division by zero, text that is not a formula) is provoked.

use kir_backends::Target;
use kir_compiler::internal::compile::{self, Emit};
use kir_compiler::internal::oplib;
use kir_compiler::{Axis, Error, Grid, KernelEntry, KernelMeta};
use kir_ir::EvalVal;
use kir_tests::Rng;
use std::collections::BTreeMap;

/// CUDA's grid limits (x < 2^31, y and z ≤ 65535).
const LIMIT: [i64; 3] = [(1 << 31) - 1, 65535, 65535];

/// An independent evaluator of the grid grammar over f64: integers, names, `+ - * / %`
/// (floor division and its remainder), `cdiv`, `min`, `max`, parentheses.
struct F64Eval<'a> {
    toks: Vec<String>,
    pos: usize,
    dims: &'a BTreeMap<String, i64>,
}

impl F64Eval<'_> {
    fn eval(text: &str, dims: &BTreeMap<String, i64>) -> f64 {
        let mut toks = Vec::new();
        let cs: Vec<char> = text.chars().collect();
        let mut i = 0;
        while i < cs.len() {
            let c = cs[i];
            if c.is_whitespace() {
                i += 1;
            } else if c.is_ascii_alphanumeric() || c == '_' {
                let start = i;
                while i < cs.len() && (cs[i].is_ascii_alphanumeric() || cs[i] == '_') {
                    i += 1;
                }
                toks.push(cs[start..i].iter().collect());
            } else {
                toks.push(c.to_string());
                i += 1;
            }
        }
        let mut p = F64Eval { toks, pos: 0, dims };
        let v = p.sum();
        assert_eq!(p.pos, p.toks.len(), "trailing tokens in `{text}`");
        v
    }
    fn next(&mut self) -> String {
        self.pos += 1;
        self.toks[self.pos - 1].clone()
    }
    fn peek(&self) -> Option<&str> {
        self.toks.get(self.pos).map(String::as_str)
    }
    fn sum(&mut self) -> f64 {
        let mut v = self.product();
        while let Some(op @ ("+" | "-")) = self.peek() {
            let plus = op == "+";
            self.pos += 1;
            let r = self.product();
            v = if plus { v + r } else { v - r };
        }
        v
    }
    fn product(&mut self) -> f64 {
        let mut v = self.atom();
        while let Some(op @ ("*" | "/" | "%")) = self.peek() {
            let op = op.to_string();
            self.pos += 1;
            let r = self.atom();
            v = match op.as_str() {
                "*" => v * r,
                "/" => (v / r).floor(),
                _ => v - r * (v / r).floor(),
            };
        }
        v
    }
    fn atom(&mut self) -> f64 {
        let t = self.next();
        if t == "(" {
            let v = self.sum();
            assert_eq!(self.next(), ")");
            return v;
        }
        if t == "-" {
            return -self.atom();
        }
        if let Ok(n) = t.parse::<i64>() {
            return n as f64;
        }
        if matches!(t.as_str(), "cdiv" | "min" | "max") {
            assert_eq!(self.next(), "(");
            let a = self.sum();
            assert_eq!(self.next(), ",");
            let b = self.sum();
            assert_eq!(self.next(), ")");
            return match t.as_str() {
                "cdiv" => (a / b).ceil(),
                "min" => a.min(b),
                _ => a.max(b),
            };
        }
        self.dims[&t] as f64
    }
}

/// META.json of `op` compiled for `target` as the compiler builds it (a JSON value), and the
/// lowered module (whose kernels' grid expressions the interpreter evaluates).
fn compiled(op: &str, target: Target, emit: Emit) -> (serde_json::Value, kir_ir::Module) {
    let src = oplib::builtin(op).unwrap();
    let c = compile::compile(src, &[], None, target, emit)
        .unwrap_or_else(|e| panic!("{op} on {}: {e}", target.name()));
    (c.meta.expect("META.json"), c.module)
}

#[test]
fn meta_json_round_trips_for_every_op_and_target() {
    let mut rng = Rng::fresh("api_meta grids");
    let mut checked = 0;
    for (op, _) in oplib::builtins() {
        let mut cases: Vec<(Target, Emit)> = Target::ALL.iter().map(|&t| (t, Emit::Ptx)).collect();
        cases.push((Target::Sm80, Emit::Cuda));
        for (target, emit) in cases {
            let what = format!("{op} on {} ({emit:?})", target.name());
            let (json, module) = compiled(op, target, emit);
            // From the text kirc writes, and back: the same JSON value.
            let text = serde_json::to_string_pretty(&json).unwrap();
            let meta: KernelMeta =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: {e}"));
            let back = serde_json::to_value(&meta).unwrap();
            assert_eq!(
                back, json,
                "{what}: the typed META.json does not round-trip"
            );
            assert!(!meta.kernels.is_empty(), "{what}");
            for k in &meta.kernels {
                check_grid(&mut rng, &what, k, &module);
                checked += 1;
            }
        }
    }
    assert!(checked >= 40, "only {checked} kernels checked");
}

/// `k.grid(dims)` on random dims against the interpreter's evaluation of the lowered module's
/// grid expressions and against [`F64Eval`]; and a missing dim is named.
fn check_grid(rng: &mut Rng, what: &str, k: &KernelEntry, module: &kir_ir::Module) {
    let (_, kernel) = module.kernel(&k.name).expect("the kernel is in the module");
    let mut names = Vec::new();
    for e in &kernel.grid {
        e.for_each_ident(&mut |n, _| names.push(n.to_string()));
    }
    names.sort();
    names.dedup();
    for _ in 0..20 {
        // Ragged values from 1 to 5000 (products stay exact in f64).
        let dims: BTreeMap<String, i64> = names
            .iter()
            .map(|n| (n.clone(), rng.range(1, 5001) as i64))
            .collect();
        let lookup = |n: &str| dims.get(n).map(|v| EvalVal::Int(*v));
        let interp: Vec<i64> = kernel
            .grid
            .iter()
            .map(|e| e.eval_int(&lookup).unwrap())
            .collect();
        let formulas = [&k.grid.x, &k.grid.y, &k.grid.z];
        let f64s: Vec<f64> = formulas.iter().map(|f| F64Eval::eval(f, &dims)).collect();
        for axis in 0..3 {
            assert_eq!(
                interp[axis] as f64, f64s[axis],
                "{what}: `{}` at {dims:?}",
                formulas[axis]
            );
        }
        let in_range = (0..3).all(|a| (0..=LIMIT[a]).contains(&interp[a]));
        match k.grid(&dims) {
            Ok(g) => {
                assert!(in_range, "{what}: {interp:?} accepted");
                assert_eq!(g.map(i64::from).to_vec(), interp, "{what}: {dims:?}");
            }
            Err(Error::GridOutOfRange { axis, value, .. }) => {
                let a = Axis::ALL.iter().position(|x| *x == axis).unwrap();
                assert_eq!(value, interp[a], "{what}");
                assert!(!in_range, "{what}: {interp:?} refused");
            }
            Err(e) => panic!("{what}: {e} at {dims:?}"),
        }
    }
    // Leave out each dim in turn: the error names it.
    for missing in &names {
        let dims: Vec<(&str, i64)> = names
            .iter()
            .filter(|n| *n != missing)
            .map(|n| (n.as_str(), 7))
            .collect();
        match k.grid(&dims) {
            Err(Error::MissingDim { dim, kernel, .. }) => {
                assert_eq!((&dim, &kernel), (missing, &k.name), "{what}")
            }
            other => panic!("{what}: without {missing}: {other:?}"),
        }
    }
}

/// A kernel entry with these grid formulas (the rest as META.json would have it).
fn entry(x: &str, y: &str, z: &str) -> KernelEntry {
    KernelEntry {
        name: "k".into(),
        symbol: "k_X".into(),
        params: vec![],
        block: [128, 1, 1],
        grid: Grid {
            x: x.into(),
            y: y.into(),
            z: z.into(),
        },
        requires: vec![],
        shared_bytes: 0,
        registers: None,
        kernel_params: vec![],
    }
}

#[test]
fn cdiv_forms_match_hand_written_arithmetic() {
    let mut rng = Rng::fresh("api_meta cdiv");
    let k = entry("cdiv(Sq, 64)", "B * Hq", "cdiv(N - 1, 3) + N % 5");
    for _ in 0..500 {
        let (sq, b, hq, n) = (
            rng.range(0, 3_000_000) as i64,
            rng.range(1, 300) as i64,
            rng.range(1, 200) as i64,
            rng.range(1, 60_000) as i64,
        );
        let dims = [("Sq", sq), ("B", b), ("Hq", hq), ("N", n)];
        // i64: ceil division of non-negatives by (a + b − 1) / b.
        let x = (sq + 63) / 64;
        let y = b * hq;
        let z = (n - 1 + 2) / 3 + n % 5;
        // f64: the same by ceil and floor.
        let xf = (sq as f64 / 64.0).ceil();
        let zf = ((n - 1) as f64 / 3.0).ceil() + (n as f64 - 5.0 * (n as f64 / 5.0).floor());
        assert_eq!((x as f64, z as f64), (xf, zf));
        let want = [x, y, z];
        match k.grid(&dims) {
            Ok(g) => assert_eq!(g.map(i64::from), want, "{dims:?}"),
            Err(Error::GridOutOfRange {
                axis, value, max, ..
            }) => {
                let a = Axis::ALL.iter().position(|x| *x == axis).unwrap();
                assert_eq!((value, max), (want[a], LIMIT[a]), "{dims:?}");
                assert!(want[a] > LIMIT[a]);
            }
            Err(e) => panic!("{e} at {dims:?}"),
        }
    }
    // cdiv rounds toward +infinity for negative operands too (floor of the quotient, plus one
    // when the remainder is not zero).
    let k = entry("cdiv(A, 4) + 3", "1", "1");
    assert_eq!(k.grid(&[("A", -5)]).unwrap(), [2, 1, 1]);
}

#[test]
fn each_grid_error_is_typed() {
    let k = entry("B * Hq", "1", "1");
    let big = 1i64 << 40;
    assert!(matches!(
        k.grid(&[("B", big), ("Hq", big)]),
        Err(Error::GridOverflow { axis: Axis::X, .. })
    ));
    let k = entry("1", "cdiv(S, 64)", "1");
    match k.grid(&[("S", 64 * 65536)]) {
        Err(Error::GridOutOfRange {
            axis, value, max, ..
        }) => {
            assert_eq!((axis, value, max), (Axis::Y, 65536, 65535))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(k.grid(&[("S", 64 * 65535)]).unwrap(), [1, 65535, 1]);
    let k = entry("1", "1", "N - 10");
    assert!(matches!(
        k.grid(&[("N", 3)]),
        Err(Error::GridOutOfRange {
            axis: Axis::Z,
            value: -7,
            ..
        })
    ));
    let k = entry("cdiv(S, D)", "1", "1");
    assert!(matches!(
        k.grid(&[("S", 3), ("D", 0)]),
        Err(Error::GridExpr { axis: Axis::X, .. })
    ));
    let k = entry("cdiv(S", "1", "1");
    match k.grid(&[("S", 3)]) {
        Err(e @ Error::GridExpr { .. }) => assert!(e.to_string().contains("not a grid formula")),
        other => panic!("{other:?}"),
    }
    let k = entry("M * 2", "1", "1");
    let e = k.grid(&BTreeMap::from([("N", 1)])).unwrap_err();
    assert_eq!(
        e.render(),
        "error: kernel `k`: grid `M * 2` (axis x) needs the dim `M`, which was not given (given: N)\n"
    );
}
