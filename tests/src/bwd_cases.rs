//! Shared pieces of the attention_bwd tests that run a program on the interpreter: the inputs of
//! a case (fresh q, k, v and do, and the forward's o and lse from the f64 oracle, rounded as the
//! forward kernel stores them), a tensor argument's data, and the check of dq, dk and dv against
//! the oracle's analytic gradients (`oracle_attention::Grads`).

use crate::oracle_attention::{self as oracle, Problem};
use crate::{compare, compare_scaled, round, t, F64s, Rng};
use kir_backends::interp::{HostArg, HostTensor};
use kir_ir::Dtype;
use std::collections::BTreeMap;

/// Inputs of one backward case for `p` in dtype `dty` at magnitude `mag`.
pub fn inputs(p: &Problem, dty: Dtype, mag: f64, rng: &mut Rng) -> BTreeMap<String, HostArg> {
    let (nq, nk) = (p.b * p.hq * p.sq * p.d, p.b * p.hkv * p.cap * p.d);
    let (q, k, v) = (
        rng.tensor(nq, mag, dty),
        rng.tensor(nk, mag, dty),
        rng.tensor(nk, mag, dty),
    );
    let d_o = rng.tensor(nq, mag, dty);
    args(p, dty, q, k, v, d_o)
}

/// The arguments of a backward case from its q, k, v and do: those, the scale, and the forward's
/// o (rounded to `dty`) and lse (rounded to f32) from the f64 oracle.
pub fn args(
    p: &Problem,
    dty: Dtype,
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    d_o: Vec<f64>,
) -> BTreeMap<String, HostArg> {
    let (o, lse) = oracle::attention_fwd(p, &q, &k, &v);
    let o = o.iter().map(|&x| round(dty, x)).collect();
    let lse = lse.iter().map(|&x| round(Dtype::F32, x)).collect();
    let (qs, ks) = ([p.b, p.hq, p.sq, p.d], [p.b, p.hkv, p.cap, p.d]);
    let mut args = BTreeMap::new();
    args.insert("q".to_string(), t(dty, &qs, q));
    args.insert("k".to_string(), t(dty, &ks, k));
    args.insert("v".to_string(), t(dty, &ks, v));
    args.insert("o".to_string(), t(dty, &qs, o));
    args.insert("do".to_string(), t(dty, &qs, d_o));
    args.insert("lse".to_string(), t(Dtype::F32, &[p.b, p.hq, p.sq], lse));
    args.insert("scale".to_string(), HostArg::Scalar(p.scale));
    args
}

/// The data of tensor argument `name`.
pub fn data<'a>(args: &'a BTreeMap<String, HostArg>, name: &str) -> &'a [f64] {
    match &args[name] {
        HostArg::Tensor(x) => x.data.f64s(),
        HostArg::Scalar(_) | HostArg::Int(_) => panic!("`{name}` is a scalar"),
    }
}

/// Compares dq, dk and dv of a run with the oracle's gradients at tolerance `tol`: dq and dk
/// against the size of the terms they are computed from, dv as is.
pub fn check(out: &BTreeMap<String, HostTensor>, g: &oracle::Grads, tol: (f64, f64), name: &str) {
    for (key, r, terms) in [("dq", &g.dq, &g.dq_terms), ("dk", &g.dk, &g.dk_terms)] {
        let what = format!("{name}: {key}");
        compare_scaled(&what, out[key].data.f64s(), r, terms, tol);
    }
    compare(&format!("{name}: dv"), out["dv"].data.f64s(), &g.dv, tol);
}
