#!/usr/bin/env bash
# The built-in GEMM on the shapes of issue 24 (M x N x K, bf16) under a fixed set of tile and
# schedule choices, each given explicitly (`-D` tiles with --warps/--stages/--warp-specialize/
# --persistent, since a user's tile choice keeps the per-target configuration out): the data
# behind a configuration by shape. One line per (shape, choice): the median time and TFLOP/s
# from `kirc bench`, or the compile error.
# usage: scripts/gpu_gemm_sweep.sh [KIRC]   (a kirc built with --features cuda)
kirc=${1:-${KIRC:-target/release/kirc}}
shapes="16x14336x4096 128x14336x4096 1024x4096x4096 2048x2048x2048 8192x1024x8192 4096x128256x4096 16384x14336x4096"
cfgs=(
 "-D BLOCK_M=128 -D BLOCK_N=256 -D BLOCK_K=64 -D GROUP_M=8 --warps 8 --stages 4 --warp-specialize on --persistent 132"
 "-D BLOCK_M=128 -D BLOCK_N=256 -D BLOCK_K=64 -D GROUP_M=8 --warps 8 --stages 4 --warp-specialize on --persistent off"
 "-D BLOCK_M=128 -D BLOCK_N=128 -D BLOCK_K=64 -D GROUP_M=8 --warps 8 --stages 5 --warp-specialize on --persistent 132"
 "-D BLOCK_M=128 -D BLOCK_N=128 -D BLOCK_K=64 -D GROUP_M=8 --warps 8 --stages 5 --warp-specialize on --persistent off"
 "-D BLOCK_M=64 -D BLOCK_N=256 -D BLOCK_K=64 -D GROUP_M=8 --warps 4 --stages 4 --warp-specialize on --persistent off"
 "-D BLOCK_M=64 -D BLOCK_N=128 -D BLOCK_K=64 -D GROUP_M=8 --warps 4 --stages 6 --warp-specialize on --persistent off"
 "-D BLOCK_M=64 -D BLOCK_N=128 -D BLOCK_K=64 -D GROUP_M=8 --warps 4 --stages 6 --warp-specialize on --persistent 132"
 "-D BLOCK_M=64 -D BLOCK_N=64 -D BLOCK_K=64 -D GROUP_M=8 --warps 4 --stages 8 --warp-specialize on --persistent off"
 "-D BLOCK_M=64 -D BLOCK_N=64 -D BLOCK_K=128 -D GROUP_M=8 --warps 4 --stages 4 --warp-specialize on --persistent off"
)
for s in $shapes; do
  IFS=x read -r m n k <<<"$s"
  for c in "${cfgs[@]}"; do
    r=$($kirc bench gemm $c --shape "a=1x${m}x${k}" --shape "b=1x${k}x${n}" --arg alpha=1 --iters 30 2>&1 | grep -E "ms median|TFLOP|error" | tr '\n' ' ')
    echo "$s | $c | $r"
  done
done
