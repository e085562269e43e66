#!/usr/bin/env bash
# Where one kernel's time goes, per SASS line: ncu samples warp stalls over one launch of the
# first kernel whose name matches KERNEL_REGEX in `KIRC bench ARGS...`, then
# scripts/ncu_lines.py prints the stalls by reason, the shared-memory bank-conflict excess, the
# instruction mix and the hottest lines; from the details page, the pipes' and shared memory's
# use. The source page (CSV) and ncu's details page (with its sections' bodies) are kept in DIR
# (default $OUT, else a temporary folder) as NAME-src.csv and NAME-details.txt. ncu locks the
# clocks, so its durations read longer than `kirc bench`'s.
# usage: scripts/gpu_ncu.sh NAME KERNEL_REGEX KIRC ARGS...   (e.g. scripts/gpu_ncu.sh dkdv
#        attention_bwd_dkdv out/kirc attention_bwd --shape q=1x16x16384x128 … --iters 1)
set -uo pipefail
name=${1:?usage: gpu_ncu.sh NAME KERNEL_REGEX KIRC ARGS...}
regex=${2:?usage: gpu_ncu.sh NAME KERNEL_REGEX KIRC ARGS...}
kirc=${3:?usage: gpu_ncu.sh NAME KERNEL_REGEX KIRC ARGS...}
shift 3
dir=${OUT:-$(mktemp -d)}
export KIR_CACHE_DIR=off
ncu --section SourceCounters --section WarpStateStats --section SpeedOfLight --section Occupancy \
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
  -k "regex:$regex" -c 1 --export "$dir/$name" -f "$kirc" bench "$@" >/dev/null 2>"$dir/$name.err" \
  || { tail -5 "$dir/$name.err"; exit 1; }
ncu --import "$dir/$name.ncu-rep" --page source --csv --print-source sass >"$dir/$name-src.csv"
ncu --import "$dir/$name.ncu-rep" --page details --print-details all >"$dir/$name-details.txt" 2>/dev/null \
  || ncu --import "$dir/$name.ncu-rep" --page details >"$dir/$name-details.txt"
rm -f "$dir/$name.ncu-rep" "$dir/$name.err"
grep -E "Duration|Compute \(SM\) Thr|Registers Per|Achieved Occ|Warp Cycles Per Issued|Issue Slots Busy|Executed Ipc|Pipe|Shared|Bank" "$dir/$name-details.txt" \
  | grep -vE "Table (Name|Description)|^ +(OPT|INF|WRN) "
python3 scripts/ncu_lines.py "$dir/$name-src.csv" 25
