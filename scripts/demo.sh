#!/usr/bin/env bash
# Builds kirc and runs the built-in attention_fwd op on the CPU interpreter with generated
# inputs (no NumPy needed): q, k, v of shape 1x2x300x64, bf16, causal. Outputs go to
# ${1:-/tmp/kir}/out/{o,lse}.npy.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${1:-/tmp/kir}
cd "$root"
cargo build --release
kirc=./target/release/kirc
"$kirc" randn 1x2x300x64 -o "$dir/q.npy" --seed 1
"$kirc" randn 1x2x300x64 -o "$dir/k.npy" --seed 2
"$kirc" randn 1x2x300x64 -o "$dir/v.npy" --seed 3
"$kirc" run attention_fwd -D DTYPE=bf16 -D HEAD_DIM=64 -D CAUSAL=1 \
  --arg q="$dir/q.npy" --arg k="$dir/k.npy" --arg v="$dir/v.npy" --arg scale=0.125 \
  --out "$dir/out"
