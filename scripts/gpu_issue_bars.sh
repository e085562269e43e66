#!/usr/bin/env bash
# The open speed bars of issues 24 and 26 in one GPU call (about five minutes), kir's defaults
# beside their peers in the same process family, after a correctness check of the kernels timed:
#   1. attention_fwd (d64, d128, d256) and attention_bwd (d64, d128, d256), causal or not, with
#      `kirc run --device cuda` against the interpreter (`--device cpu`) on ragged GQA problems
#      (q 2×4×300, k/v 2×2×389, magnitudes about 2, later keys six times larger): relative L2
#      over the finite outputs and the count of non-finite values;
#   2. the forward bars (d128 B 16 H 16 S 1k, d256 B 4 H 8 S 4k) and the backward bars (d128
#      B 1 H 16 S 16k, causal too; d64 B 4 H 32 S 4k; d256 B 4 H 8 S 4k; FLOPs 2.5× the
#      forward's): `kirc bench` at the defaults and cuDNN through torch SDPA's CUDNN backend
#      (CUDA events, median of 20 after 5 warm-ups), interleaved, ROUNDS rounds;
#   3. GEMM 16384×14336×4096 and 8192³ by kernel time: ncu's gpu__time_duration (clocks left
#      alone, the median of the last 5 of 7 launches) of `kirc bench gemm` and of torch's
#      `a @ b` (cuBLAS), ROUNDS rounds;
#   4. a table of kir / peer per bar from the medians of the rounds.
# The norm bars have their own call: scripts/gpu_norm_bwd.sh.
#
# usage: scripts/gpu_issue_bars.sh KIRC [ROUNDS]   (KIRC built with --features cuda; ROUNDS 2)
# Output: the raw lines, then the table; results also in $OUT (default a temporary folder).
set -uo pipefail
kirc=${1:?usage: gpu_issue_bars.sh KIRC [ROUNDS]}
rounds=${2:-2}
[ -x "$kirc" ] || { echo "gpu_issue_bars.sh: no kirc at $kirc" >&2; exit 1; }
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
export KIR_CACHE_DIR=off
res="$out/bars.txt"
: >"$res"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader
tmp=$(mktemp -d)

# 1. Checks against the interpreter.
python3 - "$tmp" <<'PY'
import sys, numpy as np
d, r = sys.argv[1], np.random.default_rng()
for hd in (64, 128, 256):
    for n, s in (("q", (2, 4, 300, hd)), ("k", (2, 2, 389, hd)), ("v", (2, 2, 389, hd)), ("do", (2, 4, 300, hd))):
        x = (r.standard_normal(s) * 2).astype(np.float32)
        if n == "k":
            x[:, :, 200:260] *= 6
        np.save(f"{d}/{n}{hd}.npy", x)
PY
compare() {
  python3 - "$1" "$2" "$3" <<'PY'
import os, sys, numpy as np
a_dir, b_dir, tag = sys.argv[1:]
for f in sorted(os.listdir(b_dir)):
    a = np.load(f"{a_dir}/{f}").astype(np.float64); b = np.load(f"{b_dir}/{f}").astype(np.float64)
    m = np.isfinite(b)
    rel = np.linalg.norm(a[m] - b[m]) / max(np.linalg.norm(b[m]), 1e-30)
    print(f"check {tag} {f}: rel L2 {rel:.2e}, non-finite {int((~np.isfinite(a)).sum())} (interpreter {int((~m).sum())})")
PY
}
for hd in 64 128 256; do
  sc=$(python3 -c "print(1 / $hd ** 0.5)")
  qkv="--arg q=$tmp/q$hd.npy --arg k=$tmp/k$hd.npy --arg v=$tmp/v$hd.npy --arg scale=$sc"
  for c in 0 1; do
    for dev in cuda cpu; do
      "$kirc" run attention_fwd -D HEAD_DIM=$hd -D CAUSAL=$c $qkv --device $dev --out "$tmp/f$dev" >/dev/null
    done
    compare "$tmp/fcuda" "$tmp/fcpu" "attention_fwd d$hd causal $c"
    for dev in cuda cpu; do
      "$kirc" run attention_bwd -D HEAD_DIM=$hd -D CAUSAL=$c $qkv --arg o="$tmp/fcpu/o.npy" \
        --arg lse="$tmp/fcpu/lse.npy" --arg do="$tmp/do$hd.npy" --device $dev --out "$tmp/b$dev" >/dev/null
    done
    compare "$tmp/bcuda" "$tmp/bcpu" "attention_bwd d$hd causal $c"
  done
done

# 2. Attention bars beside cuDNN.
cat >"$tmp/cudnn.py" <<'PY'
import sys, torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
b, h, s, d, c, bwd = map(int, sys.argv[1:7])
q = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=bool(bwd))
k = torch.randn_like(q, requires_grad=bool(bwd)); v = torch.randn_like(q, requires_grad=bool(bwd))
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    if bwd:
        o = F.scaled_dot_product_attention(q, k, v, is_causal=bool(c)); do = torch.randn_like(o)
        f = lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
    else:
        f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(c))
    for _ in range(5): f()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(20)]
    for a, e in ev: a.record(); f(); e.record()
    torch.cuda.synchronize(); ms = sorted(a.elapsed_time(e) for a, e in ev)[10]
print(f"{(10 if bwd else 4) * b * h * s * s * d / (2 if c else 1) / ms / 1e9:.1f}")
PY
shapes() { echo "--shape q=$1x$2x$3x$4 --shape k=$1x$2x$3x$4 --shape v=$1x$2x$3x$4"; }
tflops() { grep -E "TFLOP/s" | tail -1 | sed -E 's#^(.*[^0-9.])?([0-9.]+) TFLOP/s.*#\2#'; }
for r in $(seq "$rounds"); do
  for cfg in "fwd 16 16 1024 128 0" "fwd 4 8 4096 256 0" "bwd 1 16 16384 128 0" "bwd 1 16 16384 128 1" \
    "bwd 4 32 4096 64 0" "bwd 4 8 4096 256 0"; do
    set -- $cfg
    kind=$1; shift
    sc=$(python3 -c "print(1 / $4 ** 0.5)")
    name="$kind d$4 B$1 H$2 S$3 causal $5"
    if [ "$kind" = fwd ]; then
      x=$("$kirc" bench attention_fwd -D HEAD_DIM=$4 -D CAUSAL=$5 $(shapes "$@") --arg scale=$sc --iters 30 2>&1 | tflops)
      p=$(python3 "$tmp/cudnn.py" "$@" 0)
    else
      fl=$([ "$5" = 0 ] && echo 10 || echo 5)
      x=$("$kirc" bench attention_bwd -D HEAD_DIM=$4 -D CAUSAL=$5 $(shapes "$@") --shape o=$1x$2x$3x$4 \
        --shape do=$1x$2x$3x$4 --shape lse=$1x$2x$3 --arg scale=$sc --iters 5 \
        --flops "$fl*$1*$2*$3*$3*$4" 2>&1 | tflops)
      p=$(python3 "$tmp/cudnn.py" "$@" 1)
    fi
    echo "$name|kir|${x:-none}|cuDNN|${p:-none}" | tee -a "$res"
  done
done

# 3. GEMM beside cuBLAS by kernel time.
source "$(dirname "$0")/ncu_gemm.sh"
if [ -x "$ncu_bin" ]; then
  for r in $(seq "$rounds"); do
    for s in 16384x14336x4096 8192x8192x8192; do
      echo "gemm $s (us)|kir|$(gemm_us "$kirc" "$s")|cuBLAS|$(cublas_us "$s")" | tee -a "$res"
    done
  done
else
  echo "gpu_issue_bars.sh: no ncu, GEMM skipped" >&2
fi

# 4. The table: medians over the rounds; speed ratios (time ratios for the GEMM rows in µs).
python3 - "$res" <<'PY'
import sys, statistics
rows = {}
for line in open(sys.argv[1]):
    name, _, x, peer, p = line.strip().split("|")
    rows.setdefault((name, peer), []).append((x, p))
print(f"\n{'bar':<40} {'kir':>10} {'peer':>10} {'kir/peer':>9}")
for (name, peer), v in rows.items():
    try:
        x = statistics.median(float(a) for a, _ in v); p = statistics.median(float(b) for _, b in v)
    except ValueError:
        print(f"{name:<40} {'none':>10}"); continue
    ratio = p / x if "(us)" in name else x / p
    print(f"{name:<40} {x:>10.2f} {p:>10.2f} {ratio:>8.3f}x  ({peer})")
PY
