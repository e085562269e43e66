#!/usr/bin/env python3
"""Runs kir's PTX on a GPU from the compiled files alone, checks it against the CPU
interpreter's outputs (and torch references), and times it next to torch SDPA (flash, cuDNN),
cuBLAS and torch.compile.

usage: python3 scripts/gpu_check_ptx.py ARTIFACTS_DIR [--only check|time] [--json OUT.json]
ARTIFACTS_DIR comes from scripts/gpu_artifacts.py (run where Rust is): per case the PTX, its
META.json and the module that was lowered (`kirc compile --meta --lowered`). Needs torch, numpy
and the `kir` package (its abi3 wheel, built where Rust is: no Rust needed here); the CUDA C of
the three-way parity cases is compiled to PTX by NVRTC through cuda-python.

Every launch goes through kir's own launcher (`kir.Kernel.from_ptx`, then `kir.torch.bind`: the
launch ABI, grids, tensor maps and the shared-memory attribute are the runtime's, in Rust), so
what is checked and timed is exactly the PTX in the folder. Every output and temp is poisoned
with the interpreter's poison before a launch (NaN / -0x5A5A5A5A / 0xA5), so an unwritten
element shows.
"""
import argparse, json, math, os, statistics, sys, time
import numpy as np
import torch

import kir
import kir.torch as kt
from kir import _launch

TDT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i32": torch.int32,
       "i64": torch.int64, "u8": torch.uint8, "i1": torch.bool}
TOL = {"f32": 2e-5, "f16": 2e-3, "bf16": 1.2e-2}


def nvrtc_ptx(src, name="kernel.cu"):
    """The PTX NVRTC makes from CUDA C `src` for the current GPU (compute_XY), through
    cuda-python; the CUDA C backend's kernels are `extern "C"`, so their symbols are META's."""
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        from cuda import nvrtc
    major, minor = torch.cuda.get_device_capability()
    err, prog = nvrtc.nvrtcCreateProgram(src.encode(), name.encode(), 0, [], [])
    opts = [b"--std=c++17", f"--gpu-architecture=compute_{major}{minor}".encode()]
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    if int(err) != 0:
        _, n = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * n
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise RuntimeError(f"NVRTC failed on {name}:\n{log.decode(errors='replace')}")
    _, n = nvrtc.nvrtcGetPTXSize(prog)
    ptx = b" " * n
    nvrtc.nvrtcGetPTX(prog, ptx)
    nvrtc.nvrtcDestroyProgram(prog)
    return ptx.rstrip(b"\0").decode()


class Program:
    """A compiled module loaded by kir's launcher from its files: `kernel.ptx`, `meta.json` and
    `lowered.kir` (kind "ptx"), or `kernel.cu` compiled by NVRTC, `meta_cuda.json` and
    `lowered_cuda.kir` (kind "cuda")."""

    def __init__(self, d, kind="ptx"):
        files = {"ptx": ("kernel.ptx", "meta.json", "lowered.kir"),
                 "cuda": ("kernel.cu", "meta_cuda.json", "lowered_cuda.kir")}[kind]
        code, meta, lowered = (open(os.path.join(d, f)).read() for f in files)
        self.meta = json.loads(meta)
        t0 = time.perf_counter()
        ptx = code if kind == "ptx" else nvrtc_ptx(code)
        self.kernel = kir.Kernel.from_ptx(ptx, meta, lowered)
        # Loaded now (the driver's JIT), so that load_s measures it and the launches do not.
        _launch.loaded(self.kernel, torch.cuda.current_device())
        self.load_s = time.perf_counter() - t0

    def prepare(self, tensors, scalars):
        """Binds entry tensors (torch, on GPU) once, with poisoned outs and temps; returns every
        buffer by name. The binding (checks, grids, tensor maps) is kept for `bind`/`run`."""
        self.bound = kt.bind(self.kernel, tensors, scalars, poison=True)
        return dict(tensors, **self.bound.outputs, **self.bound.temps)

    def bind(self, bufs):
        """The binding `prepare` made for `bufs`: `run` then only launches, so a timed loop
        measures the kernels and not host work."""
        return self.bound

    @staticmethod
    def run(bound):
        """Launches what `prepare` bound, in order, on the current stream."""
        bound.launch()

    def launch(self, bufs):
        self.run(self.bind(bufs))


def rel(out, ref):
    out, ref = out.double().cpu(), ref.double().cpu()
    fin = torch.isfinite(ref)
    if not torch.equal(torch.isfinite(out), fin) or not torch.equal(out[~fin], ref[~fin]):
        return float("inf")
    d = (out[fin] - ref[fin]).norm()
    n = ref[fin].norm()
    return float(d / n) if n > 0 else float(d)


def bench(fn, reps=50):
    """Median milliseconds of one call of `fn`, timed with CUDA events around each call. The calls
    are queued back to back with no synchronization between them, so the host's launch work for
    call i + 1 overlaps call i on the GPU and is not timed (a kernel shorter than its host work
    is still timed with the gap)."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for s, e in evs:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in evs)


def check_case(root, c, kind="ptx"):
    d = os.path.join(root, c["dir"])
    prog = Program(d, kind)
    meta_params = {p["name"]: p for p in prog.meta["entry_params"]}
    tensors = {}
    for name, f in c["inputs"].items():
        arr = np.load(os.path.join(d, f))
        tensors[name] = torch.from_numpy(np.ascontiguousarray(arr)).to(device="cuda", dtype=TDT[meta_params[name]["dtype"]])
    bufs = prog.prepare(tensors, c["scalars"])
    prog.launch(bufs)
    torch.cuda.synchronize()
    worst = 0.0
    report = {}
    for name, f in c["expect"].items():
        ref = torch.from_numpy(np.load(os.path.join(d, f)))
        r = rel(bufs[name].float(), ref)
        report[name] = r
        worst = max(worst, r)
    dt = c["defines"].get("DTYPE", "f32")
    # A second, independent reference for attention: torch in f32 from the same rounded inputs.
    plain = all(not c["defines"].get(f) for f in ("VARLEN", "MASK", "WINDOW", "SOFTCAP", "KV_OFFSET", "OUT_LAYOUT"))
    if c["op"] == "attention_fwd" and plain:
        q, k, v = (tensors[x].float() for x in "qkv")
        hq, hkv = q.shape[1], k.shape[1]
        k, v = k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1)
        s = (q @ k.transpose(-1, -2)) * c["scalars"]["scale"]
        if c["defines"].get("CAUSAL"):
            sq, sk = q.shape[2], k.shape[2]
            i = torch.arange(sq, device="cuda")[:, None]
            j = torch.arange(sk, device="cuda")[None, :]
            s = s.masked_fill(j > i + sk - sq, float("-inf"))
        p = torch.softmax(s, -1).nan_to_num(0.0)
        report["o_vs_torch"] = rel(bufs["o"].float(), p @ v)
    # vs the interpreter: the GPU's exp/log/tanh and summation order differ in the last bits;
    # float outputs get twice the dtype tolerance (f32 outputs of bf16 kernels, e.g. lse, 1e-3).
    ok = all(v <= max(TOL.get(dt, 2e-5) * 2, 1e-4) for k, v in report.items() if k not in ("lse", "delta", "mean", "rstd")) \
        and all(report.get(x, 0) <= 1e-3 for x in ("lse", "delta", "mean", "rstd"))
    print(f"{'PASS' if ok else 'FAIL'} {kind:4} {c['name']}: " + ", ".join(f"{k} {v:.2e}" for k, v in report.items()), flush=True)
    return {"name": c["name"], "backend": kind, "ok": ok, "rel": report}


TRITON = {}
# Attention sequence lengths timed (`--seqs`); B·S = 16384 tokens at each.
SEQS = [1024, 4096, 16384]


def time_case(root, c, peers):
    d = os.path.join(root, c["dir"])
    prog = Program(d)
    out = {"name": c["name"]}
    if c["op"] == "attention_fwd":
        D, causal = c["head_dim"], c["causal"]
        H = 2048 // D
        rows = []
        for S in SEQS:
            B = 16384 // S
            q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            bufs = prog.prepare({"q": q, "k": k, "v": v}, {"scale": 1 / math.sqrt(D)})
            flops = 4 * B * H * S * S * D / (2 if causal else 1)
            calls = prog.bind(bufs)
            ms = bench(lambda: prog.run(calls))
            row = {"S": S, "B": B, "H": H, "kir_tflops": flops / ms / 1e9}
            from torch.nn.attention import sdpa_kernel, SDPBackend
            for nm, be in [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]:
                try:
                    with sdpa_kernel(be):
                        f = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
                        row[nm + "_tflops"] = flops / bench(f) / 1e9
                except Exception as e:  # a backend may not support a head dim
                    row[nm + "_tflops"] = None
            # The Triton peer (scripts/triton_attn.py), tuned over a few configurations once per shape.
            key = (D, causal, S)
            if key not in TRITON:
                try:
                    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
                    import triton_attn
                    got = triton_attn.best(q, k, v, bool(causal), 1 / math.sqrt(D), bench)
                    TRITON[key] = None if got is None else {"tflops": flops / got[2] / 1e9, "cfg": list(got[1]),
                                                            "first_call_s": got[3], "rel": got[4]}
                except Exception as e:
                    print(f"note: no Triton peer: {type(e).__name__}: {e}", flush=True)
                    TRITON[key] = None
            if TRITON[key]:
                row["triton_tflops"] = TRITON[key]["tflops"]
                row["triton_cfg"] = TRITON[key]["cfg"]
            # correctness at the timed shape (first batch/head block) vs SDPA math in f32
            ref = torch.nn.functional.scaled_dot_product_attention(q[:1, :2].float(), k[:1, :2].float(), v[:1, :2].float(),
                                                                   is_causal=bool(causal))
            row["rel_vs_f32"] = rel(bufs["o"][:1, :2].float(), ref)
            print(f"{c['name']} S{S}: " + ", ".join(f"{k2} {v2:.1f}" if isinstance(v2, float) and v2 > 1 else f"{k2} {v2}" for k2, v2 in row.items()), flush=True)
            rows.append(row)
            del q, k, v, bufs
        out["rows"] = rows
    elif c["op"] == "gemm":
        rows = []
        for (M, N, K) in [(8192, 8192, 8192), (16384, 14336, 4096), (4096, 4096, 4096)]:
            a = torch.randn(1, M, K, device="cuda", dtype=torch.bfloat16)
            # TRANS_B = 1 cases take b as [N, K] (K contiguous); cuBLAS gets the same layout.
            tb = c.get("trans_b", 0) == 1
            b = torch.randn(1, N, K, device="cuda", dtype=torch.bfloat16) if tb else torch.randn(1, K, N, device="cuda", dtype=torch.bfloat16)
            bk = b[0].T if tb else b[0]
            ins = {"a": a, "b": b}
            if any(p["name"] == "bias" for p in prog.meta["entry_params"]):
                ins["bias"] = torch.randn(N, device="cuda", dtype=torch.bfloat16)
            bufs = prog.prepare(ins, {"alpha": 1.0})
            fl = 2 * M * N * K
            calls = prog.bind(bufs)
            ms = bench(lambda: prog.run(calls), reps=10)
            cms = bench(lambda: torch.matmul(a[0], bk), reps=20)
            ref = a[0, :256].float() @ bk.float() + (ins["bias"].float() if "bias" in ins else 0)
            r = rel(bufs["c"][0, :256].float(), ref)
            row = {"M": M, "N": N, "K": K, "trans_b": int(tb), "kir_tflops": fl / ms / 1e9, "cublas_tflops": fl / cms / 1e9, "rel": r}
            print(f"{c['name']} {M}x{N}x{K}: {row}", flush=True)
            rows.append(row)
            del a, b, bufs
        out["rows"] = rows
    elif c["op"] == "fusion":
        M, K, N = 8192, 4096, 14336
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        if c["program"] == "gate_up_swiglu":
            wg = torch.randn(K, N, device="cuda", dtype=torch.bfloat16) / 64
            wu = torch.randn(K, N, device="cuda", dtype=torch.bfloat16) / 64
            bufs = prog.prepare({"x": x, "wg": wg, "wu": wu}, {})
            ref = lambda: torch.nn.functional.silu((x[:256].float() @ wg.float()).bfloat16().float()) * (x[:256].float() @ wu.float()).bfloat16().float()
            flops = 2 * 2 * M * N * K
        else:
            w = torch.randn(K, device="cuda", dtype=torch.bfloat16)
            wm = torch.randn(K, N, device="cuda", dtype=torch.bfloat16) / 64
            bufs = prog.prepare({"x": x, "w": w, "wm": wm}, {"eps": 1e-5})
            ref = lambda: torch.nn.functional.rms_norm(x[:256].float(), (K,), w.float(), 1e-5).bfloat16().float() @ wm.float()
            flops = 2 * M * N * K
        calls = prog.bind(bufs)
        ms = bench(lambda: prog.run(calls), reps=10)
        row = {"M": M, "K": K, "N": N, "variant": c["variant"], "kernels": len(prog.meta["kernels"]),
               "ms": ms, "tflops": flops / ms / 1e9, "rel_vs_torch_f32": rel(bufs["out" if "out" in bufs else "c"][:256].float(), ref())}
        print(f"{c['name']}: {row}", flush=True)
        out["rows"] = [row]
    elif c["op"] == "rmsnorm_fwd":
        rows = []
        comp = torch.compile(lambda x, w: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-5))
        for (R, N) in [(16384, 4096), (4096, 8192), (32768, 2048)]:
            x = torch.randn(R, N, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(N, device="cuda", dtype=torch.bfloat16)
            bufs = prog.prepare({"x": x, "w": w}, {"eps": 1e-5})
            by = 2 * R * N * 2
            calls = prog.bind(bufs)
            ms = bench(lambda: prog.run(calls))
            ems = bench(lambda: torch.nn.functional.rms_norm(x, (N,), w, 1e-5))
            t0 = time.perf_counter(); comp(x, w); torch.cuda.synchronize(); ct = time.perf_counter() - t0
            cms = bench(lambda: comp(x, w))
            ref = torch.nn.functional.rms_norm(x.float(), (N,), w.float(), 1e-5)
            row = {"R": R, "N": N, "kir_tbs": by / ms / 1e9, "eager_tbs": by / ems / 1e9, "compile_tbs": by / cms / 1e9,
                   "rel": rel(bufs["y"].float(), ref)}
            print(f"{c['name']} {R}x{N}: {row}", flush=True)
            rows.append(row)
        out["rows"] = rows
    out["module_load_s"] = prog.load_s
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--only", choices=["check", "time"])
    ap.add_argument("--json")
    ap.add_argument("--match", default="")
    ap.add_argument("--seqs", default="1024,4096,16384", help="attention sequence lengths to time, comma-separated")
    a = ap.parse_args()
    SEQS[:] = [int(x) for x in a.seqs.split(",")]
    man = json.load(open(os.path.join(a.root, "manifest.json")))
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, kir {kir.__file__}", flush=True)
    results = {"checks": [], "timings": []}
    for c in man["cases"]:
        if a.match not in c["name"] or (a.only and c["mode"] != a.only):
            continue
        try:
            if c["mode"] == "check":
                results["checks"].append(check_case(a.root, c))
                if os.path.exists(os.path.join(a.root, c["dir"], "lowered_cuda.kir")):
                    results["checks"].append(check_case(a.root, c, "cuda"))
            else:
                results["timings"].append(time_case(a.root, c, None))
        except Exception as e:
            print(f"ERROR {c['name']}: {type(e).__name__}: {e}", flush=True)
            results.setdefault("errors", []).append({"name": c["name"], "error": f"{type(e).__name__}: {e}"})
    if a.json:
        json.dump(results, open(a.json, "w"), indent=1)
    bad = [c["name"] for c in results["checks"] if not c["ok"]] + [e["name"] for e in results.get("errors", [])]
    print(f"{len(results['checks'])} checks, {len(bad)} failed: {bad}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
