#!/usr/bin/env bash
# Writes every default kernel's output (PTX + META.json on the 4 targets, CUDA C, and the
# --report text) for the built-in ops and their main variants into DIR, so that a refactor can
# be checked byte for byte: run it at the commit before and after, then `diff -r`. Shapes choose
# configurations (the long-sequence attention rows, GEMM's by-shape rows), so the shapes of the
# issues' bars are variants too, each named by the label before its `|`.
# Usage: scripts/ptx_corpus.sh KIRC DIR
set -uo pipefail
kirc=${1:?usage: ptx_corpus.sh KIRC DIR}
out=${2:?usage: ptx_corpus.sh KIRC DIR}
mkdir -p "$out"
# The backward's tensors at the bars' shapes (B×H×S×D for q, k, v, o and do; B×H×S for lse).
bwd_shapes() { for n in q k v o do; do printf -- '--shape %s=%s ' "$n" "$1"; done; printf -- '--shape lse=%s' "${1%x*}"; }
b128=$(bwd_shapes 1x16x16384x128) b64=$(bwd_shapes 4x32x4096x64) b256=$(bwd_shapes 4x8x4096x256)
variants=(
  "attention_fwd"
  "attention_fwd -D HEAD_DIM=64" "attention_fwd -D HEAD_DIM=256"
  "attention_fwd -D CAUSAL=1" "attention_fwd -D CAUSAL=1 -D HEAD_DIM=64" "attention_fwd -D CAUSAL=1 -D HEAD_DIM=256"
  "attention_fwd -D MASK=1" "attention_fwd -D VARLEN=1" "attention_fwd -D WINDOW=1 -D SOFTCAP=1"
  "attention_fwd -D DTYPE=f16 -D OUT_LAYOUT=bshd" "attention_fwd -D CAUSAL=1 -D KV_OFFSET=1"
  "attention_bwd" "attention_bwd -D HEAD_DIM=64" "attention_bwd -D CAUSAL=1"
  "gemm" "gemm -D EPILOGUE=bias" "gemm -D EPILOGUE=swiglu" "gemm -D TRANS_A=1 -D TRANS_B=1"
  "gemm -D DTYPE=f32" "gemm -D C_IN=1 -D EPILOGUE=gelu"
  "gemm_nf4" "layernorm_fwd" "layernorm_bwd" "rmsnorm_fwd" "rmsnorm_bwd" "swiglu"
  "gemm --stages 2" "gemm --persistent off" "gemm --warp-specialize off" "gemm --warps 4"
  "attention_fwd --warp-specialize off" "attention_fwd -D CAUSAL=1 --warp-specialize on"
  "attention_fwd -D HEAD_DIM=64 --overlap on" "attention_fwd --persistent 132" "rmsnorm_fwd --stages 3"
  "bwd_d128_s16k|attention_bwd $b128"
  "bwd_d128_s16k_causal|attention_bwd -D CAUSAL=1 $b128"
  "bwd_d64_s4k|attention_bwd $b64 -D HEAD_DIM=64"
  "bwd_d256_s4k|attention_bwd $b256 -D HEAD_DIM=256"
  "fwd_d128_s1k|attention_fwd --shape q=16x16x1024x128 --shape k=16x16x1024x128 --shape v=16x16x1024x128"
  "fwd_d128_s16k|attention_fwd --shape q=1x16x16384x128 --shape k=1x16x16384x128 --shape v=1x16x16384x128"
  "fwd_d256_s4k|attention_fwd -D HEAD_DIM=256 --shape q=4x8x4096x256 --shape k=4x8x4096x256 --shape v=4x8x4096x256"
  "gemm_16k|gemm --shape a=16384x4096 --shape b=4096x14336" "gemm_8k|gemm --shape a=8192x8192 --shape b=8192x8192"
  "gemm_m16|gemm --shape a=16x4096 --shape b=4096x14336"
)
for v in "${variants[@]}"; do
  case "$v" in
    *'|'*) name=${v%%|*} v=${v#*|} ;;
    *) name=$(echo "$v" | tr ' =' '_-' | tr -s '_') ;;
  esac
  for t in sm_80 sm_90a sm_100a sm_120a; do
    # shellcheck disable=SC2086
    "$kirc" compile $v --target "$t" --emit ptx -o "$out/$name.$t.ptx" --meta "$out/$name.$t.json" \
      --report="$out/$name.$t.report" 2>"$out/$name.$t.err"; echo "exit $?" >>"$out/$name.$t.err"
    # shellcheck disable=SC2086
    "$kirc" compile $v --target "$t" --emit cuda -o "$out/$name.$t.cu" --meta "$out/$name.$t.cu.json" \
      2>"$out/$name.$t.cu.err"; echo "exit $?" >>"$out/$name.$t.cu.err"
    # shellcheck disable=SC2086
    "$kirc" compile $v --target "$t" --emit ir -o "$out/$name.$t.kir" 2>"$out/$name.$t.ir.err"
    echo "exit $?" >>"$out/$name.$t.ir.err"
  done
done
