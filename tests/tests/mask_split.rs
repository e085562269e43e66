//! The `mask_split` pass, differentially: attention_fwd (CAUSAL, KV_OFFSET, WINDOW, VARLEN, MASK,
//! SOFTCAP combinations) and attention_bwd (CAUSAL, DETERMINISTIC) run on the interpreter before
//! the pass (the fused module: every key block, masked) and after it (one loop over the blocks
//! some row sees, the mask guarded by `if %ms_full`) on fresh random inputs with ragged shapes,
//! window sizes on and off (≤ 0), key lengths from 0 to the capacity and KV offsets from negative
//! to past the keys; every output agrees within the dtype tolerance. The rewrite is checked to
//! happen (one loop per masked loop, derived bounds, the guard), every other op of the library is
//! checked to be left alone, and the pass output for attention_fwd -D CAUSAL=1 is a golden
//! snapshot.

use kir_backends::interp::{self, HostArg};
use kir_compiler::internal::pipeline;
use kir_ir::{Dtype, ExprKind, Module, ParamKind};
use kir_tests::defs;
use kir_tests::F64s;
use kir_tests::{compare, tolerance, Rng};
use std::collections::BTreeMap;

/// Random arguments for the entry of `m`: dims B = 2, Hq = 4, Hkv = 2, P = 1, sequence dims
/// ragged in [1, 150); per-batch lengths and offsets, window and softcap as described above.
fn inputs(m: &Module, rng: &mut Rng) -> BTreeMap<String, HostArg> {
    let params = m.entry_params().expect("entry");
    let mut dims: BTreeMap<String, i64> = BTreeMap::new();
    for (n, v) in [("B", 2), ("Hq", 4), ("Hkv", 2), ("P", 1)] {
        dims.insert(n.into(), v);
    }
    for p in params {
        if let ParamKind::Tensor(_, t) = &p.kind {
            for d in &t.dims {
                if let ExprKind::Ident(n) = &d.kind {
                    let v = rng.range(1, 150) as i64;
                    dims.entry(n.clone()).or_insert(v);
                }
            }
        }
    }
    let sk = dims.get("Sk").copied().unwrap_or(1);
    let mut args = BTreeMap::new();
    for p in params {
        match &p.kind {
            ParamKind::Tensor(acc, t) if !matches!(acc, kir_ir::Access::Out) => {
                let shape = kir_tests::inputs::shape_of(t, &dims);
                let n: usize = shape.iter().product();
                let dtype = t.elem.known().expect("dtype");
                let data: Vec<f64> = match (p.name.as_str(), dtype) {
                    ("total_lengths", _) => (0..n)
                        .map(|_| rng.range(0, sk as usize + 1) as f64)
                        .collect(),
                    ("past_lengths", _) => (0..n)
                        .map(|_| rng.range(0, sk as usize + 20) as f64 - 10.0)
                        .collect(),
                    (_, Dtype::I32) => (0..n).map(|_| rng.range(1, 9) as f64).collect(),
                    _ => rng.tensor(n, 1.0, dtype),
                };
                args.insert(p.name.clone(), kir_tests::t(dtype, &shape, data));
            }
            ParamKind::Tensor(..) => {}
            ParamKind::Scalar(_) => {
                let v = match p.name.as_str() {
                    "scale" => 0.125,
                    "window" => [-1.0, 0.0, 1.0, 5.0, 40.0, 200.0][rng.range(0, 6)],
                    "softcap" => [0.0, 5.0][rng.range(0, 2)],
                    _ => 1.0,
                };
                args.insert(p.name.clone(), HostArg::Scalar(v));
            }
        }
    }
    args
}

/// Runs the module before and after `mask_split` on `rounds` fresh inputs and compares outputs;
/// returns the text of the module after the pass.
fn differential(op: &str, d: &[(String, String)], rounds: usize) -> String {
    let src = kir_compiler::internal::oplib::builtin(op).expect("built in");
    let f = pipeline::run_observed(src, d, &mut |_, _| {})
        .unwrap_or_else(|e| panic!("{op} {d:?}: {}", e.render(op, src)));
    let what = format!("{op} {d:?}");
    let mut rng = Rng::fresh(&what);
    for round in 0..rounds {
        let args = inputs(&f.fused, &mut rng);
        let a = interp::run(&f.fused, &args).unwrap_or_else(|e| panic!("{what}: before: {e}"));
        let b = interp::run(&f.output, &args).unwrap_or_else(|e| panic!("{what}: after: {e}"));
        for (name, ta) in &a {
            compare(
                &format!("{what} round {round}: {name}"),
                b[name].data.f64s(),
                ta.data.f64s(),
                tolerance(ta.dtype),
            );
        }
    }
    kir_ir::text::print(&f.output)
}

/// Occurrences of `pat` in `text`.
fn count(text: &str, pat: &str) -> usize {
    text.matches(pat).count()
}

#[test]
fn attention_fwd_agrees_before_and_after() {
    let mut n = 0;
    for causal in ["0", "1"] {
        for window in ["0", "1"] {
            for varlen in ["0", "1"] {
                let kv: &[&str] = if causal == "1" { &["0", "1"] } else { &["0"] };
                for &kv_offset in kv {
                    for bm in ["16", "64"] {
                        let d = defs(&[
                            ("DTYPE", "f32"),
                            ("HEAD_DIM", "16"),
                            ("CAUSAL", causal),
                            ("WINDOW", window),
                            ("VARLEN", varlen),
                            ("KV_OFFSET", kv_offset),
                            ("BLOCK_M", bm),
                            ("BLOCK_N", "16"),
                        ]);
                        let out = differential("attention_fwd", &d, 4);
                        // One key loop, its mask guarded by the derived full test.
                        assert_eq!(count(&out, " = for "), 1, "{d:?}: {out}");
                        assert_eq!(count(&out, " = if %ms_full"), 1, "{d:?}: {out}");
                        // Derived bounds: the causal limit and the key length bound the loop
                        // from above (and the K/V loads), the window from below.
                        let bounded = causal == "1" || varlen == "1";
                        assert_eq!(out.contains(" to %ms_hi "), bounded, "{d:?}: {out}");
                        assert_eq!(out.contains(" mask %ms_key_in "), bounded, "{d:?}: {out}");
                        assert_eq!(
                            out.contains("for %n0 = %ms_lo "),
                            window == "1",
                            "{d:?}: {out}"
                        );
                        n += 1;
                    }
                }
            }
        }
    }
    // The additive mask and the soft cap ride along.
    let d = defs(&[
        ("DTYPE", "bf16"),
        ("HEAD_DIM", "32"),
        ("CAUSAL", "1"),
        ("MASK", "1"),
        ("SOFTCAP", "1"),
        ("BLOCK_M", "32"),
        ("BLOCK_N", "16"),
    ]);
    let out = differential("attention_fwd", &d, 3);
    assert_eq!(
        (count(&out, " = for "), count(&out, " = if %ms_full")),
        (1, 1),
        "{out}"
    );
    assert!(n >= 24);
}

#[test]
fn attention_bwd_agrees_before_and_after() {
    for causal in ["0", "1"] {
        for det in ["0", "1"] {
            for (bm, bn) in [("16", "16"), ("32", "16"), ("16", "32")] {
                let d = defs(&[
                    ("DTYPE", "f32"),
                    ("HEAD_DIM", "16"),
                    ("CAUSAL", causal),
                    ("DETERMINISTIC", det),
                    ("BLOCK_M", bm),
                    ("BLOCK_N", bn),
                ]);
                let out = differential("attention_bwd", &d, 3);
                // dkdv: the group loop and the query loop; dq (deterministic): the key loop.
                // Each masked loop keeps one body with its mask guarded.
                let masked = if det == "1" { 2 } else { 1 };
                assert_eq!(count(&out, " = for "), masked + 1, "{d:?}: {out}");
                assert_eq!(count(&out, " = if %ms_full"), masked, "{d:?}: {out}");
                // The 0 form reads its visited blocks whole (no key masks on K, V, Q or dO).
                assert!(!out.contains("%ms_key_in"), "{d:?}: {out}");
                if causal == "1" {
                    // dkdv starts at the first query block that sees the key block; dq stops
                    // after the last key block its last row sees.
                    assert!(out.contains("for %m0 = %ms_lo to "), "{d:?}: {out}");
                    let dq_loop = out.lines().find(|l| l.contains(" = for %n0 = "));
                    assert_eq!(
                        dq_loop.is_some_and(|l| l.contains(" to %ms_hi ")),
                        det == "1",
                        "{d:?}: {out}"
                    );
                }
            }
        }
    }
}

#[test]
fn attention_fwd_causal_snapshot() {
    let src = kir_compiler::internal::oplib::builtin("attention_fwd").expect("built in");
    let text = pipeline::dump_after(src, &defs(&[("CAUSAL", "1")]), "mask_split").expect("dump");
    insta::assert_snapshot!("mask_split__attention_fwd_causal", text);
}

/// Kernels without a score mask (a select of −inf or 0 over a tile computed from a `dot`, under
/// an affine mask of the loop variable) come out of the pass unchanged: the norms' column
/// selects, the GEMMs and the elementwise ops.
#[test]
fn other_ops_are_left_alone() {
    for (op, src) in kir_compiler::internal::oplib::builtins() {
        if op.starts_with("attention") {
            continue;
        }
        let f = pipeline::run_observed(src, &[], &mut |_, _| {}).expect("pipeline");
        assert_eq!(
            kir_ir::text::print(&f.output),
            kir_ir::text::print(&f.fused),
            "{op} changed under mask_split"
        );
    }
}
