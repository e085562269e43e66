#!/usr/bin/env bash
# One GPU call for attention_bwd: three-way parity of the changed cases (PTX and CUDA C against
# the interpreter, scripts/gpu_check_ptx.py over artifacts from scripts/gpu_artifacts.py), racecheck
# and memcheck on the d128 cases, then kirc bench of attention_bwd d128 S=16k before and after a
# change (defaults, causal, and the dK/dV tile variants) next to torch SDPA flash and cuDNN backward.
# usage: scripts/gpu_bwd.sh BEFORE_KIRC AFTER_KIRC ARTIFACTS_DIR   (kirc built with --features cuda)
set -uo pipefail
before=$1 after=$2 art=$3
s128=0.08838834764831845
python3 scripts/gpu_check_ptx.py "$art" --only check --json "${OUT:-/tmp}/check.json" 2>&1 | tail -12
for tool in racecheck memcheck; do
  compute-sanitizer --tool $tool --report-api-errors no python3 scripts/gpu_check_ptx.py "$art" --only check \
    --match attn_bwd_det1_d128 2>&1 | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^PASS|^FAIL" | sed "s/^/$tool: /"
done
bwd="--shape q=1x16x16384x128 --shape k=1x16x16384x128 --shape v=1x16x16384x128 --shape o=1x16x16384x128 --shape do=1x16x16384x128 --shape lse=1x16x16384 --arg scale=$s128"
full="--flops 10*16*16384*16384*128"
half="--flops 5*16*16384*16384*128"
b() { local tag=$1; shift; printf '%-7s %-58s ' "$tag" "$(echo "$*" | sed 's/--shape.*//' | cut -c1-58)"; "$@" 2>&1 | tail -1; }
for round in 1 2; do
  b before "$before" bench attention_bwd $bwd $full --iters 5
  b after "$after" bench attention_bwd $bwd $full --iters 5
  b before "$before" bench attention_bwd -D CAUSAL=1 $bwd $half --iters 5
  b after "$after" bench attention_bwd -D CAUSAL=1 $bwd $half --iters 5
  [ $round = 1 ] && b after "$after" bench attention_bwd -D BLOCK_KV=32 $bwd $full --iters 5
  [ $round = 1 ] && b after "$after" bench attention_bwd -D BLOCK_N=64 $bwd $full --iters 5
done
python3 scripts/peers.py --bwd
