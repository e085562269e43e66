#!/usr/bin/env bash
# One GPU call for several consumer partitions on sm_90a (`--ws fa3`: a producer warpgroup and
# two consumer warpgroups, each with its own thread index, named barrier 15 − i and shared
# arena; docs/backends.md, "Several consumers"): ragged attention_fwd (d64 and d128, GQA, plain
# and causal) through the Rust runtime against the CPU interpreter;
# compute-sanitizer racecheck, synccheck and memcheck on the fa3 kernels; then kirc bench of
# `--ws fa3` beside the default at d128, S = 16k, B = 1, H = 16.
# usage: scripts/gpu_ws_consumers.sh KIRC   (kirc built with --features cuda; results under $OUT)
set -uo pipefail
K=$1
d=${OUT:-/tmp}/ws_consumers
mkdir -p "$d"
cmp() { python3 "$(dirname "$0")/npy_cmp.py" "$@"; }  # cmp NAME DIR_A DIR_REF OUTPUTS...
for hd in 64 128; do
  c=$d/attn_d$hd; mkdir -p "$c"
  # 257 query rows: the last program's second consumer has no query block (it keeps its place
  # in the ring and stores nothing); 190 keys: a partial last key block.
  $K randn 1x4x257x$hd -o $c/q.npy --seed 1 --scale 2 >/dev/null
  $K randn 1x2x190x$hd -o $c/k.npy --seed 2 --scale 2 >/dev/null
  $K randn 1x2x190x$hd -o $c/v.npy --seed 3 --scale 2 >/dev/null
  for f in "CAUSAL=0" "CAUSAL=1"; do
    a="attention_fwd -D HEAD_DIM=$hd -D BLOCK_M=64 -D $f --arg q=$c/q.npy --arg k=$c/k.npy --arg v=$c/v.npy --arg scale=0.1"
    $K run $a --out $c/cpu_$f >/dev/null
    $K run $a --device cuda --target sm_90a --ws fa3 --out $c/fa3_$f 2>&1 | tail -2
    cmp "attention_fwd d$hd $f fa3" $c/fa3_$f $c/cpu_$f o lse
    for tool in racecheck synccheck memcheck; do
      compute-sanitizer --tool $tool $K run $a --device cuda --target sm_90a --ws fa3 --no-cache \
        --out $c/san 2>&1 | grep -E "SUMMARY" | sed "s/^/$tool d$hd $f fa3: /"
    done
  done
done
b() { printf '%-70s ' "$*" | cut -c1-100 | tr -d '\n'; $K bench "$@" 2>&1 | grep -E "median|TFLOP/s|TB/s|error" | tr "\n" " "; echo; }
at="-D HEAD_DIM=128 --shape q=1x16x16384x128 --shape k=1x16x16384x128 --shape v=1x16x16384x128 --arg scale=0.08838834764831845"
for r in 1 2; do
  b attention_fwd $at --iters 20
  for bn in 64 128; do
    b attention_fwd $at -D BLOCK_M=64 -D BLOCK_N=$bn --iters 20 --ws fa3
  done
done
