#!/usr/bin/env python3
"""kir.torch on a GPU, in one call: every op against PyTorch, torch.compile, host overhead.

1. Correctness, bf16 and f16 (f32 for the norms too): kir.torch's attention (plain, causal,
   grouped-query, cross lengths, varlen, mask, window, softcap), rms_norm, layer_norm, gemm
   (2-D, batched, few-row decode shapes, bias, activation epilogues) and swiglu, forward and
   backward through
   autograd, against a float64 reference on the same inputs. An output passes when its
   relative L2 error against the reference is at most twice PyTorch's own error at the same
   dtype (SDPA, F.rms_norm, F.layer_norm, a @ b, silu(g)·u), floored at 1e-3, and it is finite.
   Inputs are random with magnitudes above 1 where the op allows, shapes ragged.
2. The same ops launched on a side stream (torch.cuda.Stream) match the default-stream results;
   two threads on two streams running one backward program at once match the serial results.
3. Bad inputs (a CPU tensor, float64, a non-contiguous view, mismatched heads) raise ValueError
   before anything launches.
4. torch.compile(fullgraph=True) of a small transformer block built on kir.torch: forward and
   gradients against eager.
5. Host overhead per call (tiny shapes; median µs from the Python call to its return over 2,000
   calls, no sync), beside F.scaled_dot_product_attention, F.rms_norm, a @ b and a Triton
   kernel's launch; then where kir.torch.attention's time goes.

usage: PYTHONPATH=<folder holding the kir package> python3 scripts/gpu_torch.py [--only overhead|attention]
(--only overhead runs part 5 alone; --only attention the attention cases with a backward, the
side stream and two threads launching one program on two streams at once.)
Exit code: 0 when every check passes.
"""

import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import kir
import kir.torch as kt

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = torch.device("cuda")
failures = []


def rel(got, ref):
    ref = ref.double()
    return ((got.double() - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def check(what, got, ref, peer):
    e, pe = rel(got, ref), rel(peer, ref)
    bound = max(2.0 * pe, 1e-3)
    ok = bool(torch.isfinite(got).all()) and e <= bound
    print(f"  {what}: rel L2 {e:.2e} (torch {pe:.2e}) {'ok' if ok else 'FAIL'}")
    if not ok:
        failures.append(what)


def rnd(*shape, dtype, scale=1.0):
    return (torch.randn(*shape, device=dev, dtype=torch.float64) * scale).to(dtype)


def ref_attention(q, k, v, causal, scale, mask=None, window=0, softcap=0.0):
    """float64 attention with GQA; causal is bottom-right aligned (key j ≤ i + Sk − Sq)."""
    hq, hk = q.shape[1], k.shape[1]
    k = k.repeat_interleave(hq // hk, dim=1)
    v = v.repeat_interleave(hq // hk, dim=1)
    s = torch.einsum("bhid,bhjd->bhij", q, k) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    sq, sk = q.shape[2], k.shape[2]
    i = torch.arange(sq, device=dev)[:, None]
    j = torch.arange(sk, device=dev)[None, :]
    limit = i + sk - sq if causal else torch.full_like(i, sk - 1)
    keep = j <= limit
    if window > 0:
        keep = keep & (j >= limit + 1 - window)
    if mask is not None:
        s = s + mask
    s = s.masked_fill(~keep, float("-inf"))
    return torch.einsum("bhij,bhjd->bhid", torch.softmax(s, dim=-1), v)


def attention_case(dtype, b, hq, hk, sq, sk, d, causal, backward=True):
    name = f"attention {str(dtype)[6:]} B{b} H{hq}/{hk} {sq}x{sk} d{d}{' causal' if causal else ''}"
    print(name)
    q, k, v = (rnd(b, h, s, d, dtype=dtype) for h, s in ((hq, sq), (hk, sk), (hk, sk)))
    do = rnd(b, hq, sq, d, dtype=dtype)
    scale = 1.0 / math.sqrt(d)
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    o = kt.attention(*leaves, causal=causal)
    r = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
    ro = ref_attention(*r, causal, scale)
    p = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    # SDPA's is_causal is top-left aligned: the same as kir's only when sq == sk.
    po = F.scaled_dot_product_attention(*p, is_causal=causal, scale=scale, enable_gqa=hq != hk)
    check("o", o, ro, po)
    if backward:
        o.backward(do)
        ro.backward(do.double())
        po.backward(do)
        for n, a, rr, pp in zip("qkv", leaves, r, p):
            check(f"d{n}", a.grad, rr.grad, pp.grad)


def feature_cases(dtype):
    b, h, s, d = 2, 4, 333, 128
    q, k, v = (rnd(b, h, s, d, dtype=dtype) for _ in range(3))
    scale = 1.0 / math.sqrt(d)
    r = [t.double() for t in (q, k, v)]
    print(f"attention {str(dtype)[6:]} features (B{b} H{h} S{s} d{d}), forward")
    m = rnd(b, 1, s, s, dtype=dtype, scale=2.0)
    check("mask (per batch)", kt.attention(q, k, v, mask=m), ref_attention(*r, False, scale, mask=m.double()),
          F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=scale))
    bm = torch.rand(s, s, device=dev) > 0.3
    bm[:, 0] = True
    check("bool mask", kt.attention(q, k, v, mask=bm),
          ref_attention(*r, False, scale, mask=torch.zeros(s, s, device=dev, dtype=torch.float64).masked_fill(~bm, float("-inf"))),
          F.scaled_dot_product_attention(q, k, v, attn_mask=bm, scale=scale))
    win = 50
    rw = ref_attention(*r, True, scale, window=win)
    i = torch.arange(s, device=dev)[:, None]
    j = torch.arange(s, device=dev)[None, :]
    wm = (j <= i) & (j > i - win)
    check("window 50 causal", kt.attention(q, k, v, causal=True, window=win), rw,
          F.scaled_dot_product_attention(q, k, v, attn_mask=wm, scale=scale))
    cap = 5.0
    rs = ref_attention(*r, False, scale, softcap=cap)
    sc = (q.float() @ k.float().transpose(-1, -2)) * scale
    ps = (torch.softmax(cap * torch.tanh(sc / cap), -1).to(dtype).float() @ v.float()).to(dtype)
    check("softcap 5", kt.attention(q, k, v, softcap=cap), rs, ps)
    # varlen: packed tokens of 4 sequences (one of length 1), causal and not
    lens = [37, 200, 1, 128]
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device=dev)
    total = sum(lens)
    for causal in (False, True):
        qp, kp, vp = (rnd(total, h, d, dtype=dtype) for _ in range(3))
        dop = rnd(total, h, d, dtype=dtype)
        leaves = [t.clone().requires_grad_(True) for t in (qp, kp, vp)]
        refs = [t.double().requires_grad_(True) for t in (qp, kp, vp)]
        peers = [t.clone().requires_grad_(True) for t in (qp, kp, vp)]
        o = kt.attention(*leaves, causal=causal, cu_seqlens=cu)
        ro, po = [], []
        for a, n in zip(cu[:-1].tolist(), lens):
            ro.append(ref_attention(*[t[a:a + n].transpose(0, 1).unsqueeze(0) for t in refs], causal, scale)[0].transpose(0, 1))
            po.append(F.scaled_dot_product_attention(*[t[a:a + n].transpose(0, 1).unsqueeze(0) for t in peers], is_causal=causal, scale=scale)[0].transpose(0, 1))
        ro, po = torch.cat(ro), torch.cat(po)
        tag = f"varlen{' causal' if causal else ''}"
        check(f"{tag} o", o, ro, po)
        o.backward(dop)
        ro.backward(dop.double())
        po.backward(dop)
        for n, a, rr, pp in zip("qkv", leaves, refs, peers):
            check(f"{tag} d{n}", a.grad, rr.grad, pp.grad)


def norm_cases(dtype):
    for r, n in ((1000, 4096), (333, 1000)):
        print(f"rms_norm / layer_norm {str(dtype)[6:]} {r}x{n}")
        x = rnd(r, n, dtype=dtype, scale=3.0)
        w = rnd(n, dtype=dtype)
        bias = rnd(n, dtype=dtype)
        dy = rnd(r, n, dtype=dtype)
        for kind in ("rms", "ln"):
            leaves = [t.clone().requires_grad_(True) for t in (x, w, bias)]
            refs = [t.double().requires_grad_(True) for t in (x, w, bias)]
            peers = [t.clone().requires_grad_(True) for t in (x, w, bias)]
            if kind == "rms":
                y = kt.rms_norm(leaves[0], leaves[1], 1e-6)
                ry = F.rms_norm(refs[0], (n,), refs[1], 1e-6)
                py = F.rms_norm(peers[0], (n,), peers[1], 1e-6)
                grads = ("dx", "dw")
            else:
                y = kt.layer_norm(leaves[0], leaves[1], leaves[2], 1e-5)
                ry = F.layer_norm(refs[0], (n,), refs[1], refs[2], 1e-5)
                py = F.layer_norm(peers[0], (n,), peers[1], peers[2], 1e-5)
                grads = ("dx", "dw", "db")
            check(f"{kind} y", y, ry, py)
            y.backward(dy)
            ry.backward(dy.double())
            py.backward(dy)
            for i, g in enumerate(grads):
                check(f"{kind} {g}", leaves[i].grad, refs[i].grad, peers[i].grad)


def gemm_cases(dtype):
    # Ragged few-row (decode) shapes take the shape rows: 13 and 29 rows the swapped 16x128
    # and 32x128 tiles, 100 rows the 128x128 one (docs/configs.md).
    for shape in ((1000, 512, 768), (3, 130, 256, 200), (13, 1024, 776), (29, 520, 1000), (100, 768, 1032)):
        print(f"gemm {str(dtype)[6:]} {shape}")
        if len(shape) == 3:
            m, kk, n = shape
            a, b = rnd(m, kk, dtype=dtype), rnd(kk, n, dtype=dtype)
        else:
            bt, m, kk, n = shape
            a, b = rnd(bt, m, kk, dtype=dtype), rnd(bt, kk, n, dtype=dtype)
        bias = rnd(n, dtype=dtype, scale=4.0)
        for with_bias in (False, True):
            leaves = [t.clone().requires_grad_(True) for t in (a, b, bias)]
            refs = [t.double().requires_grad_(True) for t in (a, b, bias)]
            peers = [t.clone().requires_grad_(True) for t in (a, b, bias)]
            c = kt.gemm(leaves[0], leaves[1], bias=leaves[2] if with_bias else None)
            rc = refs[0] @ refs[1] + (refs[2] if with_bias else 0)
            pc = peers[0] @ peers[1] + (peers[2] if with_bias else 0)
            tag = " +bias" if with_bias else ""
            check(f"c{tag}", c, rc, pc)
            dc = torch.randn_like(c)
            c.backward(dc)
            rc.backward(dc.double())
            pc.backward(dc)
            for i, g in enumerate(("da", "db", "dbias")[: 3 if with_bias else 2]):
                check(f"{g}{tag}", leaves[i].grad, refs[i].grad, peers[i].grad)
        for ep, fn in (("relu", F.relu), ("silu", F.silu), ("gelu", lambda t: F.gelu(t, approximate="tanh"))):
            check(f"epilogue {ep}", kt.gemm(a, b, epilogue=ep), fn(a.double() @ b.double()), fn(a @ b))
    print(f"swiglu {str(dtype)[6:]} 1000x3000")
    g, u, dy = rnd(1000, 3000, dtype=dtype, scale=2.0), rnd(1000, 3000, dtype=dtype), rnd(1000, 3000, dtype=dtype)
    leaves = [t.clone().requires_grad_(True) for t in (g, u)]
    refs = [t.double().requires_grad_(True) for t in (g, u)]
    peers = [t.clone().requires_grad_(True) for t in (g, u)]
    y, ry, py = kt.swiglu(*leaves), F.silu(refs[0]) * refs[1], F.silu(peers[0]) * peers[1]
    check("swiglu", y, ry, py)
    y.backward(dy)
    ry.backward(dy.double())
    py.backward(dy)
    check("swiglu dgate", leaves[0].grad, refs[0].grad, peers[0].grad)
    check("swiglu dup", leaves[1].grad, refs[1].grad, peers[1].grad)


def stream_case():
    print("side stream")
    q, k, v = (rnd(2, 8, 512, 128, dtype=torch.bfloat16) for _ in range(3))
    x, w = rnd(512, 4096, dtype=torch.bfloat16), rnd(4096, dtype=torch.bfloat16)
    want = (kt.attention(q, k, v, causal=True), kt.rms_norm(x, w))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        got = (kt.attention(q, k, v, causal=True), kt.rms_norm(x, w))
    torch.cuda.current_stream().wait_stream(s)
    for n, a, b in zip(("attention", "rms_norm"), got, want):
        same = torch.equal(a, b)
        print(f"  {n} on a side stream bit-identical: {same}")
        if not same:
            failures.append(f"side stream {n}")


def threads_case():
    """Two threads, each on its own stream, run the same backward (one loaded program, whose
    dK/dV and dQ launches fork onto the program's one side stream under its lock) many times at
    once; every gradient must equal, bit for bit, the one computed alone (deterministic mode)."""
    import threading

    print("two threads, two streams, one program")
    sets = []
    for _ in range(2):
        q, k, v, do = (rnd(2, 8, 1500, 128, dtype=torch.bfloat16) for _ in range(4))
        sets.append((q, k, v, do))

    def grads(q, k, v, do):
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
        kt.attention(*leaves).backward(do)
        return [t.grad for t in leaves]

    want = [grads(*x) for x in sets]
    torch.cuda.synchronize()
    got, errors = [[] for _ in sets], []

    def work(i):
        try:
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                for _ in range(12):
                    got[i].append(grads(*sets[i]))
            s.synchronize()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    ts = [threading.Thread(target=work, args=(i,)) for i in range(len(sets))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    torch.cuda.synchronize()
    same = not errors and all(
        all(torch.equal(a, b) for a, b in zip(g, want[i])) for i in range(len(sets)) for g in got[i]
    )
    print(f"  {sum(len(g) for g in got)} backwards bit-identical to the serial ones: {same} {errors or ''}")
    if not same:
        failures.append("two threads")


def bad_inputs():
    print("bad inputs raise ValueError")
    q = rnd(1, 2, 64, 64, dtype=torch.bfloat16)
    cases = {
        "cpu tensor": lambda: kt.attention(q.cpu(), q, q),
        "float64": lambda: kt.rms_norm(q.double().view(-1, 64), torch.ones(64, device=dev, dtype=torch.float64)),
        "non-contiguous": lambda: kt.attention(q.transpose(2, 3), q, q),
        "heads": lambda: kt.attention(rnd(1, 3, 64, 64, dtype=torch.bfloat16), q, q),
        "gemm shapes": lambda: kt.gemm(rnd(4, 5, dtype=torch.bfloat16), rnd(6, 7, dtype=torch.bfloat16)),
    }
    for n, f in cases.items():
        try:
            f()
            print(f"  {n}: no error  FAIL")
            failures.append(f"bad input {n}")
        except ValueError as e:
            print(f"  {n}: ValueError: {str(e).splitlines()[0]}")


class Block(torch.nn.Module):
    def __init__(self, d=256, h=4, f=512):
        super().__init__()
        self.h, self.d = h, d
        p = lambda *s: torch.nn.Parameter(torch.randn(*s, device=dev, dtype=torch.bfloat16) / math.sqrt(s[0]))
        self.n1, self.n2 = torch.nn.Parameter(torch.ones(d, device=dev, dtype=torch.bfloat16)), torch.nn.Parameter(torch.ones(d, device=dev, dtype=torch.bfloat16))
        self.b2 = torch.nn.Parameter(torch.zeros(d, device=dev, dtype=torch.bfloat16))
        self.wqkv, self.wo, self.wg, self.wu, self.wd = p(d, 3 * d), p(d, d), p(d, f), p(d, f), p(f, d)

    def forward(self, x):
        b, s, d = x.shape
        hd = d // self.h
        y = kt.rms_norm(x, self.n1).view(b * s, d)
        qkv = kt.gemm(y, self.wqkv).view(b, s, 3, self.h, hd).permute(2, 0, 3, 1, 4)
        o = kt.attention(qkv[0].contiguous(), qkv[1].contiguous(), qkv[2].contiguous(), causal=True)
        x = x + kt.gemm(o.transpose(1, 2).reshape(b * s, d), self.wo).view(b, s, d)
        y = kt.layer_norm(x, self.n2, self.b2).view(b * s, d)
        z = kt.swiglu(kt.gemm(y, self.wg), kt.gemm(y, self.wu))
        return x + kt.gemm(z, self.wd).view(b, s, d)


def compile_case():
    print("torch.compile(fullgraph=True) of a transformer block on kir.torch")
    torch.manual_seed(0)
    blk = Block()
    x = rnd(2, 200, 256, dtype=torch.bfloat16)
    ye = blk(x)
    ye.float().square().mean().backward()
    ge = [p.grad.clone() for p in blk.parameters()]
    blk.zero_grad()
    cb = torch.compile(blk, fullgraph=True)
    yc = cb(x)
    yc.float().square().mean().backward()
    gc = [p.grad.clone() for p in blk.parameters()]
    e = rel(yc, ye)
    eg = max(rel(a, b) for a, b in zip(gc, ge))
    ok = e <= 1e-2 and eg <= 2e-2
    print(f"  forward rel L2 {e:.2e}, worst gradient rel L2 {eg:.2e} {'ok' if ok else 'FAIL'}")
    if not ok:
        failures.append("torch.compile block")


def overhead():
    print("host overhead per call (median µs of the Python call, 2000 calls, no sync)")
    import triton
    import triton.language as tl

    @triton.jit
    def add(x, y, o, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(o + i, tl.load(x + i, mask=i < n) + tl.load(y + i, mask=i < n), mask=i < n)

    q, k, v = (rnd(1, 2, 128, 64, dtype=torch.bfloat16) for _ in range(3))
    x, w = rnd(64, 1024, dtype=torch.bfloat16), rnd(1024, dtype=torch.bfloat16)
    a, b, o = (torch.randn(4096, device=dev) for _ in range(3))
    wt = rnd(1024, 64, dtype=torch.bfloat16)
    calls = {
        "kir.torch.attention": lambda: kt.attention(q, k, v, causal=True),
        "F.scaled_dot_product_attention": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "kir.torch.rms_norm": lambda: kt.rms_norm(x, w),
        "F.rms_norm": lambda: F.rms_norm(x, (1024,), w),
        "kir.torch.gemm": lambda: kt.gemm(x, wt),
        "a @ b": lambda: x @ wt,
        "triton kernel launch": lambda: add[(4,)](a, b, o, 4096, BLOCK=1024),
    }
    for n, f in calls.items():
        for _ in range(50):
            f()
        torch.cuda.synchronize()
        ts = []
        for i in range(2000):
            t0 = time.perf_counter_ns()
            f()
            ts.append(time.perf_counter_ns() - t0)
            if i % 200 == 199:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        print(f"  {n}: {statistics.median(ts) / 1000:.1f} µs")
    # Where kir.torch.attention's time goes: the checks and the op, the prepared call (output
    # allocation, addresses, launch), the native launch alone, and the full bind of the old path.
    from kir import _launch, _ops

    consts = (("DTYPE", "bf16"), ("HEAD_DIM", 64), ("CAUSAL", 1), ("WINDOW", 0), ("SOFTCAP", 0), ("MASK", 0), ("VARLEN", 0), ("KV_OFFSET", 0))
    scale = 1 / math.sqrt(64)
    run = lambda: _ops.run_op("attention_fwd", consts, ("q", "k", "v"), (q, k, v), (("scale", scale),), q)
    o, lse = run()
    plan = next(iter(_launch.program("attention_fwd", tuple(sorted((n, str(x)) for n, x in consts)), 0).plans.values()))
    ptrs = [t.data_ptr() for t in (q, k, v, o, lse)]
    args = [_launch._arg(n, t) for n, t in zip(("q", "k", "v", "o", "lse"), (q, k, v, o, lse))]
    stream = torch.cuda.current_stream().cuda_stream
    loaded = _launch.program("attention_fwd", tuple(sorted((n, str(x)) for n, x in consts)), 0).loaded
    parts = {
        "  attention: _ops.run_op (no checks, no custom op)": run,
        "  attention: native prepared launch only": lambda: plan.prepared.launch(ptrs, stream),
        "  attention: native full bind + launch (unprepared)": lambda: loaded.launch(args, [("scale", scale)], stream),
        "  torch.empty x2": lambda: (torch.empty_like(q), torch.empty(1, 2, 128, device=dev)),
    }
    for n, f in parts.items():
        for _ in range(50):
            f()
        torch.cuda.synchronize()
        ts = []
        for i in range(2000):
            t0 = time.perf_counter_ns()
            f()
            ts.append(time.perf_counter_ns() - t0)
            if i % 200 == 199:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        print(f"  {n}: {statistics.median(ts) / 1000:.1f} µs")


def guarded(f, *args):
    """Runs one case; an exception is a failure of that case, and the others still run."""
    try:
        f(*args)
    except Exception:  # noqa: BLE001 - every failure is reported, the run goes on
        import traceback

        traceback.print_exc(limit=4)
        failures.append(f"{f.__name__}{args}")


def main():
    torch.manual_seed(1234)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    if sys.argv[1:] == ["--only", "overhead"]:
        guarded(overhead)
        print("FAILED: " + ", ".join(failures) if failures else "gpu_torch.py: all checks passed")
        sys.exit(1 if failures else 0)
    if sys.argv[1:] == ["--only", "attention"]:
        for dtype in (torch.bfloat16, torch.float16):
            guarded(attention_case, dtype, 2, 8, 8, 777, 777, 64, True)
            guarded(attention_case, dtype, 1, 16, 4, 513, 513, 128, True)
        guarded(attention_case, torch.bfloat16, 1, 2, 2, 8200, 8200, 128, True)
        guarded(stream_case)
        guarded(threads_case)
        print("FAILED: " + ", ".join(failures) if failures else "gpu_torch.py: all checks passed")
        sys.exit(1 if failures else 0)
    for dtype in (torch.bfloat16, torch.float16):
        guarded(attention_case, dtype, 2, 8, 8, 1000, 1000, 128, False)
        guarded(attention_case, dtype, 2, 8, 8, 777, 777, 64, True)
        guarded(attention_case, dtype, 1, 16, 4, 513, 513, 128, True)
        guarded(attention_case, dtype, 2, 4, 4, 300, 700, 128, False)
        guarded(feature_cases, dtype)
        guarded(norm_cases, dtype)
        guarded(gemm_cases, dtype)
    # From 8,192 queries a d128 backward takes 128-key dK/dV programs (docs/configs.md).
    guarded(attention_case, torch.bfloat16, 1, 2, 2, 8200, 8200, 128, True)
    guarded(norm_cases, torch.float32)
    guarded(stream_case)
    guarded(threads_case)
    guarded(bad_inputs)
    guarded(compile_case)
    guarded(overhead)
    print("FAILED: " + ", ".join(failures) if failures else "gpu_torch.py: all checks passed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
