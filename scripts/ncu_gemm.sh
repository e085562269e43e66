# Sourced by the GPU scripts that time GEMMs by kernel time (gpu_issue_bars.sh,
# gpu_gemm_waves.sh, gpu_gemm_ab.sh): ncu's gpu__time_duration with the clocks left alone, the
# median of the last 5 of 7 launches, in µs ("none" when ncu is missing or measured nothing).
#   gemm_us KIRC MxNxK [FLAGS...]   kir's `kirc bench gemm` at alpha = 1
#   cublas_us MxNxK                 torch's `a @ b` (cuBLAS), bf16
ncu_bin=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
ncu_tmp=$(mktemp -d)
cat >"$ncu_tmp/cublas.py" <<'PY'
import sys, torch
m, n, k = map(int, sys.argv[1].split("x"))
a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16); b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
for _ in range(3): a @ b
torch.cuda.synchronize(); torch.cuda.cudart().cudaProfilerStart()
for _ in range(7): a @ b
torch.cuda.synchronize(); torch.cuda.cudart().cudaProfilerStop()
PY
ncu_median_us() {
  python3 -c "
import sys, csv
v = [float(r[-1].replace(',', '')) for r in csv.reader(sys.stdin) if len(r) > 5 and r[-3] == 'gpu__time_duration.sum'][-5:]
print(f'{sorted(v)[len(v) // 2] / 1e3:.2f}' if v else 'none')"
}
gemm_us() {
  local kirc=$1 m n k; IFS=x read -r m n k <<<"$2"; shift 2
  "$ncu_bin" --clock-control none --print-units base --csv --metrics gpu__time_duration.sum -k regex:gemm \
    --launch-skip 2 --launch-count 7 "$kirc" bench gemm "$@" --shape "a=1x${m}x${k}" --shape "b=1x${k}x${n}" \
    --arg alpha=1 --iters 7 --warmup 2 2>/dev/null | ncu_median_us
}
cublas_us() {
  "$ncu_bin" --clock-control none --print-units base --csv --metrics gpu__time_duration.sum \
    --profile-from-start off python3 "$ncu_tmp/cublas.py" "$1" 2>/dev/null | ncu_median_us
}
