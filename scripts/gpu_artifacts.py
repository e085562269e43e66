#!/usr/bin/env python3
"""Builds the artifacts the GPU check needs, on a machine with Rust (no GPU): PTX and META.json
from `kirc compile`, random inputs, and the CPU interpreter's outputs from `kirc run` for the
correctness cases; a manifest for the timing cases (their inputs are made on the GPU).

usage: scripts/gpu_artifacts.py OUT_DIR [--kirc target/release/kirc] [--target sm_90a]
Then, on the GPU machine: python3 scripts/gpu_check_ptx.py OUT_DIR
"""
import argparse, json, os, subprocess, sys
import numpy as np


def sh(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{r.stderr}")
    return r.stdout


def compile_case(kirc, out, name, op, defines, target):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    cmd = [kirc, "compile", op, "--target", target, "--emit", "ptx", "-o", os.path.join(d, "kernel.ptx"),
           "--meta", os.path.join(d, "meta.json")]
    for k, v in defines.items():
        cmd += ["-D", f"{k}={v}"]
    sh(cmd)
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--kirc", default="target/release/kirc")
    ap.add_argument("--target", default="sm_90a")
    a = ap.parse_args()
    rng = np.random.default_rng(1234)
    os.makedirs(a.out, exist_ok=True)
    cases = []

    def correctness(name, op, defines, inputs, scalars):
        d = compile_case(a.kirc, a.out, name, op, defines, a.target)
        os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
        cmd = [a.kirc, "run", op, "--out", os.path.join(d, "interp")]
        for k, v in defines.items():
            cmd += ["-D", f"{k}={v}"]
        files = {}
        for k, arr in inputs.items():
            p = os.path.join(d, "inputs", f"{k}.npy")
            np.save(p, arr)
            files[k] = f"inputs/{k}.npy"
            cmd += ["--arg", f"{k}={p}"]
        for k, v in scalars.items():
            cmd += ["--arg", f"{k}={v}"]
        sh(cmd)
        expect = {f[:-4]: f"interp/{f}" for f in os.listdir(os.path.join(d, "interp"))}
        cases.append({"name": name, "op": op, "dir": name, "defines": defines, "inputs": files,
                      "scalars": scalars, "expect": expect, "mode": "check"})

    f32 = np.float32
    # Attention: ragged shapes, GQA, causal both ways, Sq != Sk.
    for dt in ["bf16", "f16"]:
        for d_, causal, (b, hq, hkv, sq, sk) in [(64, 1, (2, 4, 2, 300, 300)), (128, 0, (1, 14, 2, 257, 190)),
                                                 (128, 1, (1, 2, 1, 190, 257)), (256, 1, (1, 2, 2, 130, 130)),
                                                 (80, 0, (2, 2, 1, 77, 33))]:
            q = rng.standard_normal((b, hq, sq, d_)).astype(f32)
            k = rng.standard_normal((b, hkv, sk, d_)).astype(f32)
            v = rng.standard_normal((b, hkv, sk, d_)).astype(f32)
            correctness(f"attn_{dt}_d{d_}_c{causal}_{sq}x{sk}", "attention_fwd",
                        {"DTYPE": dt, "HEAD_DIM": d_, "CAUSAL": causal}, {"q": q, "k": k, "v": v},
                        {"scale": float(f32(1 / np.sqrt(d_)))})
    q = rng.standard_normal((1, 2, 100, 64)).astype(f32) * 3
    correctness("attn_f32_d64", "attention_fwd", {"DTYPE": "f32", "HEAD_DIM": 64, "CAUSAL": 1},
                {"q": q, "k": q.copy(), "v": q[:, :, ::-1].copy()}, {"scale": 0.125})
    # GEMM: ragged, epilogues, TRANS_B, batched, f32 (FMA path).
    for dt, tb, epi, (bt, m, k, n) in [("bf16", 0, "none", (1, 200, 300, 130)), ("bf16", 1, "bias", (2, 64, 64, 64)),
                                       ("f16", 0, "silu", (1, 129, 77, 65)), ("bf16", 1, "swiglu", (3, 70, 96, 40)),
                                       ("f32", 0, "none", (1, 67, 45, 33))]:
        args = {"a": rng.standard_normal((bt, m, k)).astype(f32),
                "b": rng.standard_normal((bt, n, k) if tb else (bt, k, n)).astype(f32)}
        if epi == "bias":
            args["bias"] = rng.standard_normal(n).astype(f32)
        if epi == "swiglu":
            args["b2"] = rng.standard_normal(args["b"].shape).astype(f32)
        correctness(f"gemm_{dt}_tb{tb}_{epi}_{bt}x{m}x{k}x{n}", "gemm", {"DTYPE": dt, "TRANS_B": tb, "EPILOGUE": epi},
                    args, {"alpha": 0.5})
    # Norms.
    for dt, (r, n) in [("bf16", (33, 4097)), ("f32", (7, 896)), ("f16", (130, 1))]:
        x = (rng.standard_normal((r, n)) * 3).astype(f32)
        w = rng.standard_normal(n).astype(f32)
        correctness(f"rmsnorm_fwd_{dt}_{r}x{n}", "rmsnorm_fwd", {"DTYPE": dt}, {"x": x, "w": w}, {"eps": 1e-5})
        dy = rng.standard_normal((r, n)).astype(f32)
        correctness(f"rmsnorm_bwd_{dt}_{r}x{n}", "rmsnorm_bwd", {"DTYPE": dt}, {"x": x, "w": w, "dy": dy}, {"eps": 1e-5})

    # Timing cases (inputs generated on the GPU).
    for d_ in [64, 128, 256]:
        for causal in [0, 1]:
            name = f"time_attn_d{d_}_c{causal}"
            compile_case(a.kirc, a.out, name, "attention_fwd", {"DTYPE": "bf16", "HEAD_DIM": d_, "CAUSAL": causal}, a.target)
            cases.append({"name": name, "op": "attention_fwd", "dir": name, "mode": "time", "head_dim": d_, "causal": causal})
    compile_case(a.kirc, a.out, "time_gemm", "gemm", {"DTYPE": "bf16"}, a.target)
    cases.append({"name": "time_gemm", "op": "gemm", "dir": "time_gemm", "mode": "time"})
    compile_case(a.kirc, a.out, "time_rmsnorm", "rmsnorm_fwd", {"DTYPE": "bf16"}, a.target)
    cases.append({"name": "time_rmsnorm", "op": "rmsnorm_fwd", "dir": "time_rmsnorm", "mode": "time"})
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump({"target": a.target, "cases": cases}, f, indent=1)
    print(f"{len(cases)} cases in {a.out}")


if __name__ == "__main__":
    main()
