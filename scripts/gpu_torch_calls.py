#!/usr/bin/env python3
"""kir.torch.gemm against `a @ b` three ways, to tell a call's host path from its kernel: CUDA
events around each call (median of 100: the host's path to the launch counts when the GPU
waits for it), events around 200 queued calls (per call: the throughput of calls), and each
kernel's own duration from torch.profiler (CUPTI, median of 50).

usage: python3 scripts/gpu_torch_calls.py   (PYTHONPATH holding the kir wheel's files)
"""
import os
import statistics
import sys

import torch
import kir.torch as kt
from torch.profiler import profile, ProfilerActivity

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import median_ms  # noqa: E402

SHAPES = [(128, 4096, 14336), (2048, 2048, 2048), (1024, 4096, 4096), (64, 4096, 14336), (8192, 8192, 8192)]


def per_call_us(f, n=100):
    return median_ms(f, n) * 1e3


def queued_us(f, n=200):
    for _ in range(5):
        f()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    a.record()
    for _ in range(n):
        f()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / n * 1e3


def kernel_us(f, n=50):
    for _ in range(5):
        f()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(n):
            f()
        torch.cuda.synchronize()
    ks = {}
    for e in p.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.device_time_total > 0:
            ks.setdefault(e.name[:50], []).append(e.device_time_total)
    return {k: (statistics.median(v), len(v)) for k, v in ks.items()}


for m, k, n in SHAPES:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    fk, fc = (lambda: kt.gemm(a, b)), (lambda: a @ b)
    print(f"gemm {m}x{k}x{n}: per-call events kir {per_call_us(fk):.2f} us, cuBLAS {per_call_us(fc):.2f}; "
          f"queued kir {queued_us(fk):.2f}, cuBLAS {queued_us(fc):.2f}", flush=True)
    for name, f in (("kir", fk), ("cuBLAS", fc)):
        for kn, (t, c) in kernel_us(f).items():
            print(f"    {name} kernel {kn}: {t:.2f} us (n={c})", flush=True)
