#!/usr/bin/env bash
# Two builds of kirc on the GEMM bars by kernel time, interleaved, cuBLAS beside: first the
# second build's gemm (plain and SwiGLU epilogue, alpha 1 and 1.5) against a float64 oracle on
# ragged shapes, then ncu's gpu__time_duration (clocks left alone, the median of the last 5 of 7
# launches) of `kirc bench gemm` at alpha = 1 for each build and of torch's `a @ b`, ROUNDS
# rounds. For a change to gemm's PTX (its epilogue, say) against the commit before it.
#   usage: scripts/gpu_gemm_ab.sh KIRC_A KIRC_B [ROUNDS] [SHAPES]   (built with --features cuda)
set -uo pipefail
a=${1:?usage: gpu_gemm_ab.sh KIRC_A KIRC_B [ROUNDS] [SHAPES]}
b=${2:?usage: gpu_gemm_ab.sh KIRC_A KIRC_B [ROUNDS] [SHAPES]}
rounds=${3:-2}
shapes=${4:-"16384x14336x4096 8192x8192x8192"}
export KIR_CACHE_DIR=off
tmp=$(mktemp -d)
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
python3 - "$b" "$tmp" <<'PY'
import subprocess, sys, numpy as np
K, d = sys.argv[1:]
r = np.random.default_rng()
for (m, n, k) in ((4100, 2000, 130), (300, 1001, 520), (2050, 8200, 256)):
    for alpha in (1.0, 1.5):
        for ep in ("none", "swiglu"):
            mag = 0.5 if ep == "swiglu" else 2.0
            a = (r.standard_normal((1, m, k)) * mag).astype(np.float32)
            b = (r.standard_normal((1, k, n)) * mag).astype(np.float32)
            np.save(f"{d}/a.npy", a); np.save(f"{d}/b.npy", b)
            args = ["--arg", f"a={d}/a.npy", "--arg", f"b={d}/b.npy", "--arg", f"alpha={alpha}"]
            A, B = a[0].astype(np.float64), b[0].astype(np.float64)
            ref = alpha * (A @ B)
            if ep == "swiglu":
                b2 = (r.standard_normal((1, k, n)) * mag).astype(np.float32)
                np.save(f"{d}/b2.npy", b2); args += ["--arg", f"b2={d}/b2.npy"]
                ref = ref / (1 + np.exp(-ref)) * (alpha * (A @ b2[0].astype(np.float64)))
            p = subprocess.run([K, "run", "gemm", "-D", f"EPILOGUE={ep}", *args, "--device", "cuda",
                                "--out", f"{d}/o"], capture_output=True, text=True)
            if p.returncode:
                print(f"check gemm {ep} alpha {alpha} {m}x{n}x{k}: did not run: {p.stderr.strip()[-200:]}")
                continue
            o = np.load(f"{d}/o/c.npy").astype(np.float64)[0]
            rel = np.linalg.norm(o - ref) / np.linalg.norm(ref)
            print(f"check gemm {ep} alpha {alpha} {m}x{n}x{k}: rel L2 {rel:.2e}, non-finite {int((~np.isfinite(o)).sum())}", flush=True)
PY
source "$(dirname "$0")/ncu_gemm.sh"
for r in $(seq "$rounds"); do
  for s in $shapes; do
    for kirc in "$a" "$b"; do
      echo "round $r gemm $s $kirc: $(gemm_us "$kirc" "$s") us"
    done
    echo "round $r gemm $s cuBLAS: $(cublas_us "$s") us"
  done
done
