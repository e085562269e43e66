//! Unit tests of the generator's pieces: determinism, what the bound analysis derives for the
//! e-graph's inexact sites and for the GPU, that the check can fail (a wrong pass output is
//! reported, at the right stage), and that the reducer shrinks a failure while keeping it.

use super::bounds::{egraph_bounds, egraph_bounds_guarded, gpu_bounds, with_guards, Bound};
use super::check::{check, seed_of, Config, Verdict};
use super::inputs::dim_size;
use super::module::generate;
use super::reduce::{reduce, Limits};
use kir_ir::Module;

fn spec(src: &str) -> Module {
    let g = kir_ir::text::parse(src).expect("parse");
    kir_ir::verifier::verify(&g).expect("verify");
    kir_compiler::internal::passes::specialize(&g, &[]).expect("specialize")
}

/// A seed whose inputs have M, N ≥ 4 (so every kernel below does work).
fn seed() -> u64 {
    (1..)
        .find(|&s| dim_size(s, "M") >= 4 && dim_size(s, "N") >= 4)
        .unwrap_or(1)
}

fn kernel(body: &str) -> String {
    format!(
        "// rpg seed {}\nmodule u\nkernel @k(\n  x: in tensor<f32>[M, N],\n  y: out tensor<f32>[M, N],\n  s: f32,\n) grid [cdiv(M, 4), cdiv(N, 4), 1] {{\n  %p = program_id 0 : i32\n  %q = program_id 1 : i32\n  %c4 = const 4 : i32\n  %m0 = mul %p, %c4 : i32\n  %n0 = mul %q, %c4 : i32\n  %x = load x[%m0, %n0] other 0.0 : tile<4x4xf32>\n  %s = param s : f32\n{body}\n}}\n",
        seed()
    )
}

fn cfg() -> Config {
    Config {
        targets: vec![],
        cuda: None,
        ..Config::default()
    }
}

#[test]
fn generation_is_deterministic_and_replayable() {
    for s in [0, 1, 17, 12345] {
        let a = generate(s);
        assert_eq!(a.text, generate(s).text);
        assert_eq!(seed_of(&a.text), Some(s));
    }
    assert_ne!(generate(1).text, generate(2).text);
}

#[test]
fn bounds_follow_the_rules_of_the_egraph_and_the_gpu() {
    // A plain copy is exact under every model.
    let m = spec(&kernel("  store y[%m0, %n0], %x guard"));
    assert_eq!(egraph_bounds(&m, true)["y"], Bound::EXACT);
    assert_eq!(gpu_bounds(&m)["y"].rel, 0.0);
    // exp of an exact f32 value: bounded (exp-to-exp2); then a comparison of it: unbounded.
    let m = spec(&kernel(
        "  %e = exp %x : tile<4x4xf32>\n  store y[%m0, %n0], %e guard",
    ));
    let b = egraph_bounds(&m, true)["y"];
    assert!(b.rel > 0.0 && b.rel < 1e-4, "{b:?}");
    assert_eq!(egraph_bounds(&m, false)["y"], Bound::EXACT);
    let m = spec(&kernel(
        "  %e = exp %x : tile<4x4xf32>\n  %c = cmp lt %e, %x : tile<4x4xi1>\n  %f = cast %c : tile<4x4xf32>\n  store y[%m0, %n0], %f guard",
    ));
    assert!(egraph_bounds(&m, true)["y"].is_unbounded());
    // Division by a scalar: bounded only when the divisor is provably away from zero.
    let m = spec(&kernel(
        "  %d = div %x, %s : tile<4x4xf32>\n  store y[%m0, %n0], %d guard",
    ));
    assert!(egraph_bounds(&m, true)["y"].is_unbounded());
    let m = spec(&kernel(
        "  %a = abs %s : f32\n  %h = const 0.5 : f32\n  %g = add %a, %h : f32\n  %d = div %x, %g : tile<4x4xf32>\n  store y[%m0, %n0], %d guard",
    ));
    let b = egraph_bounds(&m, true)["y"];
    assert!(b.rel > 0.0 && !b.is_unbounded(), "{b:?}");
    // x + 0: exact up to the sign of a zero.
    let m = spec(&kernel(
        "  %z = const 0.0 : f32\n  %a = add %x, %z : tile<4x4xf32>\n  store y[%m0, %n0], %a guard",
    ));
    assert!(egraph_bounds(&m, false)["y"].zero_sign);
    // The GPU: a sum of products may be contracted into FMAs.
    let m = spec(&kernel(
        "  %pr = mul %x, %x : tile<4x4xf32>\n  %a = add %pr, %x : tile<4x4xf32>\n  store y[%m0, %n0], %a guard",
    ));
    assert!(gpu_bounds(&m)["y"].is_unbounded());
    assert_eq!(egraph_bounds(&m, true)["y"], Bound::EXACT);
}

#[test]
fn a_bitcast_of_a_nan_an_op_may_have_made_has_no_bound() {
    let bits = "  %b = bitcast %t : tile<4x4xi32>\n  %f = cast %b : tile<4x4xf32>\n  store y[%m0, %n0], %f guard";
    let unbounded = |body: &str| {
        let m = spec(&kernel(&format!("{body}\n{bits}")));
        [
            egraph_bounds(&m, false)["y"],
            egraph_bounds(&m, true)["y"],
            gpu_bounds(&m)["y"],
        ]
        .iter()
        .all(|b| b.is_unbounded())
    };
    let exact = |body: &str| {
        let m = spec(&kernel(&format!("{body}\n{bits}")));
        egraph_bounds(&m, false)["y"] == Bound::EXACT && gpu_bounds(&m)["y"].rel == 0.0
    };
    // An input's NaNs keep their bits through loads, selects and shape ops.
    assert!(exact("  %t = transpose %x : tile<4x4xf32>"));
    assert!(exact(
        "  %c = cmp lt %x, %x : tile<4x4xi1>\n  %t = select %c, %x, %x : tile<4x4xf32>"
    ));
    // min(x, x) makes a NaN of its own (the e-graph keeps x's); so does a NaN literal.
    assert!(unbounded("  %t = min %x, %x : tile<4x4xf32>"));
    assert!(unbounded("  %t = const nan : tile<4x4xf32>"));
    // Numbers from integers are never NaN, and max/min of them neither.
    assert!(exact(
        "  %i = iota axis 1 : tile<4x4xi32>\n  %g = cast %i : tile<4x4xf32>\n  %t = max %g, %g : tile<4x4xf32>"
    ));
    // but their quotient may be (0/0 in column 0).
    assert!(unbounded(
        "  %i = iota axis 1 : tile<4x4xi32>\n  %g = cast %i : tile<4x4xf32>\n  %t = div %g, %g : tile<4x4xf32>"
    ));
    // A loop carries an op-made NaN into its result.
    let lp = |op: &str| {
        format!(
            "  %z = const 0 : i32\n  %o = const 1 : i32\n  %t = for %i = %z to %o step %o iter(%v = %x) : tile<4x4xf32> {{\n    %w = {op} : tile<4x4xf32>\n    yield %w\n  }}"
        )
    };
    assert!(unbounded(&lp("neg %v")));
    assert!(exact(&lp("reshape %v")));
    // A stored op-made NaN read back through memory.
    assert!(unbounded(
        "  %n = min %x, %x : tile<4x4xf32>\n  store y[%m0, %n0], %n guard\n  %t = load y[%m0, %n0] other 0.0 : tile<4x4xf32>"
    ));
}

#[test]
fn a_scalar_multiplier_is_a_site_only_over_a_scaled_tile() {
    let m = spec(&kernel(
        "  %a = mul %x, %s : tile<4x4xf32>\n  store y[%m0, %n0], %a guard",
    ));
    assert_eq!(egraph_bounds(&m, true)["y"], Bound::EXACT);
    let m = spec(&kernel(
        "  %a = mul %x, %s : tile<4x4xf32>\n  %b = mul %a, %s : tile<4x4xf32>\n  store y[%m0, %n0], %b guard",
    ));
    let b = egraph_bounds(&m, true)["y"];
    assert!(b.rel > 0.0 && !b.is_unbounded(), "{b:?}");
    // A division by a scalar becomes a product by its reciprocal: a multiplier then reassociates.
    let m = spec(&kernel(
        "  %h = const 3.0 : f32\n  %a = div %x, %h : tile<4x4xf32>\n  %b = mul %a, %s : tile<4x4xf32>\n  store y[%m0, %n0], %b guard",
    ));
    let b = egraph_bounds(&m, true)["y"];
    assert!(
        b.rel >= 5.0 * super::bounds::ULP && !b.is_unbounded(),
        "{b:?}"
    );
}

#[test]
fn a_divisor_without_a_floor_is_bounded_only_under_a_run_time_check() {
    let m = spec(&kernel(
        "  %d = div %x, %s : tile<4x4xf32>\n  store y[%m0, %n0], %d guard",
    ));
    assert!(egraph_bounds(&m, true)["y"].is_unbounded());
    let (b, guards) = egraph_bounds_guarded(&m);
    assert!(b["y"].rel > 0.0 && !b["y"].is_unbounded(), "{b:?}");
    assert_eq!(guards.len(), 1, "{guards:?}");
    let g = with_guards(&m, &guards);
    kir_ir::verifier::verify(&g).expect("the guarded module verifies");
    let mut args = super::inputs::args(&m, seed()).expect("inputs");
    let mut run = |s: f64| {
        args.insert("s".into(), kir_backends::interp::HostArg::Scalar(s));
        let opts = kir_backends::interp::RunOptions::default();
        let plain = super::check::run_with(&m, &args, &opts).expect("plain run");
        // (Debug text: NaNs print alike.)
        super::check::run_with(&g, &args, &opts)
            .map(|o| assert_eq!(format!("{o:?}"), format!("{plain:?}")))
    };
    assert!(run(3.0).is_ok());
    assert!(run(f64::NAN).is_ok());
    // Subnormal, huge, zero and infinite divisors fail the check (the last two conservatively).
    for s in [1e-39, 1e38, 0.0, f64::INFINITY] {
        assert!(run(s).is_err(), "divisor {s} passed the check");
    }
}

/// A broken e-graph pass: every `max` becomes `min` after the real pass.
fn broken(m: &Module) -> Module {
    let mut out = kir_compiler::internal::passes::egraph(m);
    for k in out.kernels.values_mut() {
        for (_, op) in k.dfg.ops.iter_mut() {
            if op.opcode == kir_ir::Opcode::Max {
                op.opcode = kir_ir::Opcode::Min;
            }
        }
    }
    out
}

#[test]
fn the_check_reports_a_wrong_pass_and_the_reducer_keeps_the_failure() {
    let body = "  %a = abs %x : tile<4x4xf32>\n  %b = neg %x : tile<4x4xf32>\n  %c = max %a, %b : tile<4x4xf32>\n  %d = add %c, %a : tile<4x4xf32>\n  %e = floor %d : tile<4x4xf32>\n  store y[%m0, %n0], %e guard";
    let text = kernel(body);
    assert_eq!(check(&text, &cfg(), None).0, Verdict::Pass);
    let bad = Config {
        egraph: broken,
        ..cfg()
    };
    let v = check(&text, &bad, None).0;
    let Verdict::Fail(f) = v else {
        panic!(
            "the broken pass was not caught: {v:?}\n{}",
            kir_ir::text::print(&broken(&spec(&text)))
        );
    };
    assert_eq!(f.stage, "egraph", "{f:?}");
    let mut pred =
        |t: &str| matches!(check(t, &bad, None).0, Verdict::Fail(g) if g.stage == "egraph");
    let (small, calls) = reduce(&text, &mut pred, &Limits::default());
    assert!(calls > 0);
    assert!(small.lines().count() < text.lines().count(), "{small}");
    assert!(small.contains("max"), "{small}");
    assert!(!small.contains("floor"), "{small}");
    assert!(matches!(check(&small, &bad, None).0, Verdict::Fail(_)));
    assert_eq!(check(&small, &cfg(), None).0, Verdict::Pass, "{small}");
}

#[test]
fn a_program_that_does_not_verify_fails_at_generate() {
    let text = kernel("  store y[%m0, %n0], %nope guard");
    let Verdict::Fail(f) = check(&text, &cfg(), None).0 else {
        panic!("accepted");
    };
    assert_eq!(f.stage, "generate");
}

/// Ordered sections (`ordered`): each counter (`sem…`, zeros on input) is touched only by
/// `sem_wait` and `sem_signal`, at the top level of one kernel, which waits and signals once; the
/// reference run never finds a wait unreached, and each counter ends holding the number of
/// programs of its kernel.
#[test]
fn ordered_sections_signal_once_per_program_at_the_top_level() {
    use super::inputs::{args, dim_size, is_counter};
    use kir_backends::interp::{HostArg, HostData, RunOptions};
    use kir_ir::{EvalVal, Opcode};
    let mut seen = 0;
    let mut ran = 0;
    for s in 0..600 {
        let text = generate(s).text;
        if !text.contains("sem_wait") {
            continue;
        }
        seen += 1;
        let m = spec(&text);
        let a = args(&m, s).expect("inputs");
        let mut programs = std::collections::BTreeMap::new();
        for k in m.kernels.values() {
            let d = &k.dfg;
            let (mut waits, mut signals) = (0, 0);
            for b in d.blocks.values() {
                for &o in &b.ops {
                    let od = &d.ops[o];
                    let Some(t) = &od.tensor else { continue };
                    let sem = matches!(od.opcode, Opcode::SemWait | Opcode::SemSignal);
                    assert_eq!(
                        is_counter(&t.param),
                        sem,
                        "seed {s}: `{}` on `{}`",
                        od.opcode.name(),
                        t.param
                    );
                    if !sem {
                        continue;
                    }
                    assert!(
                        d.blocks[k.body].ops.contains(&o),
                        "seed {s}: a semaphore op below the top level"
                    );
                    if od.opcode == Opcode::SemWait {
                        waits += 1;
                    } else {
                        signals += 1;
                    }
                    let dims = |n: &str| Some(EvalVal::Int(dim_size(s, n) as i64));
                    let n: i64 = k
                        .grid
                        .iter()
                        .map(|e| e.eval_int(&dims).expect("grid").max(0))
                        .product();
                    let by = (k.name.clone(), n);
                    let had = programs.insert(t.param.clone(), by.clone());
                    assert!(
                        had.is_none_or(|x| x == by),
                        "seed {s}: a counter of two kernels"
                    );
                }
            }
            assert!(
                waits <= 1 && waits == signals,
                "seed {s}: {waits} waits, {signals} signals in @{}",
                k.name
            );
        }
        for name in programs.keys() {
            let Some(HostArg::Tensor(h)) = a.get(name) else {
                panic!("seed {s}: no input for `{name}`");
            };
            assert!(
                matches!(&h.data, HostData::F64(v) if v.iter().all(|&x| x == 0.0)),
                "seed {s}: `{name}` does not start at 0"
            );
        }
        let out = match super::check::run_with(&m, &a, &RunOptions::default()) {
            Ok(o) => o,
            Err(e) => {
                assert!(!e.message.contains("sem_wait"), "seed {s}: {}", e.message);
                continue;
            }
        };
        ran += 1;
        for (name, (_, n)) in &programs {
            let HostData::F64(v) = &out[name].data else {
                panic!("seed {s}: `{name}` is not held as numbers");
            };
            assert_eq!(
                v.iter().sum::<f64>(),
                *n as f64,
                "seed {s}: `{name}` after the run: {v:?}"
            );
        }
    }
    assert!(
        seen >= 20 && ran >= seen / 2,
        "{seen} programs with ordered sections, {ran} ran"
    );
}

#[test]
fn every_op_of_the_table_is_generated() {
    let mut seen = std::collections::BTreeSet::new();
    for s in 0..3000 {
        let text = generate(s).text;
        let (m, twin) = super::rings::split_twin(&text);
        for t in [Some(m), twin].into_iter().flatten() {
            let md = kir_ir::text::parse(t).expect("parse");
            for k in md.kernels.values() {
                for b in k.dfg.blocks.values() {
                    for &o in &b.ops {
                        seen.insert(k.dfg.ops[o].opcode.name());
                    }
                }
            }
        }
    }
    let missing: Vec<&str> = kir_ir::Opcode::ALL
        .iter()
        .map(|o| o.name())
        .filter(|n| !seen.contains(n))
        .collect();
    assert!(missing.is_empty(), "never generated: {missing:?}");
}

#[test]
fn a_ring_is_reduced_together_with_its_twin() {
    use super::rings::{split_twin, TWIN_MARK};
    // A copy-group ring over f32 whose twin negates the tile: the ring stage fails.
    let (seed, text) = (0..5000)
        .map(|s| (s, generate(s).text))
        .find(|(_, t)| {
            t.contains("smem_alloc")
                && !t.contains("warp_specialize")
                && t.lines().any(|l| {
                    l.contains("%t = load x[%i, %c0] other 0.0 : tile<") && l.ends_with("xf32>")
                })
        })
        .expect("a copy-group ring over f32 with other 0.0");
    let (ring, twin) = split_twin(&text);
    let twin = twin.expect("twin");
    let twin = twin.replacen("%t = load x[", "%t_raw = load x[", 1);
    let at = twin.find("%t_raw = load").expect("load");
    let eol = at + twin[at..].find('\n').expect("line end");
    let ty = twin[at..eol]
        .rsplit(" : ")
        .next()
        .expect("type")
        .to_string();
    let twin = format!(
        "{}\n    %t = neg %t_raw : {ty}{}",
        &twin[..eol],
        &twin[eol..]
    );
    let text = format!("{ring}{TWIN_MARK}\n{twin}");
    let c = cfg();
    let Verdict::Fail(f) = check(&text, &c, None).0 else {
        panic!("seed {seed}: the changed twin was not caught");
    };
    assert_eq!(f.class(), "ring", "{f:?}");
    let mut pred =
        |t: &str| matches!(check(t, &c, None).0, Verdict::Fail(g) if g.class() == "ring");
    let (small, _) = reduce(&text, &mut pred, &Limits::default());
    assert!(small.len() <= text.len(), "{small}");
    assert!(
        small.contains(TWIN_MARK) && small.contains("%t = neg"),
        "{small}"
    );
    assert!(matches!(check(&small, &c, None).0, Verdict::Fail(_)));
}
