//! The interpreter check of every candidate: the small ragged inputs (the timed shapes with
//! each large dim shrunk, random values of magnitude in [1, 2) with random signs, one seed
//! for the GPU and the interpreter), the scalar params, and the comparison of a candidate's
//! outputs with the interpreter's within the dtype's tolerance.

use super::types::{Shapes, TuneError};
use kir_backends::interp::{HostArg, HostData, HostTensor};
use kir_ir::{Access, Dtype, EvalVal, ExprKind, Module, ParamKind};
use std::collections::BTreeMap;

/// The most elements one tensor of the interpreter check may have (`--check-shape`).
pub const MAX_CHECK_ELEMENTS: usize = 1 << 24;

/// Dims up to this size are kept in the check; larger ones are shrunk ([`shrink`]).
pub const SMALL_DIM: usize = 160;

/// A dim of the check: `v` itself up to [`SMALL_DIM`], else `SMALL_DIM + v % 32` (160 to
/// 191). Equal dims stay equal, and `v mod 32` is kept, so divisibility by up to 32 that a
/// `requires` asks of the timed shapes holds for the check too; 160 = 5 · 32 leaves a partial
/// tile for tiles of 64 and more.
pub fn shrink(v: usize) -> usize {
    if v <= SMALL_DIM {
        v
    } else {
        SMALL_DIM + v % 32
    }
}

/// The relative L2 error allowed for an output of `dtype`: twice the dtype tolerance of
/// docs/testing.md (the GPU sums in another order than the interpreter); integers exact.
pub fn tolerance(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::F32 => 4e-5,
        Dtype::F16 => 4e-3,
        Dtype::Bf16 => 2.4e-2,
        Dtype::I32 | Dtype::I64 | Dtype::U8 | Dtype::I1 => 0.0,
    }
}

/// The entry's tensor params that take an argument (`in`/`inout`), with their element types.
fn inputs(m: &Module) -> Vec<(&str, Dtype, &[kir_ir::Expr])> {
    let mut v = Vec::new();
    for p in m.entry_params().unwrap_or(&[]) {
        if let ParamKind::Tensor(access, tt) = &p.kind {
            if *access != Access::Out {
                let dtype = tt.elem.known().unwrap_or(Dtype::F32);
                v.push((p.name.as_str(), dtype, &tt.dims[..]));
            }
        }
    }
    v
}

/// Checks that `shapes` names exactly the entry's input tensors of `m` (each once, with its
/// rank).
pub fn check_shapes_fit(m: &Module, shapes: &Shapes, what: &str) -> Result<(), TuneError> {
    let ins = inputs(m);
    for (i, (name, shape)) in shapes.iter().enumerate() {
        if shapes[..i].iter().any(|(n, _)| n == name) {
            return Err(TuneError::Input(format!("{what} {name} is given twice")));
        }
        let elements = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        if what == "--check-shape" && elements.is_none_or(|n| n > MAX_CHECK_ELEMENTS) {
            return Err(TuneError::Input(format!(
                "{what} {name}: more than {MAX_CHECK_ELEMENTS} elements, too many for the \
                 interpreter check"
            )));
        }
        match ins.iter().find(|(n, _, _)| n == name) {
            Some((_, _, dims)) if dims.len() != shape.len() => {
                return Err(TuneError::Input(format!(
                    "{what} {name}: the tensor has {} dims, the shape {}",
                    dims.len(),
                    shape.len()
                )))
            }
            Some(_) => {}
            None => {
                let names: Vec<&str> = ins.iter().map(|(n, _, _)| *n).collect();
                return Err(TuneError::Input(format!(
                    "{what} {name}: the entry has no input tensor `{name}` (its inputs: {})",
                    names.join(", ")
                )));
            }
        }
    }
    let missing: Vec<&str> = ins
        .iter()
        .map(|(n, _, _)| *n)
        .filter(|n| !shapes.iter().any(|(s, _)| s == n))
        .collect();
    if !missing.is_empty() {
        return Err(TuneError::Input(format!(
            "no {what} for the input tensor(s) {}: give one --shape NAME=AxB… per input",
            missing.join(", ")
        )));
    }
    Ok(())
}

/// The check's shapes: each dim the entry names plainly (`x: in tensor<…>[R, N]`) takes the
/// timed size shrunk; every other dim is its expression over those (`2 * KH`), or the timed
/// size shrunk where the expression cannot be evaluated.
pub fn small_shapes(m: &Module, shapes: &Shapes) -> Vec<(String, Vec<usize>)> {
    let ins = inputs(m);
    let mut dims: BTreeMap<&str, usize> = BTreeMap::new();
    for (name, shape) in shapes {
        if let Some((_, _, exprs)) = ins.iter().find(|(n, _, _)| n == name) {
            for (e, &v) in exprs.iter().zip(shape) {
                if let ExprKind::Ident(d) = &e.kind {
                    dims.entry(d.as_str()).or_insert(shrink(v));
                }
            }
        }
    }
    let lookup = |n: &str| dims.get(n).map(|&v| EvalVal::Int(v as i64));
    shapes
        .iter()
        .map(|(name, shape)| {
            let exprs = ins
                .iter()
                .find(|(n, _, _)| n == name)
                .map_or(&[][..], |(_, _, e)| *e);
            let small = shape
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    exprs
                        .get(i)
                        .and_then(|e| e.eval_int(&lookup).ok())
                        .and_then(|x| usize::try_from(x).ok())
                        .unwrap_or(shrink(v))
                })
                .collect();
            (name.clone(), small)
        })
        .collect()
}

/// SplitMix64: a small deterministic generator for the check's inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The scalar params of the entry: the user's value, else 0.5 for floats and 1 for integers.
pub fn scalars(
    m: &Module,
    given: &[(String, f64)],
) -> Result<BTreeMap<String, HostArg>, TuneError> {
    let params = m.entry_params().unwrap_or(&[]);
    let mut out = BTreeMap::new();
    for (name, _) in given {
        if !params
            .iter()
            .any(|p| p.name == *name && matches!(p.kind, ParamKind::Scalar(_)))
        {
            return Err(TuneError::Input(format!(
                "--arg {name}: the entry has no scalar param `{name}`"
            )));
        }
    }
    for p in params {
        if let ParamKind::Scalar(elem) = &p.kind {
            let float = elem.known().is_none_or(Dtype::is_float);
            let v = given
                .iter()
                .rev()
                .find(|(n, _)| *n == p.name)
                .map_or(if float { 0.5 } else { 1.0 }, |(_, v)| *v);
            out.insert(p.name.clone(), HostArg::Scalar(v));
        }
    }
    Ok(out)
}

/// The check's arguments: random input tensors of `shapes` (floats of magnitude in [1, 2)
/// with random signs, u8 any byte, other integers 0 or 1) and the scalars.
pub fn random_args(
    m: &Module,
    shapes: &Shapes,
    scalars: &BTreeMap<String, HostArg>,
    seed: u64,
) -> BTreeMap<String, HostArg> {
    let mut rng = Rng(seed);
    let mut out = scalars.clone();
    for (name, dtype, _) in inputs(m) {
        let Some((_, shape)) = shapes.iter().find(|(n, _)| n == name) else {
            continue;
        };
        let n: usize = shape.iter().product();
        let data: Vec<f64> = (0..n)
            .map(|_| match dtype {
                Dtype::F32 | Dtype::F16 | Dtype::Bf16 => {
                    let mag = 1.0 + rng.unit();
                    if rng.next() & 1 == 1 {
                        -mag
                    } else {
                        mag
                    }
                }
                Dtype::U8 => (rng.next() & 0xFF) as f64,
                Dtype::I32 | Dtype::I64 | Dtype::I1 => (rng.next() & 1) as f64,
            })
            .collect();
        let t = HostTensor {
            dtype,
            shape: shape.clone(),
            data: HostData::F64(data),
        };
        out.insert(name.to_string(), HostArg::Tensor(t));
    }
    out
}

/// Compares a candidate's outputs with the interpreter's: the same tensors and shapes, the
/// same non-finite elements, and a relative L2 error within [`tolerance`] of each output's
/// dtype. The error names the output and the error found.
pub fn compare(
    got: &BTreeMap<String, HostTensor>,
    want: &BTreeMap<String, HostTensor>,
) -> Result<(), String> {
    for (name, w) in want {
        let Some(g) = got.get(name) else {
            return Err(format!("output `{name}` is missing"));
        };
        if g.shape != w.shape {
            return Err(format!(
                "output `{name}` has shape {:?}, the interpreter's {:?}",
                g.shape, w.shape
            ));
        }
        let (gv, wv) = (values(&g.data), values(&w.data));
        let (mut d, mut n) = (0.0f64, 0.0f64);
        for (i, (&a, &b)) in gv.iter().zip(&wv).enumerate() {
            if a.is_finite() != b.is_finite() {
                return Err(format!(
                    "output `{name}`[{i}] is {a}, the interpreter's {b}"
                ));
            }
            if b.is_finite() {
                d += (a - b) * (a - b);
                n += b * b;
            }
        }
        let rel = if n > 0.0 { (d / n).sqrt() } else { d.sqrt() };
        let tol = tolerance(w.dtype);
        if rel > tol || rel.is_nan() {
            return Err(format!(
                "output `{name}` differs from the interpreter's: relative L2 error {rel:.3e} > \
                 {tol:.1e} ({})",
                w.dtype.name()
            ));
        }
    }
    Ok(())
}

/// The elements as f64 (i64 data converted; the comparison is of magnitudes).
fn values(d: &HostData) -> Vec<f64> {
    match d {
        HostData::F64(v) => v.clone(),
        HostData::I64(v) => v.iter().map(|&x| x as f64).collect(),
    }
}
