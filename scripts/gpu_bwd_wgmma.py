#!/usr/bin/env python3
"""One GPU call for attention_bwd's tiles: every candidate checked against the interpreter
(`kirc run --device cuda` against `--device cpu`, ragged GQA shapes, relative L2 ≤ 2.4e-2 as
scripts/gpu_runtime_check.sh), then timed with `kirc bench` beside torch's backward (SDPA flash
and cuDNN) at the same shapes in this process.

usage: python3 scripts/gpu_bwd_wgmma.py KIRC WORK_DIR [--no-check] [--no-bench] [NAME:DEFINES ...]
  DEFINES: `,`-separated `-D` values (e.g. `BLOCK_KV=128,BLOCK_N=64`) or lowering flags written
  `--flag=value` (e.g. `--warp-specialize=on`); `default` for none.
"""
import os
import subprocess
import sys

import numpy as np

KIRC, WORK = sys.argv[1], sys.argv[2]
NO_CHECK = "--no-check" in sys.argv[3:]
NO_BENCH = "--no-bench" in sys.argv[3:]
CANDS = [(c.split(":")[0], [d for d in c.split(":")[1].split(",") if d and d != "default"])
         for c in ([a for a in sys.argv[3:] if not a.startswith("--no-")] or ["default:default"])]
os.makedirs(WORK, exist_ok=True)


def kirc(*args):
    r = subprocess.run([KIRC, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"kirc {' '.join(args)}: {r.stderr.strip()[-800:]}")
    return r.stdout


def dflags(defs):
    """kirc arguments of DEFINES items: `-D NAME=VALUE`, or a flag `--flag=value` as two words."""
    return [x for d in defs for x in (d.split("=", 1) if d.startswith("--") else ("-D", d))]


def check(name, defs, d, causal, det=1):
    """Forward on the CPU (o, lse), then the backward on both devices; returns the worst rel L2."""
    w = os.path.join(WORK, f"chk_{name}_d{d}_c{causal}_det{det}")
    os.makedirs(w, exist_ok=True)
    rng = np.random.default_rng(abs(hash((name, d, causal, det))) % 2**32)
    q = (rng.standard_normal((2, 4, 130, d)) * 1.5).astype(np.float32)
    k = (rng.standard_normal((2, 2, 197, d)) * 1.5).astype(np.float32)
    v = (rng.standard_normal((2, 2, 197, d)) * 1.5).astype(np.float32)
    do = (rng.standard_normal((2, 4, 130, d)) * 1.5).astype(np.float32)
    for n, x in dict(q=q, k=k, v=v, do=do).items():
        np.save(os.path.join(w, f"{n}.npy"), x)
    scale = f"scale={1 / d ** 0.5}"
    io = [f"--arg={n}={os.path.join(w, n + '.npy')}" for n in ("q", "k", "v")]
    base = ["-D", f"HEAD_DIM={d}", "-D", f"CAUSAL={causal}", *det_flag(defs, det)]
    kirc("run", "attention_fwd", "-D", f"HEAD_DIM={d}", "-D", f"CAUSAL={causal}", *io,
         "--arg", scale, "--device", "cpu", "--out", os.path.join(w, "fwd"))
    io += [f"--arg=o={w}/fwd/o.npy", f"--arg=lse={w}/fwd/lse.npy", f"--arg=do={w}/do.npy"]
    worst = 0.0
    outs = {}
    for dev in ("cpu", "cuda"):
        # The interpreter runs the module as written: lowering flags apply to the GPU only.
        mine = defs if dev == "cuda" else [x for x in defs if not x.startswith("--")]
        kirc("run", "attention_bwd", *base, *dflags(mine), *io, "--arg", scale,
             "--device", dev, "--out", os.path.join(w, dev))
        outs[dev] = {f: np.load(os.path.join(w, dev, f)).astype(np.float64)
                     for f in ("dq.npy", "dk.npy", "dv.npy")}
    for f, ref in outs["cpu"].items():
        got = outs["cuda"][f]
        if not np.isfinite(got).all():
            return float("inf")
        worst = max(worst, np.linalg.norm(got - ref) / np.linalg.norm(ref))
    return worst


def det_flag(defs, det):
    """`-D DETERMINISTIC=det` unless the candidate sets the mode itself."""
    return [] if any(x.startswith("DETERMINISTIC=") for x in defs) else ["-D", f"DETERMINISTIC={det}"]


def bench(defs, d, causal, b, h, s, det=1):
    shp = f"{b}x{h}x{s}x{d}"
    fl = 10 * b * h * s * s * d // (2 if causal else 1)
    out = kirc("bench", "attention_bwd", "-D", f"HEAD_DIM={d}", "-D", f"CAUSAL={causal}",
               *det_flag(defs, det), *dflags(defs),
               *[x for n in ("q", "k", "v", "o", "do") for x in ("--shape", f"{n}={shp}")],
               "--shape", f"lse={b}x{h}x{s}", "--arg", f"scale={1 / d ** 0.5}",
               "--flops", str(fl), "--iters", "10")
    keep = [l.strip().split(" (")[0] for l in out.splitlines() if "median" in l or "TFLOP/s" in l]
    return "; ".join(keep)


SHAPES = [(128, 0, 1, 16, 16384), (128, 1, 1, 16, 16384), (64, 0, 4, 32, 4096),
          (256, 0, 4, 8, 4096), (128, 0, 16, 16, 1024)]

print("== checks (rel L2 of dq, dk, dv against the interpreter; ≤ 2.4e-2 passes)")
bad = 0
for i, (name, defs) in enumerate([] if NO_CHECK else CANDS):
    # Every candidate at d128 both ways; the first (the defaults) also at d64, d256, atomics.
    extra = [(64, 0, 1), (256, 1, 1), (128, 0, 0)] if i == 0 else [(128, 0, 0)] if i == 1 else []
    for d, causal, det in [(128, 0, 1), (128, 1, 1)] + extra:
        try:
            e = check(name, defs, d, causal, det)
            ok = e <= 2.4e-2
        except RuntimeError as x:
            e, ok = str(x)[-300:], False
        bad += not ok
        print(f"{'PASS' if ok else 'FAIL'} {name} d{d} causal {causal} det {det}: {e}", flush=True)

if NO_BENCH:
    print(f"checks failed: {bad}")
    sys.exit(1 if bad else 0)
print("== kirc bench attention_bwd (TFLOP/s at 2.5x the forward's FLOPs)")
for d, causal, b, h, s in SHAPES:
    for name, defs in CANDS:
        try:
            print(f"kir {name:10s} d{d} causal {causal} B{b} H{h} S{s}: {bench(defs, d, causal, b, h, s)}", flush=True)
        except RuntimeError as x:
            print(f"kir {name:10s} d{d} causal {causal}: ERROR {str(x)[-300:]}", flush=True)
for name, defs in CANDS[:2]:
    try:
        print(f"kir {name:10s} d128 DETERMINISTIC=0: {bench(defs, 128, 0, 1, 16, 16384, det=0)}", flush=True)
    except RuntimeError as x:
        print(f"kir {name} det0: ERROR {str(x)[-300:]}")

print("== torch backward (SDPA), same shapes")
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
sys.path.insert(0, os.path.dirname(__file__))
from peers import median_ms
for d, causal, b, h, s in SHAPES:
    q = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn_like(q, requires_grad=True)
    v = torch.randn_like(q, requires_grad=True)
    fl = 10 * b * h * s * s * d / (2 if causal else 1)
    for be in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        with sdpa_kernel(be):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
            g = torch.randn_like(o)
            ms = median_ms(lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True), 20)
            print(f"peer {be.name:16s} d{d} causal {causal} B{b} H{h} S{s}: {fl / ms / 1e9:.1f} TFLOP/s ({ms:.3f} ms)", flush=True)
print(f"checks failed: {bad}")
sys.exit(1 if bad else 0)
