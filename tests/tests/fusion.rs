//! The `fusion` pass on the unfused programs of tests/in/fusion: the fused module launches fewer
//! kernels and moves fewer global bytes, the interpreter gives the same outputs before and after
//! on fresh random inputs with ragged sizes (magnitudes 1 and 3, within the output dtype's
//! tolerance), the IR after the pass is snapshotted, and deliberately wrong fusions are caught.
//! RMSNorm → GEMM is also checked against an independent f64 oracle, and left unfused (with the
//! reason) where the cost model says it does not pay or the producer is not an RMSNorm.

use kir_backends::interp::{self, HostArg};
use kir_compiler::internal::passes;
use kir_compiler::internal::traffic::bytes_moved;
use kir_ir::{ExprKind, Module, ParamKind};
use kir_tests::oracle::{self, Epilogue};
use kir_tests::F64s;
use kir_tests::{compare, tolerance, Rng};
use std::collections::BTreeMap;

fn source(name: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("in/fusion/{name}.kir"));
    std::fs::read_to_string(p).expect("read")
}

/// The module before the pass (after `egraph`) and after it.
fn before_after(name: &str, defines: &[(String, String)]) -> (Module, Module) {
    let src = source(name);
    let f = kir_compiler::internal::pipeline::run_observed(&src, defines, &mut |_, _| {})
        .unwrap_or_else(|e| panic!("{}", e.render(name, &src)));
    (f.optimized, f.fused)
}

/// Random ragged dims (in [5, 90)) for every program dim, and inputs for them.
fn inputs(
    m: &Module,
    mag: f64,
    rng: &mut Rng,
) -> (BTreeMap<String, i64>, BTreeMap<String, HostArg>) {
    let params = m.entry_params().expect("entry");
    let mut dims = BTreeMap::new();
    for p in params {
        if let ParamKind::Tensor(_, t) = &p.kind {
            for d in &t.dims {
                if let ExprKind::Ident(n) = &d.kind {
                    let v = rng.range(5, 90) as i64;
                    dims.entry(n.clone()).or_insert(v);
                }
            }
        }
    }
    let mut args = BTreeMap::new();
    for p in params {
        match &p.kind {
            ParamKind::Tensor(kir_ir::Access::Out, _) => {}
            ParamKind::Tensor(_, t) => {
                let shape = kir_tests::inputs::shape_of(t, &dims);
                let dtype = t.elem.known().expect("dtype");
                let data = rng.tensor(shape.iter().product(), mag, dtype);
                args.insert(p.name.clone(), kir_tests::t(dtype, &shape, data));
            }
            ParamKind::Scalar(_) => {
                args.insert(p.name.clone(), HostArg::Scalar(1e-5));
            }
        }
    }
    (dims, args)
}

/// Runs both modules on the same fresh inputs and compares every output; returns the worst
/// failure message, if any.
fn differential(what: &str, before: &Module, after: &Module) -> Result<(), String> {
    for mag in [1.0, 3.0] {
        let mut rng = Rng::fresh(what);
        let (_, args) = inputs(before, mag, &mut rng);
        let a = interp::run(before, &args).map_err(|e| format!("{what}: before: {e}"))?;
        let b = interp::run(after, &args).map_err(|e| format!("{what}: after: {e}"))?;
        for (name, ta) in &a {
            let tb = &b[name];
            let label = format!("{what} mag {mag}: {name}");
            std::panic::catch_unwind(|| {
                compare(&label, tb.data.f64s(), ta.data.f64s(), tolerance(ta.dtype))
            })
            .map_err(|_| label.clone())?;
        }
    }
    Ok(())
}

fn launches(m: &Module) -> usize {
    m.program.as_ref().map_or(1, |p| p.launches.len())
}

#[test]
fn gate_up_swiglu_fuses_into_one_kernel() {
    for dt in ["bf16", "f32"] {
        let d = vec![("DTYPE".to_string(), dt.to_string())];
        let (before, after) = before_after("gate_up_swiglu", &d);
        assert_eq!((launches(&before), launches(&after)), (3, 1));
        assert_eq!(after.kernels.len(), 1);
        let p = after.program.as_ref().expect("program");
        assert!(p.temps.is_empty(), "temps gate/up must be eliminated");
        // Bytes at ragged sizes: the fused kernel reads x once per tile for both GEMMs and
        // never writes or re-reads gate/up.
        let mut rng = Rng::fresh("fusion bytes");
        let (dims, _) = inputs(&before, 1.0, &mut rng);
        let dim = |n: &str| dims.get(n).copied();
        let (b0, b1) = (
            bytes_moved(&before, &dim).unwrap(),
            bytes_moved(&after, &dim).unwrap(),
        );
        assert!(b1 < b0, "bytes {b0} -> {b1}");
        differential(&format!("gate_up_swiglu {dt}"), &before, &after).unwrap();
    }
}

#[test]
fn fusion_report_and_snapshot() {
    let src = source("gate_up_swiglu");
    let (_, spec) = kir_compiler::internal::pipeline::frontend(&src, &[]).unwrap();
    let (fused, rep) = passes::fusion_with_report(&spec);
    assert_eq!(rep.kernels, (3, 1));
    assert_eq!(
        rep.buffers_eliminated,
        vec!["gate".to_string(), "up".to_string()]
    );
    assert!(rep.bytes.1 < rep.bytes.0, "{rep:?}");
    assert_eq!(rep.fused.len(), 2, "{rep:?}");
    insta::assert_snapshot!("fusion__gate_up_swiglu", kir_ir::text::print(&fused));
}

fn host(a: &HostArg) -> (&[usize], &[f64]) {
    match a {
        HostArg::Tensor(t) => (&t.shape, t.data.f64s()),
        HostArg::Scalar(_) | HostArg::Int(_) => panic!("a scalar"),
    }
}

/// RMSNorm → GEMM: one kernel instead of two, fewer bytes (at ragged sizes and at the nominal
/// size the pass decides with), the same outputs before and after at magnitudes 1 and 3, and the
/// fused output against an independent f64 oracle.
#[test]
fn rmsnorm_gemm_fuses_into_one_kernel() {
    for dt in ["bf16", "f32"] {
        let d = vec![("DTYPE".to_string(), dt.to_string())];
        let (before, after) = before_after("rmsnorm_gemm", &d);
        assert_eq!((launches(&before), launches(&after)), (2, 1));
        assert_eq!(after.kernels.len(), 1);
        assert!(after.program.as_ref().expect("program").temps.is_empty());
        let mut rng = Rng::fresh("rmsnorm_gemm bytes");
        let (dims, _) = inputs(&before, 1.0, &mut rng);
        let dim = |n: &str| dims.get(n).copied();
        let (b0, b1) = (
            bytes_moved(&before, &dim).unwrap(),
            bytes_moved(&after, &dim).unwrap(),
        );
        assert!(b1 < b0, "bytes {b0} -> {b1} at {dims:?}");
        let (_, rep) = passes::fusion_with_report(&before);
        assert!(rep.bytes.1 < rep.bytes.0, "{rep:?}");
        differential(&format!("rmsnorm_gemm {dt}"), &before, &after).unwrap();
        for mag in [1.0, 3.0] {
            let mut rng = Rng::fresh("rmsnorm_gemm oracle");
            let (dims, args) = inputs(&before, mag, &mut rng);
            let (m, k, n) = (dims["M"] as usize, dims["K"] as usize, dims["N"] as usize);
            let out = interp::run(&after, &args).expect("run");
            let (_, x) = host(&args["x"]);
            let (_, w) = host(&args["w"]);
            let (_, wm) = host(&args["wm"]);
            let (y, _) = oracle::rmsnorm_fwd(x, w, m, k, 1e-5);
            let want = oracle::gemm(&y, wm, None, None, (1, m, k, n), false, 1.0, Epilogue::None);
            let c = &out["c"];
            let label = format!("rmsnorm_gemm {dt} mag {mag} vs oracle");
            compare(&label, c.data.f64s(), &want, tolerance(c.dtype));
        }
    }
}

/// With 32×32 GEMM tiles the GEMM's extra loads of `w` cost as much as the RMSNorm launch saves
/// (N = 4·BLOCK_M·BLOCK_N at every dim = 4096): the cost model keeps the program unfused and
/// says so.
#[test]
fn rmsnorm_gemm_is_not_fused_when_it_does_not_pay() {
    let d: Vec<(String, String)> = [("BLOCK_M", "32"), ("BLOCK_N", "32")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let (before, after) = before_after("rmsnorm_gemm", &d);
    assert_eq!(before, after);
    let (_, rep) = passes::fusion_with_report(&before);
    assert!(rep.fused.is_empty(), "{rep:?}");
    assert!(
        rep.not_fused.iter().any(|l| l.contains("does not pay")),
        "{rep:?}"
    );
}

/// A kernel that looks like an RMSNorm but stores x·x·w (no row scale) is not fused, with the
/// reason.
#[test]
fn a_lookalike_rmsnorm_is_not_fused() {
    let src = source("rmsnorm_gemm").replace("%xn = mul %xf, %rb", "%xn = mul %xf, %xf");
    let (_, m) = kir_compiler::internal::pipeline::frontend(&src, &[]).expect("frontend");
    let (out, rep) = passes::fusion_with_report(&m);
    assert_eq!(out, m);
    assert!(
        rep.not_fused
            .iter()
            .any(|l| l.contains("@rmsnorm is not an RMSNorm")),
        "{rep:?}"
    );
}

#[test]
fn rmsnorm_gemm_snapshot() {
    let src = source("rmsnorm_gemm");
    let (_, spec) = kir_compiler::internal::pipeline::frontend(&src, &[]).unwrap();
    let (fused, rep) = passes::fusion_with_report(&spec);
    assert_eq!(rep.kernels, (2, 1));
    assert_eq!(rep.buffers_eliminated, vec!["y".to_string()]);
    insta::assert_snapshot!("fusion__rmsnorm_gemm", kir_ir::text::print(&fused));
}

/// Forgetting the rstd scale after the K loop is caught by the differential comparison.
#[test]
fn a_fusion_without_the_rstd_scale_is_caught() {
    for dt in ["bf16", "f32"] {
        let d = vec![("DTYPE".to_string(), dt.to_string())];
        let (before, after) = before_after("rmsnorm_gemm", &d);
        let text = kir_ir::text::print(&after);
        let scale = "%acc_norm = mul %acc, %rstd_b";
        assert!(text.contains(scale), "{text}");
        // acc + 0: the accumulator without the row scale.
        let broken = kir_ir::text::parse(&text.replace(scale, "%acc_norm = add %acc, %acc0"))
            .expect("parse");
        let got = differential(&format!("rmsnorm_gemm {dt} broken"), &before, &broken);
        assert!(got.is_err(), "the fusion without rstd was not caught");
    }
}

#[test]
fn builtin_ops_are_unchanged() {
    for (name, src) in kir_compiler::internal::oplib::builtins() {
        let f = kir_compiler::internal::pipeline::run_observed(src, &[], &mut |_, _| {}).unwrap();
        assert_eq!(f.optimized, f.fused, "{name}");
    }
}

/// A wrong fusion (the epilogue applies sigmoid instead of silu to the gate) is caught by the
/// same differential comparison.
#[test]
fn a_wrong_fusion_is_caught() {
    let d = vec![("DTYPE".to_string(), "f32".to_string())];
    let (before, after) = before_after("gate_up_swiglu", &d);
    let text = kir_ir::text::print(&after);
    assert!(text.contains(" = silu "), "{text}");
    let broken = kir_ir::text::parse(&text.replace(" = silu ", " = sigmoid ")).expect("parse");
    let got = differential("gate_up_swiglu broken", &before, &broken);
    assert!(got.is_err(), "the broken fusion was not caught");
}
