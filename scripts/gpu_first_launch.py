#!/usr/bin/env python3
"""Time to first launch on a GPU machine: `kirc compile` of a built-in op plus the driver's JIT of
its PTX, each measured cold (a fresh process, CUDA_CACHE_DISABLE=1), next to the first call of
the Triton attention kernel (scripts/triton_attn.py) with an empty Triton cache, compilation
included. Also reports PTX line counts (kir's and Triton's for the same tile).

usage: python3 scripts/gpu_first_launch.py KIRC [--json OUT.json]
KIRC is a kirc binary that runs on this machine (built elsewhere and carried).
"""
import json, os, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))

JIT = r"""
import sys, time
t0 = time.perf_counter()
import cupy as cp
cp.zeros(1).sum()  # context up before timing the JIT
t1 = time.perf_counter()
m = cp.RawModule(path=sys.argv[1])
for s in sys.argv[2:]:
    m.get_function(s)
cp.cuda.Device(0).synchronize()
print(time.perf_counter() - t1)
"""

TRITON = r"""
import math, sys, time
sys.path.insert(0, sys.argv[1])
import torch
q, k, v = (torch.randn(1, 16, 1024, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
torch.cuda.synchronize()
import triton_attn
t0 = time.perf_counter()
o = triton_attn.attention(q, k, v, False, 1 / math.sqrt(128), 128, 64, 8, 3)
torch.cuda.synchronize()
first = time.perf_counter() - t0
ptx_lines = None
try:
    ptx_lines = len(triton_attn.LAST[0].asm["ptx"].splitlines())
except Exception:
    pass
print(first, ptx_lines)
"""


def kir_case(kirc, op, defines=()):
    d = tempfile.mkdtemp()
    ptx, meta = os.path.join(d, "k.ptx"), os.path.join(d, "m.json")
    cmd = [kirc, "compile", op, "--target", "sm_90a", "-o", ptx, "--meta", meta]
    for x in defines:
        cmd += ["-D", x]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    compile_s = time.perf_counter() - t0
    syms = [k["symbol"] for k in json.load(open(meta))["kernels"]]
    env = dict(os.environ, CUDA_CACHE_DISABLE="1")
    jit = [float(subprocess.run([sys.executable, "-c", JIT, ptx, *syms], env=env, check=True,
                                capture_output=True, text=True).stdout.strip()) for _ in range(3)]
    jit.sort()
    lines = sum(1 for _ in open(ptx))
    return {"op": op, "defines": list(defines), "compile_s": compile_s, "jit_s_median": jit[1],
            "first_launch_s": compile_s + jit[1], "ptx_lines": lines}


def main():
    kirc = sys.argv[1]
    rows = [kir_case(kirc, "attention_fwd"), kir_case(kirc, "attention_fwd", ["CAUSAL=1"]),
            kir_case(kirc, "attention_bwd"), kir_case(kirc, "gemm")]
    env = dict(os.environ, TRITON_CACHE_DIR=tempfile.mkdtemp(), CUDA_CACHE_DISABLE="1")
    out = subprocess.run([sys.executable, "-c", TRITON, HERE], env=env, check=True, capture_output=True,
                         text=True).stdout.split()
    triton = {"first_call_s": float(out[0]), "ptx_lines": None if out[1] == "None" else int(out[1])}
    for r in rows:
        print(f"kir {r['op']} {r['defines']}: compile {r['compile_s'] * 1e3:.0f} ms + JIT {r['jit_s_median'] * 1e3:.0f} ms"
              f" = {r['first_launch_s'] * 1e3:.0f} ms, {r['ptx_lines']} PTX lines")
    print(f"triton attention (128x64, 8 warps, 3 stages) first call {triton['first_call_s'] * 1e3:.0f} ms, "
          f"{triton['ptx_lines']} PTX lines")
    if "--json" in sys.argv:
        json.dump({"kir": rows, "triton": triton}, open(sys.argv[sys.argv.index("--json") + 1], "w"), indent=1)


if __name__ == "__main__":
    main()
