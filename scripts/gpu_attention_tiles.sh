#!/usr/bin/env bash
# Attention configurations that are not defaults, in one GPU call, beside the defaults and the
# peers, with correctness checked first:
#  1. each forward candidate (FlashAttention-3's tiles: 128x176 at d128, 128x80 at d256, plain,
#     warp-specialized, persistent or with dot_overlap; persistent programs in clusters of two
#     sharing the key and value blocks, `--cluster on`, which causal attention refuses) and the
#     backward's atomic mode, run by
#     `kirc run --device cuda` on ragged problems (GQA, Sq != Sk, causal or not) against the
#     interpreter's outputs of the default (`--device cpu`);
#  2. `kirc bench` of the defaults and the candidates, alternating, two rounds: attention_fwd
#     d128 S 1k (B 16, H 16), d128 S 16k (B 1, H 16), d256 S 4k (B 4, H 8), S 1k (B 16, H 16) and
#     S 16k (B 1, H 16); attention_bwd in
#     both DETERMINISTIC modes at d128 S 16k (causal too), d64 S 4k (B 4, H 32), d256 S 4k;
#  2b. `kirc tune attention_fwd` at d128 S 1k and d256 S 4k over the key blocks (FA3's 80 and
#     176 among them), query blocks, warps, warp specialization, a persistent grid and overlap (GROUP_H 1, 2 stages;
#     160 candidates each, every one checked against the interpreter), the table's top lines;
#  3. torch SDPA (FlashAttention-2 and cuDNN) forward and backward at the same shapes;
#  4. the first launch of attention_fwd and attention_bwd in fresh processes with
#     CUDA_CACHE_DISABLE=1, an empty kir cache and no prebuilt cubins: through the driver's JIT
#     and through the ptxas that Triton's wheel ships (what `kir.ptxas()` finds in a PyTorch
#     environment without a CUDA toolkit).
# usage: scripts/gpu_attention_tiles.sh [KIRC] [SECTION...]   (a kirc built with --features cuda,
# default out/kirc; the sections to run, default all: 1 2 2b 3 4). All of them take about ten
# minutes on the H200; split them over calls where a call is limited to that.
set -uo pipefail
k=${1:-${KIRC:-out/kirc}}
shift || true
sections=" ${*:-1 2 2b 3 4} "
want() { [[ $sections == *" $1 "* ]]; }
tmp=$(mktemp -d)
s64=0.125 s128=0.08838834764831845 s256=0.0625

fwd128=("" "-D BLOCK_M=128 -D BLOCK_N=176" "-D BLOCK_M=128 -D BLOCK_N=176 --warp-specialize on"
  "-D BLOCK_M=128 -D BLOCK_N=176 --warp-specialize on --persistent 132"
  "-D BLOCK_M=128 -D BLOCK_N=112 --warp-specialize on --overlap on"
  "-D BLOCK_M=128 -D BLOCK_N=96 --warp-specialize on --overlap on"
  "--warp-specialize on --persistent 132 --cluster on")
fwd256=("" "-D BLOCK_M=128 -D BLOCK_N=80" "-D BLOCK_M=128 -D BLOCK_N=80 --warp-specialize on"
  "-D BLOCK_M=128 -D BLOCK_N=80 --warp-specialize on --persistent 132"
  "-D BLOCK_M=128 -D BLOCK_N=64 --warp-specialize on"
  "-D BLOCK_M=128 -D BLOCK_N=80 --warp-specialize on --persistent 132 --cluster on")
bwdmodes=("" "-D DETERMINISTIC=0" "-D DETERMINISTIC=0 --warp-specialize on")

if want 1; then
echo "== 1. correctness: GPU against the interpreter (rel L2; bf16 bound 1.2e-2, lse 1e-4)"
python3 - "$tmp" <<'PY'
import sys, numpy as np
d, r = sys.argv[1], np.random.default_rng()
for hd in (64, 128, 256):
    sq, sk = int(r.integers(200, 320)), int(r.integers(330, 480))
    for n, s in (("q", (1, 4, sq, hd)), ("k", (1, 2, sk, hd)), ("v", (1, 2, sk, hd)), ("do", (1, 4, sq, hd))):
        np.save(f"{d}/{n}{hd}.npy", (r.standard_normal(s) * 2).astype(np.float32))
PY
cmp_dirs() {  # cmp_dirs WHAT GPU_DIR CPU_DIR NAMES...
  python3 - "$@" <<'PY'
import sys, numpy as np
what, g, c, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
out = []
for n in names:
    a = np.load(f"{g}/{n}.npy").astype(np.float64); b = np.load(f"{c}/{n}.npy").astype(np.float64)
    bad = int(np.isnan(a).sum())
    rel = np.linalg.norm(np.nan_to_num(a) - b) / max(np.linalg.norm(b), 1e-30)
    lim = 1e-4 if n == "lse" else 1.2e-2
    out.append(f"{n} {rel:.2e}{' NaN ' + str(bad) if bad else ''}{' FAIL' if bad or rel > lim else ''}")
print(f"{what:<80} " + "  ".join(out))
PY
}
for hd in 128 256; do
  s=$([ $hd = 128 ] && echo $s128 || echo $s256)
  args="--arg q=$tmp/q$hd.npy --arg k=$tmp/k$hd.npy --arg v=$tmp/v$hd.npy --arg scale=$s"
  for c in 0 1; do
    "$k" run attention_fwd -D DTYPE=bf16 -D HEAD_DIM=$hd -D CAUSAL=$c $args --out "$tmp/cpu" >/dev/null
    if [ $hd = 128 ]; then cands=("${fwd128[@]}"); else cands=("${fwd256[@]}"); fi
    for cand in "${cands[@]}"; do
      # shellcheck disable=SC2086
      "$k" run attention_fwd -D DTYPE=bf16 -D HEAD_DIM=$hd -D CAUSAL=$c $cand $args --device cuda \
        --out "$tmp/gpu" >/dev/null 2>"$tmp/err" || { echo "fwd d$hd causal $c [$cand]: $(head -3 "$tmp/err")"; continue; }
      cmp_dirs "fwd d$hd causal $c [${cand:-default}]" "$tmp/gpu" "$tmp/cpu" o lse
    done
  done
done
for hd in 64 128 256; do
  s=$(case $hd in 64) echo $s64;; 128) echo $s128;; *) echo $s256;; esac)
  fargs="--arg q=$tmp/q$hd.npy --arg k=$tmp/k$hd.npy --arg v=$tmp/v$hd.npy --arg scale=$s"
  for c in 0 1; do
    "$k" run attention_fwd -D DTYPE=bf16 -D HEAD_DIM=$hd -D CAUSAL=$c $fargs --out "$tmp/f" >/dev/null
    bargs="$fargs --arg o=$tmp/f/o.npy --arg lse=$tmp/f/lse.npy --arg do=$tmp/do$hd.npy"
    "$k" run attention_bwd -D DTYPE=bf16 -D HEAD_DIM=$hd -D CAUSAL=$c $bargs --out "$tmp/bcpu" >/dev/null
    for mode in "${bwdmodes[@]}"; do
      # shellcheck disable=SC2086
      "$k" run attention_bwd -D DTYPE=bf16 -D HEAD_DIM=$hd -D CAUSAL=$c $mode $bargs --device cuda \
        --out "$tmp/bgpu" >/dev/null 2>"$tmp/err" || { echo "bwd d$hd causal $c [$mode]: $(head -3 "$tmp/err")"; continue; }
      cmp_dirs "bwd d$hd causal $c [${mode:-default}]" "$tmp/bgpu" "$tmp/bcpu" dq dk dv
    done
  done
done

fi

shp() { local b=$1 h=$2 s=$3 d=$4; echo "--shape q=${b}x${h}x${s}x${d} --shape k=${b}x${h}x${s}x${d} --shape v=${b}x${h}x${s}x${d}"; }
if want 2; then
echo "== 2. kirc bench (TFLOP/s; median of --iters), defaults first, two rounds"
bench() { printf '%-72s ' "$1"; shift; "$k" bench "$@" 2>&1 | grep -E "TFLOP/s|error" | tail -1; }
for round in 1 2; do
  for cand in "${fwd128[@]}"; do
    # shellcheck disable=SC2046,SC2086
    bench "fwd d128 S1k B16 H16 [${cand:-default}]" attention_fwd $cand $(shp 16 16 1024 128) --arg scale=$s128 --iters 30
  done
  for cand in "${fwd128[@]}"; do
    # shellcheck disable=SC2046,SC2086
    bench "fwd d128 S16k B1 H16 [${cand:-default}]" attention_fwd $cand $(shp 1 16 16384 128) --arg scale=$s128 --iters 20
  done
  for bhs in "4 8 4096" "16 16 1024" "1 16 16384"; do
    read -r b h s <<<"$bhs"
    for cand in "${fwd256[@]}"; do
      # shellcheck disable=SC2046,SC2086
      bench "fwd d256 S$s B$b H$h [${cand:-default}]" attention_fwd -D HEAD_DIM=256 $cand $(shp $b $h $s 256) --arg scale=$s256 --iters 30
    done
  done
  for spec in "128 1 16 16384 0" "128 1 16 16384 1" "64 4 32 4096 0" "256 4 8 4096 0"; do
    set -- $spec; d=$1 b=$2 h=$3 s=$4 c=$5
    sc=$(case $d in 64) echo $s64;; 128) echo $s128;; *) echo $s256;; esac)
    shapes="$(shp $b $h $s $d) --shape o=${b}x${h}x${s}x${d} --shape do=${b}x${h}x${s}x${d} --shape lse=${b}x${h}x${s}"
    fl=$([ "$c" = 1 ] && echo "5*$b*$h*$s*$s*$d" || echo "10*$b*$h*$s*$s*$d")
    for mode in "${bwdmodes[@]}"; do
      # shellcheck disable=SC2086
      bench "bwd d$d S$s B$b H$h causal $c [${mode:-default}]" attention_bwd -D HEAD_DIM=$d -D CAUSAL=$c $mode $shapes \
        --arg scale=$sc --flops "$fl" --iters 5
    done
  done
done

fi

if want 2b; then
echo "== 2b. kirc tune (GROUP_H 1, 2 stages; the fastest candidates, then the winner)"
for spec in "128 16 16 1024 $s128" "256 4 8 4096 $s256"; do
  set -- $spec; d=$1 b=$2 h=$3 s=$4 sc=$5
  # shellcheck disable=SC2046
  "$k" tune attention_fwd -D HEAD_DIM=$d -D GROUP_H=1 --stages 2 $(shp $b $h $s $d) --arg scale=$sc \
    --flops "4*$b*$h*$s*$s*$d" --iters 20 --no-cache 2>"$tmp/tune.err" | grep -E "candidates|TFLOP/s|winner|dropped|^ *[0-9]+ +[0-9.]+ +[0-9.]+ " | head -14
  grep -E "WRONG|error" "$tmp/tune.err" | head -5
done

fi

if want 3; then
echo "== 3. peers: torch SDPA at the same shapes (TFLOP/s, CUDA events, median)"
python3 - "$(dirname "$0")" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
from peers import median_ms
for (b, h, s, d, causal, bwd) in [(16, 16, 1024, 128, False, False), (1, 16, 16384, 128, False, True),
                                   (1, 16, 16384, 128, True, True), (4, 8, 4096, 256, False, True),
                                   (4, 32, 4096, 64, False, True)]:
    q = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    fl = 4 * b * h * s * s * d / (2 if causal else 1)
    for be in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        with sdpa_kernel(be):
            f = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), 30)
            line = f"peer {be.name:<16} d{d} S{s} B{b} H{h} causal {int(causal)}: fwd {fl / f / 1e9:.1f}"
            if bwd:
                qq, kk, vv = (x.clone().requires_grad_() for x in (q, k, v))
                o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal)
                g = torch.randn_like(o)
                ms = median_ms(lambda: torch.autograd.grad(o, (qq, kk, vv), g, retain_graph=True), 10)
                line += f", bwd {2.5 * fl / ms / 1e9:.1f}"
            print(line + " TFLOP/s")
PY

fi

if want 4; then
echo "== 4. first launch, fresh processes, CUDA_CACHE_DISABLE=1, empty kir cache, no prebuilt cubins"
tptxas=$(python3 -c "import importlib.util as u, os; s = u.find_spec('triton'); print(os.path.join(s.submodule_search_locations[0], 'backends', 'nvidia', 'bin', 'ptxas') if s else '')")
[ -x "$tptxas" ] && "$tptxas" --version | tail -1 || echo "no ptxas in Triton's wheel"
for op in attention_fwd attention_bwd; do
  if [ $op = attention_fwd ]; then shapes=$(shp 1 16 4096 128); else
    shapes="$(shp 1 16 4096 128) --shape o=1x16x4096x128 --shape do=1x16x4096x128 --shape lse=1x16x4096"; fi
  for round in 1 2 3; do
    for how in jit ptxas; do
      cache=$(mktemp -d)
      if [ $how = jit ]; then px=/nonexistent/ptxas; else px=$tptxas; fi
      # shellcheck disable=SC2086
      line=$(CUDA_CACHE_DISABLE=1 KIR_CACHE_DIR=$cache KIR_CACHE_PREBUILT=off KIR_PTXAS=$px \
        "$k" bench $op $shapes --arg scale=$s128 --iters 1 --warmup 0 2>&1 | grep -E "first launch|error" | head -1)
      echo "$op round $round, $how: $line"
      rm -rf "$cache"
    done
  done
done
fi
rm -rf "$tmp"
