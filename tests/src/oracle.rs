//! Independent f64 reference implementations (plain loops; no IR, no interpreter).

/// Attention problem description (row-major [B, H, S, D] tensors).
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    pub b: usize,
    pub hq: usize,
    pub hkv: usize,
    pub sq: usize,
    pub sk: usize,
    pub d: usize,
}

/// softmax(scale·q kᵀ) v and the natural-log lse per row; GQA head h reads kv head h/(hq/hkv);
/// causal is bottom-right aligned (key j visible to query i iff j ≤ i + sk − sq); a row with no
/// visible key gets o = 0 and lse = −inf.
pub fn attention(
    s: AttnShape,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    scale: f64,
    causal: bool,
) -> (Vec<f64>, Vec<f64>) {
    let AttnShape {
        b,
        hq,
        hkv,
        sq,
        sk,
        d,
    } = s;
    let group = hq / hkv;
    let mut o = vec![0.0; b * hq * sq * d];
    let mut lse = vec![f64::NEG_INFINITY; b * hq * sq];
    let mut scores = vec![0.0; sk];
    for bi in 0..b {
        for h in 0..hq {
            let hk = h / group;
            for i in 0..sq {
                let qrow = &q[((bi * hq + h) * sq + i) * d..][..d];
                let mut n_vis = 0;
                for j in 0..sk {
                    if causal && (j as i64) > i as i64 + sk as i64 - sq as i64 {
                        break;
                    }
                    let krow = &k[((bi * hkv + hk) * sk + j) * d..][..d];
                    scores[j] = scale * qrow.iter().zip(krow).map(|(a, b)| a * b).sum::<f64>();
                    n_vis = j + 1;
                }
                if n_vis == 0 {
                    continue;
                }
                let m = scores[..n_vis]
                    .iter()
                    .cloned()
                    .fold(f64::NEG_INFINITY, f64::max);
                let mut l = 0.0;
                let orow = &mut o[((bi * hq + h) * sq + i) * d..][..d];
                for j in 0..n_vis {
                    let p = (scores[j] - m).exp();
                    l += p;
                    let vrow = &v[((bi * hkv + hk) * sk + j) * d..][..d];
                    for (acc, vv) in orow.iter_mut().zip(vrow) {
                        *acc += p * vv;
                    }
                }
                orow.iter_mut().for_each(|x| *x /= l);
                lse[(bi * hq + h) * sq + i] = m + l.ln();
            }
        }
    }
    (o, lse)
}

/// RMSNorm forward over rows of length n: (y, rstd).
pub fn rmsnorm_fwd(x: &[f64], w: &[f64], rows: usize, n: usize, eps: f64) -> (Vec<f64>, Vec<f64>) {
    let mut y = vec![0.0; rows * n];
    let mut rstd = vec![0.0; rows];
    for r in 0..rows {
        let xr = &x[r * n..][..n];
        let ms = xr.iter().map(|v| v * v).sum::<f64>() / n as f64;
        let rs = 1.0 / (ms + eps).sqrt();
        rstd[r] = rs;
        for j in 0..n {
            y[r * n + j] = xr[j] * rs * w[j];
        }
    }
    (y, rstd)
}

/// RMSNorm backward: (dx, dw, dx_scale) for y = x·rstd·w. `dx_scale` is |rstd·w·dy| +
/// |rstd³·x·mean(x·w·dy)| per element: the size of the two terms whose difference is dx, which
/// bounds the rounding error of any finite-precision evaluation (dx itself can cancel to ~0).
pub fn rmsnorm_bwd(
    x: &[f64],
    w: &[f64],
    dy: &[f64],
    rows: usize,
    n: usize,
    eps: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut dx = vec![0.0; rows * n];
    let mut dx_scale = vec![0.0; rows * n];
    let mut dw = vec![0.0; n];
    for r in 0..rows {
        let xr = &x[r * n..][..n];
        let dyr = &dy[r * n..][..n];
        let ms = xr.iter().map(|v| v * v).sum::<f64>() / n as f64;
        let rs = 1.0 / (ms + eps).sqrt();
        let c = (0..n).map(|j| xr[j] * w[j] * dyr[j]).sum::<f64>() / n as f64;
        for j in 0..n {
            let (t1, t2) = (rs * w[j] * dyr[j], rs * rs * rs * xr[j] * c);
            dx[r * n + j] = t1 - t2;
            dx_scale[r * n + j] = t1.abs() + t2.abs();
            dw[j] += dyr[j] * xr[j] * rs;
        }
    }
    (dx, dw, dx_scale)
}

/// Epilogue of the gemm oracle.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Epilogue {
    None,
    Bias,
    Silu,
    Swiglu,
}

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// Batched c[bt] = epilogue(alpha · a[bt] · b[bt]); `b` (and `b2`) are [bt, k, n], or
/// [bt, n, k] when `trans_b`.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    a: &[f64],
    b: &[f64],
    b2: Option<&[f64]>,
    bias: Option<&[f64]>,
    dims: (usize, usize, usize, usize),
    trans_b: bool,
    alpha: f64,
    epi: Epilogue,
) -> Vec<f64> {
    let (bt, m, k, n) = dims;
    let bidx = |t: usize, kk: usize, j: usize| {
        if trans_b {
            (t * n + j) * k + kk
        } else {
            (t * k + kk) * n + j
        }
    };
    let mut c = vec![0.0; bt * m * n];
    for t in 0..bt {
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0.0;
                let mut acc2 = 0.0;
                for kk in 0..k {
                    let av = a[(t * m + i) * k + kk];
                    acc += av * b[bidx(t, kk, j)];
                    if let Some(b2) = b2 {
                        acc2 += av * b2[bidx(t, kk, j)];
                    }
                }
                let x = alpha * acc;
                c[(t * m + i) * n + j] = match epi {
                    Epilogue::None => x,
                    Epilogue::Bias => x + bias.map_or(0.0, |bb| bb[j]),
                    Epilogue::Silu => silu(x),
                    Epilogue::Swiglu => silu(x) * alpha * acc2,
                };
            }
        }
    }
    c
}
