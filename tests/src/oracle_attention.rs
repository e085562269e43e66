//! Independent f64 references for the attention ops (plain loops; no IR, no interpreter):
//! the forward with every feature of `attention_fwd` (GQA, causal, varlen, KV offset, mask,
//! window, softcap, key capacity), the analytic backward with the same features, and central
//! finite differences of the forward (at every coordinate or at one) that validate it.
//!
//! The visibility rule is written here from the documented contract of `attention_fwd.kir`:
//! query i of batch b sees key j iff 0 ≤ j < L, j ≤ causal_max(i) and, with a positive window,
//! j ≥ causal_max(i) + 1 − window, where L is the batch's key length and causal_max(i) is
//! past_lengths[b] + i (KV offset), i + L − Sq (causal) or L − 1 (neither).

/// One attention problem: shapes, switches and the scalar params. Tensors are row-major:
/// q, o, dq [b, hq, sq, d]; k, v, dk, dv [b, hkv, cap, d]; mask [p, sq, cap]; lse [b, hq, sq].
#[derive(Clone, Debug)]
pub struct Problem {
    /// Batch.
    pub b: usize,
    /// Query heads.
    pub hq: usize,
    /// Key/value heads (divides `hq`).
    pub hkv: usize,
    /// Queries per head.
    pub sq: usize,
    /// Key capacity: the key dim of k, v and mask.
    pub cap: usize,
    /// Head dim.
    pub d: usize,
    /// Softmax scale applied to q·k.
    pub scale: f64,
    /// Causal (bottom-right aligned unless `past_lengths` is given).
    pub causal: bool,
    /// Per-batch key lengths (VARLEN = 1), else every batch has `cap` keys.
    pub total_lengths: Option<Vec<i64>>,
    /// Per-batch count of cached keys before query 0 (KV_OFFSET = 1; implies causal).
    pub past_lengths: Option<Vec<i64>>,
    /// Additive mask: its leading dim P (1, b or b·hq) and its values.
    pub mask: Option<(usize, Vec<f64>)>,
    /// Window width (WINDOW = 1); ≤ 0 is off.
    pub window: Option<i64>,
    /// Soft cap (SOFTCAP = 1); ≤ 0 is off.
    pub softcap: Option<f64>,
}

impl Problem {
    /// A plain problem: no switches, key capacity `sk`, scale 1/√d.
    pub fn new(b: usize, hq: usize, hkv: usize, sq: usize, sk: usize, d: usize) -> Problem {
        Problem {
            b,
            hq,
            hkv,
            sq,
            cap: sk,
            d,
            scale: 1.0 / (d as f64).sqrt(),
            causal: false,
            total_lengths: None,
            past_lengths: None,
            mask: None,
            window: None,
            softcap: None,
        }
    }

    /// The number of keys of batch `bi`: total_lengths[bi] clamped to [0, cap], or cap.
    pub fn key_len(&self, bi: usize) -> i64 {
        match &self.total_lengths {
            Some(t) => t[bi].clamp(0, self.cap as i64),
            None => self.cap as i64,
        }
    }

    /// The last key query `i` of batch `bi` may see (before the length and window limits).
    pub fn causal_max(&self, bi: usize, i: usize) -> i64 {
        let l = self.key_len(bi);
        match (&self.past_lengths, self.causal) {
            (Some(past), _) => past[bi] + i as i64,
            (None, true) => i as i64 + l - self.sq as i64,
            (None, false) => l - 1,
        }
    }

    /// How many keys of batch `bi` some query may see: min(L, causal_max(Sq − 1) + 1). Keys past
    /// it are capacity the kernels never read.
    pub fn keys_used(&self, bi: usize) -> usize {
        let last = self.causal_max(bi, self.sq.max(1) - 1) + 1;
        self.key_len(bi).min(last).max(0) as usize
    }

    /// Whether query `i` of batch `bi` sees key `j`.
    pub fn sees(&self, bi: usize, i: usize, j: usize) -> bool {
        let j = j as i64;
        let last = self.causal_max(bi, i);
        let in_window = match self.window {
            Some(w) if w > 0 => j > last - w,
            _ => true,
        };
        j < self.key_len(bi) && j <= last && in_window
    }

    /// The mask value added to score (i, j) of batch `bi`, head `h` (0 without a mask).
    pub fn mask_at(&self, bi: usize, h: usize, i: usize, j: usize) -> f64 {
        let Some((p, m)) = &self.mask else {
            return 0.0;
        };
        let row = if *p == 1 {
            0
        } else if *p == self.b {
            bi
        } else {
            assert_eq!(*p, self.b * self.hq, "mask P must be 1, B or B·Hq");
            bi * self.hq + h
        };
        m[(row * self.sq + i) * self.cap + j]
    }

    fn q_at(&self, bi: usize, h: usize, i: usize) -> usize {
        ((bi * self.hq + h) * self.sq + i) * self.d
    }

    fn k_at(&self, bi: usize, hk: usize, j: usize) -> usize {
        ((bi * self.hkv + hk) * self.cap + j) * self.d
    }

    /// The final scores of row (bi, h, i) over every key (−inf where the row does not see it):
    /// scale·q·k, soft-capped, plus the mask.
    fn row_scores(&self, q: &[f64], k: &[f64], bi: usize, h: usize, i: usize) -> Vec<f64> {
        let hk = h / (self.hq / self.hkv);
        let qrow = &q[self.q_at(bi, h, i)..][..self.d];
        (0..self.cap)
            .map(|j| {
                if !self.sees(bi, i, j) {
                    return f64::NEG_INFINITY;
                }
                let krow = &k[self.k_at(bi, hk, j)..][..self.d];
                let mut s = self.scale * qrow.iter().zip(krow).map(|(a, b)| a * b).sum::<f64>();
                if let Some(c) = self.softcap.filter(|&c| c > 0.0) {
                    s = c * (s / c).tanh();
                }
                s + self.mask_at(bi, h, i, j)
            })
            .collect()
    }

    /// Softmax weights of a row of scores and its lse; all zero and −inf when every score is −inf.
    fn softmax(scores: &[f64]) -> (Vec<f64>, f64) {
        let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        if m == f64::NEG_INFINITY {
            return (vec![0.0; scores.len()], f64::NEG_INFINITY);
        }
        let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
        let l: f64 = e.iter().sum();
        (e.iter().map(|x| x / l).collect(), m + l.ln())
    }
}

/// The forward: (o [b, hq, sq, d], lse [b, hq, sq]). A row that sees no key (or only −inf
/// scores) gets o = 0 and lse = −inf.
pub fn attention_fwd(p: &Problem, q: &[f64], k: &[f64], v: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let mut o = vec![0.0; p.b * p.hq * p.sq * p.d];
    let mut lse = vec![f64::NEG_INFINITY; p.b * p.hq * p.sq];
    for bi in 0..p.b {
        for h in 0..p.hq {
            let hk = h / (p.hq / p.hkv);
            for i in 0..p.sq {
                let (w, l) = Problem::softmax(&p.row_scores(q, k, bi, h, i));
                lse[(bi * p.hq + h) * p.sq + i] = l;
                let orow = &mut o[p.q_at(bi, h, i)..][..p.d];
                for (j, &pj) in w.iter().enumerate().filter(|(_, &pj)| pj != 0.0) {
                    let vrow = &v[p.k_at(bi, hk, j)..][..p.d];
                    for (acc, x) in orow.iter_mut().zip(vrow) {
                        *acc += pj * x;
                    }
                }
            }
        }
    }
    (o, lse)
}

/// Per row of lse [b, hq, sq]: the size of the terms it is computed from, max over the keys the
/// row sees of scale·Σ_x |q_ix·k_jx| + |mask_ij|, and at least |lse| (0 for a row that sees no
/// key). A kernel's lse is m + log Σ exp(s − m) over scores summed in f32 from D products, so
/// its rounding error scales with these terms, not with lse, which can be near 0 where the
/// scores are not.
pub fn lse_terms(p: &Problem, q: &[f64], k: &[f64]) -> Vec<f64> {
    let (_, lse) = attention_fwd(p, q, k, &vec![0.0; k.len()]);
    let mut out = vec![0.0; p.b * p.hq * p.sq];
    for bi in 0..p.b {
        for h in 0..p.hq {
            let hk = h / (p.hq / p.hkv);
            for i in 0..p.sq {
                let qrow = &q[p.q_at(bi, h, i)..][..p.d];
                let mut t: f64 = 0.0;
                for j in (0..p.cap).filter(|&j| p.sees(bi, i, j)) {
                    let krow = &k[p.k_at(bi, hk, j)..][..p.d];
                    let dot: f64 = qrow.iter().zip(krow).map(|(a, b)| (a * b).abs()).sum();
                    t = t.max(p.scale * dot + p.mask_at(bi, h, i, j).abs());
                }
                let at = (bi * p.hq + h) * p.sq + i;
                out[at] = if lse[at].is_finite() {
                    t.max(lse[at].abs())
                } else {
                    0.0
                };
            }
        }
    }
    out
}

/// `o` [b, hq, sq, d] rearranged to the token-major layout [b, sq, hq·d].
pub fn to_bshd(p: &Problem, o: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; o.len()];
    for bi in 0..p.b {
        for h in 0..p.hq {
            for i in 0..p.sq {
                let src = &o[p.q_at(bi, h, i)..][..p.d];
                out[((bi * p.sq + i) * p.hq + h) * p.d..][..p.d].copy_from_slice(src);
            }
        }
    }
    out
}

/// The scalar loss L = Σ do ⊙ o whose gradients `attention_bwd` returns.
pub fn loss(p: &Problem, q: &[f64], k: &[f64], v: &[f64], d_o: &[f64]) -> f64 {
    let (o, _) = attention_fwd(p, q, k, v);
    o.iter().zip(d_o).map(|(a, b)| a * b).sum()
}

/// Analytic gradients of L = Σ do ⊙ o, with dk and dv summed over each GQA group, and the
/// size of the terms dq and dk are computed from.
pub struct Grads {
    pub dq: Vec<f64>,
    pub dk: Vec<f64>,
    pub dv: Vec<f64>,
    /// Per element of dq: scale·Σ_j |P_ij|·(|dP_ij| + Σ_x |do_ix·o_ix|)·|k_j|, the size of the
    /// terms of dq = scale·Σ_j P_ij (dP_ij − δ_i) k_j. δ_i = rowsum(do ⊙ o) is computed by the
    /// kernel from o rounded to its dtype, so its error is bounded by Σ_x |do_ix·o_ix| times the
    /// dtype's rounding; where dP − δ cancels (a softmax peaked on one key), dq is far smaller
    /// than that error, which is measured against these terms instead.
    pub dq_terms: Vec<f64>,
    /// Per element of dk: the same terms, scale·Σ_i |P_ij|·(|dP_ij| + Σ_x |do_ix·o_ix|)·|q_i|.
    pub dk_terms: Vec<f64>,
}

/// Analytic gradients of L = Σ do ⊙ o. With P the softmax weights of the final scores,
/// dP = do·vᵀ, δ = Σ_j P·dP (= rowsum(do ⊙ o)), dS = P ⊙ (dP − δ) ⊙ c′, where c′ = ∂s/∂(scale·q·k)
/// is 1 − tanh²(scale·q·k / softcap) under a positive soft cap and 1 otherwise (the additive mask
/// does not depend on q or k): dv = Pᵀ·do, dq = scale·dS·k, dk = scale·dSᵀ·q. Covers every
/// switch of [`Problem`]; keys a row does not see (padding included, which may hold NaN) take
/// no part.
pub fn attention_bwd(p: &Problem, q: &[f64], k: &[f64], v: &[f64], d_o: &[f64]) -> Grads {
    let mut g = Grads {
        dq: vec![0.0; q.len()],
        dk: vec![0.0; k.len()],
        dv: vec![0.0; v.len()],
        dq_terms: vec![0.0; q.len()],
        dk_terms: vec![0.0; k.len()],
    };
    for bi in 0..p.b {
        for h in 0..p.hq {
            let hk = h / (p.hq / p.hkv);
            for i in 0..p.sq {
                let (w, _) = Problem::softmax(&p.row_scores(q, k, bi, h, i));
                let qi = p.q_at(bi, h, i);
                let dorow = &d_o[qi..][..p.d];
                let dp: Vec<f64> = (0..p.cap)
                    .map(|j| {
                        let vrow = &v[p.k_at(bi, hk, j)..][..p.d];
                        dorow.iter().zip(vrow).map(|(a, b)| a * b).sum()
                    })
                    .collect();
                let delta: f64 = w
                    .iter()
                    .zip(&dp)
                    .filter(|(&a, _)| a != 0.0)
                    .map(|(a, b)| a * b)
                    .sum();
                // Σ_x |do_x·o_x| with o = Σ_j P_j v_j.
                let delta_terms: f64 = (0..p.d)
                    .map(|x| {
                        let o: f64 = (0..p.cap)
                            .filter(|&j| w[j] != 0.0)
                            .map(|j| w[j] * v[p.k_at(bi, hk, j) + x])
                            .sum();
                        (dorow[x] * o).abs()
                    })
                    .sum();
                let qrow = &q[qi..][..p.d];
                for j in (0..p.cap).filter(|&j| w[j] != 0.0) {
                    let kj = p.k_at(bi, hk, j);
                    // The soft cap's derivative at this score (1 without a cap).
                    let cap = match p.softcap.filter(|&c| c > 0.0) {
                        Some(c) => {
                            let x: f64 = qrow.iter().zip(&k[kj..][..p.d]).map(|(a, b)| a * b).sum();
                            let t = (p.scale * x / c).tanh();
                            1.0 - t * t
                        }
                        None => 1.0,
                    };
                    let ds = w[j] * (dp[j] - delta) * cap;
                    let ds_terms = w[j] * (dp[j].abs() + delta_terms) * cap;
                    for x in 0..p.d {
                        g.dq[qi + x] += p.scale * ds * k[kj + x];
                        g.dk[kj + x] += p.scale * ds * q[qi + x];
                        g.dv[kj + x] += w[j] * dorow[x];
                        g.dq_terms[qi + x] += p.scale * ds_terms * k[kj + x].abs();
                        g.dk_terms[kj + x] += p.scale * ds_terms * q[qi + x].abs();
                    }
                }
            }
        }
    }
    g
}

/// Which input a finite difference perturbs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// The queries q.
    Q,
    /// The keys k.
    K,
    /// The values v.
    V,
}

/// The derivative of [`loss`] with respect to element `idx` of input `which`, by central
/// differences in f64 at steps h and 2h (h = 1e-4·max(1, |x|)) combined by Richardson
/// extrapolation: truncation O(h⁴) instead of O(h²), so h can be large enough that rounding in
/// the loss (~1e-16·|loss| / h) stays far below the tolerance. (With the plain central
/// difference at h = 1e-6, steep softmax inputs of magnitude 3 left an error of 2e-7 relative
/// to the gradient.)
pub fn finite_difference(
    p: &Problem,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    d_o: &[f64],
    which: Input,
    idx: usize,
) -> f64 {
    let (mut q, mut k, mut v) = (q.to_vec(), k.to_vec(), v.to_vec());
    let slot = |q: &mut Vec<f64>, k: &mut Vec<f64>, v: &mut Vec<f64>, x: f64| match which {
        Input::Q => q[idx] = x,
        Input::K => k[idx] = x,
        Input::V => v[idx] = x,
    };
    let x = match which {
        Input::Q => q[idx],
        Input::K => k[idx],
        Input::V => v[idx],
    };
    let h = 1e-4 * x.abs().max(1.0);
    let mut central = |h: f64| {
        slot(&mut q, &mut k, &mut v, x + h);
        let up = loss(p, &q, &k, &v, d_o);
        slot(&mut q, &mut k, &mut v, x - h);
        let down = loss(p, &q, &k, &v, d_o);
        slot(&mut q, &mut k, &mut v, x);
        (up - down) / (2.0 * h)
    };
    let (d1, d2) = (central(h), central(2.0 * h));
    (4.0 * d1 - d2) / 3.0
}

/// [`finite_difference`] at every element of q, k and v: (dq, dk, dv).
pub fn finite_differences(
    p: &Problem,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    d_o: &[f64],
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let all = |which: Input, n: usize| -> Vec<f64> {
        (0..n)
            .map(|idx| finite_difference(p, q, k, v, d_o, which, idx))
            .collect()
    };
    (
        all(Input::Q, q.len()),
        all(Input::K, k.len()),
        all(Input::V, v.len()),
    )
}
