"""Shared helpers of the NumPy acceptance scripts (numpy_check*.py): reference rounding to the
kernel dtypes, the error metrics, and running `kirc run` on .npy inputs."""
import os, subprocess, sys
import numpy as np


def round_to(x, dt):
    x = np.asarray(x, dtype=np.float64)
    if dt == "f32":
        return x.astype(np.float32).astype(np.float64)
    if dt == "f16":
        return x.astype(np.float16).astype(np.float64)
    # bf16: round f64 to 8 significant bits, ties to even (normal range is all tests need).
    m, e = np.frexp(x)
    return np.ldexp(np.round(m * 256.0), e - 8)


def err(out, ref, scale=None):
    fin = np.isfinite(ref)
    assert np.array_equal(np.isfinite(out), fin), "non-finite mismatch (unwritten element?)"
    s = np.abs(ref[fin]) if scale is None else np.abs(scale[fin])
    d = out[fin] - ref[fin]
    rel = np.linalg.norm(d) / max(np.linalg.norm(s), 1e-300)
    mx = np.abs(d).max(initial=0) / max(s.max(initial=0), 1e-300)
    return rel, mx


def run(kirc, op, defines, args, tmp):
    cmd = [kirc, "run", op]
    for k, v in defines.items():
        cmd += ["-D", f"{k}={v}"]
    for k, v in args.items():
        if isinstance(v, np.ndarray):
            p = os.path.join(tmp, f"{k}.npy")
            np.save(p, v)
            v = p
        cmd += ["--arg", f"{k}={v}"]
    out = os.path.join(tmp, "out")
    if os.path.isdir(out):
        for f in os.listdir(out):
            os.remove(os.path.join(out, f))
    cmd += ["--out", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{r.stderr}")
    return {f[:-4]: np.load(os.path.join(out, f)).astype(np.float64) for f in os.listdir(out)}
