#!/usr/bin/env python3
"""Checks `kirc run` of the normalization, GEMM and NF4 ops (layernorm_fwd, layernorm_bwd, swiglu,
gemm with every feature, gemm_nf4 in every mode) against NumPy f64 references, on random shapes and
specializations drawn fresh each run (ragged sizes, magnitudes 1 and 3, every dtype). Needs numpy.

usage: scripts/numpy_check_ops.py [--kirc target/release/kirc] [--seed N] [--cases N]
"""
import argparse, os, subprocess, sys, tempfile
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kirnp import err, round_to, run  # noqa: E402

TOL = {"f32": (2e-5, 2e-4), "f16": (2e-3, 1e-2), "bf16": (1.2e-2, 5e-2)}
DTYPES = ["f32", "f16", "bf16"]
NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
                0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0])


def trunc_bf16(x):
    """Truncates f32 values to bf16 by clearing the low 16 bits of their bit patterns."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    return b.view(np.float32).astype(np.float64)


def check(name, out, ref, tol, scale=None):
    rel, mx = err(out, ref, scale)
    what = "term scale" if scale is not None else "ref"
    print(f"{name}: rel L2 {rel:.2e}, max/max|{what}| {mx:.2e}")
    assert rel <= tol[0] and mx <= tol[1], f"{name} out of tolerance {tol}"


def layernorm(kirc, rng, dt, mag, tmp):
    r, n = int(rng.integers(1, 200)), int(rng.integers(1, 5000))
    x = round_to(rng.standard_normal((r, n)) * mag, dt)
    w = round_to(rng.standard_normal(n) * mag, dt)
    b = round_to(rng.standard_normal(n) * mag, dt)
    dy = round_to(rng.standard_normal((r, n)) * mag, dt)
    eps = float(np.float32(1e-5))
    out = run(kirc, "layernorm_fwd", {"DTYPE": dt}, {"x": x, "w": w, "b": b, "eps": eps}, tmp)
    mean = x.mean(-1)
    rstd = 1 / np.sqrt(((x - mean[:, None]) ** 2).mean(-1) + eps)
    xhat = (x - mean[:, None]) * rstd[:, None]
    name = f"layernorm_fwd {dt} {r}x{n} x{mag}"
    check(f"{name} y", out["y"], xhat * w + b, TOL[dt])
    check(f"{name} mean", out["mean"], mean, TOL["f32"])
    check(f"{name} rstd", out["rstd"], rstd, TOL["f32"])
    # Backward from the f32 statistics the forward saved.
    m32, r32 = round_to(mean, "f32"), round_to(rstd, "f32")
    groups = int(rng.integers(1, 9))
    out = run(kirc, "layernorm_bwd", {"DTYPE": dt, "GROUPS": groups},
              {"x": x, "w": w, "dy": dy, "mean": m32, "rstd": r32}, tmp)
    xh = (x - m32[:, None]) * r32[:, None]
    g = w * dy
    c1 = g.mean(-1, keepdims=True)
    c2 = (g * xh).mean(-1, keepdims=True)
    name = f"layernorm_bwd {dt} {r}x{n} GROUPS={groups} x{mag}"
    scale = r32[:, None] * (np.abs(g) + np.abs(c1) + np.abs(xh * c2))
    check(f"{name} dx", out["dx"], r32[:, None] * (g - c1 - xh * c2), TOL[dt], scale)
    check(f"{name} dw", out["dw"], (dy * xh).sum(0), TOL[dt])
    check(f"{name} db", out["db"], dy.sum(0), TOL[dt])


def swiglu(kirc, rng, dt, mag, tmp):
    r, n = int(rng.integers(1, 100)), int(rng.integers(1, 5000))
    gate = round_to(rng.standard_normal((r, n)) * mag, dt)
    up = round_to(rng.standard_normal((r, n)) * mag, dt)
    out = run(kirc, "swiglu", {"DTYPE": dt}, {"gate": gate, "up": up}, tmp)
    check(f"swiglu {dt} {r}x{n} x{mag}", out["out"], gate / (1 + np.exp(-gate)) * up, TOL[dt])


def gemm(kirc, rng, dt, mag, tmp):
    bt, m, k, n = (int(rng.integers(1, 7)), int(rng.integers(8, 200)), int(rng.integers(1, 300)),
                   int(rng.integers(8, 200)))
    ta, tb = int(rng.integers(2)), int(rng.integers(2))
    epi = ["none", "bias", "relu", "silu", "gelu", "swiglu"][rng.integers(6)]
    cin = int(epi != "swiglu" and rng.integers(2))
    bf = int(dt == "f32" and rng.integers(2))
    A = round_to(rng.standard_normal((bt, k, m) if ta else (bt, m, k)) * mag, dt)
    B = round_to(rng.standard_normal((bt, n, k) if tb else (bt, k, n)) * mag, dt)
    B2 = round_to(rng.standard_normal(B.shape) * mag, dt)
    bias = round_to(rng.standard_normal(n) * mag, dt)
    C = round_to(rng.standard_normal((bt, m, n)) * mag * mag * np.sqrt(k), dt)
    alpha, beta = 0.5, [1.0, -0.5][rng.integers(2)]
    args = {"a": A, "b": B, "alpha": alpha}
    if epi == "bias": args["bias"] = bias
    if epi == "swiglu": args["b2"] = B2
    if cin: args.update({"c_in": C, "beta": beta})
    defs = {"DTYPE": dt, "TRANS_A": ta, "TRANS_B": tb, "C_IN": cin, "BF16_COMPUTE": bf, "EPILOGUE": epi}
    out = run(kirc, "gemm", defs, args, tmp)
    tr = trunc_bf16 if bf else (lambda z: z)
    a = tr(np.swapaxes(A, 1, 2) if ta else A)
    mm = lambda Bx: a @ tr(np.swapaxes(Bx, 1, 2) if tb else Bx)
    pre = alpha * mm(B) + (beta * C if cin else 0)
    silu = lambda z: z / (1 + np.exp(-z))
    gelu = lambda z: 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))
    ref = {"none": pre, "bias": pre + bias, "relu": np.maximum(pre, 0), "silu": silu(pre),
           "gelu": gelu(pre), "swiglu": silu(pre) * alpha * mm(B2)}[epi]
    check(f"gemm {dt} {bt}x{m}x{k}x{n} {defs} x{mag}", out["c"], ref, TOL[dt])


def gemm_nf4(kirc, rng, dt, mag, tmp):
    m, k, n = int(rng.integers(1, 100)), 64 * int(rng.integers(1, 6)), int(rng.integers(1, 300))
    tr, gu = int(rng.integers(2)), int(rng.integers(2))
    bk = [64, 128, 192, 256][rng.integers(4)]

    def weight():
        codes = rng.integers(0, 256, size=(n, k // 2), dtype=np.uint8)
        scales = round_to(np.abs(rng.standard_normal((n, k // 64))) * mag + 0.01, "f32")
        lo, hi = codes & 15, codes >> 4
        q = np.stack([NF4[lo], NF4[hi]], axis=-1).reshape(n, k)   # [n, k], k = 2j + nibble
        w = q * np.repeat(scales, 64, axis=1)
        return codes, scales, round_to(w.T, dt)                  # W [k, n], rounded to DTYPE

    c1, s1, w1 = weight()
    args = {}
    if gu:
        c2, s2, w2 = weight()
        args.update({"gate_codes": c1, "gate_scales": s1, "up_codes": c2, "up_scales": s2})
    else:
        args.update({"codes": c1, "scales": s1})
    if tr:
        g1 = round_to(rng.standard_normal((m, n)) * mag, dt)
        ref = {"grad_in": g1 @ w1.T}
        if gu:
            g2 = round_to(rng.standard_normal((m, n)) * mag, dt)
            ref["grad_in"] = ref["grad_in"] + g2 @ w2.T
            args.update({"grad_gate": g1, "grad_up": g2})
        else:
            args["grad_out"] = g1
    else:
        a = round_to(rng.standard_normal((m, k)) * mag, dt)
        args["a"] = a
        ref = {"gate": a @ w1, "up": a @ w2} if gu else {"c": a @ w1}
    defs = {"DTYPE": dt, "TRANSPOSE": tr, "GATE_UP": gu, "BLOCK_K": bk}
    out = run(kirc, "gemm_nf4", defs, args, tmp)
    for key, r in ref.items():
        check(f"gemm_nf4 {dt} {m}x{k}x{n} {defs} x{mag} {key}", out[key], r, TOL[dt])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kirc", default="target/release/kirc")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--cases", type=int, default=3)
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as tmp:
        for case in range(a.cases):
            for i, f in enumerate([layernorm, swiglu, gemm, gemm_nf4]):
                dt = DTYPES[(case + i) % 3]
                f(a.kirc, rng, dt, [1.0, 3.0][rng.integers(2)], tmp)
    print("all kirc outputs match the NumPy f64 references")


if __name__ == "__main__":
    main()
