#!/usr/bin/env bash
# One GPU call for warp specialization on sm_90a (`--warp-specialize on`): ragged attention_fwd
# (d64/128/256, GQA) and GEMM (rows that admit tensor maps, and odd K and N that do not) through
# the Rust runtime against the CPU interpreter, with and without it; compute-sanitizer racecheck, synccheck and memcheck on the specialized kernels;
# then kirc bench of the defaults against `--warp-specialize on` at S = 16k and the GEMM shapes.
# usage: scripts/gpu_ws.sh KIRC   (kirc built with --features cuda; results under $OUT)
set -uo pipefail
K=$1
d=${OUT:-/tmp}/ws
mkdir -p "$d"
s128=0.08838834764831845
cmp() { python3 "$(dirname "$0")/npy_cmp.py" "$@"; }  # cmp NAME DIR_A DIR_REF OUTPUTS...
for hd in 64 128 256; do
  c=$d/attn_d$hd; mkdir -p $c
  $K randn 1x4x257x$hd -o $c/q.npy --seed 1 --scale 2 >/dev/null
  $K randn 1x2x190x$hd -o $c/k.npy --seed 2 --scale 2 >/dev/null
  $K randn 1x2x190x$hd -o $c/v.npy --seed 3 --scale 2 >/dev/null
  a="attention_fwd -D HEAD_DIM=$hd --arg q=$c/q.npy --arg k=$c/k.npy --arg v=$c/v.npy --arg scale=0.1"
  $K run $a --out $c/cpu >/dev/null
  $K run $a --device cuda --target sm_90a --out $c/def >/dev/null
  $K run $a --device cuda --target sm_90a --warp-specialize on --out $c/ws 2>&1 | tail -2
  cmp "attention_fwd d$hd default" $c/def $c/cpu o lse
  cmp "attention_fwd d$hd ws" $c/ws $c/cpu o lse
done
c=$d/gemm; mkdir -p $c
$K randn 1x300x200 -o $c/a.npy --seed 4 --scale 2 >/dev/null
$K randn 1x200x264 -o $c/b.npy --seed 5 --scale 2 >/dev/null
g="gemm --arg a=$c/a.npy --arg b=$c/b.npy --arg alpha=1.5"
$K run $g --out $c/cpu >/dev/null
$K run $g --device cuda --target sm_90a --out $c/def >/dev/null
$K run $g --device cuda --target sm_90a --warp-specialize on --out $c/ws 2>&1 | tail -2
cmp "gemm 300x264x200 default" $c/def $c/cpu c
cmp "gemm 300x264x200 ws" $c/ws $c/cpu c
# K and N odd: no tensor map admits these rows (strides of 201 and 263 elements), so the
# launcher passes zeros and the producer's warps copy with cp.async.
u=$d/gemm_u; mkdir -p $u
$K randn 1x300x201 -o $u/a.npy --seed 6 --scale 2 >/dev/null
$K randn 1x201x263 -o $u/b.npy --seed 7 --scale 2 >/dev/null
gu="gemm --arg a=$u/a.npy --arg b=$u/b.npy --arg alpha=1.5"
$K run $gu --out $u/cpu >/dev/null
$K run $gu --device cuda --target sm_90a --out $u/def >/dev/null
$K run $gu --device cuda --target sm_90a --warp-specialize on --out $u/ws 2>&1 | tail -2
cmp "gemm 300x263x201 default" $u/def $u/cpu c
cmp "gemm 300x263x201 ws (no tensor maps)" $u/ws $u/cpu c
c=$d/attn_d128
for tool in racecheck synccheck memcheck; do
  compute-sanitizer --tool $tool $K run attention_fwd --arg q=$c/q.npy --arg k=$c/k.npy --arg v=$c/v.npy \
    --arg scale=0.1 --device cuda --target sm_90a --warp-specialize on --out $c/san 2>&1 | grep -E "SUMMARY" | sed "s/^/$tool attention ws: /"
  compute-sanitizer --tool $tool $K run $g --device cuda --target sm_90a --warp-specialize on --out $d/gemm/san 2>&1 \
    | grep -E "SUMMARY" | sed "s/^/$tool gemm ws: /"
  compute-sanitizer --tool $tool $K run $gu --device cuda --target sm_90a --warp-specialize on --out $u/san 2>&1 \
    | grep -E "SUMMARY" | sed "s/^/$tool gemm ws, no tensor maps: /"
done
b() { printf '%-70s ' "$*" | cut -c1-100 | tr -d '\n'; $K bench "$@" 2>&1 | grep -E "median|TFLOP/s|TB/s|error" | tr "\n" " "; echo; }
for hd in 128 64 256; do
  at="--shape q=1x16x16384x$hd --shape k=1x16x16384x$hd --shape v=1x16x16384x$hd --arg scale=0.1"
  for r in 1 2; do
    b attention_fwd -D HEAD_DIM=$hd $at --iters 20
    b attention_fwd -D HEAD_DIM=$hd $at --iters 20 --warp-specialize on
  done
done
for sh in "8192 8192 8192" "16384 14336 4096" "4096 4096 4096"; do
  set -- $sh
  gs="--shape a=1x$1x$3 --shape b=1x$3x$2 --arg alpha=1"
  for r in 1 2; do
    b gemm $gs --iters 20
    b gemm $gs --iters 20 --warp-specialize on
  done
done
