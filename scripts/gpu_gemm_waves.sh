#!/usr/bin/env bash
# GEMM tiles by wave count: the sm_90a default (128×256 tiles) against 128×192 tiles with the
# same schedule (groups, warp specialization, a persistent grid of 132, clusters where the
# default has them, 5 stages where 4 of the wider tile fit), by ncu kernel time beside cuBLAS,
# on shapes whose 128×256 tiles leave a partial last wave. First each candidate against a
# float64 oracle on ragged shapes (a last column tile two thirds full, K not a multiple of 64).
#   usage: scripts/gpu_gemm_waves.sh KIRC [ROUNDS] [SHAPES]   (KIRC built with --features cuda)
# One line per (shape, candidate, round): the median of the last 5 of 7 launches in µs.
set -uo pipefail
kirc=${1:?usage: gpu_gemm_waves.sh KIRC [ROUNDS] [SHAPES]}
rounds=${2:-2}
shapes=${3:-"16384x14336x4096 8192x8192x8192 8192x14336x4096 4096x128256x4096"}
export KIR_CACHE_DIR=off
tmp=$(mktemp -d)
n192() {  # the 128×192 candidate with the default's group, grid and clusters at shape $1
  local m n k; IFS=x read -r m n k <<<"$1"
  local rep g c
  rep=$("$kirc" compile gemm --target sm_90a --shape "a=1x${m}x${k}" --shape "b=1x${k}x${n}" --report -o "$tmp/r" 2>&1 | grep '^configuration')
  g=$(sed -E 's/.*GROUP_M=([0-9]+).*/\1/' <<<"$rep")
  c=$(grep -q 'clusters of 2' <<<"$rep" && echo on || echo off)
  echo "-D BLOCK_M=128 -D BLOCK_N=192 -D BLOCK_K=64 -D GROUP_M=$g --warps 8 --stages ${STAGES:-5} --warp-specialize on --persistent 132 --cluster $c"
}
# 1. Checks against float64.
python3 - "$kirc" "$tmp" "$(n192 8192x8192x8192)" "$(n192 8192x14336x4096)" <<'PY'
import subprocess, sys, numpy as np
kirc, d, *cands = sys.argv[1:]
r = np.random.default_rng()
for flags in cands:
    for (m, n, k) in ((4100, 2000, 130), (300, 1001, 520), (1000, 4480, 200)):
        a = (r.standard_normal((1, m, k)) * 2).astype(np.float32); b = (r.standard_normal((1, k, n)) * 2).astype(np.float32)
        np.save(f"{d}/a.npy", a); np.save(f"{d}/b.npy", b)
        p = subprocess.run([kirc, "run", "gemm", *flags.split(), "--arg", f"a={d}/a.npy", "--arg", f"b={d}/b.npy",
                            "--arg", "alpha=1.5", "--device", "cuda", "--out", f"{d}/o"], capture_output=True, text=True)
        if p.returncode:
            print(f"check {flags} {m}x{n}x{k}: did not run: {p.stderr.strip().splitlines()[-1:]}"); continue
        out = np.load(f"{d}/o/c.npy").astype(np.float64)[0]
        ref = 1.5 * (a[0].astype(np.float64) @ b[0].astype(np.float64))
        print(f"check {flags} {m}x{n}x{k}: rel L2 {np.linalg.norm(out - ref) / np.linalg.norm(ref):.2e}, non-finite {int((~np.isfinite(out)).sum())}", flush=True)
PY
# 2. Kernel time.
source "$(dirname "$0")/ncu_gemm.sh"
for r in $(seq "$rounds"); do
  for s in $shapes; do
    for cand in default n192; do
      flags=""; [ "$cand" = n192 ] && flags=$(n192 "$s")
      echo "round $r $s $cand: $(gemm_us "$kirc" "$s" $flags) us  ($flags)"
    done
    echo "round $r $s cuBLAS: $(cublas_us "$s") us"
  done
done
