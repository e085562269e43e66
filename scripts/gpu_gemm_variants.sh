#!/usr/bin/env bash
# The built-in GEMM's variants beyond the plain product, at kir's defaults, in one GPU call
# (about three minutes): A stored transposed (`TRANS_A = 1`, a linear layer's weight gradient
# dB = Aᵀ·dC; B transposed too), an input tile added (`C_IN = 1`, beta), a bias, and the SwiGLU
# epilogue (two dots sharing A: silu(a·b) ⊙ a·b2).
#   1. every variant with `kirc run --device cuda` (the configuration its shapes pick) against a
#      float64 oracle in numpy on ragged shapes (300×1001×200 to 4100×2050×130, M = 40 and 100
#      for the small-M rows; inputs about 2 in magnitude, c_in about 40, a bias about 30, alpha
#      1.5, beta 0.75; SwiGLU's inputs about 0.5): relative L2 and the count of non-finite values;
#      and a user's matmul with no group constant (tests/in/user/matmul_leaky_relu.kir) at a
#      shape whose persistent grid runs in clusters of two;
#   2. `kirc bench` (median of 30) of each variant at 4096³, 8192³ and 16384×14336×4096 (SwiGLU
#      at M = 8192, N = K = 4096 and 16384×14336×4096), beside the same work in torch (cuBLAS:
#      `a.t() @ b`, `addmm(c, a, b)`, `silu(x @ wg) * (x @ wu)`; CUDA events, median of 30),
#      ROUNDS rounds; with BASE (another kirc, e.g. the previous commit's) timed beside KIRC.
# usage: scripts/gpu_gemm_variants.sh KIRC [ROUNDS] [BASE]   (each kirc built with --features cuda)
#   CHECK=0 skips part 1; VARIANTS="swiglu:8192x4096x4096 c_in:4096x4096x4096" times only those.
set -uo pipefail
kirc=${1:?usage: gpu_gemm_variants.sh KIRC [ROUNDS] [BASE]}
rounds=${2:-2}
base=${3:-}
[ -x "$kirc" ] || { echo "gpu_gemm_variants.sh: no kirc at $kirc" >&2; exit 1; }
export KIR_CACHE_DIR=off
tmp=$(mktemp -d)
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader

# 1. Checks against float64.
[ "${CHECK:-1}" = 0 ] || python3 - "$kirc" "$tmp" <<'PY'
import os, subprocess, sys
import numpy as np
kirc, d = sys.argv[1:]
r = np.random.default_rng()
def run(defs, files, scalars):
    args = []
    for f, x in files.items():
        np.save(f"{d}/{f}.npy", x); args += ["--arg", f"{f}={d}/{f}.npy"]
    for name, v in scalars.items():
        args += ["--arg", f"{name}={v}"]
    p = subprocess.run([kirc, "run", "gemm", *defs, *args, "--device", "cuda", "--out", f"{d}/o"],
                       capture_output=True, text=True)
    if p.returncode:
        return None, p.stderr.strip().splitlines()[-1:]
    return np.load(f"{d}/o/c.npy").astype(np.float64)[0], None
for (m, n, k) in ((300, 1001, 200), (1000, 1000, 520), (4100, 2050, 130), (100, 257, 130), (40, 300, 200)):
    for var in ("trans_a", "trans_a trans_b", "trans_a c_in", "c_in", "c_in bias", "swiglu", "swiglu trans_b"):
        ta, tb = "trans_a" in var, "trans_b" in var
        mag = 0.5 if "swiglu" in var else 2.0
        a = (r.standard_normal((1, k, m) if ta else (1, m, k)) * mag).astype(np.float32)
        bs = (1, n, k) if tb else (1, k, n)
        b = (r.standard_normal(bs) * mag).astype(np.float32)
        A = (a[0].T if ta else a[0]).astype(np.float64)
        B = (b[0].T if tb else b[0]).astype(np.float64)
        defs = [f"-D TRANS_A={int(ta)}", f"-D TRANS_B={int(tb)}"]
        files, scalars = {"a": a, "b": b}, {"alpha": 1.5}
        ref = 1.5 * (A @ B)
        if "c_in" in var:
            c = (r.standard_normal((1, m, n)) * 40).astype(np.float32)
            files["c_in"] = c; scalars["beta"] = 0.75; defs.append("-D C_IN=1")
            ref = ref + 0.75 * c[0].astype(np.float64)
        if "bias" in var:
            bias = (r.standard_normal(n) * 30).astype(np.float32)
            files["bias"] = bias; defs.append("-D EPILOGUE=bias")
            ref = ref + bias.astype(np.float64)
        if "swiglu" in var:
            b2 = (r.standard_normal(bs) * mag).astype(np.float32)
            files["b2"] = b2; defs.append("-D EPILOGUE=swiglu")
            u = 1.5 * (A @ (b2[0].T if tb else b2[0]).astype(np.float64))
            ref = ref / (1 + np.exp(-ref)) * u
        out, err = run(" ".join(defs).split(), files, scalars)
        if out is None:
            print(f"check gemm {var} {m}x{n}x{k}: did not run: {err}", flush=True)
            continue
        rel = np.linalg.norm(out - ref) / np.linalg.norm(ref)
        print(f"check gemm {var} {m}x{n}x{k}: rel L2 {rel:.2e}, non-finite {int(np.sum(~np.isfinite(out)))}", flush=True)
# A user's matmul (tests/in/user/matmul_leaky_relu.kir, f16, no group constant: its persistent
# grid walks the tiles in the row's groups of rows, in clusters of two from 1,024 tiles).
for (m, n, k) in ((4100, 8192, 130), (1000, 1001, 520)):
    a = (r.standard_normal((m, k)) * 2).astype(np.float32); b = (r.standard_normal((k, n)) * 2).astype(np.float32)
    np.save(f"{d}/ua.npy", a); np.save(f"{d}/ub.npy", b)
    p = subprocess.run([kirc, "run", "tests/in/user/matmul_leaky_relu.kir", "--arg", f"a={d}/ua.npy",
                        "--arg", f"b={d}/ub.npy", "--device", "cuda", "--out", f"{d}/uo"],
                       capture_output=True, text=True)
    if p.returncode:
        print(f"check user matmul {m}x{n}x{k}: did not run: {p.stderr.strip().splitlines()[-1:]}", flush=True)
        continue
    s16 = a.astype(np.float16).astype(np.float64) @ b.astype(np.float16).astype(np.float64)
    ref = np.where(s16 > 0, s16, 0.01 * s16)
    out = np.load(f"{d}/uo/c.npy").astype(np.float64)
    rel = np.linalg.norm(out - ref) / np.linalg.norm(ref)
    print(f"check user matmul {m}x{n}x{k}: rel L2 {rel:.2e}, non-finite {int(np.sum(~np.isfinite(out)))}", flush=True)
PY

# 2. Timing beside torch.
cat >"$tmp/peer.py" <<'PY'
import sys, torch, torch.nn.functional as F
var, shape = sys.argv[1], sys.argv[2]
m, n, k = map(int, shape.split("x"))
t = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16)
if var == "trans_a":
    a, b = t(k, m), t(k, n); f = lambda: a.t() @ b; name = "a.t() @ b"
elif var == "c_in":
    a, b, c = t(m, k), t(k, n), t(m, n); f = lambda: torch.addmm(c, a, b); name = "addmm(c, a, b)"
else:
    x, wg, wu = t(m, k), t(k, n), t(k, n); f = lambda: F.silu(x @ wg) * (x @ wu); name = "silu(x @ wg) * (x @ wu)"
for _ in range(10): f()
ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(30)]
for s, e in ev: s.record(); f(); e.record()
torch.cuda.synchronize()
ms = sorted(s.elapsed_time(e) for s, e in ev)[15]
print(f"torch {name} {shape}: {ms:.4f} ms")
PY
bench() {
  local bin=$1 var=$2 m=$3 n=$4 kk=$5
  case $var in
    trans_a) set -- -D TRANS_A=1 --shape "a=1x${kk}x${m}" --shape "b=1x${kk}x${n}" ;;
    c_in) set -- -D C_IN=1 --shape "a=1x${m}x${kk}" --shape "b=1x${kk}x${n}" --shape "c_in=1x${m}x${n}" --arg beta=1 ;;
    swiglu) set -- -D EPILOGUE=swiglu --shape "a=1x${m}x${kk}" --shape "b=1x${kk}x${n}" --shape "b2=1x${kk}x${n}" ;;
  esac
  "$bin" bench gemm "$@" --arg alpha=1 --iters 30 2>&1 | grep -E " ms median|rror" | tail -1
}
for r in $(seq "$rounds"); do
  for v in ${VARIANTS:-trans_a:4096x4096x4096 trans_a:8192x8192x8192 trans_a:16384x14336x4096 \
    c_in:4096x4096x4096 c_in:8192x8192x8192 c_in:16384x14336x4096 \
    swiglu:8192x4096x4096 swiglu:16384x14336x4096}; do
    set -- ${v/:/ }
    IFS=x read -r m n kk <<<"$2"
    echo "round $r $1 $2 kir: $(bench "$kirc" "$1" "$m" "$n" "$kk")"
    [ -n "$base" ] && echo "round $r $1 $2 base: $(bench "$base" "$1" "$m" "$n" "$kk")"
    python3 "$tmp/peer.py" "$1" "$2"
  done
done
