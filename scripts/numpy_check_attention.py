#!/usr/bin/env python3
"""Checks `kirc run` of attention_fwd (every feature) and attention_bwd against NumPy f64
references, on problems drawn fresh each run: random shapes (GQA, Sq != Sk, key capacity larger
than the keys in use, with NaN in the unused capacity), random switches (CAUSAL, VARLEN,
KV_OFFSET, MASK with P = 1, B or B*Hq, WINDOW, SOFTCAP, OUT_LAYOUT), every dtype, magnitudes 1
and 3. The references follow the documented rules of compiler/ops/attention_fwd.kir and
attention_bwd.kir and share no code with kir. Needs numpy.

usage: scripts/numpy_check_attention.py [--kirc target/release/kirc] [--seed N] [--cases N]
"""
import argparse, os, subprocess, sys, tempfile
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kirnp import err, round_to, run  # noqa: E402

TOL = {"f32": (2e-5, 2e-4), "f16": (2e-3, 1e-2), "bf16": (1.2e-2, 5e-2)}
LSE_TOL = (1e-5, 1e-4)


def visibility(B, Sq, cap, causal, tl, past, window):
    """[B, Sq, cap] booleans: query i of batch b sees key j (the rule of attention_fwd.kir)."""
    L = np.full(B, cap) if tl is None else np.clip(tl, 0, cap)
    i = np.arange(Sq)[None, :, None]
    j = np.arange(cap)[None, None, :]
    Lb = L[:, None, None]
    if past is not None:
        last = past[:, None, None] + i
    elif causal:
        last = i + Lb - Sq
    else:
        last = np.broadcast_to(Lb - 1, (B, Sq, 1))
    vis = (j < Lb) & (j <= last)
    if window is not None and window > 0:
        vis &= j >= last + 1 - window
    return vis, L, last


def softmax_rows(s):
    m = s.max(axis=-1, keepdims=True)
    empty = ~np.isfinite(m)
    e = np.exp(s - np.where(empty, 0, m))
    l = e.sum(-1, keepdims=True)
    p = e / np.where(l == 0, 1, l)
    lse = (np.log(l) + np.where(empty, -np.inf, m))[..., 0]
    return p, lse


def fwd_ref(q, k, v, scale, vis, mask, softcap):
    B, Hq, Sq, D = q.shape
    g = Hq // k.shape[1]
    kk = np.nan_to_num(np.repeat(k, g, axis=1))  # NaN only where no query looks
    vv = np.nan_to_num(np.repeat(v, g, axis=1))
    s = np.einsum("bhid,bhjd->bhij", q, kk) * scale
    if softcap is not None and softcap > 0:
        s = softcap * np.tanh(s / softcap)
    if mask is not None:
        P = mask.shape[0]
        rows = {1: np.zeros((B, Hq), int), B: np.repeat(np.arange(B)[:, None], Hq, 1)}.get(
            P, np.arange(B * Hq).reshape(B, Hq))
        with np.errstate(invalid="ignore"):
            s = s + mask[rows]
    s = np.where(vis[:, None], s, -np.inf)
    p, lse = softmax_rows(s)
    return np.einsum("bhij,bhjd->bhid", p, vv), lse, p


def bwd_ref(q, k, v, o, do, scale, p):
    """Analytic gradients of sum(do * o), and the size of the terms of dq and dk."""
    Hq, Hkv = q.shape[1], k.shape[1]
    g = Hq // Hkv
    kk, vv = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    dp = np.einsum("bhid,bhjd->bhij", do, vv)
    delta = (p * dp).sum(-1, keepdims=True)
    ds = p * (dp - delta)
    dq = scale * np.einsum("bhij,bhjd->bhid", ds, kk)
    dk = scale * np.einsum("bhij,bhid->bhjd", ds, q)
    dv = np.einsum("bhij,bhid->bhjd", p, do)
    terms = p * (np.abs(dp) + np.abs(do * o).sum(-1, keepdims=True))
    dq_t = scale * np.einsum("bhij,bhjd->bhid", terms, np.abs(kk))
    dk_t = scale * np.einsum("bhij,bhid->bhjd", terms, np.abs(q))
    group = lambda x: x.reshape(x.shape[0], Hkv, g, *x.shape[2:]).sum(2)
    return dq, group(dk), group(dv), dq_t, group(dk_t)


def check(name, key, out, ref, tol, terms=None):
    rel, mx = err(out, ref, terms)
    print(f"{name} {key}: rel L2 {rel:.2e}, max/max {mx:.2e}")
    assert rel <= tol[0] and mx <= tol[1], f"{name} {key} out of tolerance {tol}"


def fwd_case(a, rng, tmp, case):
    dt = ["f32", "f16", "bf16"][case % 3]
    mag = [1.0, 3.0][rng.integers(2)]
    hkv = int(rng.integers(1, 3)); hq = hkv * int(rng.integers(1, 5))
    B = int(rng.integers(1, 4)); Sq = int(rng.integers(1, 200)); cap = int(rng.integers(1, 300))
    D = [int(8 * rng.integers(1, 33)), 384][int(rng.random() < 0.1)]
    coin = lambda: bool(rng.integers(2))
    causal = coin()
    tl = rng.integers(0, cap + 30, B).astype(np.int32) if coin() else None
    past = rng.integers(-3, cap + 1, B).astype(np.int32) if coin() else None
    causal = causal or past is not None
    window = int(rng.integers(0, 80)) if coin() else None
    softcap = float(rng.integers(0, 30)) if coin() else None
    bshd = coin()
    vis, L, last = visibility(B, Sq, cap, causal, tl, past, window)
    q = round_to(rng.standard_normal((B, hq, Sq, D)) * mag, dt)
    k = round_to(rng.standard_normal((B, hkv, cap, D)) * mag, dt)
    v = round_to(rng.standard_normal((B, hkv, cap, D)) * mag, dt)
    # Keys the kernel never reads hold NaN: j >= min(L, causal_max(Sq - 1) + 1).
    used = np.clip(np.minimum(L, last[:, -1, 0] + 1), 0, cap)
    for b in range(B):
        k[b, :, used[b]:] = np.nan
        v[b, :, used[b]:] = np.nan
    mask = None
    if coin():
        P = [1, B, B * hq][rng.integers(3)]
        mask = round_to(rng.standard_normal((P, Sq, cap)) * mag, dt)
        mask[rng.random(mask.shape) < 0.1] = -np.inf
        mask[:, :, used.max(initial=0):] = np.nan
    scale = float(np.float32(1 / np.sqrt(D)))
    defines = {"DTYPE": dt, "HEAD_DIM": D, "CAUSAL": int(causal), "VARLEN": int(tl is not None),
               "KV_OFFSET": int(past is not None), "MASK": int(mask is not None),
               "WINDOW": int(window is not None), "SOFTCAP": int(softcap is not None),
               "OUT_LAYOUT": "bshd" if bshd else "bhsd"}
    args = {"q": q, "k": k, "v": v, "scale": scale}
    for key, val in [("total_lengths", tl), ("past_lengths", past), ("mask", mask),
                     ("window", window), ("softcap", softcap)]:
        if val is not None:
            args[key] = val
    out = run(a.kirc, "attention_fwd", defines, args, tmp)
    o_ref, lse_ref, _ = fwd_ref(q, k, v, scale, vis, mask, softcap)
    if bshd:
        o_ref = o_ref.transpose(0, 2, 1, 3).reshape(B, Sq, hq * D)
    name = (f"attention_fwd {dt} B{B} Hq{hq} Hkv{hkv} Sq{Sq} cap{cap} D{D} causal{int(causal)} "
            f"varlen{tl is not None} past{past is not None} mask{None if mask is None else mask.shape[0]} "
            f"window{window} softcap{softcap} bshd{int(bshd)} x{mag}")
    check(name, "o", out["o"], o_ref, TOL[dt])
    check(name, "lse", out["lse"], lse_ref, LSE_TOL)


def bwd_case(a, rng, tmp, case):
    dt = ["f32", "f16", "bf16"][case % 3]
    mag = [1.0, 3.0][rng.integers(2)]
    hkv = int(rng.integers(1, 3)); hq = hkv * int(rng.integers(1, 5))
    B = int(rng.integers(1, 3)); Sq = int(rng.integers(1, 150)); Sk = int(rng.integers(1, 150))
    D = int(8 * rng.integers(1, 17)); causal = int(rng.integers(2)); det = int(rng.integers(2))
    q, k, v, do = (round_to(rng.standard_normal(s) * mag, dt)
                   for s in [(B, hq, Sq, D), (B, hkv, Sk, D), (B, hkv, Sk, D), (B, hq, Sq, D)])
    scale = float(np.float32(1 / np.sqrt(D)))
    vis, _, _ = visibility(B, Sq, Sk, causal, None, None, None)
    o, lse, p = fwd_ref(q, k, v, scale, vis, None, None)
    o = round_to(o, dt)
    lse = lse.astype(np.float32)
    out = run(a.kirc, "attention_bwd", {"DTYPE": dt, "HEAD_DIM": D, "CAUSAL": causal, "DETERMINISTIC": det},
              {"q": q, "k": k, "v": v, "o": o, "do": do, "lse": lse, "scale": scale}, tmp)
    dq, dk, dv, dq_t, dk_t = bwd_ref(q, k, v, o, do, scale, p)
    name = f"attention_bwd {dt} B{B} Hq{hq} Hkv{hkv} Sq{Sq} Sk{Sk} D{D} causal{causal} det{det} x{mag}"
    check(name, "dq (vs term size)", out["dq"], dq, TOL[dt], dq_t)
    check(name, "dk (vs term size)", out["dk"], dk, TOL[dt], dk_t)
    check(name, "dv", out["dv"], dv, TOL[dt])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kirc", default="target/release/kirc")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--cases", type=int, default=6)
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as tmp:
        for case in range(a.cases):
            fwd_case(a, rng, tmp, case)
            bwd_case(a, rng, tmp, case)
    print("all kirc outputs match the NumPy f64 references")


if __name__ == "__main__":
    main()
