#!/usr/bin/env python3
"""kir.torch at the configurations its calls' shapes select, timed beside the peers in one
process, each output checked in the same run.

kir.torch resolves a configuration from each call's input shapes (docs/python.md,
"Configurations by shape"). This script runs, through kir.torch at default flags:

- decode and mid-size GEMMs (bf16, [M, K] @ [K, N]) beside torch's `a @ b` (cuBLAS);
- attention forward at d128, S = 1k, B = 16, H = 16 beside SDPA's cuDNN and flash backends;
- attention backward at d128, S = 16k (B = 1, H = 16), causal and not, beside SDPA cuDNN's.

For each case it prints the kernel symbols of the programs kir.torch compiled for it (so the
configuration that applied shows), the median time of CUDA-event timings after warm-up
(scripts/peers.py, `median_ms`), TFLOP/s, kir's ratio to the best peer, and the relative L2
error of kir's output against the peer's and against a float64 reference where one is cheap.

usage: PYTHONPATH=<folder holding the kir package> python3 scripts/gpu_torch_shapes.py
Exit code: 0 when every output is within its bound.
"""

import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import kir.torch as kt
from kir import _launch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import median_ms  # noqa: E402

torch.backends.cuda.matmul.allow_tf32 = False
dev = torch.device("cuda")
failures = []


def rel(got, ref):
    """Relative L2 error of got against ref, in float64."""
    got, ref = got.double(), ref.double()
    return ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def new_programs(before):
    """The symbols of the programs kir.torch compiled since `before` (a set of keys)."""
    out = []
    for key, p in _launch._programs.items():
        if key not in before:
            out.extend(p.kernel.symbols)
    return out


def report(name, ms, flops, peers, err, bound, programs):
    tf = flops / ms / 1e9
    best = min(peers.values()) if peers else None
    line = f"{name}: kir {ms * 1e3:.2f} us {tf:.1f} TFLOP/s"
    for n, t in peers.items():
        line += f" | {n} {t * 1e3:.2f} us {flops / t / 1e9:.1f}"
    if best is not None:
        line += f" | kir/best {best / ms:.3f}x"
    line += f" | err {err:.2e} (bound {bound:.0e})"
    print(line)
    for s in programs:
        print(f"    program: {s}")
    if not err <= bound:
        failures.append(name)


def gemm(m, k, n):
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16) * 2
    b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
    before = set(_launch._programs)
    c = kt.gemm(a, b)
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    err = rel(c, ref)
    peer_err = rel(a @ b, ref)
    ms = median_ms(lambda: kt.gemm(a, b), n=100)
    peer = median_ms(lambda: a @ b, n=100)
    report(f"gemm {m}x{k}x{n}", ms, 2.0 * m * n * k, {"cuBLAS": peer}, err, max(2 * peer_err, 1e-3), new_programs(before))


def attention_fwd(b, h, s, d, causal):
    q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
    before = set(_launch._programs)
    o = kt.attention(q, k, v, causal=causal)
    torch.cuda.synchronize()
    peers, outs = {}, {}
    for name, backend in (("cuDNN", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        with sdpa_kernel(backend):
            outs[name] = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            peers[name] = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    ms = median_ms(lambda: kt.attention(q, k, v, causal=causal))
    flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
    # bf16 attention against the flash peer: both round P to bf16, so 2e-2 is a loose bound
    # that a wrong tile (rows or keys dropped) exceeds by orders of magnitude.
    report(f"attention_fwd d{d} B{b} H{h} S{s}{' causal' if causal else ''}", ms, flops, peers, rel(o, outs["flash"]), 2e-2, new_programs(before))


def attention_bwd(b, h, s, d, causal):
    q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16).requires_grad_(True) for _ in range(3))
    do = torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16)
    before = set(_launch._programs)
    o = kt.attention(q, k, v, causal=causal)
    grads = torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
    torch.cuda.synchronize()
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        po = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        pgrads = torch.autograd.grad(po, (q, k, v), do, retain_graph=True)
        peer = median_ms(lambda: torch.autograd.grad(po, (q, k, v), do, retain_graph=True), n=20)
    ms = median_ms(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True), n=20)
    flops = 2.5 * 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
    err = max(rel(g, pg) for g, pg in zip(grads, pgrads))
    report(f"attention_bwd d{d} B{b} H{h} S{s}{' causal' if causal else ''}", ms, flops, {"cuDNN": peer}, err, 2e-2, new_programs(before))


def main():
    torch.manual_seed(7)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for m in (16, 32, 64, 128):
        gemm(m, 4096, 14336)
    for m, k, n in ((1024, 4096, 4096), (2048, 2048, 2048), (8192, 8192, 8192)):
        gemm(m, k, n)
    attention_fwd(16, 16, 1024, 128, False)
    for causal in (False, True):
        attention_bwd(1, 16, 16384, 128, causal)
    print(f"programs loaded: {len(_launch._programs)}")
    print("FAILED: " + ", ".join(failures) if failures else "gpu_torch_shapes.py: all outputs within bounds")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
