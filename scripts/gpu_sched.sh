#!/usr/bin/env bash
# Times kir before and after a change in one GPU call, next to the peers (torch SDPA flash and
# cuDNN, cuBLAS), for the kernels the scheduling work touches: attention_fwd d128 S=16k (defaults
# and the tuned 4-warp 128-row tile, causal and not), attention_bwd d128 S=16k (defaults) and
# GEMM 8192³ (defaults and the tuned 128×256×128 tile), then checks three-way parity of the new
# build from META.json alone (scripts/gpu_check_ptx.py over artifacts from scripts/gpu_artifacts.py).
# usage: scripts/gpu_sched.sh BEFORE_KIRC AFTER_KIRC [ARTIFACTS_DIR]   (kirc built with --features cuda)
set -uo pipefail
before=$1 after=$2 art=${3:-}
s128=0.08838834764831845
attn="--shape q=1x16x16384x128 --shape k=1x16x16384x128 --shape v=1x16x16384x128 --arg scale=$s128"
bwd="--shape q=1x16x16384x128 --shape k=1x16x16384x128 --shape v=1x16x16384x128 --shape o=1x16x16384x128 --shape do=1x16x16384x128 --shape lse=1x16x16384 --arg scale=$s128 --flops 10*16*16384*16384*128"
gemm="--shape a=1x8192x8192 --shape b=1x8192x8192 --arg alpha=1"
b() { local tag=$1; shift; printf '%-8s %-60s ' "$tag" "$*" | cut -c1-140 | tr -d '\n'; "$@" 2>&1 | tail -1; }
for round in 1 2; do
  for k in "$before" "$after"; do
    tag=$([ "$k" = "$before" ] && echo before || echo after)
    b $tag $k bench attention_fwd $attn --iters 20
    b $tag $k bench attention_fwd -D CAUSAL=1 $attn --iters 20
    b $tag $k bench attention_fwd -D BLOCK_M=128 --warps 4 $attn --iters 20
    b $tag $k bench attention_fwd -D BLOCK_M=128 --warps 4 -D CAUSAL=1 $attn --iters 20
    b $tag $k bench gemm $gemm --iters 20
    b $tag $k bench gemm -D BLOCK_M=128 -D BLOCK_N=256 -D BLOCK_K=128 $gemm --iters 20
    [ $round = 1 ] && b $tag $k bench attention_bwd $bwd --iters 5
    [ $round = 1 ] && b $tag $k bench attention_bwd -D BLOCK_N=64 $bwd --iters 5
  done
done
python3 "$(dirname "$0")/peers.py" --causal --bwd
if [ -n "$art" ]; then
  python3 scripts/gpu_check_ptx.py "$art" --only check --json "${OUT:-/tmp}/check.json" 2>&1 | tail -40
fi
