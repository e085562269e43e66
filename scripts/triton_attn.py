#!/usr/bin/env python3
"""A compact Triton flash-attention forward kernel (the standard tutorial structure: one program
per (query block, batch·head), an online softmax over key blocks, causal blocks split into the
fully visible ones and the diagonal ones), used as a peer in kir's GPU benchmarks.

`best(q, k, v, causal, scale)` tries a few configurations (tile sizes, warps, stages), checks
each against SDPA in f32 on a slice, and returns the fastest as a callable with its config and
its first-call time (compilation included). Run directly for a quick table:

usage: python3 scripts/triton_attn.py [--d 128] [--s 16384] [--causal]
"""
import math, sys, time

import torch
import triton
import triton.language as tl


@triton.jit
def _block(acc, l_i, m_i, q, k_ptrs, v_ptrs, start_m, lo, hi, qk_scale, stride_kn, stride_vn,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DIAG: tl.constexpr):
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    k_ptrs += lo * stride_kn
    v_ptrs += lo * stride_vn
    for start_n in tl.range(lo, hi, BLOCK_N):
        k = tl.load(k_ptrs)
        s = tl.dot(q, tl.trans(k))
        if DIAG:
            keep = offs_m[:, None] >= (start_n + offs_n)[None, :]
            s = tl.where(keep, s * qk_scale, -1.0e6)
            m_new = tl.maximum(m_i, tl.max(s, 1))
            s = s - m_new[:, None]
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
            s = s * qk_scale - m_new[:, None]
        p = tl.math.exp2(s)
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = tl.load(v_ptrs)
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
        k_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn
    return acc, l_i, m_i


@triton.jit
def _attn_fwd(Q, K, V, O, sm_scale, stride_qh, stride_qm, stride_kh, stride_kn, stride_vh, stride_vn,
              stride_oh, stride_om, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + bh * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :])
    k_ptrs = K + bh * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :]
    v_ptrs = V + bh * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :]
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    hi = start_m * BLOCK_M if CAUSAL else N_CTX
    acc, l_i, m_i = _block(acc, l_i, m_i, q, k_ptrs, v_ptrs, start_m, 0, hi, qk_scale, stride_kn, stride_vn,
                           BLOCK_M, BLOCK_N, False)
    if CAUSAL:
        acc, l_i, m_i = _block(acc, l_i, m_i, q, k_ptrs, v_ptrs, start_m, hi, hi + BLOCK_M, qk_scale, stride_kn,
                               stride_vn, BLOCK_M, BLOCK_N, True)
    acc = acc / l_i[:, None]
    tl.store(O + bh * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :], acc.to(O.dtype.element_ty))


def attention(q, k, v, causal, scale, block_m, block_n, warps, stages):
    """o = softmax(scale·q·kᵀ)·v for [B, H, S, D] tensors (S a multiple of block_m and block_n)."""
    B, H, S, D = q.shape
    o = torch.empty_like(q)
    grid = (S // block_m, B * H)
    LAST[:] = [_attn_fwd[grid](q, k, v, o, scale, q.stride(1), q.stride(2), k.stride(1), k.stride(2), v.stride(1),
                    v.stride(2), o.stride(1), o.stride(2), N_CTX=S, HEAD_DIM=D, BLOCK_M=block_m,
                    BLOCK_N=block_n, CAUSAL=causal, num_warps=warps, num_stages=stages)]
    return o


# The compiled kernel of the last call (its PTX is `LAST[0].asm["ptx"]`).
LAST = []


CONFIGS = [(128, 64, 4, 3), (128, 128, 8, 3), (128, 64, 8, 3), (128, 128, 8, 2), (64, 64, 4, 4)]
# Head dim 256: K/V tiles twice as wide, so shorter key blocks and two stages fit shared memory.
CONFIGS_D256 = [(128, 64, 8, 2), (64, 64, 4, 2), (128, 32, 8, 2), (64, 32, 4, 2)]


def best(q, k, v, causal, scale, bench):
    """The fastest correct configuration: (callable, config, ms, first-call seconds, rel error)."""
    D = q.shape[-1]
    ref = torch.nn.functional.scaled_dot_product_attention(q[:1, :2].float(), k[:1, :2].float(),
                                                           v[:1, :2].float(), is_causal=causal, scale=scale)
    out = None
    for cfg in (CONFIGS_D256 if D == 256 else CONFIGS):
        bm, bn, w, st = cfg
        try:
            t0 = time.perf_counter()
            o = attention(q, k, v, causal, scale, *cfg)
            torch.cuda.synchronize()
            first = time.perf_counter() - t0
        except Exception:  # out of shared memory or registers for this tile
            continue
        d = (o[:1, :2].double() - ref.double()).norm() / ref.double().norm()
        if not float(d) < 2e-2:
            continue
        f = lambda cfg=cfg: attention(q, k, v, causal, scale, *cfg)
        ms = bench(f)
        if out is None or ms < out[2]:
            out = (f, cfg, ms, first, float(d))
    return out


def main(argv):
    d = int(argv[argv.index("--d") + 1]) if "--d" in argv else 128
    s = int(argv[argv.index("--s") + 1]) if "--s" in argv else 16384
    causal = "--causal" in argv
    from peers import median_ms
    h, b = 2048 // d, 16384 // s
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    f, cfg, ms, first, err = best(q, k, v, causal, 1 / math.sqrt(d), lambda g: median_ms(g, 30))
    fl = 4 * b * h * s * s * d / (2 if causal else 1)
    print(f"triton d{d} S{s} causal={int(causal)}: {fl / ms / 1e9:.1f} TFLOP/s, config {cfg}, "
          f"first call {first * 1e3:.0f} ms, rel {err:.2e}")


if __name__ == "__main__":
    main(sys.argv)
