#!/usr/bin/env bash
# The three speed bars of the PTX backend in one GPU call, with the peers (torch SDPA flash and
# cuDNN, cuBLAS, copy, F.rms_norm) measured in the same call, after a correctness check of the
# default rmsnorm_fwd on the GPU against the interpreter (ragged rows per program, two-pass rows).
# usage: scripts/gpu_bars.sh [KIRC]   (a kirc built with --features cuda; default out/kirc)
k=${1:-${KIRC:-out/kirc}}
python3 - <<'PY'
import numpy as np; r=np.random.default_rng(21)
np.save('/tmp/rx.npy', r.standard_normal((37,4000)).astype(np.float32)*3); np.save('/tmp/rw.npy', r.standard_normal(4000).astype(np.float32))
np.save('/tmp/rx2.npy', r.standard_normal((5,9000)).astype(np.float32)); np.save('/tmp/rw2.npy', r.standard_normal(9000).astype(np.float32))
PY
for p in "rx rw" "rx2 rw2"; do set -- $p
  $k run rmsnorm_fwd --arg x=/tmp/$1.npy --arg w=/tmp/$2.npy --arg eps=1e-5 --device cuda --out /tmp/r_cuda >/dev/null
  $k run rmsnorm_fwd --arg x=/tmp/$1.npy --arg w=/tmp/$2.npy --arg eps=1e-5 --device cpu --out /tmp/r_cpu >/dev/null
  python3 -c "
import numpy as np
for f in ['y','rstd']:
    a=np.load(f'/tmp/r_cuda/{f}.npy'); b=np.load(f'/tmp/r_cpu/{f}.npy'); print('rmsnorm_fwd defaults $1', f, 'rel', np.linalg.norm(a-b)/np.linalg.norm(b), 'nan', np.isnan(a).sum())"
done
b() { echo "== kirc bench $*"; "$k" bench "$@" 2>&1 | grep -E "median|TFLOP/s|TB/s|error"; }
s128=0.08838834764831845
b attention_fwd -D BLOCK_M=128 --warps 4 --shape q=1x16x16384x128 --shape k=1x16x16384x128 --shape v=1x16x16384x128 --arg scale=$s128 --iters 30
b gemm -D TRANS_B=1 -D BLOCK_M=128 -D BLOCK_N=256 -D BLOCK_K=128 --shape a=1x8192x8192 --shape b=1x8192x8192 --arg alpha=1 --iters 20
b rmsnorm_fwd --shape x=16384x4096 --shape w=4096 --arg eps=1e-5
b tests/in/bench/copy.kir --shape x=16384x4096
python3 "$(dirname "$0")/peers.py" --trans-b --norm
