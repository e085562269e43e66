#!/usr/bin/env bash
# Fills a directory with prebuilt kir cache entries (docs/cache.md, "Prebuilt entries"): every
# built-in op at its defaults, and attention forward and backward at head dims 64, 128 and 256,
# causal and not, in bf16 and f16, compiled and assembled by ptxas for every target. Shipped as
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
"$kirc" cache list | tail -1
