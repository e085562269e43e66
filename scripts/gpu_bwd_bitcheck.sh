#!/usr/bin/env bash
# Two builds of kirc on attention_bwd, for a change meant to leave its results unchanged (an
# instruction order, a load moved): on ragged GQA problems (q 2×4×301, k/v 2×2×389, magnitudes
# about 1.5, some keys five times larger) at head dim D, with the tiles and warps in TILE (by
# default the 128-key d128 kernel of long sequences, which small problems do not choose), for
# each case (not causal, causal, a causal window of 100 keys): dq, dk and dv of build B on the
# GPU against the interpreter (relative L2) and bit for bit against build A on the GPU; then
# compute-sanitizer memcheck of build B on the causal case. Time the builds afterwards with
# scripts/gpu_ab.sh --set bwd.
# usage: scripts/gpu_bwd_bitcheck.sh KIRC_A KIRC_B [D] [TILE]   (both built with --features cuda)
set -uo pipefail
a=${1:?usage: gpu_bwd_bitcheck.sh KIRC_A KIRC_B [D] [TILE]}
b=${2:?usage: gpu_bwd_bitcheck.sh KIRC_A KIRC_B [D] [TILE]}
d=${3:-128}
tile=${4:-"-D BLOCK_KV=128 -D BLOCK_M=64 -D BLOCK_MQ=128 -D BLOCK_N=128 --warps 8"}
export KIR_CACHE_DIR=off
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
t=$(mktemp -d)
python3 - "$t" "$d" <<'PY'
import sys, numpy as np
w, d = sys.argv[1], int(sys.argv[2])
r = np.random.default_rng()
for n, s in (("q", (2, 4, 301, d)), ("k", (2, 2, 389, d)), ("v", (2, 2, 389, d)), ("do", (2, 4, 301, d))):
    x = (r.standard_normal(s) * 1.5).astype(np.float32)
    if n == "k":
        x[:, :, 200:260] *= 5
    np.save(f"{w}/{n}.npy", x)
PY
scale=$(python3 -c "print(1 / $d ** 0.5)")
args() { # the backward's arguments for case flags "$1" (the forward's outputs from the interpreter)
  local fa=(--arg q="$t/q.npy" --arg k="$t/k.npy" --arg v="$t/v.npy" --arg scale="$scale" -D HEAD_DIM="$d" $1)
  "$a" run attention_fwd "${fa[@]}" --device cpu --out "$t/f" >/dev/null || return 1
  echo "${fa[@]}" --arg o="$t/f/o.npy" --arg lse="$t/f/lse.npy" --arg do="$t/do.npy"
}
for case in "-D CAUSAL=0" "-D CAUSAL=1" "-D CAUSAL=1 -D WINDOW=1 --arg window=100"; do
  # shellcheck disable=SC2207
  bw=($(args "$case")) || { echo "case [$case]: the forward failed"; continue; }
  rm -rf "$t/cpu" "$t/ga" "$t/gb"
  "$a" run attention_bwd "${bw[@]}" --device cpu --out "$t/cpu" >/dev/null
  # shellcheck disable=SC2086
  "$a" run attention_bwd "${bw[@]}" $tile --device cuda --out "$t/ga" 2>&1 | grep -i error
  # shellcheck disable=SC2086
  "$b" run attention_bwd "${bw[@]}" $tile --device cuda --out "$t/gb" 2>&1 | grep -i error
  python3 - "$t" "$case" <<'PY'
import sys, numpy as np
t, tag = sys.argv[1:]
def rel(x, y):
    x = np.load(x).astype(np.float64); y = np.load(y).astype(np.float64)
    return np.linalg.norm(x - y) / np.linalg.norm(x) if np.isfinite(y).all() else float("inf")
names = ("dq", "dk", "dv")
try:
    same = all(np.load(f"{t}/ga/{n}.npy").tobytes() == np.load(f"{t}/gb/{n}.npy").tobytes() for n in names)
    print(f"case [{tag}]: B against the interpreter " + ", ".join(f"{n} {rel(f'{t}/cpu/{n}.npy', f'{t}/gb/{n}.npy'):.1e}" for n in names)
          + f"; bit-identical to A: {same}")
except FileNotFoundError as e:
    print(f"case [{tag}]: missing output {e.filename}")
PY
done
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
# shellcheck disable=SC2207
bw=($(args "-D CAUSAL=1"))
if [ -n "$cs" ]; then
  # shellcheck disable=SC2086
  "$cs" --tool memcheck "$b" run attention_bwd "${bw[@]}" $tile --device cuda --out "$t/s" 2>&1 \
    | grep -E "ERROR SUMMARY|Invalid" | head -3
else
  echo "gpu_bwd_bitcheck.sh: no compute-sanitizer, memcheck skipped"
fi
