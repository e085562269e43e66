#!/usr/bin/env bash
# A user's kernels on the fast path, timed on a GPU machine beside kir's built-in ops and cuBLAS
# in one call (kir's default flags; bf16; medians of CUDA-event timings after warm-up, by
# `kirc bench` and, for the peers, scripts/peers.py's median_ms):
#   1. copies of built-in ops (a comment added, the module renamed): gemm 8192³ and
#      attention_fwd d128 at 16k tokens, each beside the built-in;
#   2. a user's own matmul (tests/in/user/matmul_leaky_relu.kir, when present) at 8192³;
#   3. the fusion programs of tests/in/fusion at M = 8192, K = N = 4096 and 4. the built-in
#      GEMM on the shapes of issue 24 beside torch.mm (cuBLAS): scripts/gpu_kernel_configs.sh
#      parts 1 and 3;
#   5. the first launch of attention_fwd, attention_bwd and gemm: cold (no driver JIT cache),
#      with the kir cache off, into an empty kir cache, and from it.
# Correctness of the same kernels is checked by scripts/gpu_runtime_check.sh (part 5).
#
# usage: scripts/gpu_user_kernels.sh [KIRC] [OUT_DIR]
# Build the binary where Rust is: cargo build --release -p kirc --features cuda
set -uo pipefail

kirc=${1:-${KIRC:-target/release/kirc}}
out=${2:-out/gpu_user_kernels}
[ -x "$kirc" ] || { echo "gpu_user_kernels.sh: no kirc at $kirc" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
failed=()

bench() {
  echo "\$ kirc bench $*"
  "$kirc" bench "$@" --iters 30 || failed+=("bench $1")
}

# 1. Copies of built-in ops.
for op in gemm attention_fwd; do
  { echo "// A user's copy of $op, renamed."; sed "s/^module $op\$/module my_$op/" "compiler/ops/$op.kir"; } \
    >"$out/my_$op.kir"
done
echo "== copies of built-in ops"
g="--shape a=1x8192x8192 --shape b=1x8192x8192 --arg alpha=1"
# shellcheck disable=SC2086
bench gemm $g
# shellcheck disable=SC2086
bench "$out/my_gemm.kir" $g --flops "2*Bt*M*N*K"
qkv="--shape q=1x16x16384x128 --shape k=1x16x16384x128 --shape v=1x16x16384x128 --arg scale=0.08838834764831845"
# shellcheck disable=SC2086
bench attention_fwd $qkv
# shellcheck disable=SC2086
bench "$out/my_attention_fwd.kir" $qkv --flops "4*B*Hq*Sq*Sk*HEAD_DIM"

# 2. A user's own matmul.
user=tests/in/user/matmul_leaky_relu.kir
if [ -f "$user" ]; then
  echo "== a user's matmul"
  "$kirc" compile "$user" --target sm_90a -o "$out/user.ptx" --report 2>&1 | grep -E "^configuration|warps|ring|dot" | head -8
  params=$(grep -oE '^  [a-z_0-9]+: in tensor' "$user" | awk '{print $1}' | tr -d ':')
  echo "  (inputs: $params)"
  # shellcheck disable=SC2086
  bench "$user" --shape a=8192x8192 --shape b=8192x8192 --flops "2*M*N*K"
fi

# 3 and 4. The fusion programs beside the built-in ops and torch, and the built-in GEMM by shape
# beside cuBLAS: parts 1 and 3 of scripts/gpu_kernel_configs.sh (one copy of those benches).
"$here/gpu_kernel_configs.sh" "$kirc" "1 3" || failed+=("gpu_kernel_configs.sh")

# 5. First launch (compile, module load, bind, first run; the GPU context is up before timing)
#    with the driver's JIT cache off (CUDA_CACHE_DISABLE=1), each in a fresh process: without
#    the kir cache (the PTX through the driver's JIT), then into an empty kir cache (compiled, a
#    cubin linked and stored), then from it (the stored cubin: no compile, no JIT). Three rounds.
echo "== first launch"
s128=0.08838834764831845
att="--shape q=1x16x4096x128 --shape k=1x16x4096x128 --shape v=1x16x4096x128 --arg scale=$s128"
bwd="$att --shape o=1x16x4096x128 --shape do=1x16x4096x128 --shape lse=1x16x4096"
first() {
  local name=$1; shift
  for round in 1 2 3; do
    local kc="$out/first_cache_${name}_$round"
    for mode in off store hit; do
      local dir=off
      [ "$mode" != off ] && dir=$kc
      # shellcheck disable=SC2068
      line=$(CUDA_CACHE_DISABLE=1 KIR_CACHE_DIR=$dir "$kirc" bench $@ --iters 3 --warmup 1 2>&1 | grep "first launch" || echo "  (failed)")
      echo "$name round $round, kir cache $mode:$line"
    done
  done
}
# shellcheck disable=SC2086
first attention_fwd attention_fwd $att
# shellcheck disable=SC2086
first attention_bwd attention_bwd $bwd --flops "10*16*4096*4096*128"
first gemm gemm --shape a=1x4096x4096 --shape b=1x4096x4096 --arg alpha=1

echo
if [ ${#failed[@]} -eq 0 ]; then echo "gpu_user_kernels.sh: every bench ran"; else echo "gpu_user_kernels.sh: FAILED: ${failed[*]}"; exit 1; fi
