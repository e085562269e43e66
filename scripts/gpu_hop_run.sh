#!/usr/bin/env bash
# One H200 call over artifacts built by scripts/gpu_artifacts.py (packed as ARCHIVE, a .tar.xz of
# the artifact folder): checks and timings through scripts/gpu_check_ptx.py, then `kirc` itself
# (built with `--features cuda`, so the Rust runtime encodes the tensor maps) on a ragged
# attention case against the interpreter's outputs and on the S = 16k benchmark.
#
# usage (on the GPU machine, from the repository root):
#   scripts/gpu_hop_run.sh ARCHIVE PHASE
#   PHASE check: every check case (PTX and CUDA C against the interpreter), plus the Rust runtime
#                parity case; time: MATCH (a substring of timing case names, env, default
#                `time_`); bench: kirc bench at S = 16k (d64/128/256, causal and not) and GEMM.
# Results go to $OUT (json and logs); the last lines printed are a short table.
set -euo pipefail
archive=$1
phase=$2
out=${OUT:-/tmp/kir_out}
mkdir -p "$out"
# The archive holds one folder named like it (gpu_tma.tar.xz: gpu_tma/).
dir=$(basename "$archive" .tar.xz)
[ -d "$dir" ] || tar xJf "$archive"
kirc=${KIRC:-target/release/kirc}
case "$phase" in
  check)
    python3 scripts/gpu_check_ptx.py "$dir" --only check --json "$out/check.json" 2>&1 | tee "$out/check.log" | grep -v "^PASS" || true
    # The Rust runtime (tensor maps encoded through cudarc) on the ragged GQA case.
    c=$dir/attn_hop_d128_default_c0
    "$kirc" run attention_fwd -D DTYPE=bf16 -D HEAD_DIM=128 -D CAUSAL=0 --device cuda --target sm_90a \
      --arg q="$c/inputs/q.npy" --arg k="$c/inputs/k.npy" --arg v="$c/inputs/v.npy" \
      --arg scale=0.0883883461356163 --out "$out/rt"
    python3 - "$c" "$out/rt" <<'EOF'
import sys, numpy as np
c, rt = sys.argv[1], sys.argv[2]
for n in ("o", "lse"):
    a = np.load(f"{rt}/{n}.npy").astype(np.float64); b = np.load(f"{c}/interp/{n}.npy").astype(np.float64)
    fin = np.isfinite(b)
    r = np.linalg.norm(np.where(fin, a - b, 0)) / max(np.linalg.norm(np.where(fin, b, 0)), 1e-30)
    same_inf = bool(np.all(np.isfinite(a) == fin))
    print(f"{'PASS' if r < 1e-2 and same_inf else 'FAIL'} kirc run --device cuda attention_fwd d128 ragged: {n} rel {r:.2e}")
EOF
    grep -c "^PASS" "$out/check.log" | sed 's/^/check PASS: /'
    grep -c "^FAIL" "$out/check.log" | sed 's/^/check FAIL: /' || true
    ;;
  time)
    python3 scripts/gpu_check_ptx.py "$dir" --only time --match "${MATCH:-time_}" --json "$out/time.json" 2>&1 | tee "$out/time.log" | grep -E "S16384|8192x8192|16384x14336|4096x4096|ERROR" || true
    ;;
  bench)
    for d in 64 128 256; do
      h=$((2048 / d))
      for causal in 0 1; do
        f="4*B*Hq*Sq*Sk*$d"
        [ "$causal" = 1 ] && f="2*B*Hq*Sq*Sk*$d"
        echo "== kirc bench attention_fwd bf16 d$d causal $causal (1x${h}x16384)"
        "$kirc" bench attention_fwd -D DTYPE=bf16 -D HEAD_DIM=$d -D CAUSAL=$causal \
          --shape q=1x${h}x16384x$d --shape k=1x${h}x16384x$d --shape v=1x${h}x16384x$d \
          --arg scale=0.0883883461356163 --flops "$f" 2>&1 | tail -2
      done
    done
    echo "== kirc bench gemm bf16 8192^3"
    "$kirc" bench gemm -D DTYPE=bf16 --shape a=1x8192x8192 --shape b=1x8192x8192 --arg alpha=1.0 \
      --flops "2*M*N*K" 2>&1 | tail -2
    ;;
  *)
    echo "unknown phase $phase (check, time, bench)" >&2
    exit 2
    ;;
esac
