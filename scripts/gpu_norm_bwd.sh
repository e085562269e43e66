#!/usr/bin/env bash
# The norm backward ops on a GPU, in one call (about a minute): rmsnorm_bwd and layernorm_bwd
#   1. against the CPU interpreter: `kirc run --device cuda` and `--device cpu` on the same .npy
#      files (relative L2 ≤ 2.4e-2 per output, the same non-finite positions), at shapes that take
#      the one-pass path (a row in one chunk: N ≤ BLOCK) with ragged row groups and a partial last
#      column slice of the final sum, and the two-pass path (N > BLOCK), bf16 and f32;
#   2. run twice on the GPU, every output bit-identical between the runs (no float atomics: the
#      row groups and the order of the final sums are fixed by R, N and the constants);
#   3. `kirc bench` of both at 16384×4096, 16384×8192 and 4096×1024 (bf16) with the bytes of x,
#      dy and dx (6·R·N) as the traffic; the kernels alone at 16384×4096 (`--kernel`), and a
#      few other values of the constants; beside a torch copy (x.clone()) and torch's eager
#      F.rms_norm / F.layer_norm backward (autograd: dx, dw and db), timed the same way.
#
# usage: scripts/gpu_norm_bwd.sh KIRC [OUT_DIR]
#   KIRC: a kirc built with `cargo build --release -p kirc --features cuda`; OUT_DIR defaults to
#   out/gpu_norm_bwd. Needs python3 with numpy (parts 1-2) and torch (the peers of part 3).
# Exit code: 0 when every comparison passes, every repeat is bit-identical and every bench runs.
set -uo pipefail

kirc=${1:?usage: gpu_norm_bwd.sh KIRC [OUT_DIR]}
out=${2:-out/gpu_norm_bwd}
[ -x "$kirc" ] || { echo "gpu_norm_bwd.sh: no kirc at $kirc" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out"
# The kir cache (of this call only) spares the repeated JIT of one specialization.
export KIR_CACHE_DIR="$out/kir_cache"
seed=700
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

# identical DIR_A DIR_B: every .npy of DIR_A has the same bytes as in DIR_B.
identical() {
  local ok=0 f
  for f in "$1"/*.npy; do
    if cmp -s "$f" "$2/$(basename "$f")"; then
      echo "    $(basename "$f"): bit-identical"
    else
      echo "    $(basename "$f"): DIFFERS"; ok=1
    fi
  done
  return $ok
}

# randn NAME SHAPE [OPTIONS...]: a random input in $dir/in.
randn() {
  seed=$((seed + 1))
  "$kirc" randn "$2" --seed "$seed" "${@:3}" -o "$dir/in/$1.npy" >/dev/null
}

# check NAME OP "DEFINES" ARGS...: the GPU against the interpreter, then a second GPU run that
# must be bit-identical to the first.
check() {
  local name=$1 op=$2 defines=$3
  shift 3
  local dflags=()
  for d in $defines; do dflags+=(-D "$d"); done
  "$kirc" run "$op" "${dflags[@]}" "$@" --device cpu --out "$dir/cpu" >/dev/null || failed+=("$name cpu")
  "$kirc" run "$op" "${dflags[@]}" "$@" --device cuda --out "$dir/cuda" >/dev/null || failed+=("$name cuda")
  "$kirc" run "$op" "${dflags[@]}" "$@" --device cuda --out "$dir/cuda2" >/dev/null || failed+=("$name cuda2")
  echo "$name ($op ${defines:-default}): GPU against the interpreter"
  if compare "$dir/cuda" "$dir/cpu"; then echo "  PASS"; else echo "  FAIL"; failed+=("$name"); fi
  echo "$name: two GPU runs"
  if identical "$dir/cuda" "$dir/cuda2"; then echo "  PASS"; else echo "  FAIL"; failed+=("$name repeat"); fi
}

echo "== 1-2. rmsnorm_bwd and layernorm_bwd: GPU against the interpreter, and run twice"
# (rows, columns): one pass with 264 row groups of 3-4 rows and a partial last slice of 64
# columns; a row exactly one chunk; two chunks (two passes); fewer rows than groups. bf16 at
# every shape, f32 at the first and the two-pass one.
for shape in 1000x1000 300x4096 1000x5000 3x777; do
  r=${shape%x*} n=${shape#*x}
  dts="bf16"
  [ "$n" = 1000 ] || [ "$n" = 5000 ] && dts="bf16 f32"
  for dt in $dts; do
    dir="$out/rmsnorm_bwd_${dt}_$shape"
    mkdir -p "$dir/in"
    randn x "$shape" --scale 3
    randn w "$n"
    randn dy "$shape"
    check "rmsnorm_bwd_${dt}_$shape" rmsnorm_bwd "DTYPE=$dt" --arg eps=1e-5 \
      --arg x="$dir/in/x.npy" --arg w="$dir/in/w.npy" --arg dy="$dir/in/dy.npy"
    # layernorm_bwd from the statistics the interpreter's layernorm_fwd saves.
    dir="$out/layernorm_bwd_${dt}_$shape"
    mkdir -p "$dir/in"
    randn x "$shape" --scale 3
    randn w "$n"
    randn b "$n"
    randn dy "$shape"
    "$kirc" run layernorm_fwd -D DTYPE="$dt" --arg x="$dir/in/x.npy" --arg w="$dir/in/w.npy" \
      --arg b="$dir/in/b.npy" --arg eps=1e-5 --device cpu --out "$dir/fwd" >/dev/null || failed+=("layernorm_fwd $shape")
    check "layernorm_bwd_${dt}_$shape" layernorm_bwd "DTYPE=$dt" \
      --arg x="$dir/in/x.npy" --arg w="$dir/in/w.npy" --arg dy="$dir/in/dy.npy" \
      --arg mean="$dir/fwd/mean.npy" --arg rstd="$dir/fwd/rstd.npy"
  done
done
# Other constants: few groups, small chunks and slices (the two-pass path on a short row).
dir="$out/rmsnorm_bwd_small_constants"
mkdir -p "$dir/in"
randn x 500x300 --scale 3
randn w 300
randn dy 500x300
check rmsnorm_bwd_small_constants rmsnorm_bwd "GROUPS=7 BLOCK=64 SUM_COLS=40" \
  --arg eps=1e-5 --arg x="$dir/in/x.npy" --arg w="$dir/in/w.npy" --arg dy="$dir/in/dy.npy"

echo
echo "== 3. kirc bench (bf16; TB/s counts x, dy and dx: 6·R·N bytes)"
bench() {
  echo "\$ kirc bench $*"
  "$kirc" bench "$@" || failed+=("bench $*")
}
for shape in 16384x4096 16384x8192 4096x1024; do
  r=${shape%x*} n=${shape#*x}
  bench rmsnorm_bwd --shape x="$shape" --shape w="$n" --shape dy="$shape" --arg eps=1e-5 --bytes "6*R*N"
  bench layernorm_bwd --shape x="$shape" --shape w="$n" --shape dy="$shape" --shape mean="$r" \
    --shape rstd="$r" --bytes "6*R*N"
done
echo "-- the kernels alone at 16384×4096 (264 row groups; the final sums read 264×4096 f32 partials)"
bench rmsnorm_bwd --kernel rmsnorm_bwd_dx --shape x=16384x4096 --shape w=4096 --shape dy=16384x4096 \
  --shape dw_part=264x4096 --arg eps=1e-5 --bytes "6*R*N"
bench rmsnorm_bwd --kernel rmsnorm_bwd_dw --shape dw_part=264x4096 --bytes "4*G*N"
bench layernorm_bwd --kernel layernorm_bwd_dx --shape x=16384x4096 --shape w=4096 --shape dy=16384x4096 \
  --shape mean=16384 --shape rstd=16384 --shape dw_part=264x4096 --shape db_part=264x4096 --bytes "6*R*N"
bench layernorm_bwd --kernel layernorm_bwd_dwdb --shape dw_part=264x4096 --shape db_part=264x4096 --bytes "8*G*N"
echo "-- other constants at 16384×4096 (rmsnorm_bwd), and BLOCK=8192 at 16384×8192 (one pass)"
for d in "GROUPS=132" "GROUPS=528" "SUM_COLS=32" "SUM_COLS=128"; do
  dflags=()
  for x in $d; do dflags+=(-D "$x"); done
  bench rmsnorm_bwd "${dflags[@]}" --shape x=16384x4096 --shape w=4096 --shape dy=16384x4096 --arg eps=1e-5 --bytes "6*R*N"
done
bench rmsnorm_bwd -D BLOCK=8192 --shape x=16384x8192 --shape w=8192 --shape dy=16384x8192 --arg eps=1e-5 --bytes "6*R*N"
bench layernorm_bwd -D BLOCK=8192 --shape x=16384x8192 --shape w=8192 --shape dy=16384x8192 \
  --shape mean=16384 --shape rstd=16384 --bytes "6*R*N"

echo
echo "-- torch peers (bf16; same byte count 6·R·N; median of 100 CUDA-event timings)"
python3 - <<'EOF' || failed+=("torch peers")
import torch, torch.nn.functional as F

def median_ms(f, n=100):
    for _ in range(5):
        f()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for a, b in ev:
        a.record(); f(); b.record()
    torch.cuda.synchronize()
    xs = sorted(a.elapsed_time(b) for a, b in ev)
    return xs[len(xs) // 2]

for r, n in [(16384, 4096), (16384, 8192), (4096, 1024)]:
    bytes_ = 6 * r * n
    tbs = lambda ms: bytes_ / ms / 1e9
    x = torch.randn(r, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(r, n, device="cuda", dtype=torch.bfloat16)
    xd = x.detach()
    ms = median_ms(lambda: xd.clone())
    print(f"peer copy x.clone() {r}x{n}: {ms:.4f} ms, {2 * r * n * 2 / ms / 1e9:.3f} TB/s (its own bytes, 4·R·N)")
    y = F.rms_norm(x, (n,), w, 1e-5)
    ms = median_ms(lambda: torch.autograd.grad(y, (x, w), dy, retain_graph=True))
    print(f"peer torch rms_norm backward {r}x{n}: {ms:.4f} ms, {tbs(ms):.3f} TB/s")
    y = F.layer_norm(x, (n,), w, b, 1e-5)
    ms = median_ms(lambda: torch.autograd.grad(y, (x, w, b), dy, retain_graph=True))
    print(f"peer torch layer_norm backward {r}x{n}: {ms:.4f} ms, {tbs(ms):.3f} TB/s")
EOF

echo
if [ ${#failed[@]} -eq 0 ]; then
  echo "gpu_norm_bwd.sh: all checks passed"
else
  echo "gpu_norm_bwd.sh: FAILED: ${failed[*]}"
  exit 1
fi
