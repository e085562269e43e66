#!/usr/bin/env bash
# Builds the inputs of scripts/gpu_check.py on a CPU machine (no GPU, no NumPy needed): for each
# case, the CUDA C (`kirc compile --emit cuda`), its META.json and lowered module (`--lowered`),
# random inputs (`kirc randn`), the CPU interpreter's outputs (`kirc run`) and a case.json saying
# how to launch and what to check.
# One extra case, `mutant_attention`, is the bf16 attention case with two indices swapped in the
# generated Q·Kᵀ product: gpu_check.py must report it as failing (it proves the check can fail).
#
# usage: scripts/make_gpu_artifacts.sh [OUT_DIR]   (default: out/gpu_artifacts)
# Then copy OUT_DIR and scripts/gpu_check.py to the GPU machine and run
#   python3 gpu_check.py OUT_DIR
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/out/gpu_artifacts}
cd "$root"
kirc=${KIRC:-${CARGO_TARGET_DIR:-$root/target}/release/kirc}
if [ -z "${KIRC:-}" ]; then
  cargo build --release -p kirc >&2
fi
[ -x "$kirc" ] || { echo "make_gpu_artifacts.sh: no kirc at $kirc" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out"
seed=100

# case NAME OP "DEFINES" "SCALARS" INPUT=SHAPE[:SCALE] ...
#   DEFINES: space-separated NAME=VALUE; SCALARS: space-separated NAME=VALUE (kernel scalars).
case_() {
  local name=$1 op=$2 defines=$3 scalars=$4
  shift 4
  local dir="$out/$name"
  mkdir -p "$dir/in" "$dir/ref"
  local dflags=() rargs=() inputs=()
  for d in $defines; do dflags+=(-D "$d"); done
  for s in $scalars; do rargs+=(--arg "$s"); done
  for spec in "$@"; do
    local iname=${spec%%=*} rest=${spec#*=}
    local shape=${rest%%:*} scale=1
    [[ $rest == *:* ]] && scale=${rest#*:}
    seed=$((seed + 1))
    "$kirc" randn "$shape" --seed "$seed" --scale "$scale" -o "$dir/in/$iname.npy"
    rargs+=(--arg "$iname=$dir/in/$iname.npy")
    inputs+=("\"$iname\"")
  done
  "$kirc" compile "$op" "${dflags[@]}" --target sm_90a --emit cuda -o "$dir/kernel.cu" --meta "$dir/META.json" \
    --lowered "$dir/lowered.kir"
  "$kirc" run "$op" "${dflags[@]}" "${rargs[@]}" --out "$dir/ref"
  local djson="" sjson=""
  for d in $defines; do djson+="${djson:+, }\"${d%%=*}\": \"${d#*=}\""; done
  for s in $scalars; do sjson+="${sjson:+, }\"${s%%=*}\": ${s#*=}"; done
  local IFS=,
  printf '{"op": "%s", "defines": {%s}, "scalars": {%s}, "inputs": [%s], "expect": "pass"}\n' \
    "$op" "$djson" "$sjson" "${inputs[*]}" > "$dir/case.json"
  echo "make_gpu_artifacts.sh: $name ready" >&2
}

# Attention: GQA (4 query heads on 2 kv heads), ragged Sq/Sk, both causal settings, every dtype.
case_ attention_bf16_causal attention_fwd "DTYPE=bf16 HEAD_DIM=128 CAUSAL=1" "scale=0.08838834764831845" \
  q=2x4x300x128 k=2x2x317x128 v=2x2x317x128
case_ attention_f16_d64 attention_fwd "DTYPE=f16 HEAD_DIM=64 CAUSAL=0" "scale=0.125" \
  q=1x2x130x64:3 k=1x1x77x64 v=1x1x77x64:3
case_ attention_bf16_mask_per_batch attention_fwd "DTYPE=bf16 HEAD_DIM=64 MASK=1" "scale=0.125" \
  q=2x2x100x64 k=2x2x90x64 v=2x2x90x64 mask=2x100x90:3
# The backward (checked against the interpreter only: no float64 reference here), on random o
# and lse; its program runs the delta preprocess, dK/dV and dQ kernels.
case_ attention_bwd_bf16_d64 attention_bwd "DTYPE=bf16 HEAD_DIM=64" "scale=0.125" \
  q=1x2x70x64 k=1x1x50x64 v=1x1x50x64 o=1x2x70x64 do=1x2x70x64:2 lse=1x2x70:3
case_ attention_f32_causal_sq_gt_sk attention_fwd "DTYPE=f32 HEAD_DIM=64 CAUSAL=1" "scale=0.125" \
  q=1x3x200x64 k=1x3x70x64 v=1x3x70x64
# RMSNorm forward and backward (a program with a temp), ragged N.
case_ rmsnorm_fwd_bf16 rmsnorm_fwd "DTYPE=bf16" "eps=1e-6" x=37x4097:3 w=4097
case_ rmsnorm_fwd_f32 rmsnorm_fwd "DTYPE=f32" "eps=1e-5" x=5x896 w=896
case_ rmsnorm_bwd_bf16 rmsnorm_bwd "DTYPE=bf16" "eps=1e-6" x=30x896 w=896 dy=30x896:3
case_ rmsnorm_bwd_f32 rmsnorm_bwd "DTYPE=f32 GROUPS=2" "eps=1e-5" x=7x1000:3 w=1000 dy=7x1000
# LayerNorm: a row in one chunk (widening casts of w and b inside the row loop) and three passes.
case_ layernorm_fwd_bf16 layernorm_fwd "DTYPE=bf16" "eps=1e-5" x=37x4095:3 w=4095:2 b=4095
case_ layernorm_fwd_f32 layernorm_fwd "DTYPE=f32" "eps=1e-5" x=5x5000:3 w=5000 b=5000
case_ layernorm_bwd_bf16 layernorm_bwd "DTYPE=bf16" "" x=30x896:3 w=896 dy=30x896:3 mean=30 rstd=30
case_ swiglu_bf16 swiglu "DTYPE=bf16" "" gate=9x1001:3 up=9x1001
# GEMM: every epilogue, transposed and plain B, ragged M/N/K.
case_ gemm_bf16_swiglu_tb gemm "DTYPE=bf16 TRANS_B=1 EPILOGUE=swiglu" "alpha=0.5" \
  a=2x130x77 b=2x200x77 b2=2x200x77
case_ gemm_f16_bias gemm "DTYPE=f16 EPILOGUE=bias" "alpha=1.0" a=1x65x96 b=1x96x130 bias=130
case_ gemm_bf16_gelu_cin gemm "DTYPE=bf16 C_IN=1 EPILOGUE=gelu" "alpha=0.5 beta=0.75" \
  a=1x70x96 b=1x96x130 c_in=1x70x130
case_ gemm_f32_silu gemm "DTYPE=f32 EPILOGUE=silu" "alpha=0.25" a=3x33x200:3 b=3x200x47
case_ gemm_f32_none gemm "DTYPE=f32" "alpha=1.0" a=1x128x64 b=1x64x128

# The seeded mutation: swap two indices in the generated Q·Kᵀ product (key row e1 → query row e0).
cp -r "$out/attention_bf16_causal" "$out/mutant_attention"
cu="$out/mutant_attention/kernel.cu"
before=$(grep -c 'kt\[kk + e1 \* 128\]' "$cu" || true)
sed -i 's/kt\[kk + e1 \* 128\]/kt[kk + e0 * 128]/' "$cu"
after=$(grep -c 'kt\[kk + e0 \* 128\]' "$cu" || true)
if [ "$before" != 1 ] || [ "$after" != 1 ]; then
  echo "make_gpu_artifacts.sh: the mutation did not apply (the generated code changed?)" >&2
  exit 1
fi
sed -i 's/"expect": "pass"/"expect": "fail"/' "$out/mutant_attention/case.json"
echo "make_gpu_artifacts.sh: wrote $(ls "$out" | wc -l) cases to $out" >&2
