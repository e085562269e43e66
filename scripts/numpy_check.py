#!/usr/bin/env python3
"""Checks `kirc run` of the built-in ops against NumPy f64 references, on random shapes drawn
fresh each run (ragged sizes, GQA, Sq != Sk, magnitudes 1 and 3). Needs numpy.

usage: scripts/numpy_check.py [--kirc target/release/kirc] [--seed N] [--cases N]
"""
import argparse, os, subprocess, sys, tempfile
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kirnp import err, round_to, run  # noqa: E402

TOL = {"f32": (2e-5, 2e-4), "f16": (2e-3, 1e-2), "bf16": (1.2e-2, 5e-2)}


def attention_ref(q, k, v, scale, causal):
    B, Hq, Sq, D = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    kk = np.repeat(k, Hq // Hkv, axis=1)
    vv = np.repeat(v, Hq // Hkv, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q, kk) * scale
    if causal:
        i = np.arange(Sq)[:, None]
        j = np.arange(Sk)[None, :]
        s = np.where(j <= i + Sk - Sq, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    empty = ~np.isfinite(m)
    p = np.exp(s - np.where(empty, 0, m))
    l = p.sum(-1, keepdims=True)
    o = np.einsum("bhij,bhjd->bhid", p, vv) / np.where(l == 0, 1, l)
    lse = (np.log(l) + np.where(empty, -np.inf, m))[..., 0]
    return o, lse


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kirc", default="target/release/kirc")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--cases", type=int, default=3)
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    worst = {}
    with tempfile.TemporaryDirectory() as tmp:
        for case in range(a.cases):
            dt = ["f32", "f16", "bf16"][case % 3]
            mag = [1.0, 3.0][rng.integers(2)]
            # attention
            hkv = int(rng.integers(1, 3)); hq = hkv * int(rng.integers(1, 5))
            d = 8 * int(rng.integers(1, 33)); b = int(rng.integers(1, 3))
            sq, sk = int(rng.integers(1, 400)), int(rng.integers(1, 400))
            causal = int(rng.integers(2))
            q = round_to(rng.standard_normal((b, hq, sq, d)) * mag, dt)
            k = round_to(rng.standard_normal((b, hkv, sk, d)) * mag, dt)
            v = round_to(rng.standard_normal((b, hkv, sk, d)) * mag, dt)
            scale = float(np.float32(1 / np.sqrt(d)))
            o = run(a.kirc, "attention_fwd", {"DTYPE": dt, "HEAD_DIM": d, "CAUSAL": causal},
                    {"q": q, "k": k, "v": v, "scale": scale}, tmp)
            o_ref, lse_ref = attention_ref(q, k, v, scale, causal)
            name = f"attention {dt} B{b} Hq{hq} Hkv{hkv} Sq{sq} Sk{sk} D{d} causal{causal} x{mag}"
            for key, out, ref, tol in [("o", o["o"], o_ref, TOL[dt]), ("lse", o["lse"], lse_ref, (1e-5, 1e-4))]:
                rel, mx = err(out, ref)
                print(f"{name} {key}: rel L2 {rel:.2e}, max/max|ref| {mx:.2e}")
                assert rel <= tol[0] and mx <= tol[1], f"{name} {key} out of tolerance {tol}"
            # rmsnorm fwd / bwd
            r, n = int(rng.integers(1, 300)), int(rng.integers(1, 5000))
            x = round_to(rng.standard_normal((r, n)) * mag, dt)
            w = round_to(rng.standard_normal(n) * mag, dt)
            dy = round_to(rng.standard_normal((r, n)) * mag, dt)
            eps = float(np.float32(1e-6))
            out = run(a.kirc, "rmsnorm_fwd", {"DTYPE": dt}, {"x": x, "w": w, "eps": eps}, tmp)
            rstd = 1 / np.sqrt((x * x).mean(-1) + eps)
            for key, ref, tol in [("y", x * rstd[:, None] * w, TOL[dt]), ("rstd", rstd, TOL["f32"])]:
                rel, mx = err(out[key], ref)
                print(f"rmsnorm_fwd {dt} {r}x{n} x{mag} {key}: rel L2 {rel:.2e}, max {mx:.2e}")
                assert rel <= tol[0] and mx <= tol[1]
            out = run(a.kirc, "rmsnorm_bwd", {"DTYPE": dt}, {"x": x, "w": w, "dy": dy, "eps": eps}, tmp)
            c = (x * w * dy).mean(-1)
            t1 = rstd[:, None] * w * dy
            t2 = rstd[:, None] ** 3 * x * c[:, None]
            dw = (dy * x * rstd[:, None]).sum(0)
            rel, mx = err(out["dw"], dw)
            print(f"rmsnorm_bwd {dt} {r}x{n} x{mag} dw: rel L2 {rel:.2e}, max {mx:.2e}")
            assert rel <= TOL[dt][0] and mx <= TOL[dt][1]
            dx_err = out["dx"] - (t1 - t2)
            scale_t = np.abs(t1) + np.abs(t2)
            rel = np.linalg.norm(dx_err) / np.linalg.norm(scale_t)
            print(f"rmsnorm_bwd {dt} {r}x{n} x{mag} dx: rel L2 vs term scale {rel:.2e}")
            assert rel <= TOL[dt][0]
            # gemm
            bt, m, kd, nn = (int(rng.integers(1, 4)), int(rng.integers(1, 300)), int(rng.integers(1, 300)), int(rng.integers(1, 300)))
            tb = int(rng.integers(2)); epi = ["none", "bias", "silu", "swiglu"][rng.integers(4)]
            A = round_to(rng.standard_normal((bt, m, kd)) * mag, dt)
            Bm = round_to(rng.standard_normal((bt, nn, kd) if tb else (bt, kd, nn)) * mag, dt)
            B2 = round_to(rng.standard_normal(Bm.shape) * mag, dt)
            bias = round_to(rng.standard_normal(nn) * mag, dt)
            alpha = 0.5
            args = {"a": A, "b": Bm, "alpha": alpha}
            if epi == "bias": args["bias"] = bias
            if epi == "swiglu": args["b2"] = B2
            out = run(a.kirc, "gemm", {"DTYPE": dt, "TRANS_B": tb, "EPILOGUE": epi}, args, tmp)
            bb = np.swapaxes(Bm, 1, 2) if tb else Bm
            acc = alpha * (A @ bb)
            silu = lambda z: z / (1 + np.exp(-z))
            ref = {"none": acc, "bias": acc + bias, "silu": silu(acc),
                   "swiglu": silu(acc) * alpha * (A @ (np.swapaxes(B2, 1, 2) if tb else B2))}[epi]
            rel, mx = err(out["c"], ref)
            print(f"gemm {dt} {bt}x{m}x{kd}x{nn} trans_b={tb} {epi} x{mag}: rel L2 {rel:.2e}, max {mx:.2e}")
            assert rel <= TOL[dt][0] and mx <= TOL[dt][1]
    print("all kirc outputs match the NumPy f64 references")


if __name__ == "__main__":
    main()
