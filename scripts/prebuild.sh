#!/usr/bin/env bash
# Fills a directory with prebuilt kir cache entries (docs/cache.md, "Prebuilt entries"): every
# built-in op at its defaults, attention forward and backward at head dims 64, 128 and 256,
# causal and not, in bf16 and f16, the GEMMs kir.torch's backward runs (one operand transposed),
# and, in bf16 and f16, one problem of each configuration that shapes select
# (docs/configs.md, "Configurations by problem shape"; kir.torch passes its calls' shapes):
# GEMMs of 16, 32, 64 and 128 rows and one wave of tiles, attention at d128 S = 1k and d256
# S = 4k, and the d128 backward at 16k queries. Each is compiled and assembled by ptxas for
# every target (a cubin is keyed by its PTX, so a configuration shared by several shapes or
# targets is stored once). Shipped as
# `kir-prebuilt` beside `kirc` (or named by KIR_CACHE_PREBUILT), it lets those ops launch the
# first time without the driver's JIT. Needs ptxas ($KIR_PTXAS, else on the PATH; see
# scripts/install-tools.sh); no GPU.
#
# usage: scripts/prebuild.sh KIRC DIR [TARGET...]   (default targets: all four)
set -euo pipefail
kirc=$1
dir=$2
shift 2
targets=()
for t in "$@"; do targets+=(--target "$t"); done
mkdir -p "$dir"
export KIR_CACHE_DIR=$dir
pre() { "$kirc" cache prebuild "$@" ${targets[@]+"${targets[@]}"}; }
for op in $("$kirc" ops | awk '{print $1}'); do
  pre "$op"
done
for op in attention_fwd attention_bwd; do
  for dt in bf16 f16; do
    for d in 64 128 256; do
      for c in 0 1; do
        [ "$dt/$d/$c" = "bf16/128/0" ] && continue # the defaults, above
        pre "$op" -D DTYPE=$dt -D HEAD_DIM=$d -D CAUSAL=$c
      done
    done
  done
done
for dt in bf16 f16; do
  # kir.torch.gemm's backward: da = dc·bᵀ, db = aᵀ·dc.
  pre gemm -D DTYPE=$dt -D TRANS_B=1
  pre gemm -D DTYPE=$dt -D TRANS_A=1
  # Configurations by shape: few rows (the swapped 16×128 and 32×128 tiles, 64×128, 128×128),
  # then one wave of 128×256 tiles on a grid of one program per tile.
  for m in 16 32 64 128; do
    pre gemm -D DTYPE=$dt --shape a=1x${m}x4096 --shape b=1x4096x4096
  done
  pre gemm -D DTYPE=$dt --shape a=1x2048x2048 --shape b=1x2048x2048
  fwd_shapes() { for t in q k v; do echo "--shape $t=$1"; done; }
  pre attention_fwd -D DTYPE=$dt -D HEAD_DIM=128 $(fwd_shapes 16x16x1024x128)
  pre attention_fwd -D DTYPE=$dt -D HEAD_DIM=256 $(fwd_shapes 4x16x4096x256)
  for c in 0 1; do
    pre attention_bwd -D DTYPE=$dt -D HEAD_DIM=128 -D CAUSAL=$c $(for t in q k v o do; do echo "--shape $t=1x16x16384x128"; done)
  done
done
"$kirc" cache list | tail -1
