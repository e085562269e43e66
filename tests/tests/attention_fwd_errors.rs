//! attention_fwd's located errors: a `-D` value its `where` rejects, a missing `mask` argument,
//! a mask whose leading dim P is none of 1, B and B·Hq, and a scale that is not positive. Each
//! renders as file:line:col with a caret at the source that states the rule, naming the
//! constant or param and the values that break it.

use kir_backends::interp::{self, HostArg};
use kir_ir::{Diagnostic, Dtype};
use kir_tests::{t, Rng};
use std::collections::BTreeMap;

const FWD: &str = "attention_fwd";

fn fwd_src() -> &'static str {
    kir_compiler::internal::oplib::builtin(FWD).expect("attention_fwd is built in")
}

/// A `-D` or argument mistake renders as a located error naming the constant or param.
#[test]
fn specialization_errors_are_clear() {
    let src = fwd_src();
    let file = "attention_fwd.kir";
    let defs = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    let err = kir_compiler::internal::pipeline::frontend(src, &defs(&[("HEAD_DIM", "100")]))
        .expect_err("HEAD_DIM = 100 must be rejected")
        .render(file, src);
    assert!(err.starts_with("attention_fwd.kir:"), "{err}");
    assert!(
        err.contains("constant `HEAD_DIM` = 100 (set by -D) does not satisfy"),
        "{err}"
    );
    assert!(
        err.contains("HEAD_DIM == 384") && err.contains('^'),
        "{err}"
    );

    // MASK = 1 with no mask, and a mask whose P is none of 1, B, B·Hq.
    let spec = kir_compiler::internal::pipeline::output(
        src,
        &defs(&[("DTYPE", "f32"), ("HEAD_DIM", "64"), ("MASK", "1")]),
    )
    .expect("front end");
    let mut rng = Rng::fresh("attention_fwd argument errors");
    let mut args = BTreeMap::new();
    for (name, s) in [
        ("q", [2, 2, 5, 64]),
        ("k", [2, 1, 7, 64]),
        ("v", [2, 1, 7, 64]),
    ] {
        let data = (0..s.iter().product::<usize>())
            .map(|_| rng.normal() * 2.0)
            .collect();
        args.insert(name.to_string(), t(Dtype::F32, &s, data));
    }
    args.insert("scale".to_string(), HostArg::Scalar(0.125));
    let render = |args: &BTreeMap<String, HostArg>| {
        let e = interp::run(&spec, args).expect_err("must fail");
        let span = e
            .span
            .unwrap_or_else(|| panic!("error without a location: {e}"));
        Diagnostic::new(span, e.message).render(file, src)
    };
    let err = render(&args);
    assert!(err.contains("missing argument `mask`"), "{err}");
    assert!(
        err.contains("mask: in tensor<DTYPE>[P, Sq, Sk] if MASK == 1"),
        "{err}"
    );
    args.insert(
        "mask".to_string(),
        t(Dtype::F32, &[3, 5, 7], vec![0.0; 3 * 5 * 7]),
    );
    let err = render(&args);
    assert!(
        err.contains("requirement `P == 1 || P == B || P == B * Hq` does not hold"),
        "{err}"
    );
    assert!(
        err.contains("P = 3") && err.contains("B = 2") && err.contains("Hq = 2"),
        "{err}"
    );
    // The requirement is written once in the source and the caret points at it.
    assert!(
        err.contains("MASK == 0 || P == 1 || P == B || P == B * Hq"),
        "{err}"
    );
}

/// The plain-score softmax takes its row max before the scale, which is exact only for a
/// positive scale, so `scale > 0.0` is a requirement of the kernel: a launch with a scale ≤ 0
/// or NaN is an error located at the requirement and quoting the value, never a silent result.
#[test]
fn a_scale_that_is_not_positive_is_a_launch_error() {
    let mut rng = Rng::fresh("scale requirement");
    let (b, h, s, d) = (1, 2, 9, 64);
    let data = |rng: &mut Rng| (0..b * h * s * d).map(|_| rng.normal() * 2.0).collect();
    for bad in [-0.125, 0.0, f64::NAN] {
        let args = vec![
            ("q", t(Dtype::Bf16, &[b, h, s, d], data(&mut rng))),
            ("k", t(Dtype::Bf16, &[b, h, s, d], data(&mut rng))),
            ("v", t(Dtype::Bf16, &[b, h, s, d], data(&mut rng))),
            ("scale", HostArg::Scalar(bad)),
        ];
        let e = kir_tests::try_op(FWD, &[("DTYPE", "bf16"), ("HEAD_DIM", "64")], args)
            .expect_err("a scale that is not positive must not run");
        assert!(
            e.contains("requirement `scale > 0.0` does not hold") && e.contains("scale = "),
            "{bad}: {e}"
        );
        assert!(e.contains("attention_fwd.kir:") && e.contains('^'), "{e}");
    }
}
