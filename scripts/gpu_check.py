#!/usr/bin/env python3
"""Runs kir's CUDA-C kernels on a GPU and checks them against the CPU interpreter and an
independent float64 NumPy reference. Needs python3 with numpy, torch, cuda-python (NVRTC) and
the `kir` package (its abi3 wheel; no Rust, no kirc).

usage: gpu_check.py ARTIFACT_DIR [--case NAME]... [--emulate]

--emulate runs the same CUDA C on the CPU instead (g++ with a small shim that maps the CUDA
built-ins to plain C++, one thread per block, blocks in order): no GPU, torch or kir needed. It checks
the lowering's index arithmetic, bounds, rounding and control flow, not its thread parallelism.

ARTIFACT_DIR comes from scripts/make_gpu_artifacts.sh: one folder per case holding
  kernel.cu   the CUDA C (`kirc compile --emit cuda`)
  META.json   the launch metadata (kernels, symbols, ABI, grid formulas, block, shared bytes,
              the program's launches and temps)
  lowered.kir the module that was lowered (`kirc compile --lowered`)
  in/*.npy    the inputs; ref/*.npy the interpreter's outputs (`kirc run`)
  case.json   op, defines, scalar arguments, and whether the case must pass or fail
On the GPU, NVRTC compiles the CUDA C to PTX and kir's own launcher runs it
(`kir.Kernel.from_ptx` with META.json and lowered.kir, then `kir.torch.bind`: dims, grids,
argument order and shared memory are the runtime's, in Rust). The emulation launches each
kernel from META.json alone: dims bind from the input shapes, the grid is the META formula over
them, arguments follow the ABI order (tensor pointers, scalars, one int32 per dim). Output
tensors and temps are poisoned (NaN) before the launch, so an element no kernel writes shows up
as a failure.

Reported per output: relative L2 error ||out - ref|| / ||ref|| against the interpreter and
against float64 NumPy, the max error over max |ref|, and how many elements are bit-identical
to the interpreter. The tolerances are those of docs/testing.md for the output's dtype. A case
whose case.json says "expect": "fail" (the seeded mutation) must FAIL the check; the script
exits 0 only if every case behaves as expected.
"""
import argparse, json, math, os, re, sys, time

import numpy as np

import ctypes, subprocess, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

EMULATE = "--emulate" in sys.argv
cp = np  # the emulation's host arrays stand in for device arrays
if not EMULATE:
    try:
        import torch
        import kir
        import kir.torch as kt
        from gpu_check_ptx import TDT, nvrtc_ptx
    except ImportError as e:  # explained to the user
        sys.exit(f"gpu_check.py needs torch, cuda-python, the kir package and a GPU (or --emulate, which needs g++): {e}")

TOL = {"f32": (2e-5, 2e-4), "f16": (2e-3, 1e-2), "bf16": (1.2e-2, 5e-2)}
LSE_TOL = (1e-5, 1e-4)

# ---------------------------------------------------------------- dtypes and conversions


def bf16_bits(x):
    """float32 -> bfloat16 bits, round to nearest even (NaN stays NaN)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def to_device_array(x, dtype):
    """Host values (any float array) -> the storage of `dtype` on the device."""
    x = np.asarray(x)
    if dtype == "f32":
        return cp.asarray(x.astype(np.float32))
    if dtype == "f16":
        return cp.asarray(x.astype(np.float32).astype(np.float16).view(np.uint16))
    if dtype == "bf16":
        return cp.asarray(bf16_bits(x.astype(np.float32)))
    if dtype == "i32":
        return cp.asarray(x.astype(np.int32))
    if dtype == "i64":
        return cp.asarray(x.astype(np.int64))
    if dtype in ("u8", "i1"):
        return cp.asarray(x.astype(np.uint8))
    raise ValueError(f"unknown dtype {dtype}")


def poisoned(shape, dtype):
    if dtype == "f32":
        return cp.full(shape, np.nan, dtype=np.float32)
    if dtype == "f16":
        return cp.full(shape, 0x7E00, dtype=np.uint16)
    if dtype == "bf16":
        return cp.full(shape, 0x7FC0, dtype=np.uint16)
    if dtype in ("i32", "i64"):
        return cp.full(shape, -0x5A5A5A5A, dtype=np.int32 if dtype == "i32" else np.int64)
    return cp.full(shape, 0xA5, dtype=np.uint8)


def from_device(a, dtype):
    h = np.asarray(a)
    if dtype == "f16":
        return h.view(np.float16).astype(np.float64)
    if dtype == "bf16":
        return bf16_to_f32(h).astype(np.float64)
    return h.astype(np.float64)


def round_to(x, dtype):
    """f64 -> the dtype's value (used to make the f64 reference see the kernel's inputs)."""
    if dtype == "f32":
        return x.astype(np.float32).astype(np.float64)
    if dtype == "f16":
        return x.astype(np.float16).astype(np.float64)
    return bf16_to_f32(bf16_bits(x.astype(np.float32))).astype(np.float64)


def scalar_arg(value, dtype):
    if dtype == "f32":
        return np.float32(value)
    if dtype == "f16":
        return np.float16(value).view(np.uint16)
    if dtype == "bf16":
        return bf16_bits(np.array([value], dtype=np.float32))[0]
    if dtype == "i32":
        return np.int32(value)
    if dtype == "i64":
        return np.int64(value)
    return np.uint8(value)


# ---------------------------------------------------------------- META formulas


def eval_formula(expr, dims):
    """Evaluates a META grid/dim formula (integers, dim names, + - * / (floor) %, cdiv, min,
    max, parentheses) over `dims`."""
    if not re.fullmatch(r"[A-Za-z0-9_+\-*/%(), ]*", expr):
        raise ValueError(f"unexpected characters in formula {expr!r}")
    py = expr.replace("/", "//")
    env = {"cdiv": lambda a, b: -((-a) // b), "min": min, "max": max, "__builtins__": {}}
    env.update(dims)
    return int(eval(py, env))  # noqa: S307 - the grammar is checked above


def bind_dims(params, buffers, dims):
    """Binds every plain-name dim of tensor `params` from the shapes of `buffers`."""
    for p in params:
        if p["kind"] != "tensor" or p["name"] not in buffers:
            continue
        shape = buffers[p["name"]].shape
        for d, n in zip(p["dims"], shape):
            if re.fullmatch(r"[A-Za-z_]\w*", d):
                if d in dims and dims[d] != n:
                    raise ValueError(f"dim {d} is {dims[d]} and {n}")
                dims[d] = n


# ---------------------------------------------------------------- CPU emulation

SHIM = r"""
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
struct kir_dim3 { unsigned x, y, z; };
extern "C" { kir_dim3 blockIdx = {0, 0, 0}, gridDim = {1, 1, 1}; }
static const kir_dim3 threadIdx = {0, 0, 0}, blockDim = {1, 1, 1};
alignas(16) unsigned char kir_smem[232448];
#define __global__
#define __device__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(n)
#define __align__(n)
#define __shared__
inline void __syncthreads() {}
[[noreturn]] inline void __trap() { fflush(stdout); abort(); }
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float __double2float_rz(double d) {
  float f = (float)d;
  if (std::isfinite(d) && std::fabs((double)f) > std::fabs(d)) f = nextafterf(f, 0.0f);
  return f;
}
inline float atomicAdd(float* p, float v) { float o = *p; *p = o + v; return o; }
inline int atomicAdd(int* p, int v) { int o = *p; *p = (int)((unsigned)o + (unsigned)v); return o; }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) { unsigned long long o = *p; *p = o + v; return o; }
inline unsigned atomicCAS(unsigned* p, unsigned cmp, unsigned v) { unsigned o = *p; if (o == cmp) *p = v; return o; }
"""
_EMU = {}


def emulated_module(src):
    key = hash(src)
    if key not in _EMU:
        d = tempfile.mkdtemp(prefix="kir-emu-")
        cpp, so = os.path.join(d, "k.cpp"), os.path.join(d, "k.so")
        text = src.replace("extern __shared__ __align__(16) unsigned char kir_smem[];", "")
        open(cpp, "w").write(SHIM + text)
        r = subprocess.run(["g++", "-std=c++17", "-O1", "-ffp-contract=off", "-fno-fast-math",
                            "-shared", "-fPIC", "-w", cpp, "-o", so], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("g++ failed:\n" + r.stderr[-3000:])
        _EMU[key] = ctypes.CDLL(so)
    return _EMU[key]


CTYPES = {"f32": ctypes.c_float, "f16": ctypes.c_uint16, "bf16": ctypes.c_uint16,
          "i32": ctypes.c_int32, "i64": ctypes.c_int64, "u8": ctypes.c_uint8, "i1": ctypes.c_uint8}


def emulated_launch(lib, k, grid, args):
    fn = lib[k["symbol"]]
    types, vals = [], []
    for p, a in zip(sorted(k["params"], key=lambda p: p["ptr_index"]), args):
        if p["kind"] == "tensor":
            types.append(ctypes.c_void_p)
            vals.append(a.ctypes.data)
        else:
            types.append(ctypes.c_int32 if p["kind"] == "dim" else CTYPES[p["dtype"]])
            vals.append(a.item())
    fn.argtypes = types
    fn.restype = None

    class Dim3(ctypes.Structure):
        _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]

    bidx, gdim = Dim3.in_dll(lib, "blockIdx"), Dim3.in_dll(lib, "gridDim")
    gdim.x, gdim.y, gdim.z = grid
    for z in range(grid[2]):
        for y in range(grid[1]):
            for x in range(grid[0]):
                bidx.x, bidx.y, bidx.z = x, y, z
                fn(*vals)


# ---------------------------------------------------------------- running one case


def run_case_gpu(folder):
    """The case on the GPU through kir's launcher: NVRTC's PTX of kernel.cu, META.json and
    lowered.kir loaded by `kir.Kernel.from_ptx`, inputs rounded to their dtypes by torch (round
    to nearest even), outs and temps poisoned, one launch timed to its end."""
    meta_text = open(os.path.join(folder, "META.json")).read()
    meta = json.loads(meta_text)
    case = json.load(open(os.path.join(folder, "case.json")))
    src = open(os.path.join(folder, "kernel.cu")).read()
    lowered = open(os.path.join(folder, "lowered.kir")).read()
    kernel = kir.Kernel.from_ptx(nvrtc_ptx(src), meta_text, lowered)
    host_in = {n: np.load(os.path.join(folder, "in", n + ".npy")) for n in case["inputs"]}
    tensors = {}
    for p in meta["entry_params"]:
        if p["kind"] == "tensor" and p["access"] != "out":
            x = torch.from_numpy(np.ascontiguousarray(host_in[p["name"]]))
            tensors[p["name"]] = x.to(device="cuda", dtype=TDT[p["dtype"]])
    bound = kt.bind(kernel, tensors, case["scalars"], poison=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    bound.launch()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    outs = {}
    for p in meta["entry_params"]:
        if p["kind"] == "tensor" and p["access"] != "in":
            t = bound.outputs.get(p["name"], tensors.get(p["name"]))
            outs[p["name"]] = (t.double().cpu().numpy(), p["dtype"])
    return case, outs, host_in, elapsed


def run_case(folder):
    if not EMULATE:
        return run_case_gpu(folder)
    meta = json.load(open(os.path.join(folder, "META.json")))
    case = json.load(open(os.path.join(folder, "case.json")))
    src = open(os.path.join(folder, "kernel.cu")).read()
    module = emulated_module(src)
    host_in = {n: np.load(os.path.join(folder, "in", n + ".npy")) for n in case["inputs"]}
    dims, bufs, dtypes = {}, {}, {}
    for p in meta["entry_params"]:
        if p["kind"] == "tensor" and p["access"] != "out":
            bufs[p["name"]] = to_device_array(host_in[p["name"]], p["dtype"])
            dtypes[p["name"]] = p["dtype"]
    bind_dims(meta["entry_params"], bufs, dims)
    for p in meta["entry_params"]:
        if p["kind"] == "tensor" and p["access"] == "out":
            shape = tuple(eval_formula(d, dims) for d in p["dims"])
            bufs[p["name"]] = poisoned(shape, p["dtype"])
            dtypes[p["name"]] = p["dtype"]
    for t in meta["temps"]:
        shape = tuple(eval_formula(d, dims) for d in t["dims"])
        bufs[t["name"]] = poisoned(shape, t["dtype"])
    scalars = case["scalars"]
    kernels = {k["name"]: k for k in meta["kernels"]}
    elapsed = 0.0
    for launch in meta["launches"]:
        k = kernels[launch["kernel"]]
        kbufs = {kp: bufs[arg] for kp, arg in launch["args"].items() if arg in bufs}
        kdims = {}
        bind_dims(k["kernel_params"], kbufs, kdims)
        args = [None] * len(k["params"])
        for p in k["params"]:
            if p["kind"] == "tensor":
                a = kbufs[p["name"]]
            elif p["kind"] == "tensor_map":
                raise RuntimeError(f"--emulate runs no tensor copies (tensor map of `{p['name']}`)")
            elif p["kind"] == "scalar":
                a = scalar_arg(scalars[launch["args"][p["name"]]], p["dtype"])
            else:
                a = np.int32(kdims[p["name"]])
            args[p["ptr_index"]] = a
        grid = tuple(eval_formula(k["grid"][ax], kdims) for ax in ("x", "y", "z"))
        t0 = time.perf_counter()
        emulated_launch(module, k, grid, args)
        elapsed += time.perf_counter() - t0
    outs = {}
    for p in meta["entry_params"]:
        if p["kind"] == "tensor" and p["access"] != "in":
            outs[p["name"]] = (from_device(bufs[p["name"]], p["dtype"]), p["dtype"])
    return case, outs, host_in, elapsed


# ---------------------------------------------------------------- float64 references


def ref_attention(case, x):
    d = case["defines"]
    dt = d.get("DTYPE", "bf16")
    q, k, v = (round_to(x[n].astype(np.float64), dt) for n in ("q", "k", "v"))
    scale = float(np.float32(case["scalars"]["scale"]))
    causal = d.get("CAUSAL", "0") == "1"
    B, Hq, Sq, D = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    kk = np.repeat(k, Hq // Hkv, axis=1)
    vv = np.repeat(v, Hq // Hkv, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q, kk) * scale
    if d.get("MASK", "0") == "1":
        # An additive mask of P planes: one for all, one per batch, or one per (batch, head).
        mk = round_to(x["mask"].astype(np.float64), dt)
        P = mk.shape[0]
        mk = mk[None] if P == 1 else mk[:, None] if P == B else mk.reshape(B, Hq, Sq, Sk)
        s = s + mk
    if causal:
        i = np.arange(Sq)[:, None]
        j = np.arange(Sk)[None, :]
        s = np.where(j <= i + Sk - Sq, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    empty = ~np.isfinite(m)
    m = np.where(empty, 0.0, m)
    p = np.exp(s - m)
    l = p.sum(axis=-1, keepdims=True)
    o = np.einsum("bhij,bhjd->bhid", p, vv) / np.where(l == 0, 1.0, l)
    with np.errstate(divide="ignore"):
        lse = np.where(empty[..., 0], -np.inf, np.log(l[..., 0]) + m[..., 0])
    return {"o": o, "lse": lse}


def ref_rmsnorm_fwd(case, x):
    dt = case["defines"].get("DTYPE", "bf16")
    xx, w = round_to(x["x"].astype(np.float64), dt), round_to(x["w"].astype(np.float64), dt)
    eps = float(np.float32(case["scalars"]["eps"]))
    rstd = 1.0 / np.sqrt((xx * xx).mean(axis=1) + eps)
    return {"y": xx * rstd[:, None] * w[None, :], "rstd": rstd}


def ref_rmsnorm_bwd(case, x):
    dt = case["defines"].get("DTYPE", "bf16")
    xx, w, dy = (round_to(x[n].astype(np.float64), dt) for n in ("x", "w", "dy"))
    eps = float(np.float32(case["scalars"]["eps"]))
    rstd = 1.0 / np.sqrt((xx * xx).mean(axis=1) + eps)
    mdot = (xx * w[None, :] * dy).mean(axis=1)
    dx = rstd[:, None] * w[None, :] * dy - (rstd**3 * mdot)[:, None] * xx
    dw = (dy * xx * rstd[:, None]).sum(axis=0)
    return {"dx": dx, "dw": dw}


def ref_layernorm_fwd(case, x):
    dt = case["defines"].get("DTYPE", "bf16")
    xx, w, b = (round_to(x[n].astype(np.float64), dt) for n in ("x", "w", "b"))
    eps = float(np.float32(case["scalars"]["eps"]))
    mean = xx.mean(axis=1)
    rstd = 1.0 / np.sqrt(((xx - mean[:, None]) ** 2).mean(axis=1) + eps)
    return {"y": (xx - mean[:, None]) * rstd[:, None] * w[None, :] + b[None, :],
            "mean": mean, "rstd": rstd}


def ref_layernorm_bwd(case, x):
    dt = case["defines"].get("DTYPE", "bf16")
    xx, w, dy = (round_to(x[n].astype(np.float64), dt) for n in ("x", "w", "dy"))
    mean, rstd = (round_to(x[n].astype(np.float64), "f32") for n in ("mean", "rstd"))
    xh = (xx - mean[:, None]) * rstd[:, None]
    g = w[None, :] * dy
    c1, c2 = g.mean(axis=1, keepdims=True), (g * xh).mean(axis=1, keepdims=True)
    return {"dx": rstd[:, None] * (g - c1 - xh * c2), "dw": (dy * xh).sum(axis=0),
            "db": dy.sum(axis=0)}


def ref_swiglu(case, x):
    dt = case["defines"].get("DTYPE", "bf16")
    gate, up = (round_to(x[n].astype(np.float64), dt) for n in ("gate", "up"))
    return {"out": gate / (1.0 + np.exp(-gate)) * up}


def ref_gemm(case, x):
    d = case["defines"]
    dt = d.get("DTYPE", "bf16")
    a = round_to(x["a"].astype(np.float64), dt)
    tb = d.get("TRANS_B", "0") == "1"
    ep = d.get("EPILOGUE", "none")
    alpha = float(np.float32(case["scalars"]["alpha"]))

    def mm(bname):
        b = round_to(x[bname].astype(np.float64), dt)
        return alpha * (a @ (np.swapaxes(b, 1, 2) if tb else b))

    acc = mm("b")
    if d.get("C_IN", "0") == "1":
        beta = float(np.float32(case["scalars"]["beta"]))
        acc = acc + beta * round_to(x["c_in"].astype(np.float64), dt)
    silu = lambda z: z / (1.0 + np.exp(-z))
    if ep == "gelu":
        acc = 0.5 * acc * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (acc + 0.044715 * acc**3)))
    if ep == "bias":
        acc = acc + round_to(x["bias"].astype(np.float64), dt)[None, None, :]
    elif ep == "silu":
        acc = silu(acc)
    elif ep == "swiglu":
        acc = silu(acc) * mm("b2")
    return {"c": acc}


REFS = {
    "attention_fwd": ref_attention,
    "rmsnorm_fwd": ref_rmsnorm_fwd,
    "rmsnorm_bwd": ref_rmsnorm_bwd,
    "layernorm_fwd": ref_layernorm_fwd,
    "layernorm_bwd": ref_layernorm_bwd,
    "swiglu": ref_swiglu,
    "gemm": ref_gemm,
}


def errors(out, ref):
    """(rel L2, max/max|ref|, problem) over finite reference entries; non-finite ones must
    match exactly (e.g. lse = -inf for rows that see no key)."""
    fin = np.isfinite(ref)
    if not np.array_equal(np.isfinite(out), fin):
        bad = int((np.isfinite(out) != fin).sum())
        return math.inf, math.inf, f"{bad} elements differ in finiteness (unwritten or wrong inf)"
    if not np.array_equal(out[~fin], ref[~fin]):
        return math.inf, math.inf, "non-finite values differ"
    d = out[fin] - ref[fin]
    rel = np.linalg.norm(d) / max(np.linalg.norm(ref[fin]), 1e-300)
    mx = np.abs(d).max(initial=0) / max(np.abs(ref[fin]).max(initial=0), 1e-300)
    return rel, mx, ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--case", action="append", help="only these cases")
    ap.add_argument("--emulate", action="store_true", help="run on the CPU with g++ (no GPU)")
    a = ap.parse_args()
    names = sorted(n for n in os.listdir(a.dir) if os.path.isfile(os.path.join(a.dir, n, "case.json")))
    if a.case:
        names = [n for n in names if n in a.case]
    if not names:
        sys.exit(f"no cases in {a.dir} (make them with scripts/make_gpu_artifacts.sh)")
    if EMULATE:
        print(f"device: CPU emulation (g++, one thread per block), numpy {np.__version__}")
    else:
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, numpy {np.__version__}")
    print(f"{'case':30} {'out':5} {'dtype':5} {'vs interp L2':>12} {'max':>9} {'bit-same':>9} "
          f"{'vs f64 L2':>10} {'max':>9} {'ms':>8}  verdict")
    ok_all = True
    for name in names:
        folder = os.path.join(a.dir, name)
        try:
            case, outs, host_in, secs = run_case(folder)
        except Exception as e:  # a launch failure (trap) or a bad artifact
            expect_fail = json.load(open(os.path.join(folder, "case.json"))).get("expect") == "fail"
            print(f"{name:30} launch failed: {e}")
            ok_all &= expect_fail
            continue
        f64 = REFS.get(case["op"], lambda c, x: {})(case, host_in)
        case_ok = True
        for oname, (out, dt) in sorted(outs.items()):
            interp = np.load(os.path.join(folder, "ref", oname + ".npy")).astype(np.float64)
            tol = LSE_TOL if oname == "lse" else TOL.get(dt, (0.0, 0.0))
            r1, m1, p1 = errors(out, interp)
            same = int((out == interp).sum() + (np.isnan(out) & np.isnan(interp)).sum())
            line_ok = r1 <= tol[0] and m1 <= tol[1]
            r2 = m2 = float("nan")
            p2 = ""
            if oname in f64:
                ref = f64[oname]
                r2, m2, p2 = errors(out, ref)
                line_ok &= r2 <= tol[0] and m2 <= tol[1]
            case_ok &= line_ok
            print(f"{name:30} {oname:5} {dt:5} {r1:12.3e} {m1:9.2e} {same:>4}/{out.size:<5}"
                  f" {r2:10.3e} {m2:9.2e} {secs * 1e3:8.2f}  {'ok' if line_ok else 'FAIL'} {p1 or p2}")
        expect_fail = case.get("expect") == "fail"
        if expect_fail:
            print(f"{name:30} seeded mutation: {'detected (good)' if not case_ok else 'NOT DETECTED'}")
            ok_all &= not case_ok
        else:
            ok_all &= case_ok
    print("gpu_check: ALL OK" if ok_all else "gpu_check: FAILURES (see above)")
    sys.exit(0 if ok_all else 1)


if __name__ == "__main__":
    main()
