#!/usr/bin/env python3
"""The peers kir's GPU scripts time beside it, in their process: torch SDPA (FlashAttention-2 and
cuDNN) attention forward (and, with --bwd, backward) at d128 and 16k tokens, cuBLAS GEMM 8192³,
and with --norm a device copy and F.rms_norm at 16384×4096. Medians of CUDA-event timings after
a warm-up (`median_ms`, also imported by other scripts).

usage: python3 scripts/peers.py [--causal] [--bwd] [--trans-b] [--norm]
"""
import sys


def median_ms(f, n=50):
    """Median of n CUDA-event timings of f() after 5 warm-up calls, in milliseconds."""
    import torch
    for _ in range(5):
        f()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for a, b in ev:
        a.record(); f(); b.record()
    torch.cuda.synchronize()
    xs = sorted(a.elapsed_time(b) for a, b in ev)
    return xs[len(xs) // 2]


def main(argv):
    import torch, torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel, SDPBackend
    t = median_ms
    q = torch.randn(1, 16, 16384, 128, device='cuda', dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    fl = 4 * 16 * 16384 * 16384 * 128
    for be in [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION]:
        with sdpa_kernel(be):
            line = f"peer {be} fwd {fl / t(lambda: F.scaled_dot_product_attention(q, k, v), 30) / 1e9:.1f} TFLOP/s"
            if "--causal" in argv:
                c = t(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), 30)
                line += f" causal {fl / 2 / c / 1e9:.1f} TFLOP/s"
            print(line)
            if "--bwd" in argv:
                qq, kk, vv = (x.clone().requires_grad_() for x in (q, k, v))
                o = F.scaled_dot_product_attention(qq, kk, vv)
                g = torch.randn_like(o)
                ms = t(lambda: torch.autograd.grad(o, (qq, kk, vv), g, retain_graph=True), 10)
                print(f"peer {be} bwd {2.5 * fl / ms / 1e9:.1f} TFLOP/s")
    del q, k, v
    a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)
    bb = torch.randn_like(a)
    if "--trans-b" in argv:
        print("peer cublas a@b.T", f"{2 * 8192**3 / t(lambda: a @ bb.T, 20) / 1e9:.1f} TFLOP/s")
    print("peer cublas a@b", f"{2 * 8192**3 / t(lambda: a @ bb, 20) / 1e9:.1f} TFLOP/s")
    del a, bb
    if "--norm" in argv:
        x = torch.randn(16384, 4096, device='cuda', dtype=torch.bfloat16)
        w = torch.randn(4096, device='cuda', dtype=torch.bfloat16)
        print("peer copy x.clone()", f"{2 * x.numel() * 2 / t(lambda: x.clone(), 100) / 1e9:.3f} TB/s")
        print("peer torch rms_norm", f"{2 * x.numel() * 2 / t(lambda: F.rms_norm(x, (4096,), w, 1e-5), 100) / 1e9:.3f} TB/s")


if __name__ == "__main__":
    main(sys.argv[1:])
