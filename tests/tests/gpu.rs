//! The CUDA runtime on a real GPU: every built-in op at its default specialization, run from
//! its PTX and META.json by `kir_backends::runtime` with poisoned outputs, against the CPU
//! interpreter on the same fresh random inputs (relative L2 within twice the dtype tolerance of
//! docs/testing.md: the PTX sums in another order). Plus the fill kernels of `kirc bench`, and
//! the tensor maps META.json lists for sm_90a's TMA rings, encoded as the runtime encodes them.
//!
//! Runs only where a GPU is present. Without a CUDA driver or device it prints a loud SKIPPED
//! line and passes; any other failure to open the GPU (a driver that fails) is a test failure,
//! so a broken GPU setup never hides behind the skip.

use kir_backends::interp::{self, HostArg, HostTensor};
use kir_backends::runtime::{self, Gpu, RuntimeError};
use kir_compiler::internal::compile::{compile, Emit};
use kir_ir::Dtype;
use kir_tests::F64s;
use kir_tests::{tolerance, Rng};
use std::collections::BTreeMap;

/// The GPU, or `None` after a loud SKIPPED line when the machine has no driver or device.
fn gpu(test: &str) -> Option<Gpu> {
    match Gpu::open(0) {
        Ok(g) => Some(g),
        Err(RuntimeError::NoDriver(m)) => {
            eprintln!("\n*** SKIPPED {test}: no GPU found ({m}) ***\n");
            None
        }
        Err(e) => panic!("{test}: a CUDA driver is present but the GPU cannot be opened: {e}"),
    }
}

fn tensor(rng: &mut Rng, shape: &[usize], scale: f64) -> HostArg {
    let n = shape.iter().product();
    let data: Vec<f64> = (0..n).map(|_| rng.normal() * scale).collect();
    HostArg::Tensor(HostTensor {
        dtype: Dtype::F32,
        shape: shape.to_vec(),
        data: data.into(),
    })
}

/// Runs `op` (default specialization) on the GPU and on the interpreter; compares every output.
fn parity(gpu: &Gpu, op: &str, args: Vec<(&str, HostArg)>) {
    let src = kir_compiler::internal::oplib::builtin(op).expect("built-in op");
    parity_src(gpu, op, src, args);
}

/// [`parity`] for the module `src` (named `op` in messages).
fn parity_src(gpu: &Gpu, op: &str, src: &str, args: Vec<(&str, HostArg)>) {
    let target = runtime::target_for(gpu.capability).expect("a kir target for this GPU");
    let c = compile(src, &[], None, target, Emit::Ptx).unwrap_or_else(|e| panic!("{op}: {e}"));
    let args: BTreeMap<String, HostArg> =
        args.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let want = interp::run(&c.module, &args).unwrap_or_else(|e| panic!("{op} (cpu): {e}"));
    let got = runtime::run(gpu, &c.text, c.meta.as_ref().unwrap(), &c.module, &args)
        .unwrap_or_else(|e| panic!("{op} (cuda): {e}"));
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "{op}"
    );
    for (name, w) in &want {
        let g = &got[name];
        assert_eq!(g.shape, w.shape, "{op}.{name} shape");
        let (rel, _) = tolerance(w.dtype);
        let (mut d, mut n) = (0.0f64, 0.0f64);
        for (i, (&a, &b)) in g.data.f64s().iter().zip(w.data.f64s()).enumerate() {
            assert_eq!(
                a.is_finite(),
                b.is_finite(),
                "{op}.{name}[{i}]: cuda {a}, cpu {b}"
            );
            if b.is_finite() {
                d += (a - b) * (a - b);
                n += b * b;
            }
        }
        let r = if n > 0.0 { (d / n).sqrt() } else { d.sqrt() };
        eprintln!("{op}.{name}: rel L2 {r:.2e}");
        assert!(
            r <= 2.0 * rel.max(1e-5),
            "{op}.{name}: rel L2 {r:.2e} > {:.2e}",
            2.0 * rel
        );
    }
}

/// A hand-scheduled cp.async ring (tests/in/sched/ring_plain.kir) whose stage reads feed an
/// elementwise op, so the backend reads each stage into registers, over ragged rows.
#[test]
fn hand_scheduled_ring_matches_the_interpreter_on_the_gpu() {
    let Some(g) = gpu("hand_scheduled_ring_matches_the_interpreter_on_the_gpu") else {
        return;
    };
    let src = include_str!("../in/sched/ring_plain.kir");
    let mut rng = Rng::fresh("gpu ring");
    for rows in [1, 16, 37, 64] {
        let x = tensor(&mut rng, &[rows, 8], 1.0);
        parity_src(&g, "ring_plain", src, vec![("x", x)]);
    }
}

#[test]
fn every_op_matches_the_interpreter_on_the_gpu() {
    let Some(g) = gpu("every_op_matches_the_interpreter_on_the_gpu") else {
        return;
    };
    let mut rng = Rng::fresh("gpu parity");
    let s = 1.0 / 128f64.sqrt();
    let (q, k, v) = ([2, 4, 130, 128], [2, 2, 97, 128], [2, 2, 97, 128]);
    let qa = tensor(&mut rng, &q, 1.0);
    let ka = tensor(&mut rng, &k, 1.0);
    let va = tensor(&mut rng, &v, 3.0);
    parity(
        &g,
        "attention_fwd",
        vec![
            ("q", qa),
            ("k", ka),
            ("v", va),
            ("scale", HostArg::Scalar(s)),
        ],
    );
    let a = tensor(&mut rng, &[1, 200, 96], 1.0);
    let b = tensor(&mut rng, &[1, 96, 130], 3.0);
    parity(
        &g,
        "gemm",
        vec![("a", a), ("b", b), ("alpha", HostArg::Scalar(0.5))],
    );
    for op in ["rmsnorm_fwd", "layernorm_fwd"] {
        let mut args = vec![
            ("x", tensor(&mut rng, &[37, 1000], 3.0)),
            ("w", tensor(&mut rng, &[1000], 1.0)),
        ];
        if op == "layernorm_fwd" {
            args.push(("b", tensor(&mut rng, &[1000], 1.0)));
        }
        args.push(("eps", HostArg::Scalar(1e-5)));
        parity(&g, op, args);
    }
    let x = tensor(&mut rng, &[30, 1000], 1.0);
    let w = tensor(&mut rng, &[1000], 1.0);
    let dy = tensor(&mut rng, &[30, 1000], 3.0);
    parity(
        &g,
        "rmsnorm_bwd",
        vec![
            ("x", x),
            ("w", w),
            ("dy", dy),
            ("eps", HostArg::Scalar(1e-5)),
        ],
    );
    let gate = tensor(&mut rng, &[33, 1500], 3.0);
    let up = tensor(&mut rng, &[33, 1500], 1.0);
    parity(&g, "swiglu", vec![("gate", gate), ("up", up)]);
}

/// The device fill kernels write every element of every dtype, in range.
#[test]
fn random_fill_covers_every_element() {
    let Some(g) = gpu("random_fill_covers_every_element") else {
        return;
    };
    let src = kir_compiler::internal::oplib::builtin("rmsnorm_fwd").unwrap();
    let target = runtime::target_for(g.capability).unwrap();
    let c = compile(src, &[], None, target, Emit::Ptx).unwrap();
    let mut p = runtime::Program::load(&g, &c.text, c.meta.as_ref().unwrap(), &c.module).unwrap();
    let empty = |shape: &[usize]| {
        HostArg::Tensor(HostTensor {
            dtype: Dtype::Bf16,
            shape: shape.to_vec(),
            data: Vec::<f64>::new().into(),
        })
    };
    let args: BTreeMap<String, HostArg> = [
        ("x", empty(&[33, 1000])),
        ("w", empty(&[1000])),
        ("eps", HostArg::Scalar(1e-5)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let random = ["x".to_string(), "w".to_string()].into_iter().collect();
    let mut b = p.bind(&args, &random, 7).unwrap();
    p.launch(&mut b).unwrap();
    let out = p.outputs(&b).unwrap();
    // Random x and w in [-1, 1): every output row is finite (no poison survives).
    assert!(
        out["y"]
            .data
            .f64s()
            .iter()
            .all(|v| v.is_finite() && v.abs() < 1e3),
        "y has poison or junk"
    );
    assert!(
        out["rstd"]
            .data
            .f64s()
            .iter()
            .all(|v| v.is_finite() && *v > 0.0),
        "rstd has poison"
    );
    let t = runtime::bench(&p, &mut b, 1, 3).unwrap();
    assert!(t.median_ms > 0.0 && t.min_ms <= t.median_ms && t.median_ms <= t.max_ms);
}

/// The fill kernels assemble with ptxas for every target (runs without a GPU; needs
/// `KIR_PTXAS`, which scripts/test.sh sets).
#[test]
fn fill_kernels_assemble() {
    let ptxas = std::env::var("KIR_PTXAS").unwrap_or_else(|_| {
        panic!("KIR_PTXAS is not set: run ./scripts/test.sh (it installs the pinned ptxas and exports KIR_PTXAS)")
    });
    let dir = std::env::temp_dir().join(format!("kir-fill-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ptx = dir.join("fill.ptx");
    std::fs::write(&ptx, runtime::fill_ptx()).unwrap();
    for arch in ["sm_80", "sm_90a", "sm_100a", "sm_120a"] {
        let o = std::process::Command::new(&ptxas)
            .args([&format!("-arch={arch}"), ptx.to_str().unwrap(), "-o"])
            .arg(dir.join(format!("{arch}.cubin")))
            .output()
            .expect("ptxas runs");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success() && err.trim().is_empty(),
            "ptxas {arch}: {err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The tensor maps META.json lists for attention_fwd on sm_90a (ABI item 4) encode at a ragged
/// shape, exactly as the runtime binds them: every map's tensor, dtype and box from META, its
/// dims from the kernel's params (runs without a GPU).
#[test]
fn attention_tensor_maps_encode_from_meta() {
    use kir_backends::tensor_map::{tensor_map_spec, MapDataType};
    let src = kir_compiler::internal::oplib::builtin("attention_fwd").unwrap();
    let c = compile(src, &[], None, kir_backends::Target::Sm90a, Emit::Ptx).unwrap();
    let meta = c.meta.unwrap();
    let dim = |d: &str| d.parse::<usize>().unwrap_or(300);
    let mut maps = 0;
    for k in meta["kernels"].as_array().unwrap() {
        for p in k["params"].as_array().unwrap() {
            if p["kind"] != "tensor_map" {
                continue;
            }
            let name = p["name"].as_str().unwrap();
            let kps = k["kernel_params"].as_array().unwrap();
            let kp = kps.iter().find(|q| q["name"] == name).unwrap();
            let shape: Vec<usize> = kp["dims"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| dim(d.as_str().unwrap()))
                .collect();
            let mut strides = vec![1; shape.len()];
            for i in (0..shape.len() - 1).rev() {
                strides[i] = strides[i + 1] * shape[i + 1];
            }
            let boxes: Vec<u32> = p["box"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_u64().unwrap() as u32)
                .collect();
            let dtype = kir_ir::Dtype::from_name(p["dtype"].as_str().unwrap()).unwrap();
            let s = tensor_map_spec(name, dtype, &shape, &strides, &boxes, 0x7f00_0000_0000)
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(s.global_dim, vec![128, 300, 300, 300], "{name}");
            assert_eq!(
                s.global_strides,
                vec![256, 256 * 300, 256 * 300 * 300],
                "{name}"
            );
            // The d128 default's 192-row query block and 128-key blocks, 64 columns per box.
            let rows = if name == "q" { 192 } else { 128 };
            assert_eq!(s.box_dim, vec![64, rows, 1, 1], "{name}");
            assert_eq!(s.data_type, MapDataType::Bfloat16);
            maps += 1;
        }
    }
    assert!(
        maps > 0,
        "attention_fwd on sm_90a copies with TMA, so META lists tensor maps"
    );
}
