//! The buffers a caller provides to launch on its own memory (`kir_backends::runtime::
//! buffer_specs`, what `kir.torch` allocates with PyTorch's allocator): for the built-in
//! programs at random ragged shapes, every `out` param and temp with the dtype, shape and
//! strides the ops document (compiler/ops/*.kir), written out here by hand; the binding's
//! errors for inputs that disagree; and which launches run together (`launch_pairs`). Needs no
//! GPU: the specs come from the specialized module.

use kir_backends::runtime::{self, BufferRole, BufferSpec, DeviceArg, DeviceTensor};
use kir_backends::Target;
use kir_compiler::internal::compile::{compile, Emit};
use kir_ir::{Dtype, Module};
use kir_tests::Rng;
use std::collections::BTreeMap;

fn module(op: &str, defines: &[(&str, &str)]) -> Module {
    let src = kir_compiler::internal::oplib::builtin(op).expect("built-in op");
    let d: Vec<(String, String)> = defines
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    compile(src, &d, None, Target::Sm90a, Emit::Ptx)
        .unwrap_or_else(|e| panic!("{op}: {e}"))
        .module
}

fn c_order(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// A tensor argument at a made-up address (nothing is dereferenced).
fn t(dtype: Dtype, shape: &[usize]) -> DeviceArg {
    DeviceArg::Tensor(DeviceTensor {
        ptr: 0x1000,
        dtype,
        shape: shape.to_vec(),
        strides: c_order(shape),
    })
}

fn spec(name: &str, dtype: Dtype, shape: &[usize], role: BufferRole) -> BufferSpec {
    BufferSpec {
        name: name.to_string(),
        dtype,
        shape: shape.to_vec(),
        strides: c_order(shape),
        role,
    }
}

fn args(list: Vec<(&str, DeviceArg)>) -> BTreeMap<String, DeviceArg> {
    list.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

#[test]
fn attention_bwd_lists_its_gradients_and_temps() {
    let mut rng = Rng::fresh("attention_bwd specs");
    for deterministic in ["1", "0"] {
        let b = rng.range(1, 4);
        let hkv = rng.range(1, 4);
        let hq = hkv * rng.range(1, 4);
        let s = rng.range(17, 217);
        let d = 64;
        let m = module(
            "attention_bwd",
            &[("HEAD_DIM", "64"), ("DETERMINISTIC", deterministic)],
        );
        let (q, kv) = ([b, hq, s, d], [b, hkv, s, d]);
        let inputs = args(vec![
            ("q", t(Dtype::Bf16, &q)),
            ("k", t(Dtype::Bf16, &kv)),
            ("v", t(Dtype::Bf16, &kv)),
            ("o", t(Dtype::Bf16, &q)),
            ("do", t(Dtype::Bf16, &q)),
            ("lse", t(Dtype::F32, &[b, hq, s])),
            ("scale", DeviceArg::Scalar(0.125)),
        ]);
        let got = runtime::buffer_specs(&m, &inputs).expect("specs");
        // The f32 dq accumulator has rows only in the atomic mode (DETERMINISTIC = 0); it
        // holds dqᵀ by query block, [B, Hq, cdiv(Sq, BLOCK_M), D, BLOCK_M], BLOCK_M 64 (the
        // sm_90a rows of both modes at d64).
        let acc_b = if deterministic == "0" { b } else { 0 };
        // Its rows are BLOCK_M + 4 long at head dim 64 (BLOCK_M + 8 above): the staging of the
        // bulk reduction then has few bank conflicts (backends/src/ptx/lower/bulk_reduce.rs).
        let acc = [acc_b, hq, s.div_ceil(64), d, 64 + 4];
        let want = vec![
            spec("dq", Dtype::Bf16, &q, BufferRole::Out),
            spec("dk", Dtype::Bf16, &kv, BufferRole::Out),
            spec("dv", Dtype::Bf16, &kv, BufferRole::Out),
            spec("delta", Dtype::F32, &[b, hq, s], BufferRole::Temp),
            spec("lse_log2", Dtype::F32, &[b, hq, s], BufferRole::Temp),
            spec("dq_acc", Dtype::F32, &acc, BufferRole::Temp),
            // The counters of ORDERED = 1 (0 here): no rows.
            spec(
                "dq_sem",
                Dtype::I32,
                &[0, hq, s.div_ceil(64)],
                BufferRole::Temp,
            ),
        ];
        assert_eq!(got, want, "DETERMINISTIC={deterministic}");
    }
}

#[test]
fn norm_backwards_list_their_row_group_partials() {
    let mut rng = Rng::fresh("norm backward specs");
    for _ in 0..4 {
        // Row counts on both sides of the 264 row groups.
        let r = rng.range(1, 601);
        let n = rng.range(1, 5001);
        let groups = r.min(264);
        let m = module("rmsnorm_bwd", &[("DTYPE", "f16")]);
        let inputs = args(vec![
            ("x", t(Dtype::F16, &[r, n])),
            ("w", t(Dtype::F16, &[n])),
            ("dy", t(Dtype::F16, &[r, n])),
            ("eps", DeviceArg::Scalar(1e-5)),
        ]);
        let want = vec![
            spec("dx", Dtype::F16, &[r, n], BufferRole::Out),
            spec("dw", Dtype::F16, &[n], BufferRole::Out),
            spec("dw_part", Dtype::F32, &[groups, n], BufferRole::Temp),
        ];
        assert_eq!(runtime::buffer_specs(&m, &inputs).expect("specs"), want);
        let m = module("layernorm_bwd", &[]);
        let inputs = args(vec![
            ("x", t(Dtype::Bf16, &[r, n])),
            ("w", t(Dtype::Bf16, &[n])),
            ("dy", t(Dtype::Bf16, &[r, n])),
            ("mean", t(Dtype::F32, &[r])),
            ("rstd", t(Dtype::F32, &[r])),
        ]);
        let want = vec![
            spec("dx", Dtype::Bf16, &[r, n], BufferRole::Out),
            spec("dw", Dtype::Bf16, &[n], BufferRole::Out),
            spec("db", Dtype::Bf16, &[n], BufferRole::Out),
            spec("dw_part", Dtype::F32, &[groups, n], BufferRole::Temp),
            spec("db_part", Dtype::F32, &[groups, n], BufferRole::Temp),
        ];
        assert_eq!(runtime::buffer_specs(&m, &inputs).expect("specs"), want);
    }
}

#[test]
fn a_single_kernel_lists_its_outs_and_no_temps() {
    let m = module("gemm", &[]);
    let inputs = args(vec![
        ("a", t(Dtype::Bf16, &[2, 37, 64])),
        ("b", t(Dtype::Bf16, &[2, 64, 53])),
        ("alpha", DeviceArg::Scalar(1.0)),
    ]);
    assert_eq!(
        runtime::buffer_specs(&m, &inputs).expect("specs"),
        vec![spec("c", Dtype::Bf16, &[2, 37, 53], BufferRole::Out)]
    );
}

#[test]
fn inputs_that_disagree_are_errors_naming_them() {
    let m = module("rmsnorm_bwd", &[]);
    let cases = [
        (
            args(vec![
                ("x", t(Dtype::Bf16, &[8, 100])),
                ("w", t(Dtype::Bf16, &[99])),
                ("dy", t(Dtype::Bf16, &[8, 100])),
                ("eps", DeviceArg::Scalar(1e-5)),
            ]),
            "dim `N` is 100 from `x` but 99 from `w`",
        ),
        (
            args(vec![
                ("x", t(Dtype::Bf16, &[8, 100])),
                ("w", t(Dtype::Bf16, &[100])),
                ("eps", DeviceArg::Scalar(1e-5)),
            ]),
            "missing argument `dy`",
        ),
        (
            args(vec![
                ("x", t(Dtype::Bf16, &[8, 100])),
                ("w", t(Dtype::Bf16, &[100])),
                ("dy", t(Dtype::Bf16, &[8, 100])),
                ("eps", DeviceArg::Scalar(1e-5)),
                ("dz", t(Dtype::Bf16, &[8, 100])),
            ]),
            "unknown argument `dz`",
        ),
    ];
    for (inputs, want) in cases {
        let e = runtime::buffer_specs(&m, &inputs).expect_err(want);
        assert!(e.to_string().contains(want), "{e} (want {want})");
    }
}

/// Which launches run together (`runtime::launch_pairs`, what `Program::launch_on` forks when
/// no two of the caller's tensors share memory): attention_bwd's dK/dV and dQ kernels in the
/// deterministic mode (each writes its own gradients; the atomic mode's dq_acc is empty), not
/// in the atomic mode (the dK/dV kernel adds into dq_acc, which the dQ kernel reads), nor a
/// norm backward's dx kernel and the sums of its partials, nor a GEMM alone; a user's unfused
/// gate and up projections (each reads x and writes its own temp) do, and the SwiGLU after
/// them, which reads both, does not.
#[test]
fn launches_that_touch_nothing_in_common_pair_up() {
    let mut rng = Rng::fresh("launch pairs");
    let (b, h, s) = (rng.range(1, 3), 2 * rng.range(1, 3), rng.range(17, 300));
    let q = [b, h, s, 64];
    let bwd = |det: &str| {
        let m = module(
            "attention_bwd",
            &[("HEAD_DIM", "64"), ("DETERMINISTIC", det)],
        );
        let inputs = args(vec![
            ("q", t(Dtype::Bf16, &q)),
            ("k", t(Dtype::Bf16, &q)),
            ("v", t(Dtype::Bf16, &q)),
            ("o", t(Dtype::Bf16, &q)),
            ("do", t(Dtype::Bf16, &q)),
            ("lse", t(Dtype::F32, &[b, h, s])),
            ("scale", DeviceArg::Scalar(0.125)),
        ]);
        runtime::launch_pairs(&m, &inputs).expect("pairs")
    };
    assert_eq!(
        bwd("1"),
        vec![(
            "attention_bwd_dkdv".to_string(),
            "attention_bwd_dq".to_string()
        )]
    );
    assert_eq!(bwd("0"), vec![]);
    let (r, n) = (rng.range(3, 70), rng.range(5, 300));
    let m = module("rmsnorm_bwd", &[]);
    let inputs = args(vec![
        ("x", t(Dtype::Bf16, &[r, n])),
        ("w", t(Dtype::Bf16, &[n])),
        ("dy", t(Dtype::Bf16, &[r, n])),
        ("eps", DeviceArg::Scalar(1e-5)),
    ]);
    assert_eq!(runtime::launch_pairs(&m, &inputs).expect("pairs"), vec![]);
    let m = module("gemm", &[]);
    let inputs = args(vec![
        ("a", t(Dtype::Bf16, &[1, r, n])),
        ("b", t(Dtype::Bf16, &[1, n, r])),
        ("alpha", DeviceArg::Scalar(1.0)),
    ]);
    assert_eq!(runtime::launch_pairs(&m, &inputs).expect("pairs"), vec![]);
    // A user's program, unfused.
    let path = format!(
        "{}/in/fusion/gate_up_swiglu.kir",
        env!("CARGO_MANIFEST_DIR")
    );
    let src = std::fs::read_to_string(&path).expect("read");
    let flags = kir_compiler::internal::plan::Flags {
        fusion: kir_compiler::internal::options::Fusion::Off,
        ..Default::default()
    };
    let plan = kir_compiler::internal::plan::CompilePlan::resolve(
        &src,
        &[],
        Target::Sm90a,
        Emit::Ptx,
        flags,
    )
    .expect("plan");
    let m = kir_compiler::internal::pipeline::compile(&src, &plan)
        .expect("compiles")
        .module;
    let inputs = args(vec![
        ("x", t(Dtype::Bf16, &[r, n])),
        ("wg", t(Dtype::Bf16, &[n, r])),
        ("wu", t(Dtype::Bf16, &[n, r])),
    ]);
    assert_eq!(
        runtime::launch_pairs(&m, &inputs).expect("pairs"),
        vec![("gate_proj".to_string(), "up_proj".to_string())]
    );
}
