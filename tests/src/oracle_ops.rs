//! Independent f64 references for the normalization, GEMM and NF4 ops of the library
//! (layernorm_fwd, layernorm_bwd, gemm with all its features, swiglu, gemm_nf4), and the error
//! function with the exact GELU built on it.
//!
//! Plain loops over the inputs, written from the ops' formulas; they never call the IR, the
//! interpreter or the op table. The NF4 codebook is copied from docs/ir.md (QLoRA's values)
//! and the bf16 truncation is computed from the format's parameters.

/// LayerNorm forward over rows of length `n`: (y, mean, rstd) with the biased variance.
pub fn layernorm_fwd(
    x: &[f64],
    w: &[f64],
    b: &[f64],
    rows: usize,
    n: usize,
    eps: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut y = vec![0.0; rows * n];
    let (mut mean, mut rstd) = (vec![0.0; rows], vec![0.0; rows]);
    for r in 0..rows {
        let xr = &x[r * n..][..n];
        let mu = xr.iter().sum::<f64>() / n as f64;
        let var = xr.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / n as f64;
        let rs = 1.0 / (var + eps).sqrt();
        mean[r] = mu;
        rstd[r] = rs;
        for j in 0..n {
            y[r * n + j] = (xr[j] - mu) * rs * w[j] + b[j];
        }
    }
    (y, mean, rstd)
}

/// Gradients of LayerNorm backward, with the size of the terms `dx` is computed from.
pub struct LayerNormGrads {
    /// dL/dx, [rows, n].
    pub dx: Vec<f64>,
    /// dL/dw, [n].
    pub dw: Vec<f64>,
    /// dL/db, [n].
    pub db: Vec<f64>,
    /// rstd·(|g| + |mean(g)| + |x̂·mean(g·x̂)|) per element: dx is a difference of these terms
    /// and can cancel to ~0, so its error is measured against them (`compare_scaled`).
    pub dx_scale: Vec<f64>,
}

/// LayerNorm backward for y = (x − mean)·rstd·w + b, using the given per-row `mean` and `rstd`
/// (as the forward saved them): x̂ = (x − mean)·rstd, g = w·dy,
/// dx = rstd·(g − mean(g) − x̂·mean(g·x̂)), dw = Σ_rows dy·x̂, db = Σ_rows dy.
pub fn layernorm_bwd(
    x: &[f64],
    w: &[f64],
    dy: &[f64],
    mean: &[f64],
    rstd: &[f64],
    rows: usize,
    n: usize,
) -> LayerNormGrads {
    let mut o = LayerNormGrads {
        dx: vec![0.0; rows * n],
        dw: vec![0.0; n],
        db: vec![0.0; n],
        dx_scale: vec![0.0; rows * n],
    };
    for r in 0..rows {
        let (mu, rs) = (mean[r], rstd[r]);
        let xhat: Vec<f64> = (0..n).map(|j| (x[r * n + j] - mu) * rs).collect();
        let g: Vec<f64> = (0..n).map(|j| w[j] * dy[r * n + j]).collect();
        let c1 = g.iter().sum::<f64>() / n as f64;
        let c2 = (0..n).map(|j| g[j] * xhat[j]).sum::<f64>() / n as f64;
        for j in 0..n {
            let i = r * n + j;
            o.dx[i] = rs * (g[j] - c1 - xhat[j] * c2);
            o.dx_scale[i] = rs * (g[j].abs() + c1.abs() + (xhat[j] * c2).abs());
            o.dw[j] += dy[i] * xhat[j];
            o.db[j] += dy[i];
        }
    }
    o
}

/// x·sigmoid(x).
pub fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// The error function, by a different method than the interpreter's (fdlibm's rational
/// approximations): below 3, the series of positive terms
/// erf(x) = (2/√π)·e^(−x²)·Σₙ 2ⁿx^(2n+1)/(1·3·…·(2n+1)), which has no cancellation; from 3 on,
/// 1 − erfc(x) with erfc from its continued fraction
/// erfc(x) = e^(−x²)/√π · 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + …))))), evaluated
/// bottom-up with 60 terms (ample from 3 on). Relative error a few f64 ulps.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let y = if a < 3.0 {
        let (mut term, mut sum, mut n) = (a, a, 0.0);
        while term > sum * 1e-18 {
            n += 1.0;
            term *= 2.0 * a * a / (2.0 * n + 1.0);
            sum += term;
        }
        2.0 / std::f64::consts::PI.sqrt() * (-a * a).exp() * sum
    } else if a < 27.0 {
        let mut f = a;
        for k in (1..=60).rev() {
            f = a + (k as f64 / 2.0) / f;
        }
        1.0 - (-a * a).exp() / std::f64::consts::PI.sqrt() / f
    } else {
        1.0
    };
    y.copysign(x)
}

/// GELU with the error function: x·(1 + erf(x/√2))/2.
pub fn gelu_erf(x: f64) -> f64 {
    0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))
}

/// GELU, tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
pub fn gelu_tanh(x: f64) -> f64 {
    let k = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
}

/// Truncates an f32 value to bf16 toward zero (drops the low 16 bits of its f32 pattern),
/// computed from the format: keep 8 significant bits, exponent floor at bf16's −126.
pub fn trunc_bf16(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let e = (((x.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(-126);
    let ulp = 2f64.powi(e - 7);
    (x / ulp).trunc() * ulp
}

/// Element-wise SwiGLU: silu(gate)·up.
pub fn swiglu(gate: &[f64], up: &[f64]) -> Vec<f64> {
    gate.iter().zip(up).map(|(g, u)| silu(*g) * u).collect()
}

/// Epilogue of the gemm oracle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Epi {
    None,
    Bias,
    Relu,
    Silu,
    Gelu,
    Swiglu,
}

impl Epi {
    /// Every epilogue.
    pub const ALL: [Epi; 6] = [
        Epi::None,
        Epi::Bias,
        Epi::Relu,
        Epi::Silu,
        Epi::Gelu,
        Epi::Swiglu,
    ];

    /// The name the op's `EPILOGUE` constant uses.
    pub fn name(self) -> &'static str {
        match self {
            Epi::None => "none",
            Epi::Bias => "bias",
            Epi::Relu => "relu",
            Epi::Silu => "silu",
            Epi::Gelu => "gelu",
            Epi::Swiglu => "swiglu",
        }
    }
}

/// A batched GEMM problem for [`gemm`]: `a` is [bt, m, k] ([bt, k, m] when `trans_a`), `b` and
/// `b2` are [bt, k, n] ([bt, n, k] when `trans_b`), `bias` [n], `c_in` [bt, m, n].
pub struct Gemm<'a> {
    pub dims: (usize, usize, usize, usize),
    pub a: &'a [f64],
    pub b: &'a [f64],
    pub b2: Option<&'a [f64]>,
    pub bias: Option<&'a [f64]>,
    pub c_in: Option<(&'a [f64], f64)>,
    pub trans_a: bool,
    pub trans_b: bool,
    /// Truncate every element of a, b and b2 to bf16 before multiplying.
    pub bf16_trunc: bool,
    pub alpha: f64,
    pub epi: Epi,
}

/// c = epi(alpha·a·b + beta·c_in) per batch, in f64; swiglu is silu(alpha·a·b)·alpha·a·b2.
pub fn gemm(g: &Gemm) -> Vec<f64> {
    let (bt, m, k, n) = g.dims;
    let tr = |x: f64| if g.bf16_trunc { trunc_bf16(x) } else { x };
    let aidx = |t: usize, i: usize, kk: usize| {
        if g.trans_a {
            (t * k + kk) * m + i
        } else {
            (t * m + i) * k + kk
        }
    };
    let bidx = |t: usize, kk: usize, j: usize| {
        if g.trans_b {
            (t * n + j) * k + kk
        } else {
            (t * k + kk) * n + j
        }
    };
    let mut c = vec![0.0; bt * m * n];
    for t in 0..bt {
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut s2) = (0.0, 0.0);
                for kk in 0..k {
                    let av = tr(g.a[aidx(t, i, kk)]);
                    s += av * tr(g.b[bidx(t, kk, j)]);
                    if let Some(b2) = g.b2 {
                        s2 += av * tr(b2[bidx(t, kk, j)]);
                    }
                }
                let o = (t * m + i) * n + j;
                let mut pre = g.alpha * s;
                if let Some((cin, beta)) = g.c_in {
                    pre += beta * cin[o];
                }
                c[o] = match g.epi {
                    Epi::None => pre,
                    Epi::Bias => pre + g.bias.map_or(0.0, |b| b[j]),
                    Epi::Relu => pre.max(0.0),
                    Epi::Silu => silu(pre),
                    Epi::Gelu => gelu_tanh(pre),
                    Epi::Swiglu => silu(pre) * g.alpha * s2,
                };
            }
        }
    }
    c
}

/// The NF4 codebook (QLoRA), index = 4-bit code, as listed in docs/ir.md.
pub const NF4: [f64; 16] = [
    -1.0,
    -0.6961928009986877,
    -0.5250730514526367,
    -0.39491748809814453,
    -0.28444138169288635,
    -0.18477343022823334,
    -0.09105003625154495,
    0.0,
    0.07958029955625534,
    0.16093020141124725,
    0.24611230194568634,
    0.33791524171829224,
    0.44070982933044434,
    0.5626170039176941,
    0.7229568362236023,
    1.0,
];

/// Dequantizes packed NF4 weights: `codes` [n, k/2] (low nibble = even k), `scales`
/// [n, k/64]; returns W as [k, n] with W[kk, j] = NF4[code]·scale[j, kk/64].
pub fn nf4_dequant(codes: &[u8], scales: &[f64], k: usize, n: usize) -> Vec<f64> {
    let groups = k.div_ceil(64);
    let mut w = vec![0.0; k * n];
    for j in 0..n {
        for kk in 0..k {
            let byte = codes[j * (k / 2) + kk / 2];
            let code = if kk % 2 == 0 { byte & 15 } else { byte >> 4 };
            w[kk * n + j] = NF4[code as usize] * scales[j * groups + kk / 64];
        }
    }
    w
}

/// Plain [m, k] · [k, n] in f64.
pub fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for kk in 0..k {
            let av = a[i * k + kk];
            for j in 0..n {
                c[i * n + j] += av * b[kk * n + j];
            }
        }
    }
    c
}

/// [m, n] · Wᵀ for W [k, n]: grad_in [m, k].
pub fn matmul_wt(g: &[f64], w: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * k];
    for i in 0..m {
        for kk in 0..k {
            c[i * k + kk] = (0..n).map(|j| g[i * n + j] * w[kk * n + j]).sum();
        }
    }
    c
}

#[cfg(test)]
mod tests {
    /// erf against 30-digit values computed independently (mpmath's arbitrary precision).
    #[test]
    fn erf_matches_high_precision_values() {
        for (x, want) in [
            (1.0e-8, 1.128379167095512536e-8),
            (0.1, 0.1124629160182848922),
            (0.5, 0.5204998778130465377),
            (1.0, 0.8427007929497148693),
            (2.0, 0.9953222650189527342),
            (2.99, 0.9999764743969193598),
            (3.0, 0.9999779095030014146),
            (4.5, 0.9999999998033839558),
            (-1.5, -0.9661051464753107271),
        ] {
            let got = super::erf(x);
            assert!(
                ((got - want) / want).abs() < 8.0 * f64::EPSILON,
                "erf({x}) = {got:e}, want {want:e}"
            );
        }
    }
}
