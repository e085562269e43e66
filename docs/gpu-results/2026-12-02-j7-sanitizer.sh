#!/usr/bin/env bash
# Call J7: the paired dot_overlap through the Rust runtime (kirc run --device cuda) against the
# interpreter on ragged GQA d128 (q 1x4x300, k/v 1x2x257), and compute-sanitizer on it.
set -uo pipefail
K=gpu_chk/j7/kirc; I=gpu_chk/j7/in
A="--arg q=$I/q.npy --arg k=$I/k.npy --arg v=$I/v.npy --arg scale=0.088 --device cuda --target sm_90a"
T="-D DTYPE=bf16 -D HEAD_DIM=128 -D BLOCK_M=128 -D BLOCK_N=128 --warps 8 --stages 3 --overlap on"
cmp() { python3 - "$1" "$2" <<'PY'
import sys, numpy as np
a, b = sys.argv[1], sys.argv[2]
for n in ["o", "lse"]:
    x = np.load(f"{a}/{n}.npy").astype(np.float64); r = np.load(f"{b}/{n}.npy").astype(np.float64)
    print(f"  {n}: rel {np.linalg.norm(x - r) / np.linalg.norm(r):.2e}, finite {np.isfinite(x).all()}")
PY
}
run() { name=$1; c=$2; shift 2; echo "$name"; timeout 30 $K run attention_fwd $T -D CAUSAL=$c "$@" $A --out $OUT/$name >/dev/null 2>&1 || echo "  run failed"; cmp $OUT/$name gpu_chk/j7/ref_c$c; }
run overlap_c0 0
run overlap_c1 1
run ws_overlap_c0 0 --warp-specialize on
san() { tool=$1; name=$2; c=$3; shift 3; timeout 40 compute-sanitizer --tool $tool $K run attention_fwd $T -D CAUSAL=$c "$@" $A --out $OUT/san 2>&1 | grep -E "SUMMARY" | sed "s/^/$tool $name: /" || echo "$tool $name: timeout"; }
san racecheck overlap_c1 1
san synccheck overlap_c1 1
san racecheck ws_overlap_c0 0 --warp-specialize on
san synccheck ws_overlap_c0 0 --warp-specialize on
san memcheck ws_overlap_c0 0 --warp-specialize on
