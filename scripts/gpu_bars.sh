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
b() { echo "== kirc bench $*"; "$k" bench "$@" 2>&1 | tail -1; }
s128=0.08838834764831845
b attention_fwd -D BLOCK_M=128 --warps 4 --shape q=1x16x16384x128 --shape k=1x16x16384x128 --shape v=1x16x16384x128 --arg scale=$s128 --iters 30
b gemm -D TRANS_B=1 -D BLOCK_M=128 -D BLOCK_N=256 -D BLOCK_K=128 --shape a=1x8192x8192 --shape b=1x8192x8192 --arg alpha=1 --iters 20
b rmsnorm_fwd --shape x=16384x4096 --shape w=4096 --arg eps=1e-5
b tests/in/bench/copy.kir --shape x=16384x4096
python3 - <<'PY'
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
def t(f, n=50):
    for _ in range(5): f()
    ev=[(torch.cuda.Event(enable_timing=True),torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for a,b in ev: a.record(); f(); b.record()
    torch.cuda.synchronize(); xs=sorted(a.elapsed_time(b) for a,b in ev); return xs[len(xs)//2]
q=torch.randn(1,16,16384,128,device='cuda',dtype=torch.bfloat16); k=torch.randn_like(q); v=torch.randn_like(q)
fl=4*16*16384*16384*128
for be in [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION]:
    with sdpa_kernel(be):
        print(be, f"{fl/t(lambda: F.scaled_dot_product_attention(q,k,v), 30)/1e9:.1f} TFLOP/s")
del q, k, v
a=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16); bb=torch.randn_like(a)
print("cublas a@b.T", f"{2*8192**3/t(lambda: a@bb.T, 20)/1e9:.1f} TFLOP/s")
print("cublas a@b", f"{2*8192**3/t(lambda: a@bb, 20)/1e9:.1f} TFLOP/s")
del a, bb
x=torch.randn(16384,4096,device='cuda',dtype=torch.bfloat16); w=torch.randn(4096,device='cuda',dtype=torch.bfloat16)
print("copy x.clone()", f"{2*x.numel()*2/t(lambda: x.clone(), 100)/1e9:.3f} TB/s")
print("torch rms_norm", f"{2*x.numel()*2/t(lambda: F.rms_norm(x,(4096,),w,1e-5), 100)/1e9:.3f} TB/s")
PY
