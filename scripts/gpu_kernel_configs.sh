#!/usr/bin/env bash
# Configurations per kernel and the no-dot classes (docs/configs.md), timed on a GPU machine in
# one call with kir's default flags (bf16; medians of CUDA-event timings after warm-up, by
# `kirc bench`, and for torch by scripts/peers.py's median_ms):
#   1. the fusion programs of tests/in/fusion at M = 8192, K = N = 4096 as kir runs them by
#      default, with --fuse and with --no-fuse, beside the same work through the built-in ops
#      (rmsnorm_fwd + gemm; gemm + gemm + swiglu; gemm with the swiglu epilogue) and torch;
#   2. the row-reduction row's column block on layernorm_fwd and rmsnorm_fwd: the default
#      beside -D BLOCK=1024 and 2048, at 16384 rows of 1024, 4096 and 8192 columns, beside copy;
#   3. the built-in GEMM by shape (issue 24's shapes; `kirc bench` hands the shapes to the
#      compile plan, so the rows for few rows apply) beside torch.mm (cuBLAS).
# Correctness of the same kernels is checked by scripts/gpu_runtime_check.sh (part 5).
#
# usage: scripts/gpu_kernel_configs.sh [KIRC] [PARTS]   (PARTS: e.g. "1 3"; default all)
# Build the binary where Rust is: cargo build --release -p kirc --features cuda
set -uo pipefail

kirc=${1:-${KIRC:-target/release/kirc}}
[ -x "$kirc" ] || { echo "gpu_kernel_configs.sh: no kirc at $kirc" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
parts=${2:-1 2 3}
failed=()
part() { [[ " $parts " == *" $1 "* ]]; }

bench() {
  echo "\$ kirc bench $*"
  "$kirc" bench "$@" --iters 30 || failed+=("bench $1")
}

if part 1; then
echo "== 1. fusion programs (M = 8192, K = N = 4096)"
rg=tests/in/fusion/rmsnorm_gemm.kir
rgs="--shape x=8192x4096 --shape w=4096 --shape wm=4096x4096 --arg eps=1e-5"
"$kirc" compile "$rg" --target sm_90a -o /dev/null --report 2>&1 | grep -E "^(configuration|fusion)"
for f in "" --fuse --no-fuse; do
  # shellcheck disable=SC2086
  bench "$rg" $rgs --flops "2*M*N*K" $f
done
bench rmsnorm_fwd --shape x=8192x4096 --shape w=4096 --arg eps=1e-5
bench gemm --shape a=1x8192x4096 --shape b=1x4096x4096 --arg alpha=1
gs=tests/in/fusion/gate_up_swiglu.kir
gss="--shape x=8192x4096 --shape wg=4096x4096 --shape wu=4096x4096"
"$kirc" compile "$gs" --target sm_90a -o /dev/null --report 2>&1 | grep -E "^(configuration|fusion)"
for f in "" --fuse --no-fuse; do
  # shellcheck disable=SC2086
  bench "$gs" $gss --flops "4*M*N*K" $f
done
bench gemm -D EPILOGUE=swiglu --shape a=1x8192x4096 --shape b=1x4096x4096 --shape b2=1x4096x4096 --arg alpha=1
bench swiglu --shape gate=8192x4096 --shape up=8192x4096
python3 - "$here" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import torch
import torch.nn.functional as F
from peers import median_ms
x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
wm = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
wu = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
print(f"torch rms_norm + mm: {median_ms(lambda: torch.mm(F.rms_norm(x, (4096,), w, 1e-5), wm), 30):.4f} ms")
print(f"torch silu(x @ wg) * (x @ wu): {median_ms(lambda: F.silu(torch.mm(x, wm)) * torch.mm(x, wu), 30):.4f} ms")
PY

fi

if part 2; then
echo "== 2. the row-reduction column block (16384 rows)"
for n in 1024 4096 8192; do
  for op in layernorm_fwd rmsnorm_fwd; do
    extra=""
    [ "$op" = layernorm_fwd ] && extra="--shape b=$n"
    for d in "" "-D BLOCK=1024" "-D BLOCK=2048"; do
      # shellcheck disable=SC2086
      bench $op $d --shape x=16384x$n --shape w=$n $extra --arg eps=1e-5 --bytes "4*R*N"
    done
  done
done
python3 - "$here" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import torch
from peers import median_ms
for n in (1024, 4096, 8192):
    x = torch.randn(16384, n, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    t = median_ms(lambda: y.copy_(x), 30)
    print(f"copy 16384x{n}: {t:.4f} ms, {2 * x.numel() * 2 / t / 1e9:.2f} TB/s")
PY
fi

if part 3; then
echo "== 3. gemm by shape (kir defaults) beside torch.mm"
shapes="16x14336x4096 128x14336x4096 1024x4096x4096 2048x2048x2048 8192x1024x8192 4096x128256x4096 8192x8192x8192 16384x14336x4096"
for s in $shapes; do
  IFS=x read -r m n k <<<"$s"
  bench gemm --shape "a=1x${m}x${k}" --shape "b=1x${k}x${n}" --arg alpha=1
done
# shellcheck disable=SC2086
python3 - "$here" $shapes <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import torch
from peers import median_ms
for s in sys.argv[2:]:
    m, n, k = map(int, s.split("x"))
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    t = median_ms(lambda: torch.mm(a, b), 30)
    print(f"cuBLAS {s}: {t:.4f} ms, {2 * m * n * k / t / 1e9:.1f} TFLOP/s")
PY
fi

echo
if [ ${#failed[@]} -eq 0 ]; then echo "gpu_kernel_configs.sh: every bench ran"; else echo "gpu_kernel_configs.sh: FAILED: ${failed[*]}"; exit 1; fi
