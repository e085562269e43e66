#!/usr/bin/env bash
# kir's default configuration against the best that `kirc tune` finds, on a GPU machine in one
# call: for each case, `kirc bench` with no flags (the kir cache off, so the default is what
# runs) and `kirc tune` over the op's declared search space (its winner not stored), then the
# ratio default / best as speeds (≥ 1: the default is at least as fast as the tuner's best).
# Lowering flags given to a case (`--stages 2 --warp-specialize off`) only narrow the tuner's
# space; the default is always benched with none.
#
# usage: scripts/gpu_tune_vs_default.sh [KIRC] [GROUPS]   (GROUPS: any of gemm fwd bwd norm;
#   default all). attention_bwd's space is narrowed to 4 warps (its default's policy), and at
#   head dims 64 and 128 to unspecialized kernels.
# Build the binary where Rust is: cargo build --release -p kirc --features cuda
set -uo pipefail

kirc=${1:-${KIRC:-target/release/kirc}}
[ -x "$kirc" ] || { echo "gpu_tune_vs_default.sh: no kirc at $kirc" >&2; exit 1; }
export KIR_CACHE_DIR=off
failed=()

# case NAME "TUNE-ONLY FLAGS" OP ARGS...
case_() {
  local name=$1 narrow=$2 op=$3
  shift 3
  local d t
  d=$("$kirc" bench "$op" "$@" --iters 30 2>&1 | grep -oE '^  [0-9.]+ ms median' | grep -oE '[0-9.]+' | head -1)
  # shellcheck disable=SC2086
  t=$("$kirc" tune "$op" $narrow "$@" --iters 20 --warmup 5 --no-cache 2>&1 | tee "/tmp/tune_$name.txt" | grep -E '^ +1 +[0-9.]+' | head -1)
  local best
  best=$(echo "$t" | awk '{print $2}')
  if [ -z "$d" ] || [ -z "$best" ]; then
    echo "$name: FAILED (default '${d}', tuned '${t}')"; tail -3 "/tmp/tune_$name.txt"; failed+=("$name"); return
  fi
  local ratio
  ratio=$(python3 -c "print(f'{$best / $d:.3f}')")
  echo "$name: default $d ms, tuned best: $t; default/best speed $ratio"
}

only=${2:-}
want() { [ -z "$only" ] || [[ " $only " == *" $1 "* ]]; }
want gemm && case_ gemm_8192 "-D BLOCK_K=64 -D GROUP_M=8" gemm --shape a=1x8192x8192 --shape b=1x8192x8192 --arg alpha=1
want gemm && case_ gemm_1024x4096x4096 "-D BLOCK_K=64 -D GROUP_M=8" gemm --shape a=1x1024x4096 --shape b=1x4096x4096 --arg alpha=1
want gemm && case_ gemm_128x14336x4096 "-D BLOCK_K=64 -D GROUP_M=8" gemm --shape a=1x128x4096 --shape b=1x4096x14336 --arg alpha=1
want fwd && for d in 64 128 256; do
  s=$(python3 -c "print(1 / $d ** 0.5)")
  qkv="--shape q=4x16x4096x$d --shape k=4x16x4096x$d --shape v=4x16x4096x$d --arg scale=$s"
  # shellcheck disable=SC2086
  case_ "attention_fwd_d$d" "-D GROUP_H=1" attention_fwd -D HEAD_DIM=$d $qkv
done
want bwd && for d in 64 128; do
  s=$(python3 -c "print(1 / $d ** 0.5)")
  bwd="--shape q=2x16x4096x$d --shape k=2x16x4096x$d --shape v=2x16x4096x$d --shape o=2x16x4096x$d --shape do=2x16x4096x$d --shape lse=2x16x4096 --arg scale=$s"
  # shellcheck disable=SC2086
  case_ "attention_bwd_d$d" "--stages 2 --warp-specialize off --warps 4" attention_bwd -D HEAD_DIM=$d $bwd
done
# d256: its default is warp-specialized (docs/configs.md), so the tuner keeps that axis open.
want bwd && case_ attention_bwd_d256 "--stages 2 --warps 4" attention_bwd -D HEAD_DIM=256 \
  --shape q=2x8x4096x256 --shape k=2x8x4096x256 --shape v=2x8x4096x256 --shape o=2x8x4096x256 \
  --shape do=2x8x4096x256 --shape lse=2x8x4096 --arg scale=0.0625
want norm && case_ rmsnorm_fwd "--stages 2 --warp-specialize off" rmsnorm_fwd --shape x=16384x4096 --shape w=4096 --arg eps=1e-5
want norm && case_ layernorm_fwd "--stages 2 --warp-specialize off" layernorm_fwd --shape x=16384x4096 --shape w=4096 --shape b=4096 --arg eps=1e-5
want norm && case_ rmsnorm_bwd "--stages 2 --warp-specialize off" rmsnorm_bwd --shape x=16384x4096 --shape w=4096 --shape dy=16384x4096 --arg eps=1e-5
want norm && case_ layernorm_bwd "--stages 2 --warp-specialize off" layernorm_bwd --shape x=16384x4096 --shape w=4096 --shape dy=16384x4096 --shape mean=16384 --shape rstd=16384
echo
if [ ${#failed[@]} -eq 0 ]; then echo "gpu_tune_vs_default.sh: every case ran"; else echo "gpu_tune_vs_default.sh: FAILED: ${failed[*]}"; exit 1; fi
