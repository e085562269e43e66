#!/usr/bin/env bash
# Two or more kirc builds (each built with --features cuda) of a change whose PTX differs, in one
# GPU call: every build after the first checked first, then the timing interleaved, so that a
# difference is measured on one card in one process per run:
#  1. each later build's correctness: scripts/gpu_runtime_check.sh --no-bench (every op's
#     default against the interpreter, and the negative control) and section 1 of
#     scripts/gpu_attention_tiles.sh (attention fwd and bwd at d64/128/256, causal and not,
#     against the interpreter; the lines of the defaults and the atomic mode are kept);
#  2. `kirc bench` of every build in turn per shape (the first is A, then B, C, …), ROUNDS
#     rounds: attention_fwd d128 S 1k (B 16, H 16), S 16k (B 1, H 16) and causal, d256 S 4k
#     (B 4, H 8), d64 S 4k (B 4, H 32); attention_bwd d128 S 16k, causal and DETERMINISTIC=0,
#     d64 S 4k, d256 S 4k, d128 S 1k; gemm 8192³, 16384×14336×4096, 4096³ and
#     4096×128256×4096; rmsnorm_fwd, layernorm_fwd, rmsnorm_bwd and layernorm_bwd at
#     16384×4096 (bf16 everywhere). TFLOP/s (backward at 2.5× the forward's FLOPs) or TB/s, the
#     median of each bench's runs.
# --set picks part of step 2: all (default), attention, bwd, gemm or norms, or rows (not in
# all): the per-target rows chosen or changed where no GPU was lent (docs/configs.md), each
# as its median time in ms: gemm at 16 and 64 rows (the warp-specialized M ≤ 64 row and
# the swapped one), attention_bwd d96 (`.minnctapersm 2`), d128 with a mask or a causal
# window (the 128-key row), d256 causal and not (a 4-warp consumer at 256 registers).
# atomic (not in all): attention_bwd's atomic mode (`DETERMINISTIC=0`) at d128 S 16k, causal
# and S 1k (B 16), and d64 S 4k, beside the deterministic default at d128 S 16k.
# wide (not in all): attention_bwd above head dim 128 (the rows whose dK/dV kernel runs its dk
# and dv programs as two consumers, docs/configs.md) off the bar's shape: d256 at S 16k (B 1,
# H 8) causal or not, S 1k (B 16, H 8), GQA (B 4, 16 query heads on 2 kv heads, S 4k) causal
# or not, and d192 at S 4k (B 4, H 8) causal or not.
# --no-check skips step 1. All of it takes about 7 minutes on an H100 for two builds and two rounds.
# usage: scripts/gpu_ab.sh [--rounds N] [--set SET] [--no-check] KIRC_A KIRC_B [KIRC_C ...]
set -uo pipefail
rounds=2 set_=all check=1 builds=()
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --set) set_=$2; shift 2 ;;
    --no-check) check=0; shift ;;
    *) builds+=("$1"); shift ;;
  esac
done
[ ${#builds[@]} -ge 2 ] || { echo "usage: gpu_ab.sh [--rounds N] [--set SET] [--no-check] KIRC_A KIRC_B [KIRC_C ...]" >&2; exit 2; }
names=(A B C D E F G H)
for i in "${!builds[@]}"; do echo "${names[$i]} = ${builds[$i]}"; done
export KIR_CACHE_DIR=off
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader
if [ $check = 1 ]; then
  for i in "${!builds[@]}"; do
    [ "$i" = 0 ] && continue
    b=${builds[$i]}
    echo "== 1. correctness of ${names[$i]} ($b)"
    bash scripts/gpu_runtime_check.sh "$b" "$(mktemp -d)" --no-bench 2>&1 | grep -E "FAIL|all checks|error" | tail -6
    bash scripts/gpu_attention_tiles.sh "$b" 1 2>&1 | grep -E "FAIL|error|default\]|DETERMINISTIC=0\]"
  done
fi
s64=0.125 s128=0.08838834764831845 s256=0.0625
qkv() { echo "--shape q=$1x$2x$3x$4 --shape k=$1x$2x$3x$4 --shape v=$1x$2x$3x$4"; }
grad() { echo "$(qkv "$@") --shape o=$1x$2x$3x$4 --shape do=$1x$2x$3x$4 --shape lse=$1x$2x$3"; }
each() { # LINE SED NAME ARGS...: every build in turn, bench's last line matching LINE, edited by SED
  local line=$1 edit=$2 name=$3
  shift 3
  for i in "${!builds[@]}"; do
    printf '%-30s %s  ' "$name" "${names[$i]}"
    "${builds[$i]}" bench "$@" 2>&1 | grep -E "$line|error" | tail -1 | sed -E "$edit"
  done
}
ab() { each "TFLOP/s|TB/s" 's/ \(.*//' "$@"; }                # NAME ARGS...: the rate
ab_ms() { each "ms median" 's/^ +//; s/ of .*//' "$@"; }       # NAME ARGS...: the median in ms
want() { { [ "$set_" = all ] && [ "$1" != rows ] && [ "$1" != atomic ] && [ "$1" != wide ]; } || [ "$set_" = "$1" ]; }
gqa() { # B HQ HKV S D: attention_bwd's shapes with HKV kv heads
  echo "--shape q=$1x$2x$4x$5 --shape k=$1x$3x$4x$5 --shape v=$1x$3x$4x$5 --shape o=$1x$2x$4x$5 --shape do=$1x$2x$4x$5 --shape lse=$1x$2x$4"
}
echo "== 2. every build in turn, $rounds rounds"
for r in $(seq "$rounds"); do
  echo "-- round $r"
  if want attention; then
    # shellcheck disable=SC2046
    {
      ab "fwd d128 S1k B16" attention_fwd $(qkv 16 16 1024 128) --arg scale=$s128 --iters 30
      ab "fwd d128 S16k" attention_fwd $(qkv 1 16 16384 128) --arg scale=$s128 --iters 20
      ab "fwd d128 S16k causal" attention_fwd -D CAUSAL=1 $(qkv 1 16 16384 128) --arg scale=$s128 --iters 20
      ab "fwd d256 S4k B4 H8" attention_fwd -D HEAD_DIM=256 $(qkv 4 8 4096 256) --arg scale=$s256 --iters 30
      ab "fwd d64 S4k B4 H32" attention_fwd -D HEAD_DIM=64 $(qkv 4 32 4096 64) --arg scale=$s64 --iters 30
    }
  fi
  if want attention || want bwd; then
    # shellcheck disable=SC2046
    {
      ab "bwd d128 S16k" attention_bwd $(grad 1 16 16384 128) --arg scale=$s128 --iters 5 --flops "10*16*16384*16384*128"
      ab "bwd d128 S16k causal" attention_bwd -D CAUSAL=1 $(grad 1 16 16384 128) --arg scale=$s128 --iters 5 --flops "5*16*16384*16384*128"
      ab "bwd d128 S16k DETERMINISTIC=0" attention_bwd -D DETERMINISTIC=0 $(grad 1 16 16384 128) --arg scale=$s128 --iters 5 --flops "10*16*16384*16384*128"
      ab "bwd d64 S4k B4 H32" attention_bwd -D HEAD_DIM=64 $(grad 4 32 4096 64) --arg scale=$s64 --iters 10 --flops "10*4*32*4096*4096*64"
      ab "bwd d256 S4k B4 H8" attention_bwd -D HEAD_DIM=256 $(grad 4 8 4096 256) --arg scale=$s256 --iters 10 --flops "10*4*8*4096*4096*256"
      ab "bwd d128 S1k B16" attention_bwd $(grad 16 16 1024 128) --arg scale=$s128 --iters 10 --flops "10*16*16*1024*1024*128"
    }
  fi
  if want atomic; then
    # shellcheck disable=SC2046
    {
      ab "bwd d128 S16k DETERMINISTIC=0" attention_bwd -D DETERMINISTIC=0 $(grad 1 16 16384 128) --arg scale=$s128 --iters 5 --flops "10*16*16384*16384*128"
      ab "bwd d128 S16k causal DET=0" attention_bwd -D DETERMINISTIC=0 -D CAUSAL=1 $(grad 1 16 16384 128) --arg scale=$s128 --iters 5 --flops "5*16*16384*16384*128"
      ab "bwd d128 S1k B16 DET=0" attention_bwd -D DETERMINISTIC=0 $(grad 16 16 1024 128) --arg scale=$s128 --iters 10 --flops "10*16*16*1024*1024*128"
      ab "bwd d64 S4k B4 H32 DET=0" attention_bwd -D DETERMINISTIC=0 -D HEAD_DIM=64 $(grad 4 32 4096 64) --arg scale=$s64 --iters 10 --flops "10*4*32*4096*4096*64"
      ab "bwd d128 S16k" attention_bwd $(grad 1 16 16384 128) --arg scale=$s128 --iters 5 --flops "10*16*16384*16384*128"
    }
  fi
  if want wide; then
    # shellcheck disable=SC2046
    {
      ab "bwd d256 S16k B1 H8" attention_bwd -D HEAD_DIM=256 $(grad 1 8 16384 256) --arg scale=$s256 --iters 5 --flops "10*8*16384*16384*256"
      ab "bwd d256 S16k causal" attention_bwd -D HEAD_DIM=256 -D CAUSAL=1 $(grad 1 8 16384 256) --arg scale=$s256 --iters 5 --flops "5*8*16384*16384*256"
      ab "bwd d256 S1k B16 H8" attention_bwd -D HEAD_DIM=256 $(grad 16 8 1024 256) --arg scale=$s256 --iters 10 --flops "10*16*8*1024*1024*256"
      ab "bwd d256 S4k GQA 16/2" attention_bwd -D HEAD_DIM=256 $(gqa 4 16 2 4096 256) --arg scale=$s256 --iters 10 --flops "10*4*16*4096*4096*256"
      ab "bwd d256 S4k GQA causal" attention_bwd -D HEAD_DIM=256 -D CAUSAL=1 $(gqa 4 16 2 4096 256) --arg scale=$s256 --iters 10 --flops "5*4*16*4096*4096*256"
      ab "bwd d192 S4k B4 H8" attention_bwd -D HEAD_DIM=192 $(grad 4 8 4096 192) --arg scale=0.07216878364870323 --iters 10 --flops "10*4*8*4096*4096*192"
      ab "bwd d192 S4k causal" attention_bwd -D HEAD_DIM=192 -D CAUSAL=1 $(grad 4 8 4096 192) --arg scale=0.07216878364870323 --iters 10 --flops "5*4*8*4096*4096*192"
    }
  fi
  if want gemm; then
    for s in 8192x8192x8192 16384x14336x4096 4096x4096x4096 4096x128256x4096; do
      IFS=x read -r m n kk <<<"$s"
      ab "gemm $s" gemm --shape "a=1x${m}x${kk}" --shape "b=1x${kk}x${n}" --arg alpha=1 --iters 30
    done
  fi
  if want rows; then
    # shellcheck disable=SC2046
    {
      ab_ms "gemm 16x14336x4096" gemm --shape a=1x16x4096 --shape b=1x4096x14336 --arg alpha=1 --iters 50
      ab_ms "gemm 64x14336x4096" gemm --shape a=1x64x4096 --shape b=1x4096x14336 --arg alpha=1 --iters 50
      ab_ms "bwd d96 S4k B4 H16" attention_bwd -D HEAD_DIM=96 $(grad 4 16 4096 96) --arg scale=0.10206207261596575 --iters 10
      ab_ms "bwd d96 S4k causal" attention_bwd -D HEAD_DIM=96 -D CAUSAL=1 $(grad 4 16 4096 96) --arg scale=0.10206207261596575 --iters 10
      ab_ms "bwd d128 S4k B4 H16 mask" attention_bwd -D MASK=1 $(grad 4 16 4096 128) --shape mask=1x4096x4096 --arg scale=$s128 --iters 10
      ab_ms "bwd d128 S4k causal window" attention_bwd -D CAUSAL=1 -D WINDOW=1 $(grad 4 16 4096 128) --arg scale=$s128 --arg window=1024 --iters 10
      ab_ms "bwd d256 S4k B4 H8" attention_bwd -D HEAD_DIM=256 $(grad 4 8 4096 256) --arg scale=$s256 --iters 10
      ab_ms "bwd d256 S4k causal" attention_bwd -D HEAD_DIM=256 -D CAUSAL=1 $(grad 4 8 4096 256) --arg scale=$s256 --iters 10
    }
  fi
  if want norms; then
    x="--shape x=16384x4096 --shape w=4096"
    # shellcheck disable=SC2086
    {
      ab "rmsnorm_fwd 16384x4096" rmsnorm_fwd $x --arg eps=1e-5
      ab "layernorm_fwd 16384x4096" layernorm_fwd $x --shape b=4096 --arg eps=1e-5
      ab "rmsnorm_bwd 16384x4096" rmsnorm_bwd $x --shape dy=16384x4096 --arg eps=1e-5 --bytes "6*R*N"
      ab "layernorm_bwd 16384x4096" layernorm_bwd $x --shape dy=16384x4096 --shape mean=16384 --shape rstd=16384 --bytes "6*R*N"
    }
  fi
done
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
