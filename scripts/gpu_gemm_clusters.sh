#!/usr/bin/env bash
# The sm_90a GEMM default in clusters of two that share B (the `cluster` pass; from 1,024
# output tiles) against the same row without clusters and cuBLAS, with correctness first:
#  1. `kirc run --device cuda` of the default GEMM tile (128x256x64, warp-specialized,
#     persistent) with and without `--cluster on` on ragged problems: an odd tile count whose
#     pairs straddle columns (1x300x520), shared B tiles (3x1000x1500 · 1500x520) and a grid of
#     4 programs; the outputs must be the same bits, and each is compared with an f64 matmul;
#  2. `kirc bench` of the default and `--cluster off`, then cuBLAS (`a @ b` through torch,
#     CUDA-event median), interleaved, three rounds: the issue-24 shapes.
# usage: scripts/gpu_gemm_clusters.sh [KIRC]   (a kirc built with --features cuda, default out/kirc)
set -uo pipefail
k=${1:-${KIRC:-out/kirc}}
export KIR_CACHE_DIR=off
tmp=$(mktemp -d)
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader
echo "== 1. correctness: --cluster on and off give the same bits (rel L2 against f64)"
python3 - "$tmp" <<'PY'
import sys, numpy as np
d, r = sys.argv[1], np.random.default_rng()
for n, s in (("a1", (1, 300, 200)), ("b1", (1, 200, 520)), ("a2", (3, 1000, 1500)), ("b2", (3, 1500, 520))):
    np.save(f"{d}/{n}.npy", (r.standard_normal(s) * 2).astype(np.float32))
PY
tile="-D BLOCK_M=128 -D BLOCK_N=256 -D BLOCK_K=64 -D GROUP_M=16 --warps 8 --stages 4 --warp-specialize on"
for case in "1 132" "2 132" "2 4"; do
  read -r i p <<<"$case"
  for cl in off on; do
    # shellcheck disable=SC2086
    "$k" run gemm --device cuda $tile --persistent "$p" --cluster $cl --arg a="$tmp/a$i.npy" \
      --arg b="$tmp/b$i.npy" --arg alpha=0.75 --out "$tmp/c${i}_${p}_$cl" >/dev/null 2>"$tmp/err" \
      || { echo "case $i P$p cluster $cl: $(head -3 "$tmp/err")"; continue; }
  done
  python3 - "$tmp" "$i" "$p" <<'PY'
import sys, numpy as np
d, i, p = sys.argv[1:]
a = np.load(f"{d}/a{i}.npy").astype(np.float64); b = np.load(f"{d}/b{i}.npy").astype(np.float64)
ref = 0.75 * np.matmul(a, b)
off = np.load(f"{d}/c{i}_{p}_off/c.npy"); on = np.load(f"{d}/c{i}_{p}_on/c.npy")
rel = lambda c: np.linalg.norm(c.astype(np.float64) - ref) / np.linalg.norm(ref)
same = off.tobytes() == on.tobytes()
print(f"{a.shape[0]}x{a.shape[1]}x{b.shape[2]} K {a.shape[2]} P{p}: same bits {same}{'' if same else ' FAIL'}, rel L2 off {rel(off):.2e} on {rel(on):.2e}")
PY
done
echo "== 2. kirc bench (median ms) and cuBLAS, interleaved, three rounds"
cat > "$tmp/cublas.py" <<'PY'
import sys, torch
sys.path.insert(0, 'scripts')
from peers import median_ms
m, n, k = map(int, sys.argv[1].split('x'))
a = torch.randn(m, k, device='cuda', dtype=torch.bfloat16); b = torch.randn(k, n, device='cuda', dtype=torch.bfloat16)
t = median_ms(lambda: a @ b, 40)
print(f"{sys.argv[1]:<18} cuBLAS            {t:.4f} ms  {2 * m * n * k / t / 1e9:.1f} TFLOP/s")
PY
for s in 16384x14336x4096 8192x8192x8192 4096x128256x4096 4096x4096x4096 8192x1024x8192; do
  IFS=x read -r m n kk <<<"$s"
  for round in 1 2 3; do
    for flag in "" "--cluster off"; do
      # shellcheck disable=SC2086
      r=$("$k" bench gemm $flag --shape "a=1x${m}x${kk}" --shape "b=1x${kk}x${n}" --arg alpha=1 --iters 40 2>&1 | grep -E "ms median|error" | head -1)
      printf '%-18s %-17s %s\n' "$s" "${flag:-default}" "$r"
    done
    python3 "$tmp/cublas.py" "$s"
  done
done
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
