//! Random entry arguments for any specialized module: dims that `requires` constrain get fixed
//! sizes, every other dim a random size in [5, 70) (so most are ragged against any tile), floats
//! a random normal tensor of the given magnitude, integers small positive values, and scalar
//! params values that keep every op-library kernel in its domain.

use crate::Rng;
use kir_backends::interp::HostArg;
use kir_ir::{Dtype, EvalVal, ExprKind, Module, ParamKind};
use std::collections::BTreeMap;

/// Fixed sizes for dims that `requires` constrain; every other dim is random in [5, 70).
pub fn fixed_dim(name: &str) -> Option<i64> {
    Some(match name {
        "B" | "Bt" => 2,
        "Hq" => 4,
        "Hkv" => 2,
        "P" => 1,
        "KH" => 32,
        _ => return None,
    })
}

/// The shape of tensor param type `t` with its dims bound by `dims` (panics on an unbound dim:
/// test inputs bind every dim first).
pub fn shape_of(t: &kir_ir::TensorType, dims: &BTreeMap<String, i64>) -> Vec<usize> {
    t.dims
        .iter()
        .map(|d| {
            d.eval_int(&|n| dims.get(n).map(|&v| EvalVal::Int(v)))
                .expect("dim") as usize
        })
        .collect()
}

/// Random arguments for the entry of a specialized module (see the module doc).
pub fn inputs(m: &Module, mag: f64, rng: &mut Rng) -> BTreeMap<String, HostArg> {
    let params = m.entry_params().expect("entry");
    let mut dims: BTreeMap<String, i64> = BTreeMap::new();
    for p in params {
        if let ParamKind::Tensor(_, t) = &p.kind {
            for d in &t.dims {
                if let ExprKind::Ident(n) = &d.kind {
                    let v = fixed_dim(n).unwrap_or_else(|| rng.range(5, 70) as i64);
                    dims.entry(n.clone()).or_insert(v);
                }
            }
        }
    }
    let mut args = BTreeMap::new();
    for p in params {
        match &p.kind {
            ParamKind::Tensor(acc, t) if !matches!(acc, kir_ir::Access::Out) => {
                let shape = shape_of(t, &dims);
                let n: usize = shape.iter().product();
                let dtype = t.elem.known().expect("dtype");
                let data = match dtype {
                    Dtype::I32 | Dtype::I64 => (0..n).map(|_| rng.range(1, 9) as f64).collect(),
                    Dtype::U8 => (0..n).map(|_| rng.range(0, 256) as f64).collect(),
                    Dtype::I1 => (0..n).map(|_| rng.range(0, 2) as f64).collect(),
                    _ => rng.tensor(n, mag, dtype),
                };
                args.insert(p.name.clone(), crate::t(dtype, &shape, data));
            }
            ParamKind::Tensor(..) => {}
            ParamKind::Scalar(e) => {
                let v = match (p.name.as_str(), e.known()) {
                    ("eps", _) => 1e-5,
                    ("scale", _) => 0.125,
                    ("window", _) => 7.0,
                    ("softcap", _) => 5.0,
                    (_, Some(d)) if d.is_float() => 0.75,
                    _ => 3.0,
                };
                args.insert(p.name.clone(), HostArg::Scalar(v));
            }
        }
    }
    args
}
