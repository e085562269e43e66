#!/usr/bin/env bash
# Checks the CUDA runtime on a GPU machine with nothing but a kirc binary built with
# `--features cuda` (no Rust there; the driver is loaded at run time) and python3 + numpy:
#   1. every built-in op at its default specialization on small random inputs (and attention_bwd
#      with each of the forward's features, both DETERMINISTIC modes; f32 attention fwd and bwd
#      at head dim 384, causal and not, at their rows' tiles; attention_fwd and attention_bwd at
#      the other rows of tiles that do not spill: f32 d160 and d256, bf16 d384), run with
#      `kirc run --device cuda` and `kirc run --device cpu` (the interpreter) on the same .npy
#      files; every output must match (same shape, same non-finite positions, relative L2
#      error ≤ 2.4e-2, twice the bf16 tolerance of docs/testing.md: the PTX sums in another
#      order than the interpreter). Outputs are poisoned on both devices, so an element the GPU
#      never writes shows as NaN.
#   2. a negative control: attention on the GPU with another `scale` than on the CPU must FAIL
#      the same comparison (the check can fail);
#   3. `kirc bench` for attention_fwd (HEAD_DIM 128, B 4, H 16, S 4096, causal 0 and 1), gemm
#      8192³ and rmsnorm_fwd 16384×4096 (bf16, the defaults).
#
#   4. the compile plan's per-target choices on real hardware: attention_fwd at head dim 256
#      compiled for sm_80 (whose 163 KB of shared memory hold no 2-stage ring: the schedule
#      search keeps the plain loop; the sm_80 PTX runs on any later GPU), and warp
#      specialization with the paired overlap (`--warp-specialize on --overlap on`, sm_90a).
#   5. a user's kernels (copies of built-in ops, a user's matmul, the fusion programs by default,
#      --fuse and --no-fuse) and the kir cache (stored, hit, damaged cubins), against the CPU.
#
# usage: scripts/gpu_runtime_check.sh [KIRC] [OUT_DIR] [--no-bench]
#   KIRC defaults to $KIRC, else target/release/kirc; OUT_DIR to out/gpu_runtime; --no-bench
#   skips part 3.
# Build the binary where Rust is: cargo build --release -p kirc --features cuda
# Exit code: 0 when every comparison passes, the negative control fails and every bench runs.
set -euo pipefail

kirc=${1:-${KIRC:-target/release/kirc}}
out=${2:-out/gpu_runtime}
no_bench=${3:-}
[ -x "$kirc" ] || { echo "gpu_runtime_check.sh: no kirc at $kirc" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out"
seed=500
failed=()

# compare DIR_A DIR_B: relative L2 of every .npy of DIR_A against DIR_B; exit 1 on a mismatch.
compare() {
  python3 - "$1" "$2" <<'EOF'
import os, sys
import numpy as np
a_dir, b_dir = sys.argv[1], sys.argv[2]
ok = True
for f in sorted(os.listdir(a_dir)):
    a, b = np.load(os.path.join(a_dir, f)).astype(np.float64), np.load(os.path.join(b_dir, f)).astype(np.float64)
    if a.shape != b.shape:
        print(f"    {f}: shape {a.shape} vs {b.shape}"); ok = False; continue
    fa, fb = np.isfinite(a), np.isfinite(b)
    if not (fa == fb).all() or not np.array_equal(a[~fa], b[~fb], equal_nan=True):
        print(f"    {f}: non-finite values differ ({(~fa).sum()} vs {(~fb).sum()} non-finite)"); ok = False; continue
    d, n = np.linalg.norm(a[fa] - b[fb]), np.linalg.norm(b[fb])
    rel = d / n if n > 0 else d
    mx = np.abs(a[fa] - b[fb]).max() if fa.any() else 0.0
    good = rel <= 2.4e-2
    ok &= good
    print(f"    {f}: rel L2 {rel:.2e}, max abs {mx:.2e} {'ok' if good else 'MISMATCH'}")
sys.exit(0 if ok else 1)
EOF
}

# case_ NAME OP "DEFINES" "SCALARS" INPUT=SHAPE[:RANDN_OPTIONS] | INPUT=@FILE.npy ...
#   RANDN_OPTIONS: extra `kirc randn` options with `,` for spaces (e.g. `--dtype,u8,--high,256`).
#   $gpu_flags (default none): extra flags of the GPU run only (`--target`, lowering flags).
gpu_flags=""
case_() {
  local name=$1 op=$2 defines=$3 scalars=$4
  shift 4
  # Every loop variable is local: a caller's own `d` (bwd_feature's head dim) must survive.
  local dir="$out/$name" dflags=() args=() d s spec
  mkdir -p "$dir/in"
  for d in $defines; do dflags+=(-D "$d"); done
  for s in $scalars; do args+=(--arg "$s"); done
  for spec in "$@"; do
    local iname=${spec%%=*} rest=${spec#*=}
    if [[ $rest == @* ]]; then
      args+=(--arg "$iname=${rest#@}")
      continue
    fi
    local shape=${rest%%:*} opts=""
    [[ $rest == *:* ]] && opts=${rest#*:}
    seed=$((seed + 1))
    # shellcheck disable=SC2086
    "$kirc" randn "$shape" --seed "$seed" ${opts//,/ } -o "$dir/in/$iname.npy" >/dev/null
    args+=(--arg "$iname=$dir/in/$iname.npy")
  done
  "$kirc" run "$op" "${dflags[@]}" "${args[@]}" --device cpu --out "$dir/cpu" >/dev/null
  # shellcheck disable=SC2086
  "$kirc" run "$op" "${dflags[@]}" "${args[@]}" --device cuda $gpu_flags --out "$dir/cuda" >/dev/null
  echo "$name ($op ${defines:-default} ${gpu_flags}):"
  if compare "$dir/cuda" "$dir/cpu"; then echo "  PASS"; else echo "  FAIL"; failed+=("$name"); fi
}

s128=0.08838834764831845
# Attention forward (GQA, ragged Sq/Sk); its CPU outputs feed the backward's o and lse.
case_ attention_fwd attention_fwd "" "scale=$s128" q=2x4x130x128 k=2x2x97x128 v=2x2x97x128
a="$out/attention_fwd"
case_ attention_bwd attention_bwd "" "scale=$s128" q=@$a/in/q.npy k=@$a/in/k.npy v=@$a/in/v.npy \
  o=@$a/cpu/o.npy lse=@$a/cpu/lse.npy do=2x4x130x128
# Head dim 64: the sm_90a attention-backward row's 64-row blocks.
case_ attention_fwd_d64 attention_fwd "HEAD_DIM=64" "scale=0.125" q=2x4x130x64 k=2x2x97x64 v=2x2x97x64
# d256 at a known short length takes the warp-specialized row (docs/configs.md).
case_ attention_fwd_d256 attention_fwd "HEAD_DIM=256" "scale=0.0625" q=2x4x300x256 k=2x2x257x256 v=2x2x257x256
a="$out/attention_fwd_d64"
case_ attention_bwd_d64 attention_bwd "HEAD_DIM=64" "scale=0.125" q=@$a/in/q.npy k=@$a/in/k.npy v=@$a/in/v.npy \
  o=@$a/cpu/o.npy lse=@$a/cpu/lse.npy do=2x4x130x64
# d256's backward row: warp-specialized, its dQ programs over 80-key blocks (257 keys end inside
# the fourth block).
a="$out/attention_fwd_d256"
case_ attention_bwd_d256 attention_bwd "HEAD_DIM=256" "scale=0.0625" q=@$a/in/q.npy k=@$a/in/k.npy \
  v=@$a/in/v.npy o=@$a/cpu/o.npy lse=@$a/cpu/lse.npy do=2x4x300x256
# attention_bwd with each of the forward's features, in both DETERMINISTIC modes, on the CPU o and
# lse of the forward with the same specialization (GQA 4/2, Sq 37, key capacity 53, head dim
# $hd: 64 unless set, as for the rows that features choose at d128 and d256 below).
# bwd_feature NAME "DEFINES" "SCALARS" [FEATURE_INPUT=SHAPE[:RANDN_OPTIONS] ...]
bwd_feature() {
  local name=$1 defines=$2 scalars=$3 d=${hd:-64}
  shift 3
  local sc
  sc=$(python3 -c "print($d ** -0.5)")
  case_ "fwd_$name" attention_fwd "HEAD_DIM=$d $defines" "scale=$sc $scalars" \
    q=2x4x37x$d k=2x2x53x$d v=2x2x53x$d "$@"
  local f="$out/fwd_$name" extra=() spec det
  for spec in "$@"; do extra+=("${spec%%=*}=@$f/in/${spec%%=*}.npy"); done
  for det in 1 0; do
    case_ "bwd_${name}_det$det" attention_bwd "HEAD_DIM=$d DETERMINISTIC=$det $defines" \
      "scale=$sc $scalars" q=@$f/in/q.npy k=@$f/in/k.npy v=@$f/in/v.npy o=@$f/cpu/o.npy \
      lse=@$f/cpu/lse.npy do=2x4x37x$d "${extra[@]}"
  done
}
lengths=2:--dtype,i32,--low=0,--high=54
past=2:--dtype,i32,--low=-5,--high=30
bwd_feature varlen "VARLEN=1" "" total_lengths=$lengths
bwd_feature kv_offset "CAUSAL=1 KV_OFFSET=1" "" past_lengths=$past
bwd_feature mask "MASK=1 CAUSAL=1" "" mask=8x37x53:--scale,2
bwd_feature window "WINDOW=1 CAUSAL=1" "window=17"
bwd_feature softcap "SOFTCAP=1" "softcap=5.0"
bwd_feature all "CAUSAL=1 VARLEN=1 KV_OFFSET=1 MASK=1 WINDOW=1 SOFTCAP=1" "window=20 softcap=8.0" \
  total_lengths=$lengths past_lengths=$past mask=2x37x53:--scale,2
# The rows that features choose to keep ptxas from spilling (docs/configs.md, "Tiles that do
# not spill"): sm_90a's 128-key row at d128 with a mask or a causal window, and 16-key tiles at
# d256 with a mask or a soft cap (here both, with a causal window); and d256 with VARLEN, whose
# row (80-key dQ blocks) is the default's.
hd=128 bwd_feature d128_mask "MASK=1" "" mask=8x37x53:--scale,2
hd=128 bwd_feature d128_window "WINDOW=1 CAUSAL=1" "window=17"
hd=256 bwd_feature d256_varlen "VARLEN=1" "" total_lengths=$lengths
hd=256 bwd_feature d256_mask_softcap "MASK=1 SOFTCAP=1 WINDOW=1 CAUSAL=1" "window=17 softcap=5.0" \
  mask=2x37x53:--scale,2
# The largest head dim in f32 (the scalar parity kernel FP32 users rely on), at its rows'
# tiles that fit the target's shared memory and do not spill (docs/configs.md).
for c in 0 1; do
  case_ "attention_fwd_f32_d384_causal$c" attention_fwd "DTYPE=f32 HEAD_DIM=384 CAUSAL=$c" "scale=0.051" \
    q=1x4x130x384 k=1x2x97x384 v=1x2x97x384
  a="$out/attention_fwd_f32_d384_causal$c"
  case_ "attention_bwd_f32_d384_causal$c" attention_bwd "DTYPE=f32 HEAD_DIM=384 CAUSAL=$c" "scale=0.051" \
    q=@$a/in/q.npy k=@$a/in/k.npy v=@$a/in/v.npy o=@$a/cpu/o.npy lse=@$a/cpu/lse.npy do=1x4x130x384
done
# The rows of the tiles that do not spill (f32 above head dim 128, 16-bit at 384;
# compiler/src/configs/table.rs, docs/configs.md): f32 d160 and d256, bf16 d384, forward and
# backward, each at its row's tiles.
for spec in "f32 160 0.079" "f32 256 0.0625" "bf16 384 0.051"; do
  set -- $spec
  case_ "attention_fwd_${1}_d$2" attention_fwd "DTYPE=$1 HEAD_DIM=$2 CAUSAL=1" "scale=$3" \
    q=1x4x130x$2 k=1x2x97x$2 v=1x2x97x$2
  a="$out/attention_fwd_${1}_d$2"
  case_ "attention_bwd_${1}_d$2" attention_bwd "DTYPE=$1 HEAD_DIM=$2 CAUSAL=1" "scale=$3" \
    q=@$a/in/q.npy k=@$a/in/k.npy v=@$a/in/v.npy o=@$a/cpu/o.npy lse=@$a/cpu/lse.npy do=1x4x130x$2
done
case_ gemm gemm "" "alpha=0.5" a=1x200x96 b=1x96x130
case_ gemm_nf4 gemm_nf4 "" "" a=70x128 codes=130x64:--dtype,u8,--high,256 scales=130x2:--scale,0.1
case_ rmsnorm_fwd rmsnorm_fwd "" "eps=1e-5" x=37x1000:--scale,3 w=1000
case_ rmsnorm_bwd rmsnorm_bwd "" "eps=1e-5" x=30x1000 w=1000 dy=30x1000
case_ layernorm_fwd layernorm_fwd "" "eps=1e-5" x=37x1000 w=1000 b=1000
l="$out/layernorm_fwd"
case_ layernorm_bwd layernorm_bwd "" "" x=@$l/in/x.npy w=@$l/in/w.npy dy=37x1000 \
  mean=@$l/cpu/mean.npy rstd=@$l/cpu/rstd.npy
case_ swiglu swiglu "" "" gate=33x1500 up=33x1500

# The compile plan's per-target choices (part 4).
s256=0.0625
s64=0.125
gpu_flags="--target sm_80"
case_ attention_fwd_d256_sm80 attention_fwd "HEAD_DIM=256" "scale=$s256" q=2x4x130x256 k=2x2x97x256 v=2x2x97x256
for c in 0 1; do
  gpu_flags="--target sm_90a --warp-specialize on --overlap on"
  case_ "ws_overlap_d64_causal$c" attention_fwd "HEAD_DIM=64 CAUSAL=$c" "scale=$s64" q=2x4x300x64 k=2x2x300x64 v=2x2x300x64
  case_ "ws_overlap_d128_causal$c" attention_fwd "HEAD_DIM=128 CAUSAL=$c" "scale=$s128" q=2x4x300x128 k=2x2x300x128 v=2x2x300x128
done
gpu_flags=""

# Part 5: a user's kernels and the kir cache. Copies of built-in ops (a comment added, the
# module renamed), a user's own matmul, and the fusion programs as kir runs them by default, with
# --fuse and with --no-fuse; then attention through the kir cache: stored, then hit (the cached
# cubin, no JIT), then with every cached cubin damaged (a warning, the PTX loaded instead).
for op in gemm attention_fwd; do
  { echo "// A user's copy of $op."; sed "s/^module $op\$/module my_$op/" "compiler/ops/$op.kir"; } >"$out/my_$op.kir"
done
export KIR_CACHE_DIR=off
case_ copy_gemm "$out/my_gemm.kir" "" "alpha=0.5" a=1x200x96 b=1x96x130
# GEMMs with few rows: the compile plan sees the shapes and takes the small-M rows.
case_ gemm_m16 gemm "" "alpha=0.5" a=1x16x200 b=1x200x300
case_ gemm_m100 gemm "" "alpha=0.5" a=1x100x130 b=1x130x257
case_ copy_attention_fwd "$out/my_attention_fwd.kir" "" "scale=$s128" q=2x4x130x128 k=2x2x97x128 v=2x2x97x128
if [ -f tests/in/user/matmul_leaky_relu.kir ]; then
  case_ user_matmul tests/in/user/matmul_leaky_relu.kir "" "" a=200x96 b=96x130
fi
for f in "" --fuse --no-fuse; do
  gpu_flags="$f"
  case_ "rmsnorm_gemm${f}" tests/in/fusion/rmsnorm_gemm.kir "" "eps=1e-5" x=130x96:--scale,3 w=96 wm=96x70
  case_ "gate_up_swiglu${f}" tests/in/fusion/gate_up_swiglu.kir "" "" x=130x96 wg=96x70 wu=96x70
done
gpu_flags=""
export KIR_CACHE_DIR="$out/kir_cache"
a="$out/attention_fwd"
for round in stored hit; do
  "$kirc" run attention_fwd --arg q="$a/in/q.npy" --arg k="$a/in/k.npy" --arg v="$a/in/v.npy" \
    --arg scale=$s128 --device cuda --out "$out/cache_$round" >/dev/null
  echo "cache_$round (attention_fwd through the kir cache):"
  if compare "$out/cache_$round" "$a/cpu"; then echo "  PASS"; else echo "  FAIL"; failed+=("cache_$round"); fi
done
"$kirc" cache list
for f in "$KIR_CACHE_DIR"/*.cubin; do printf 'damaged' | dd of="$f" bs=1 seek=200 conv=notrunc 2>/dev/null; done
"$kirc" run attention_fwd --arg q="$a/in/q.npy" --arg k="$a/in/k.npy" --arg v="$a/in/v.npy" \
  --arg scale=$s128 --device cuda --out "$out/cache_damaged" >/dev/null 2>"$out/cache_damaged.err"
echo "cache_damaged (every cubin damaged: a warning, then the right outputs):"
sed 's/^/    /' "$out/cache_damaged.err"
if grep -q "warning: kir cache" "$out/cache_damaged.err" && compare "$out/cache_damaged" "$a/cpu"; then
  echo "  PASS"; else echo "  FAIL"; failed+=(cache_damaged); fi
export KIR_CACHE_DIR=off

# Negative control: the GPU runs attention with scale 0.05, the CPU with 1/sqrt(128).
neg="$out/negative_control"
"$kirc" run attention_fwd --arg q="$a/in/q.npy" --arg k="$a/in/k.npy" --arg v="$a/in/v.npy" \
  --arg scale=0.05 --device cuda --out "$neg" >/dev/null
echo "negative_control (scale 0.05 on the GPU vs $s128 on the CPU, must fail):"
if compare "$neg" "$a/cpu"; then echo "  PASSED (the check cannot fail!)"; failed+=(negative_control); else echo "  FAIL, as it must"; fi

if [ "$no_bench" = --no-bench ]; then
  if [ ${#failed[@]} -eq 0 ]; then echo "gpu_runtime_check.sh: all checks passed (no bench)"; exit 0; fi
  echo "gpu_runtime_check.sh: FAILED: ${failed[*]}"; exit 1
fi
echo
echo "== kirc bench"
bench() {
  echo "\$ kirc bench $*"
  "$kirc" bench "$@" || failed+=("bench $1")
}
qkv="--shape q=4x16x4096x128 --shape k=4x16x4096x128 --shape v=4x16x4096x128"
for c in 0 1; do
  # shellcheck disable=SC2086
  bench attention_fwd -D HEAD_DIM=128 -D CAUSAL=$c $qkv --arg scale=$s128
done
bench gemm --shape a=1x8192x8192 --shape b=1x8192x8192 --arg alpha=1 --iters 30
bench rmsnorm_fwd --shape x=16384x4096 --shape w=4096 --arg eps=1e-5

echo
if [ ${#failed[@]} -eq 0 ]; then
  echo "gpu_runtime_check.sh: all checks passed"
else
  echo "gpu_runtime_check.sh: FAILED: ${failed[*]}"
  exit 1
fi
