//! Shared test support: fresh random inputs, dtype rounding, error metrics, and a runner that
//! takes an op from the library through the front end and the CPU interpreter.
//!
//! Oracles live in [`oracle`], [`oracle_ops`] and [`oracle_attention`] and are plain f64 loops,
//! independent of the IR.

pub mod bwd_cases;
pub mod filecheck;
pub mod inputs;
pub mod oracle;
pub mod oracle_attention;
pub mod oracle_ops;
pub mod ptxas;
pub mod rpg;
pub mod sched_diff;

pub use ptxas::pinned_ptxas;

use kir_backends::interp::{self, HostArg, HostData, HostTensor};
use kir_ir::Dtype;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Specialization defines as the compile API takes them: `&[("HEAD_DIM", "128")]` to owned
/// name/value pairs.
pub fn defs(d: &[(&str, &str)]) -> Vec<(String, String)> {
    d.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// A small deterministic PRNG (splitmix64) with a normal sampler.
pub struct Rng(u64);

static SEQ: AtomicU64 = AtomicU64::new(0);

impl Rng {
    /// A generator with a fresh seed per call (time-based, or `KIR_TEST_SEED` + a counter),
    /// printed so a failure can be replayed.
    pub fn fresh(what: &str) -> Rng {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let base = std::env::var("KIR_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        let seed = base ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        eprintln!("[{what}] seed {seed} (replay: KIR_TEST_SEED={base})");
        Rng(seed)
    }

    /// A generator with a fixed seed.
    pub fn seeded(seed: u64) -> Rng {
        Rng(seed)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform().max(1e-300);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// Uniform integer in [lo, hi).
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % (hi - lo).max(1) as u64) as usize
    }

    /// `n` normal samples times `scale`, rounded to `dtype` (what the kernel will see).
    pub fn tensor(&mut self, n: usize, scale: f64, dtype: Dtype) -> Vec<f64> {
        (0..n)
            .map(|_| round(dtype, self.normal() * scale))
            .collect()
    }
}

/// Rounds `x` to the nearest value of `dtype` (ties to even), as the IR's storage does.
/// Written independently of the code under test: f64 arithmetic on the binary format's
/// parameters (significand bits, minimum normal exponent, largest finite value).
pub fn round(dtype: Dtype, x: f64) -> f64 {
    let (bits, emin, max) = match dtype {
        Dtype::F32 => return x as f32 as f64,
        Dtype::F16 => (11, -14, 65504.0),
        Dtype::Bf16 => (8, -126, 3.3895313892515355e38),
        Dtype::I32 | Dtype::I64 | Dtype::U8 | Dtype::I1 => return x.round(),
    };
    if !x.is_finite() || x == 0.0 {
        return x;
    }
    // Exponent of x from its bits (x is normal in f64 for every value tests use).
    let e = (((x.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(emin);
    let ulp = 2f64.powi(e - (bits - 1));
    let r = (x / ulp).round_ties_even() * ulp;
    // Overflow: values at or beyond max + ulp/2 round to infinity.
    if r.abs() > max {
        f64::INFINITY.copysign(x)
    } else {
        r
    }
}

/// Parses a dtype name used in test tables.
pub fn dtype(name: &str) -> Dtype {
    Dtype::from_name(name).unwrap_or_else(|| panic!("bad dtype {name}"))
}

/// Tolerances for comparing a kernel output of `dtype` with an f64 oracle:
/// (max relative L2 error ‖out−ref‖/‖ref‖, max elementwise error relative to max|ref|).
/// These are the documented tolerances of docs/testing.md.
pub fn tolerance(dtype: Dtype) -> (f64, f64) {
    match dtype {
        Dtype::F32 => (2e-5, 2e-4),
        Dtype::F16 => (2e-3, 1e-2),
        Dtype::Bf16 => (1.2e-2, 5e-2),
        Dtype::I32 | Dtype::I64 | Dtype::U8 | Dtype::I1 => (0.0, 0.0),
    }
}

/// A column sum (a norm backward's dw or db) element by element against its f64 oracle summed
/// in a fixed order and rounded once to `dtype`: each element may differ from the rounded
/// reference by one unit in the last place of `dtype` (the kernel rounds its f32 sum, not the
/// f64 one) plus `rel` times the sum of the absolute values of the column's terms (`abs_sum`,
/// which bounds the f32 rounding of any summation order). A missing or doubled row group, or a
/// column slice summed twice or never, is off by whole terms and fails.
pub fn compare_column_sums(
    name: &str,
    out: &[f64],
    reference: &[f64],
    abs_sum: &[f64],
    dtype: Dtype,
    rel: f64,
) {
    assert_eq!(out.len(), reference.len(), "{name}: length");
    assert_eq!(abs_sum.len(), reference.len(), "{name}: abs_sum length");
    let bits = match dtype {
        Dtype::F32 => 24,
        Dtype::F16 => 11,
        Dtype::Bf16 => 8,
        other => panic!("{name}: column sums of {other:?}"),
    };
    for (i, ((&o, &r), &a)) in out.iter().zip(reference).zip(abs_sum).enumerate() {
        let want = round(dtype, r);
        let ulp = if want == 0.0 {
            0.0
        } else {
            2f64.powi(want.abs().log2().floor() as i32 - (bits - 1))
        };
        let err = (o - want).abs();
        assert!(
            o.is_finite() && err <= ulp + rel * a,
            "{name}[{i}]: got {o}, expected {want} (f64 {r}), error {err:.3e} > {ulp:.3e} + {rel:e}·{a:.3e}"
        );
    }
}

/// Relative L2 error and max abs error over max|ref|; fails on any non-finite mismatch
/// (a poisoned element that was never written shows up here).
pub fn compare(name: &str, out: &[f64], reference: &[f64], tol: (f64, f64)) {
    check(name, out, reference, None, tol)
}

/// Like [`compare`], but errors are measured against `scale` (the magnitude of the terms the
/// result is computed from) rather than the result itself, for outputs that are a difference of
/// larger terms: ‖out−ref‖/‖scale‖ and max|out−ref| / max|scale|.
pub fn compare_scaled(name: &str, out: &[f64], reference: &[f64], scale: &[f64], tol: (f64, f64)) {
    assert_eq!(scale.len(), reference.len(), "{name}: scale length");
    check(name, out, reference, Some(scale), tol)
}

fn check(name: &str, out: &[f64], reference: &[f64], scale: Option<&[f64]>, tol: (f64, f64)) {
    assert_eq!(
        out.len(),
        reference.len(),
        "{name}: length {} vs reference {}",
        out.len(),
        reference.len()
    );
    let (mut num, mut den, mut max_err, mut max_ref) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for (i, (&o, &r)) in out.iter().zip(reference).enumerate() {
        if !r.is_finite() || !o.is_finite() {
            assert!(
                o == r || (o.is_nan() && r.is_nan()),
                "{name}[{i}]: got {o}, expected {r}"
            );
            continue;
        }
        let s = scale.map_or(r, |s| s[i]);
        num += (o - r) * (o - r);
        den += s * s;
        max_err = max_err.max((o - r).abs());
        max_ref = max_ref.max(s.abs());
    }
    let rel = if den > 0.0 {
        (num / den).sqrt()
    } else {
        num.sqrt()
    };
    let rel_max = if max_ref > 0.0 {
        max_err / max_ref
    } else {
        max_err
    };
    let what = if scale.is_some() {
        "term scale"
    } else {
        "reference"
    };
    assert!(
        rel <= tol.0 && rel_max <= tol.1,
        "{name}: rel L2 error vs {what} {rel:.3e} (tol {:.1e}), max error / max |{what}| {rel_max:.3e} (tol {:.1e})",
        tol.0,
        tol.1
    );
}

/// A tensor argument.
pub fn t(dtype: Dtype, shape: &[usize], data: Vec<f64>) -> HostArg {
    HostArg::Tensor(HostTensor {
        dtype,
        shape: shape.to_vec(),
        data: HostData::F64(data),
    })
}

/// Reading results as f64 in tests: every dtype but i64 comes back as f64 ([`HostData::F64`]).
pub trait F64s {
    /// The f64 elements; panics on i64 data (a test reads that with `as_i64`).
    fn f64s(&self) -> &[f64];
}

impl F64s for HostData {
    fn f64s(&self) -> &[f64] {
        self.as_f64()
            .expect("f64 data (an i64 result is read with `as_i64`)")
    }
}

/// Runs built-in op `name` with `-D` style `defines` on the interpreter (the pipeline's output
/// module, as `kirc run` does) and returns its outputs.
pub fn run_op(
    name: &str,
    defines: &[(&str, &str)],
    args: Vec<(&str, HostArg)>,
) -> BTreeMap<String, HostTensor> {
    let src = kir_compiler::internal::oplib::builtin(name)
        .unwrap_or_else(|| panic!("no built-in op {name}"));
    let defs: Vec<(String, String)> = defines
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let spec = kir_compiler::internal::pipeline::output(src, &defs)
        .unwrap_or_else(|e| panic!("{name} {defines:?}:\n{}", e.render(name, src)));
    let args: BTreeMap<String, HostArg> =
        args.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    interp::run(&spec, &args).unwrap_or_else(|e| panic!("{name} {defines:?}: {e}"))
}

/// Like [`run_op`], but returns an error instead of panicking: front-end errors and runtime
/// errors with a location are rendered against the op's source as `NAME.kir:line:col` with
/// the line and a caret.
pub fn try_op(
    name: &str,
    defines: &[(&str, &str)],
    args: Vec<(&str, HostArg)>,
) -> Result<BTreeMap<String, HostTensor>, String> {
    let src = kir_compiler::internal::oplib::builtin(name)
        .ok_or_else(|| format!("no built-in op {name}"))?;
    let file = format!("{name}.kir");
    let defs: Vec<(String, String)> = defines
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let spec =
        kir_compiler::internal::pipeline::output(src, &defs).map_err(|e| e.render(&file, src))?;
    let args: BTreeMap<String, HostArg> =
        args.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    interp::run(&spec, &args).map_err(|e| match e.span {
        Some(sp) => kir_ir::Diagnostic::new(sp, e.message).render(&file, src),
        None => e.message,
    })
}

/// The sm_90a PTX plan of module `src` with `defs`, made for the tensor `shapes` as `kirc bench
/// --shape` makes it (`CompilePlan::resolve_for`: shapes can choose the configuration).
pub fn sm90a_plan(
    src: &str,
    defs: &[(String, String)],
    shapes: &[(String, Vec<usize>)],
) -> kir_compiler::internal::plan::CompilePlan {
    kir_compiler::internal::plan::CompilePlan::resolve_for(
        src,
        defs,
        kir_backends::Target::Sm90a,
        kir_compiler::internal::compile::Emit::Ptx,
        kir_compiler::internal::plan::Flags::default(),
        shapes,
    )
    .unwrap_or_else(|e| panic!("plan for {defs:?} {shapes:?}: {e}"))
}

/// The built-in `op` compiled to PTX for sm_90a with `d` defined, warp-specialized or not
/// (`--warp-specialize on|off`); panics naming the defines on any error.
pub fn sm90a_op(
    op: &str,
    d: &[(&str, &str)],
    ws: bool,
) -> kir_compiler::internal::compiled::Compiled {
    let src = kir_compiler::internal::oplib::builtin(op).unwrap_or_else(|| panic!("no op {op}"));
    let flags = kir_compiler::internal::plan::Flags {
        warp_specialize: Some(ws),
        ..kir_compiler::internal::plan::Flags::default()
    };
    let plan = kir_compiler::internal::plan::CompilePlan::resolve(
        src,
        &defs(d),
        kir_backends::Target::Sm90a,
        kir_compiler::internal::compile::Emit::Ptx,
        flags,
    )
    .unwrap_or_else(|e| panic!("{op} {d:?}: {e}"));
    kir_compiler::internal::pipeline::compile(src, &plan)
        .unwrap_or_else(|e| panic!("{op} {d:?}: {e}"))
}

/// Kernel `kernel`'s PTX within module text `ptx`: from its `.entry` to the end of its body.
pub fn entry_body<'p>(ptx: &'p str, kernel: &str) -> &'p str {
    let at = ptx
        .find(&format!(".entry {kernel}"))
        .unwrap_or_else(|| panic!("no entry {kernel}"));
    let end = ptx[at..]
        .find("\n}\n")
        .map(|e| at + e)
        .unwrap_or_else(|| panic!("no end of {kernel}"));
    &ptx[at..end]
}

/// Every `.kir` file in the repository (op library, test inputs, error cases, fusion programs),
/// sorted.
pub fn kir_files() -> Vec<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = Vec::new();
    for dir in [
        "compiler/ops",
        "tests/in",
        "tests/in/errors",
        "tests/in/fusion",
        "tests/in/sched",
    ] {
        if let Ok(rd) = std::fs::read_dir(root.join(dir)) {
            for e in rd.flatten() {
                let p = e.path();
                if p.extension().is_some_and(|x| x == "kir") {
                    out.push(p);
                }
            }
        }
    }
    out.sort();
    out
}

/// The file name without extension.
pub fn stem(p: &std::path::Path) -> String {
    p.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}
