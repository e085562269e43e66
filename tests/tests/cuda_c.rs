//! The CUDA-C backend without a GPU: every op of the library (and every op-semantics input)
//! under representative specializations is lowered to CUDA C, compiled by NVRTC for each
//! target's architecture (compute_80, 90a, 100a, 120a) with no warning, and the PTX is
//! assembled by ptxas for the matching sm_XX. Also: one golden `.cu` per op (insta), META.json
//! facts, and the clear error for a kernel whose tiles do not fit in shared memory.
//!
//! NVRTC and ptxas come from `KIR_NVRTC` / `KIR_PTXAS`, which `scripts/test.sh` sets; without
//! them these tests fail (they never skip).

use kir_backends::nvrtc::{ptxas, Nvrtc};
use kir_backends::Target;
use kir_compiler::internal::compile::{compile, Emit};
use kir_tests::defs;
use std::sync::Mutex;
use std::time::Instant;

type Case = (String, String, Vec<(String, String)>);

/// Every op × a representative set of specializations: all dtypes, causal on and off, every
/// GEMM epilogue with and without a transposed B, head dims 64/128/256, ragged tile sizes.
fn cases() -> Vec<Case> {
    let mut v: Vec<(&str, Vec<(String, String)>)> = vec![];
    for dt in ["f32", "f16", "bf16"] {
        for causal in ["0", "1"] {
            for hd in ["64", "128"] {
                let d = defs(&[("DTYPE", dt), ("CAUSAL", causal), ("HEAD_DIM", hd)]);
                v.push(("attention_fwd", d));
            }
        }
        for tb in ["0", "1"] {
            for ep in ["none", "bias", "silu", "swiglu"] {
                let d = defs(&[("DTYPE", dt), ("TRANS_B", tb), ("EPILOGUE", ep)]);
                v.push(("gemm", d));
            }
        }
        v.push(("rmsnorm_fwd", defs(&[("DTYPE", dt)])));
        v.push(("rmsnorm_bwd", defs(&[("DTYPE", dt)])));
    }
    v.push((
        "attention_fwd",
        defs(&[
            ("DTYPE", "bf16"),
            ("HEAD_DIM", "256"),
            ("CAUSAL", "1"),
            // 16x16 blocks: the largest that fit sm_120a's 99 KB at head dim 256 (70,784 bytes
            // in the parity backend, which keeps every live tile as 32-bit values).
            ("BLOCK_M", "16"),
            ("BLOCK_N", "16"),
        ]),
    ));
    v.push((
        "attention_fwd",
        defs(&[
            ("DTYPE", "f16"),
            ("HEAD_DIM", "40"),
            ("BLOCK_M", "16"),
            ("BLOCK_N", "48"),
        ]),
    ));
    v.push((
        "gemm",
        defs(&[("BLOCK_M", "16"), ("BLOCK_N", "8"), ("BLOCK_K", "5")]),
    ));
    v.push(("rmsnorm_fwd", defs(&[("BLOCK", "100")])));
    v.push((
        "rmsnorm_bwd",
        defs(&[("GROUPS", "3"), ("BLOCK", "96"), ("SUM_COLS", "24")]),
    ));
    // The rest of the op library and the attention_fwd switches.
    for dt in ["f32", "bf16"] {
        v.push(("layernorm_fwd", defs(&[("DTYPE", dt)])));
        v.push(("layernorm_bwd", defs(&[("DTYPE", dt)])));
        v.push(("swiglu", defs(&[("DTYPE", dt)])));
        v.push(("gemm_nf4", defs(&[("DTYPE", dt)])));
    }
    v.push((
        "gemm_nf4",
        defs(&[("DTYPE", "bf16"), ("TRANSPOSE", "1"), ("GATE_UP", "1")]),
    ));
    v.push((
        "gemm",
        defs(&[
            ("DTYPE", "f32"),
            ("TRANS_A", "1"),
            ("C_IN", "1"),
            ("EPILOGUE", "gelu"),
        ]),
    ));
    v.push((
        "gemm",
        defs(&[
            ("DTYPE", "f32"),
            ("BF16_COMPUTE", "1"),
            ("EPILOGUE", "relu"),
        ]),
    ));
    v.push((
        "attention_fwd",
        defs(&[
            ("HEAD_DIM", "64"),
            ("CAUSAL", "1"),
            ("VARLEN", "1"),
            ("WINDOW", "1"),
            ("SOFTCAP", "1"),
        ]),
    ));
    v.push((
        "attention_fwd",
        defs(&[
            ("HEAD_DIM", "64"),
            ("MASK", "1"),
            ("KV_OFFSET", "1"),
            ("CAUSAL", "1"),
            ("OUT_LAYOUT", "bshd"),
        ]),
    ));
    for (det, ordered) in [("0", "0"), ("1", "0"), ("1", "1")] {
        v.push((
            "attention_bwd",
            defs(&[
                ("HEAD_DIM", "64"),
                ("DETERMINISTIC", det),
                ("ORDERED", ordered),
                ("BLOCK_M", "32"),
                ("BLOCK_N", "32"),
            ]),
        ));
    }
    let mut out: Vec<Case> = v
        .into_iter()
        .map(|(op, d)| {
            let src = kir_compiler::internal::oplib::builtin(op)
                .expect("builtin op")
                .to_string();
            (op.to_string(), src, d)
        })
        .collect();
    // The op-semantics inputs cover the ops the library does not use (nf4, shifts, if, ...).
    for f in kir_tests::kir_files() {
        if f.parent().is_some_and(|d| d.ends_with("in")) {
            let src = std::fs::read_to_string(&f).expect("read");
            out.push((kir_tests::stem(&f), src, vec![]));
        }
    }
    out
}

fn tools() -> Nvrtc {
    match Nvrtc::from_env() {
        Ok(n) => n,
        Err(e) => panic!("{e}"),
    }
}

/// Compiles and assembles one case for one target; returns a line for the report.
fn check(nv: &Nvrtc, (op, src, d): &Case, t: Target) -> Result<String, String> {
    let label = format!("{op} {d:?} {t}");
    let c = compile(src, d, None, t, Emit::Cuda).map_err(|e| format!("{label}: {e}"))?;
    let meta = c.meta.as_ref().ok_or(format!("{label}: no META"))?;
    if meta["emit"] != "cuda" || meta["target"] != t.name() {
        return Err(format!("{label}: META emit/target wrong: {meta}"));
    }
    let arch = format!("--gpu-architecture={}", t.compute_name());
    let ptx = nv
        .compile(&c.text, &format!("{op}.cu"), &[&arch])
        .map_err(|e| format!("{label}: NVRTC failed:\n{e}"))?;
    if ptx.contains("warning") {
        return Err(format!("{label}: NVRTC warned"));
    }
    let version = ptx
        .lines()
        .find_map(|l| l.strip_prefix(".version "))
        .ok_or(format!("{label}: no .version"))?;
    let (maj, min) = version.split_once('.').ok_or("bad version")?;
    let v: (u32, u32) = (maj.parse().unwrap_or(99), min.parse().unwrap_or(99));
    if v > (9, 0) {
        return Err(format!("{label}: PTX .version {version} is above 9.0"));
    }
    for k in meta["kernels"].as_array().ok_or("no kernels")? {
        let sym = k["symbol"].as_str().ok_or("no symbol")?;
        if !ptx.contains(&format!(".entry {sym}(")) {
            return Err(format!("{label}: PTX has no entry `{sym}`"));
        }
        if k["block"] != serde_json::json!([256, 1, 1]) {
            return Err(format!("{label}: block is {}", k["block"]));
        }
        if k["shared_bytes"].as_u64().unwrap_or(u64::MAX) > t.smem_per_block() {
            return Err(format!("{label}: shared_bytes {}", k["shared_bytes"]));
        }
    }
    let report = ptxas(&ptx, t.name()).map_err(|e| format!("{label}: {e}"))?;
    let regs: Vec<&str> = report
        .lines()
        .filter_map(|l| l.split("Used ").nth(1))
        .filter_map(|l| l.split(' ').next())
        .collect();
    Ok(format!("{label}: ok, registers {}", regs.join("/")))
}

#[test]
fn nvrtc_and_ptxas_every_op_spec_and_target() {
    let nv = tools();
    let start = Instant::now();
    let work: Vec<(Case, Target)> = cases()
        .into_iter()
        .flat_map(|c| Target::ALL.into_iter().map(move |t| (c.clone(), t)))
        .collect();
    let total = work.len();
    let queue = Mutex::new(work);
    let results = Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(8);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let Some((c, t)) = queue.lock().expect("queue").pop() else {
                    break;
                };
                let r = check(&nv, &c, t);
                results.lock().expect("results").push(r);
            });
        }
    });
    let results = results.into_inner().expect("results");
    let failures: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    for r in results.iter().flatten() {
        eprintln!("{r}");
    }
    eprintln!(
        "cuda_c: {} op x specialization x target combinations compiled by NVRTC and assembled by ptxas in {:.1}s",
        total,
        start.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} of {total} failed:\n{}",
        failures.len(),
        failures
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}

/// The helpers at the top of every file, replaced in the per-op snapshots by one line.
fn split_prelude(src: &str) -> (String, String) {
    let a = src.find("// ---- helpers").unwrap_or(0);
    let end = "// ---- end of helpers ----\n";
    let b = src.find(end).map_or(a, |i| i + end.len());
    let rest = format!(
        "{}// [helpers: see the cuda_c__prelude snapshot]\n{}",
        &src[..a],
        &src[b..]
    );
    (src[a..b].to_string(), rest)
}

#[test]
fn golden_cuda_per_op() {
    let mut prelude = None;
    for (name, src) in kir_compiler::internal::oplib::builtins() {
        // attention_bwd's default 64×64 tiles exceed 227 KB when every live tile is held as
        // 32-bit values (the parity backend's choice); its golden uses 32×32 tiles.
        let defs: Vec<(String, String)> = if name == "attention_bwd" {
            vec![
                ("BLOCK_M".into(), "32".into()),
                ("BLOCK_N".into(), "32".into()),
            ]
        } else {
            vec![]
        };
        let c = compile(src, &defs, None, Target::Sm90a, Emit::Cuda)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let (p, rest) = split_prelude(&c.text);
        insta::assert_snapshot!(format!("cuda_c__{name}"), rest);
        prelude = Some(p);
    }
    insta::assert_snapshot!("cuda_c__prelude", prelude.unwrap_or_default());
}

#[test]
fn meta_describes_the_cuda_kernels() {
    let src = kir_compiler::internal::oplib::builtin("rmsnorm_bwd").expect("op");
    let d = defs(&[("DTYPE", "f16")]);
    let c = compile(src, &d, None, Target::Sm80, Emit::Cuda).expect("compile");
    let meta = c.meta.expect("meta");
    assert_eq!(meta["emit"], "cuda");
    let ks = meta["kernels"].as_array().expect("kernels");
    assert_eq!(ks.len(), 2);
    assert_eq!(
        ks[0]["symbol"],
        "rmsnorm_bwd_dx_DTYPE_f16_BLOCK_4096_GROUPS_264_SUM_COLS_64"
    );
    assert_eq!(
        ks[1]["symbol"],
        "rmsnorm_bwd_dw_DTYPE_f16_BLOCK_4096_GROUPS_264_SUM_COLS_64"
    );
    // Parameter order is the launch ABI: tensors, scalars, dims.
    let names: Vec<&str> = ks[0]["params"]
        .as_array()
        .expect("params")
        .iter()
        .map(|p| p["name"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        names,
        ["x", "w", "dy", "dx", "dw_part", "eps", "R", "N", "G"]
    );
    for k in ks {
        let sym = k["symbol"].as_str().expect("symbol");
        assert!(c.text.contains(&format!(
            "extern \"C\" __global__ void __launch_bounds__(256) {sym}("
        )));
    }
    assert_eq!(meta["launches"].as_array().map(|l| l.len()), Some(2));
}

#[test]
fn too_much_shared_memory_is_a_clear_error() {
    let src = kir_compiler::internal::oplib::builtin("attention_fwd").expect("op");
    let d = defs(&[("HEAD_DIM", "256"), ("BLOCK_M", "256"), ("BLOCK_N", "256")]);
    let e = compile(src, &d, None, Target::Sm90a, Emit::Cuda).expect_err("must not fit");
    let msg = e.to_string();
    assert!(msg.contains("kernel `attention_fwd` needs"), "{msg}");
    assert!(msg.contains("232448"), "{msg}");
}

/// An `if`'s tile results are written by its yields, inside the regions, so their buffers stay
/// live to the end of the `if` even when nothing after it reads them: a tile computed in a
/// branch must get another buffer (seed 535 of the random-program generator on the H200: the
/// yield wrote an unused result into the buffer of the tile it then read).
#[test]
fn if_results_keep_their_buffers_through_the_branches() {
    let src = "module m\n\nkernel @k(x: in tensor<i32>[N], y: out tensor<i32>[N]) grid [1, 1, 1] {\n  %z = const 0 : i32\n  %t = load x[%z] other 0 : tile<4xi32>\n  %c = cmp lt %z, %z : i1\n  %r1, %r2 = if %c : tile<4xi32>, tile<4xi32> {\n    %a = mul %t, %t : tile<4xi32>\n    %b = add %a, %t : tile<4xi32>\n    yield %b, %a\n  } else {\n    yield %t, %t\n  }\n  store y[%z], %r2 guard\n}\n";
    let out = compile(src, &[], None, Target::Sm90a, Emit::Cuda).expect("compile");
    // `int* NAME = (int*)(kir_smem + OFF);` for every buffer.
    let off = |name: &str| -> usize {
        let pat = format!("* {name} = (int*)(kir_smem + ");
        let line = out
            .text
            .lines()
            .find(|l| l.contains(&pat))
            .unwrap_or_else(|| panic!("no buffer {name}:\n{}", out.text));
        let rest = &line[line.find(&pat).expect("pattern") + pat.len()..];
        rest[..rest.find(')').expect("offset end")]
            .parse()
            .expect("offset")
    };
    let (r1, a, b) = (off("r1"), off("a"), off("b"));
    assert!(
        r1 != a && r1 != b,
        "r1 at {r1} shares a buffer with a ({a}) or b ({b})"
    );
}
