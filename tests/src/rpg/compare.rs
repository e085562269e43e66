//! Comparing a stage's outputs with the expected ones: bit for bit (NaNs equal whatever their
//! payload), or within an output's [`Bound`]: a relative error with a subnormal slack, a NaN only
//! against a NaN, an infinity only against a finite value at the dtype's overflow threshold, and
//! ±0 equal where the bound allows a zero's sign to differ. i64 data must be equal.

use super::bounds::Bound;
use super::outcome::{fail, Failure, Stats};
use kir_backends::interp::{HostData, HostTensor};
use std::collections::BTreeMap;

/// True when `a` (from the stage) matches `e` (expected) under `b` (see the module doc).
pub fn close(a: f64, e: f64, b: Bound, dt: kir_ir::Dtype) -> bool {
    if a.to_bits() == e.to_bits() || (a.is_nan() && e.is_nan()) {
        return true;
    }
    if a == 0.0 && e == 0.0 {
        return b.zero_sign;
    }
    if b.rel == 0.0 || b.is_unbounded() || a.is_nan() || e.is_nan() {
        return b.is_unbounded();
    }
    let max = match dt {
        kir_ir::Dtype::F16 => 65504.0,
        kir_ir::Dtype::Bf16 => 3.3895313892515355e38,
        _ => f32::MAX as f64,
    };
    if a.is_infinite() || e.is_infinite() {
        // Explained only at the overflow threshold: the finite side is within the bound of it.
        let (inf, fin) = if a.is_infinite() { (a, e) } else { (e, a) };
        return fin.is_finite() && fin.signum() == inf.signum() && fin.abs() * (1.0 + b.rel) >= max;
    }
    let tiny = 2f64.powi(-126);
    (a - e).abs() <= b.rel * a.abs().max(e.abs()) + b.rel * tiny
}

/// The first element where `got` and `want` differ beyond `b` (index, got, expected as text).
/// i64 data (held exactly) must be equal.
pub fn first_difference(
    got: &HostData,
    want: &HostData,
    b: Bound,
    dt: kir_ir::Dtype,
) -> Option<(usize, String, String)> {
    match (got, want) {
        (HostData::F64(g), HostData::F64(w)) => g
            .iter()
            .zip(w)
            .position(|(&x, &y)| !close(x, y, b, dt))
            .map(|i| (i, format!("{:e}", g[i]), format!("{:e}", w[i]))),
        (HostData::I64(g), HostData::I64(w)) => g
            .iter()
            .zip(w)
            .position(|(x, y)| x != y)
            .map(|i| (i, g[i].to_string(), w[i].to_string())),
        _ => Some((
            0,
            "data held as another kind".into(),
            "the reference's".into(),
        )),
    }
}

/// Compares every output of `got` with `want`; `bounds` per output (exact when absent).
/// Counts compared elements in `stats` under `what`.
pub fn compare(
    stage: &str,
    got: &BTreeMap<String, HostTensor>,
    want: &BTreeMap<String, HostTensor>,
    bounds: Option<&BTreeMap<String, Bound>>,
    stats: &mut Stats,
) -> Result<(), Failure> {
    for (name, w) in want {
        let Some(g) = got.get(name) else {
            return Err(fail(stage, format!("output `{name}` is missing")));
        };
        if g.shape != w.shape {
            return Err(fail(
                stage,
                format!(
                    "output `{name}` has shape {:?}, expected {:?}",
                    g.shape, w.shape
                ),
            ));
        }
        let b = bounds
            .and_then(|m| m.get(name))
            .copied()
            .unwrap_or(Bound::EXACT);
        let kind = if b.is_exact() {
            "exact"
        } else if b.is_unbounded() {
            "unchecked"
        } else {
            "bounded"
        };
        let class = stage.split(' ').next().unwrap_or(stage);
        stats.add(format!("{class} outputs {kind}"), 1);
        if b.is_unbounded() {
            continue;
        }
        if let Some((i, x, y)) = first_difference(&g.data, &w.data, b, w.dtype) {
            return Err(fail(
                stage,
                format!(
                    "output `{name}` [{i}] of {:?} {}: got {x}, expected {y} (bound: relative {:e}{})",
                    w.shape,
                    w.dtype.name(),
                    b.rel,
                    if b.zero_sign { ", ±0" } else { "" }
                ),
            ));
        }
    }
    Ok(())
}
