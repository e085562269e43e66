#!/usr/bin/env python3
"""Whether each attention default on sm_90a still takes the better of its two warp roles, in one
GPU call: for every case below, the configuration row the default takes (read from `kirc compile
--report`) is given by hand with the other role (`--warp-specialize on` where the row is
unspecialized, `off` where it is specialized; the row's tiles, warps and stages as they are), the
flipped build is checked against the interpreter on a ragged GQA problem (and two GPU runs
compared bit for bit), then both are timed with `kirc bench`, interleaved, ROUNDS rounds.

Why: the two roles' kernels gain from different backend changes (the row loads in pairs and the
uniform warp index reach the unspecialized kernels first), so a row's role measured once can go
stale. Call F6 (docs/history/benchmarks-log.md, 2026-12-06) found causal d256 attention_bwd 5 %
faster unspecialized, against call E2's choice; this script repeats that question for every row.
Its first run (call T1) found the causal forwards faster warp-specialized, which their rows now are.

usage: scripts/gpu_roles.py KIRC [ROUNDS] [--dry]   (KIRC built with --features cuda; ROUNDS 2)
       --dry prints the flipped flags of each case (no GPU needed).
Output: one line per case and round, then a table of default / flipped medians.
"""
import os
import re
import subprocess
import sys
import statistics
import tempfile

# (name, op, head dim, causal, B, H, S)
CASES = [
    ("fwd d64", "attention_fwd", 64, 0, 4, 32, 4096),
    ("fwd d64 causal", "attention_fwd", 64, 1, 4, 32, 4096),
    ("fwd d128 S1k", "attention_fwd", 128, 0, 16, 16, 1024),
    ("fwd d128 S16k", "attention_fwd", 128, 0, 1, 16, 16384),
    ("fwd d128 causal", "attention_fwd", 128, 1, 1, 16, 16384),
    ("fwd d128 causal S4k", "attention_fwd", 128, 1, 4, 16, 4096),
    ("fwd d128 causal S1k", "attention_fwd", 128, 1, 16, 16, 1024),
    ("fwd d256 S4k", "attention_fwd", 256, 0, 4, 8, 4096),
    ("fwd d256 causal", "attention_fwd", 256, 1, 4, 8, 4096),
    ("bwd d64", "attention_bwd", 64, 0, 4, 32, 4096),
    ("bwd d128 S16k", "attention_bwd", 128, 0, 1, 16, 16384),
    ("bwd d128 causal", "attention_bwd", 128, 1, 1, 16, 16384),
    ("bwd d256", "attention_bwd", 256, 0, 4, 8, 4096),
    ("bwd d256 causal", "attention_bwd", 256, 1, 4, 8, 4096),
]

ENV = dict(os.environ, KIR_CACHE_DIR="off")


def shapes(op, b, h, s, d):
    names = ["q", "k", "v"] + (["o", "do"] if op == "attention_bwd" else [])
    out = [f"--shape {n}={b}x{h}x{s}x{d}" for n in names]
    if op == "attention_bwd":
        out.append(f"--shape lse={b}x{h}x{s}")
    return " ".join(out).split()


def flipped(kirc, op, d, c, b, h, s):
    """The default's row with the other warp role, or None with the reason."""
    args = [kirc, "compile", op, "-D", f"HEAD_DIM={d}", "-D", f"CAUSAL={c}", "--target", "sm_90a",
            "--report", "-o", os.devnull] + shapes(op, b, h, s, d)
    p = subprocess.run(args, capture_output=True, text=True, env=ENV)
    text = p.stdout + p.stderr
    line = next((l for l in text.splitlines() if l.startswith("configuration:")), "")
    if " row:" not in line:
        return None, f"no row ({line.strip()})"
    row = line.split(" row:", 1)[1].split(" — ", 1)[0]
    flags = []
    for name, value in re.findall(r"\b([A-Z][A-Z_]*)=(\d+)", row):
        flags += ["-D", f"{name}={value}"]
    m = re.search(r"\bwarps (\d+)", row)
    if m:
        flags += ["--warps", m.group(1)]
    m = re.search(r"\bstages (\d+)", row)
    if m:
        flags += ["--stages", m.group(1)]
    specialized = "warp-specialized" in row
    flags += ["--warp-specialize", "off" if specialized else "on"]
    build = [a for a in args if a != "--report"] + flags
    p = subprocess.run(build, capture_output=True, text=True, env=ENV)
    if p.returncode != 0:
        return None, f"the flipped build does not compile: {p.stderr.strip()[-300:]}"
    return (flags, "specialized" if specialized else "unspecialized"), None


def tflops(kirc, op, d, c, b, h, s, extra):
    fl = (10 if op == "attention_bwd" else 4) * b * h * s * s * d // (2 if c else 1)
    args = [kirc, "bench", op, "-D", f"HEAD_DIM={d}", "-D", f"CAUSAL={c}", "--arg",
            f"scale={d ** -0.5}", "--iters", "10" if op == "attention_bwd" else "30",
            "--flops", str(fl)] + shapes(op, b, h, s, d) + extra
    out = subprocess.run(args, capture_output=True, text=True, env=ENV)
    m = re.search(r"([0-9.]+) TFLOP/s", out.stdout + out.stderr)
    return float(m.group(1)) if m else None


def check(kirc, op, d, c, extra, tmp):
    """The flipped build against the interpreter (ragged GQA), and two GPU runs bit for bit."""
    import numpy as np  # on the GPU machine; `--dry` needs none

    r = np.random.default_rng()
    files = {}
    for n, shp in (("q", (2, 4, 300, d)), ("k", (2, 2, 389, d)), ("v", (2, 2, 389, d)),
                   ("do", (2, 4, 300, d))):
        x = (r.standard_normal(shp) * 2).astype(np.float32)
        if n == "k":
            x[:, :, 200:260] *= 6
        files[n] = f"{tmp}/{n}.npy"
        np.save(files[n], x)
    base = [kirc, "run", "-D", f"HEAD_DIM={d}", "-D", f"CAUSAL={c}", "--arg", f"scale={d ** -0.5}"]
    qkv = sum((["--arg", f"{n}={files[n]}"] for n in ("q", "k", "v")), [])
    outs = ["o", "lse"]
    if op == "attention_bwd":
        subprocess.run(base[:2] + ["attention_fwd"] + base[2:] + qkv
                       + ["--device", "cpu", "--out", f"{tmp}/f"], check=True, env=ENV,
                       capture_output=True)
        qkv += ["--arg", f"o={tmp}/f/o.npy", "--arg", f"lse={tmp}/f/lse.npy",
                "--arg", f"do={files['do']}"]
        outs = ["dq", "dk", "dv"]
    cmd = base[:2] + [op] + base[2:] + qkv
    runs = {}
    for tag, dev in (("cpu", ["--device", "cpu"]), ("gpu", ["--device", "cuda"] + extra),
                     ("gpu2", ["--device", "cuda"] + extra)):
        p = subprocess.run(cmd + dev + ["--out", f"{tmp}/{tag}"], capture_output=True, text=True,
                           env=ENV)
        if p.returncode != 0:
            return f"{tag} run failed: {(p.stderr or p.stdout).strip()[-200:]}"
        runs[tag] = {o: np.load(f"{tmp}/{tag}/{o}.npy") for o in outs}
    parts = []
    for o in outs:
        a, ref = runs["gpu"][o].astype(np.float64), runs["cpu"][o].astype(np.float64)
        fin = np.isfinite(ref)
        rel = np.linalg.norm(a[fin] - ref[fin]) / max(np.linalg.norm(ref[fin]), 1e-30)
        same = np.array_equal(runs["gpu"][o], runs["gpu2"][o], equal_nan=True)
        parts.append(f"{o} rel L2 {rel:.2e}{'' if same else ' (two runs differ)'}")
    return ", ".join(parts)


def main():
    argv = [a for a in sys.argv[1:] if a != "--dry"]
    dry = "--dry" in sys.argv[1:]
    if not argv:
        sys.exit(__doc__)
    kirc, rounds = argv[0], int(argv[1]) if len(argv) > 1 else 2
    plans = []
    for name, op, d, c, b, h, s in CASES:
        got, why = flipped(kirc, op, d, c, b, h, s)
        if got is None:
            print(f"{name}: skipped, {why}")
            continue
        flags, role = got
        print(f"{name}: default {role}; flipped: {' '.join(flags)}")
        plans.append((name, op, d, c, b, h, s, flags, role))
    if dry:
        return
    with tempfile.TemporaryDirectory() as tmp:
        for name, op, d, c, b, h, s, flags, _ in plans:
            print(f"check {name} flipped: {check(kirc, op, d, c, flags, tmp)}", flush=True)
    times = {p[0]: ([], []) for p in plans}
    for r in range(rounds):
        for name, op, d, c, b, h, s, flags, _ in plans:
            a = tflops(kirc, op, d, c, b, h, s, [])
            f = tflops(kirc, op, d, c, b, h, s, flags)
            print(f"round {r + 1} {name}: default {a} flipped {f}", flush=True)
            if a is not None:
                times[name][0].append(a)
            if f is not None:
                times[name][1].append(f)
    print(f"\n{'case':<18}{'default role':>15}{'default':>10}{'flipped':>10}{'flipped/default':>17}")
    for name, *_, role in plans:
        a, f = (statistics.median(v) if v else None for v in times[name])
        ratio = f"{f / a:.3f}x" if a and f else "n/a"
        print(f"{name:<18}{role:>15}{a or float('nan'):>10.1f}{f or float('nan'):>10.1f}{ratio:>17}")


if __name__ == "__main__":
    main()
