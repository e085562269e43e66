#!/usr/bin/env bash
# attention_bwd's defaults on the GPU under compute-sanitizer (memcheck, racecheck, synccheck),
# on ragged GQA shapes (q 1x4x300xD, k/v 1x2x257xD: two query heads per kv head, so the dK/dV
# kernel's ring runs on across heads), with two GPU runs compared bit for bit (the deterministic
# mode) and the outputs against the interpreter (relative L2).
# usage: [BWD_DEFINES='-D DETERMINISTIC=0'] scripts/gpu_bwd_sanitize.sh KIRC WORK_DIR [HEAD_DIM ...]
#   (default head dims: 64 128 256). BWD_DEFINES adds defines to every backward run (the atomic
#   mode, say); the two runs must then be bit-identical only in the deterministic mode.
set -uo pipefail
K=${1:?usage: gpu_bwd_sanitize.sh KIRC WORK_DIR [HEAD_DIM ...]}
W=${2:?usage: gpu_bwd_sanitize.sh KIRC WORK_DIR [HEAD_DIM ...]}
shift 2
dims=("$@"); [ ${#dims[@]} -eq 0 ] && dims=(64 128 256)
export KIR_CACHE_DIR=off
rm -rf "$W"; mkdir -p "$W"
python3 - "$W" "${dims[@]}" <<'PY'
import sys, numpy as np
w = sys.argv[1]; rng = np.random.default_rng(11)
for d in map(int, sys.argv[2:]):
    for n, s in (("q", (1, 4, 300, d)), ("k", (1, 2, 257, d)), ("v", (1, 2, 257, d)), ("do", (1, 4, 300, d))):
        np.save(f"{w}/{n}{d}.npy", (rng.standard_normal(s) * 1.5).astype(np.float32))
PY
bad=0
read -r -a X <<<"${BWD_DEFINES:-}"
det=1; [[ " ${BWD_DEFINES:-} " == *"DETERMINISTIC=0"* ]] && det=0
for d in "${dims[@]}"; do for c in 0 1; do
  sc=$(python3 -c "print(1/$d**0.5)")
  "$K" run attention_fwd -D HEAD_DIM=$d -D CAUSAL=$c --arg q=$W/q$d.npy --arg k=$W/k$d.npy --arg v=$W/v$d.npy --arg scale=$sc --device cpu --out $W/fwd_${d}_$c >/dev/null
  A=(--arg q=$W/q$d.npy --arg k=$W/k$d.npy --arg v=$W/v$d.npy --arg o=$W/fwd_${d}_$c/o.npy --arg lse=$W/fwd_${d}_$c/lse.npy --arg do=$W/do$d.npy --arg scale=$sc)
  for r in 1 2; do "$K" run attention_bwd -D HEAD_DIM=$d -D CAUSAL=$c "${X[@]}" "${A[@]}" --device cuda --out $W/g${d}_${c}_$r >/dev/null || { echo "FAIL d$d causal $c: GPU run $r"; bad=1; }; done
  "$K" run attention_bwd -D HEAD_DIM=$d -D CAUSAL=$c "${X[@]}" "${A[@]}" --device cpu --out $W/cpu${d}_$c >/dev/null
  python3 - "$W" $d $c <<'PY' || bad=1
import sys, numpy as np
w, d, c = sys.argv[1:]
worst = 0.0
for f in ("dq", "dk", "dv"):
    a = np.load(f"{w}/cpu{d}_{c}/{f}.npy").astype(np.float64); b = np.load(f"{w}/g{d}_{c}_1/{f}.npy").astype(np.float64)
    e = np.linalg.norm(a - b) / np.linalg.norm(a); worst = max(worst, e if np.isfinite(b).all() else np.inf)
    print(f"d{d} causal {c} {f}: rel L2 against the interpreter {e:.2e}")
sys.exit(0 if worst <= 2.4e-2 else 1)
PY
  same=1; for f in dq dk dv; do cmp -s $W/g${d}_${c}_1/$f.npy $W/g${d}_${c}_2/$f.npy || same=0; done
  echo "d$d causal $c: two GPU runs bit-identical: $same"; [ $same = 1 ] || [ $det = 0 ] || bad=1
  for tool in memcheck racecheck synccheck; do
    out=$(timeout 300 compute-sanitizer --tool $tool "$K" run attention_bwd -D HEAD_DIM=$d -D CAUSAL=$c "${X[@]}" "${A[@]}" --device cuda --out $W/san 2>&1)
    summary=$(echo "$out" | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' | head -1)
    echo "d$d causal $c $tool: $summary"
    echo "$summary" | grep -qE ' 0 (errors|hazards)' || bad=1
  done
done; done
[ $bad = 0 ] && echo "gpu_bwd_sanitize: all clean" || echo "gpu_bwd_sanitize: FAILED"
exit $bad
