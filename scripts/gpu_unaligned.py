#!/usr/bin/env python3
"""Checks the copies of a warp-specialized kernel's producer without tensor maps (docs/backends.md
"Tensor maps": a tensor whose address breaks the 16-byte rule gets a zero map, and the producer's
warps copy it element by element), on the GPU: each case's kernel (a `time_*` artifact of
scripts/gpu_variants.py) runs on inputs that are views one element into a larger buffer, and its
output is compared with the same kernel on aligned copies of the same values and with torch in f32
(attention: head dim and causality, bottom-right aligned, read from the kernel's symbol).

usage: scripts/gpu_unaligned.py ART_DIR CASE...
"""
import math, os, sys
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_check_ptx import Program, rel  # noqa: E402


def shifted(x):
    """x's values in a view whose address is one element past a 16-byte boundary."""
    buf = torch.empty(x.numel() + 8, dtype=x.dtype, device=x.device)
    v = buf[1:1 + x.numel()].view(x.shape)
    v.copy_(x)
    assert v.data_ptr() % 16 != 0
    return v


def main():
    root, names = sys.argv[1], sys.argv[2:]
    bad = 0
    for name in names:
        prog = Program(os.path.join(root, name))
        torch.manual_seed(7)
        if "gemm" in name:
            a = torch.randn(1, 300, 256, device="cuda", dtype=torch.bfloat16) * 2
            b = torch.randn(1, 256, 520, device="cuda", dtype=torch.bfloat16)
            ref = (a[0].float() @ b[0].float())
            outs = []
            for ins in ({"a": a, "b": b}, {"a": shifted(a), "b": shifted(b)}):
                bufs = prog.prepare(ins, {"alpha": 1.0})
                prog.launch(bufs)
                torch.cuda.synchronize()
                outs.append(bufs["c"][0].float())
        else:
            # Head dim and causality from the kernel's symbol (…_HEAD_DIM_128_CAUSAL_1_…).
            sym = prog.meta["kernels"][0]["symbol"]
            d = int(sym.split("_HEAD_DIM_")[1].split("_")[0])
            causal = "_CAUSAL_1_" in sym
            q = torch.randn(1, 4, 300, d, device="cuda", dtype=torch.bfloat16) * 2
            k = torch.randn(1, 2, 257, d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(1, 2, 257, d, device="cuda", dtype=torch.bfloat16)
            kr, vr = (t.repeat_interleave(2, dim=1) for t in (k, v))
            s = (q.float() @ kr.float().transpose(-1, -2)) / math.sqrt(d)
            if causal:  # bottom-right aligned, as attention_fwd defines it: query i sees j <= i + Sk - Sq
                i = torch.arange(300, device="cuda")[:, None]
                j = torch.arange(257, device="cuda")[None, :]
                s = s.masked_fill(j > i + 257 - 300, float("-inf"))
            ref = torch.softmax(s, -1).nan_to_num(0.0) @ vr.float()
            outs = []
            for ins in ({"q": q, "k": k, "v": v}, {"q": shifted(q), "k": shifted(k), "v": shifted(v)}):
                bufs = prog.prepare(ins, {"scale": 1 / math.sqrt(d)})
                prog.launch(bufs)
                torch.cuda.synchronize()
                outs.append(bufs["o"].float())
        e_al, e_un, e_same = rel(outs[0], ref), rel(outs[1], ref), rel(outs[1], outs[0])
        ok = e_un < 1e-2 and e_same < 1e-2 and bool(torch.isfinite(outs[1]).all())
        bad += not ok
        print(f"{'PASS' if ok else 'FAIL'} unaligned {name}: aligned vs f32 {e_al:.2e}, "
              f"unaligned vs f32 {e_un:.2e}, unaligned vs aligned {e_same:.2e}", flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
