//! Inputs for any specialized module, derived from a seed and the names in the module only:
//! each dim's size and each argument's data come from their own stream (seed, name), so a
//! reduced program that lost a param still gets the same values for the others.
//!
//! Dims are ragged against every tile most of the time (1–100, sometimes a multiple of 16 or
//! 64, rarely 0; `D`, a head dim, 1–16). Floats mix normal values at scales 1, 8 and 100 with, per tensor, a density of
//! specials (NaN, ±inf, ±0, values near f16's largest; none for tensors named `fin_*`); integers mix small values with the
//! dtype's extremes. Every float is rounded to the param's dtype by the interpreter. Semaphore
//! counters (tensors named `sem*`, see `ordered`) start at zero: a count of signals given.

use super::gen::mix;
use crate::Rng;
use kir_backends::interp::{HostArg, HostData, HostTensor};
use kir_ir::{Dtype, EvalVal, ExprKind, Module, ParamKind};
use std::collections::BTreeMap;

fn stream(seed: u64, name: &str) -> Rng {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    Rng::seeded(mix(seed, h))
}

/// The size of dim `name` for `seed`.
pub fn dim_size(seed: u64, name: &str) -> usize {
    let mut r = stream(seed, &format!("dim {name}"));
    if name == "D" {
        // A head dim: one tile wide (attention-shaped kernels require D ≤ 16).
        return r.range(1, 17);
    }
    match r.range(0, 40) {
        0 => 0,
        1..=4 => 16 * r.range(1, 5),
        5..=6 => 64 * r.range(1, 3),
        7..=12 => r.range(1, 8),
        _ => r.range(1, 101),
    }
}

/// Whether the tensor param `name` is a semaphore counter (see `ordered`): its input is zeros.
pub fn is_counter(name: &str) -> bool {
    name.starts_with("sem")
}

/// `n` values of dtype `d` for the argument `name` (i64 held exactly, extremes included; zeros
/// for a semaphore counter).
pub fn data(seed: u64, name: &str, d: Dtype, n: usize) -> HostData {
    if is_counter(name) {
        return HostData::F64(vec![0.0; n]);
    }
    if d == Dtype::I64 {
        let mut r = stream(seed, &format!("data {name}"));
        let special = [0.0, 0.0, 0.002, 0.03][r.range(0, 4)];
        return HostData::I64(
            (0..n)
                .map(|_| {
                    if r.uniform() < special {
                        [i64::MAX, i64::MIN, 1 << 53, (1 << 53) + 1, -1][r.range(0, 5)]
                    } else if r.range(0, 4) == 0 {
                        r.range(0, 20001) as i64 - 10000
                    } else {
                        r.range(0, 41) as i64 - 20
                    }
                })
                .collect(),
        );
    }
    HostData::F64(data_f64(seed, name, d, n))
}

fn data_f64(seed: u64, name: &str, d: Dtype, n: usize) -> Vec<f64> {
    let mut r = stream(seed, &format!("data {name}"));
    let scale = [1.0, 1.0, 8.0, 100.0][r.range(0, 4)];
    // Tensors named `fin_*` hold finite values only (see `attention`).
    let special = if name.starts_with("fin_") {
        0.0
    } else {
        [0.0, 0.0, 0.0, 0.002, 0.03][r.range(0, 5)]
    };
    (0..n)
        .map(|_| match d {
            Dtype::I1 => r.range(0, 2) as f64,
            Dtype::U8 => match r.range(0, 10) {
                0 => 255.0,
                1 => 0.0,
                _ => r.range(0, 256) as f64,
            },
            Dtype::I32 => {
                if r.uniform() < special {
                    let big = if d == Dtype::I32 {
                        2147483647.0
                    } else {
                        4.5e15
                    };
                    [big, -big - 1.0, 65536.0, -1.0][r.range(0, 4)]
                } else if r.range(0, 4) == 0 {
                    (r.range(0, 20001) as f64) - 10000.0
                } else {
                    (r.range(0, 41) as f64) - 20.0
                }
            }
            _ => {
                if r.uniform() < special {
                    [
                        f64::NAN,
                        f64::INFINITY,
                        f64::NEG_INFINITY,
                        0.0,
                        -0.0,
                        65504.0,
                        -6.0e4,
                    ][r.range(0, 7)]
                } else {
                    let x = (r.normal() * scale).clamp(-1e4, 1e4);
                    crate::round(d, x)
                }
            }
        })
        .collect()
}

/// The value of scalar param `name` of dtype `d`.
pub fn scalar(seed: u64, name: &str, d: Dtype) -> f64 {
    let mut r = stream(seed, &format!("scalar {name}"));
    if d.is_float() {
        [0.5, -1.25, 3.0, 0.0, 1.0e3, f64::INFINITY, f64::NAN, 0.1][r.range(0, 8)]
    } else if d == Dtype::I1 {
        r.range(0, 2) as f64
    } else {
        (r.range(0, 21) as f64) - 10.0
    }
}

/// Arguments for the entry of the specialized module `m` under `seed`: every `in`/`inout`
/// tensor and scalar param. Dims that are not plain names are evaluated from the named ones.
pub fn args(m: &Module, seed: u64) -> Result<BTreeMap<String, HostArg>, String> {
    let params = m.entry_params().ok_or("the module has no entry")?;
    let mut dims: BTreeMap<String, i64> = BTreeMap::new();
    for p in params {
        if let ParamKind::Tensor(_, t) = &p.kind {
            for d in &t.dims {
                if let ExprKind::Ident(n) = &d.kind {
                    dims.entry(n.clone())
                        .or_insert_with(|| dim_size(seed, n) as i64);
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    for p in params {
        match &p.kind {
            ParamKind::Tensor(acc, t) if !matches!(acc, kir_ir::Access::Out) => {
                let mut shape = vec![];
                for d in &t.dims {
                    let v = d
                        .eval_int(&|n| dims.get(n).map(|&v| EvalVal::Int(v)))
                        .map_err(|e| format!("dim of `{}`: {e:?}", p.name))?;
                    shape.push(v.max(0) as usize);
                }
                let dt = t.elem.known().ok_or("unspecialized dtype")?;
                let n: usize = shape.iter().product();
                let values = data(seed, &p.name, dt, n);
                out.insert(
                    p.name.clone(),
                    HostArg::Tensor(HostTensor {
                        dtype: dt,
                        shape,
                        data: values,
                    }),
                );
            }
            ParamKind::Tensor(..) => {}
            ParamKind::Scalar(e) => {
                let dt = e.known().ok_or("unspecialized dtype")?;
                out.insert(p.name.clone(), HostArg::Scalar(scalar(seed, &p.name, dt)));
            }
        }
    }
    Ok(out)
}
