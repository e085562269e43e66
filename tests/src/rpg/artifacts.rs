//! GPU artifacts for generated programs, in the format `scripts/gpu_check_ptx.py` reads (a
//! `manifest.json` of cases, each a folder with `kernel.ptx` + `meta.json` + `lowered.kir` (the
//! module that was lowered, for `kir.Kernel.from_ptx`), `inputs/*.npy`,
//! `interp/*.npy`), for `scripts/gpu_rpg.py` on a machine with a GPU.
//!
//! Per program (seeds in order, until the count is reached): the front end's output module, its
//! interpreter outputs on the seed's inputs (the expectation), PTX for sm_90a, and the CUDA C
//! compiled here by NVRTC to PTX (`cu/kernel.ptx` + `cu/meta.json`, so the GPU machine needs no
//! compiler), and both assembled by ptxas (`kernel.cubin`, `cu/kernel.cubin`: a failed assembly
//! shows here, before the GPU; `scripts/gpu_rpg.py` loads the PTX through kir's launcher). Each output carries its bound from [`gpu_bounds`](super::bounds::gpu_bounds): exact,
//! a relative bound, or none (compared loosely and reported apart). Programs a backend refuses,
//! or whose reference fails, are skipped and counted. Every tenth written program is marked for
//! the compute-sanitizer sample. Two *mutants* follow: a program compiled with one op changed
//! (`max` → `min`, `add` → `sub`, …) next to the original's expectation, chosen so that an
//! exact-class output differs on the interpreter; the GPU check must report them.

use super::bounds::{gpu_bounds, Bound};
use super::check::run_with;
use super::compare::first_difference;
use super::{inputs, module};
use kir_backends::interp::{HostArg, RunOptions};
use kir_backends::nvrtc::Nvrtc;
use kir_backends::Target;
use kir_compiler::internal::compile::{compile, Emit};
use kir_compiler::internal::npy::{self, NpyDtype};
use kir_ir::Dtype;
use std::fmt::Write as _;
use std::path::Path;

/// The npy dtype a tensor of `d` is stored as (bf16 as f32 holding bf16 values, i1 as bool).
fn npy_dtype(d: Dtype) -> NpyDtype {
    match d {
        Dtype::F32 | Dtype::Bf16 => NpyDtype::F32,
        Dtype::F16 => NpyDtype::F16,
        Dtype::I32 => NpyDtype::I32,
        Dtype::I64 => NpyDtype::I64,
        Dtype::U8 => NpyDtype::U8,
        Dtype::I1 => NpyDtype::Bool,
    }
}

/// A JSON number (NaN and infinities as Python's json module writes them).
fn num(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        format!("{x:?}")
    }
}

fn bound_json(b: &Bound) -> String {
    let class = if b.rel == 0.0 {
        "exact"
    } else if b.is_unbounded() {
        "loose"
    } else {
        "bounded"
    };
    let rel = if b.is_unbounded() { 0.0 } else { b.rel };
    format!("{{\"class\": \"{class}\", \"rel\": {}}}", num(rel))
}

/// Assembles `ptx` into `out` with `$KIR_PTXAS -arch=sm_90a` (ptxas must accept what the GPU's
/// driver will JIT-compile; the cubin is kept beside it for a launcher that loads cubins).
fn cubin(ptx: &Path, out: &Path) -> Result<(), String> {
    let exe = std::env::var("KIR_PTXAS").map_err(|_| "KIR_PTXAS is not set".to_string())?;
    let r = std::process::Command::new(exe)
        .arg("-arch=sm_90a")
        .arg(ptx)
        .arg("-o")
        .arg(out)
        .output()
        .map_err(|e| format!("ptxas: {e}"))?;
    if r.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ptxas failed on {}: {}",
            ptx.display(),
            String::from_utf8_lossy(&r.stderr)
        ))
    }
}

fn io<T>(r: Result<T, impl std::fmt::Display>, what: &str) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

/// The mutations a mutant case may apply (one occurrence): each changes what a kernel computes.
const MUTATIONS: &[(&str, &str)] = &[
    (" = max ", " = min "),
    (" = add ", " = sub "),
    (" = xor ", " = or "),
    ("cmp lt ", "cmp le "),
];

/// A mutant: the program of `seed` with one op changed (`kernel`, compiled) and the original's
/// interpreter outputs as the expectation; only if an exact-class output differs between them
/// on the interpreter, so a GPU that runs the mutant must fail the comparison.
fn mutant(seed: u64) -> Option<(String, String)> {
    let text = module::generate(seed).text;
    if text.contains(super::rings::TWIN_MARK) {
        return None;
    }
    let m = kir_compiler::internal::pipeline::output(&text, &[]).ok()?;
    let args = inputs::args(&m, seed).ok()?;
    let want = run_with(&m, &args, &RunOptions::default()).ok()?;
    let bounds = gpu_bounds(&m);
    for (from, to) in MUTATIONS {
        let Some(i) = text.find(from) else { continue };
        let changed = format!("{}{to}{}", &text[..i], &text[i + from.len()..]);
        let Ok(mm) = kir_compiler::internal::pipeline::output(&changed, &[]) else {
            continue;
        };
        let Ok(got) = run_with(&mm, &args, &RunOptions::default()) else {
            continue;
        };
        let caught = want.iter().any(|(k, w)| {
            bounds.get(k).is_some_and(|b| b.rel == 0.0)
                && got.get(k).is_some_and(|g| {
                    first_difference(
                        &g.data,
                        &w.data,
                        Bound::EXACT.join(Bound {
                            rel: 0.0,
                            zero_sign: true,
                        }),
                        w.dtype,
                    )
                    .is_some()
                })
        });
        if caught {
            return Some((text, changed));
        }
    }
    None
}

/// One program's folder; `None` (with the reason counted by the caller) when it is skipped.
/// With `kernel`, that text is compiled instead of the generated one (a mutant).
fn one(dir: &Path, seed: u64, nv: &Nvrtc, kernel: Option<&str>) -> Result<Option<String>, String> {
    let case = module::generate(seed);
    if case.text.contains(super::rings::TWIN_MARK) {
        return Ok(None);
    }
    let Ok(m) = kir_compiler::internal::pipeline::output(&case.text, &[]) else {
        return Ok(None);
    };
    let Ok(args) = inputs::args(&m, seed) else {
        return Ok(None);
    };
    let Ok(want) = run_with(&m, &args, &RunOptions::default()) else {
        return Ok(None);
    };
    let t = Target::Sm90a;
    let src = kernel.unwrap_or(&case.text);
    let Ok(ptx) = compile(src, &[], None, t, Emit::Ptx) else {
        return Ok(None);
    };
    let Ok(cu) = compile(src, &[], None, t, Emit::Cuda) else {
        return Ok(None);
    };
    let arch = format!("--gpu-architecture={}", t.compute_name());
    let Ok(cu_ptx) = nv.compile(&cu.text, "rpg.cu", &[&arch]) else {
        return Ok(None);
    };
    let name = if kernel.is_some() {
        format!("mutant_{seed}")
    } else {
        format!("rpg_{seed}")
    };
    let d = dir.join(&name);
    for sub in ["inputs", "interp", "cu"] {
        io(std::fs::create_dir_all(d.join(sub)), "mkdir")?;
    }
    io(std::fs::write(d.join("kernel.ptx"), &ptx.text), "write")?;
    cubin(&d.join("kernel.ptx"), &d.join("kernel.cubin"))?;
    let meta = ptx.meta.map(|v| v.to_string()).unwrap_or_default();
    io(std::fs::write(d.join("meta.json"), meta), "write")?;
    let lowered = kir_ir::text::print(&ptx.module);
    io(std::fs::write(d.join("lowered.kir"), lowered), "write")?;
    io(std::fs::write(d.join("cu/kernel.ptx"), &cu_ptx), "write")?;
    cubin(&d.join("cu/kernel.ptx"), &d.join("cu/kernel.cubin"))?;
    let meta = cu.meta.map(|v| v.to_string()).unwrap_or_default();
    io(std::fs::write(d.join("cu/meta.json"), meta), "write")?;
    let lowered = kir_ir::text::print(&cu.module);
    io(std::fs::write(d.join("cu/lowered.kir"), lowered), "write")?;
    io(std::fs::write(d.join("program.kir"), src), "write")?;
    let mut ins = vec![];
    let mut scalars = vec![];
    for (k, a) in &args {
        match a {
            HostArg::Tensor(h) => {
                let f = format!("inputs/{k}.npy");
                io(
                    npy::write(&d.join(&f), npy_dtype(h.dtype), &h.shape, &h.data),
                    "npy",
                )?;
                ins.push(format!("\"{k}\": \"{f}\""));
            }
            HostArg::Scalar(x) => scalars.push(format!("\"{k}\": {}", num(*x))),
            HostArg::Int(x) => scalars.push(format!("\"{k}\": {x}")),
        }
    }
    let bounds = gpu_bounds(&m);
    let mut expect = vec![];
    let mut bj = vec![];
    for (k, h) in &want {
        let f = format!("interp/{k}.npy");
        io(
            npy::write(&d.join(&f), npy_dtype(h.dtype), &h.shape, &h.data),
            "npy",
        )?;
        expect.push(format!("\"{k}\": \"{f}\""));
        let b = bounds.get(k).copied().unwrap_or(Bound::UNBOUNDED);
        bj.push(format!("\"{k}\": {}", bound_json(&b)));
    }
    let mut c = String::new();
    let _ = write!(
        c,
        "{{\"name\": \"{name}\", \"op\": \"rpg\", \"dir\": \"{name}\", \"seed\": {seed}, \"shape\": \"{}\", \"defines\": {{}}, \"mode\": \"check\", \"inputs\": {{{}}}, \"scalars\": {{{}}}, \"expect\": {{{}}}, \"bounds\": {{{}}}",
        case.shape,
        ins.join(", "),
        scalars.join(", "),
        expect.join(", "),
        bj.join(", ")
    );
    Ok(Some(c))
}

/// Writes up to `count` programs from `seeds` (in order) into `dir` with their manifest; returns
/// how many were written. Needs `KIR_NVRTC`.
pub fn write(dir: &Path, seeds: (u64, u64), count: usize) -> Result<usize, String> {
    let nv = Nvrtc::from_env()?;
    io(std::fs::create_dir_all(dir), "mkdir")?;
    let mut cases = vec![];
    let mut skipped = 0;
    for seed in seeds.0..seeds.1 {
        if cases.len() >= count {
            break;
        }
        match one(dir, seed, &nv, None)? {
            Some(c) => {
                let sample = cases.len() % 10 == 0;
                cases.push(format!("{c}, \"sanitizer_sample\": {sample}}}"));
            }
            None => skipped += 1,
        }
    }
    // Two mutants (seeds after the range): the check must report them.
    let mut found = 0;
    for seed in seeds.1..seeds.1 + 500 {
        if found == 2 {
            break;
        }
        if let Some((_, changed)) = mutant(seed) {
            if let Some(c) = one(dir, seed, &nv, Some(&changed))? {
                cases.push(format!(
                    "{c}, \"mutant\": true, \"sanitizer_sample\": false}}"
                ));
                found += 1;
            }
        }
    }
    let manifest = format!(
        "{{\"generator\": \"rpg\", \"target\": \"sm_90a\", \"seeds\": [{}, {}], \"skipped\": {skipped}, \"cases\": [\n{}\n]}}\n",
        seeds.0,
        seeds.1,
        cases.join(",\n")
    );
    io(std::fs::write(dir.join("manifest.json"), manifest), "write")?;
    Ok(cases.len())
}
