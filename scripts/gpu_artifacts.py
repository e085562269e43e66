#!/usr/bin/env python3
"""Builds the artifacts the GPU check needs, on a machine with Rust (no GPU): PTX, META.json and
the module that was lowered (lowered.kir: what `kir.Kernel.from_ptx` loads) from `kirc compile`, random inputs, and the CPU interpreter's outputs from `kirc run` for the
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


def compile_case(kirc, out, name, op, defines, target, extra=()):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    cmd = [kirc, "compile", op, "--target", target, "--emit", "ptx", "-o", os.path.join(d, "kernel.ptx"),
           "--meta", os.path.join(d, "meta.json"), "--lowered", os.path.join(d, "lowered.kir"), *extra]
    for k, v in defines.items():
        cmd += ["-D", f"{k}={v}"]
    sh(cmd)
    return d


def interp_case(kirc, d, op, defines, inputs, scalars):
    """Saves `inputs` under d/inputs and runs the CPU interpreter on them (`kirc run`, outputs in
    d/interp); returns the input files and the expected outputs, relative to d."""
    os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
    cmd = [kirc, "run", op, "--out", os.path.join(d, "interp")]
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
    return files, expect


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--kirc", default="target/release/kirc")
    ap.add_argument("--target", default="sm_90a")
    a = ap.parse_args()
    rng = np.random.default_rng(1234)
    os.makedirs(a.out, exist_ok=True)
    cases = []

    def correctness(name, op, defines, inputs, scalars, extra=()):
        d = compile_case(a.kirc, a.out, name, op, defines, a.target, extra)
        files, expect = interp_case(a.kirc, d, op, defines, inputs, scalars)
        # The CUDA-C parity backend on the same inputs (three-way parity).
        ccmd = [a.kirc, "compile", op, "--target", a.target, "--emit", "cuda", "-o", os.path.join(d, "kernel.cu"),
                "--meta", os.path.join(d, "meta_cuda.json"), "--lowered", os.path.join(d, "lowered_cuda.kir")]
        for k2, v2 in defines.items():
            ccmd += ["-D", f"{k2}={v2}"]
        r = subprocess.run(ccmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"note: no CUDA C for {name}: {r.stderr.strip().splitlines()[0] if r.stderr else ''}")
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

    # The rest of the op library.
    i32 = np.int32
    for dt in ["bf16", "f32"]:
        r_, n_ = (33, 4097) if dt == "bf16" else (7, 896)
        x = (rng.standard_normal((r_, n_)) * 3).astype(f32)
        w = rng.standard_normal(n_).astype(f32)
        bb = rng.standard_normal(n_).astype(f32)
        correctness(f"layernorm_fwd_{dt}", "layernorm_fwd", {"DTYPE": dt}, {"x": x, "w": w, "b": bb}, {"eps": 1e-5})
        mean = x.mean(-1).astype(f32)
        rstd = (1 / np.sqrt(x.var(-1) + 1e-5)).astype(f32)
        correctness(f"layernorm_bwd_{dt}", "layernorm_bwd", {"DTYPE": dt},
                    {"x": x, "w": w, "dy": rng.standard_normal((r_, n_)).astype(f32), "mean": mean, "rstd": rstd}, {})
        correctness(f"swiglu_{dt}", "swiglu", {"DTYPE": dt},
                    {"gate": (rng.standard_normal((r_, n_)) * 3).astype(f32), "up": rng.standard_normal((r_, n_)).astype(f32)}, {})
    M, N, K = 70, 96, 192
    codes = lambda: rng.integers(0, 256, (N, K // 2)).astype(np.uint8)
    scales = lambda: (rng.random((N, K // 64)) + 0.5).astype(f32)
    correctness("gemm_nf4_bf16", "gemm_nf4", {"DTYPE": "bf16"},
                {"a": rng.standard_normal((M, K)).astype(f32), "codes": codes(), "scales": scales()}, {})
    correctness("gemm_nf4_bf16_transpose", "gemm_nf4", {"DTYPE": "bf16", "TRANSPOSE": 1},
                {"grad_out": rng.standard_normal((M, N)).astype(f32), "codes": codes(), "scales": scales()}, {})
    correctness("gemm_nf4_f32_gate_up", "gemm_nf4", {"DTYPE": "f32", "GATE_UP": 1},
                {"a": rng.standard_normal((M, K)).astype(f32), "gate_codes": codes(), "gate_scales": scales(),
                 "up_codes": codes(), "up_scales": scales()}, {})
    # attention_fwd features, one at a time and combined.
    b, hq, hkv, sq, sk, d_ = 2, 4, 2, 77, 130, 64
    q = rng.standard_normal((b, hq, sq, d_)).astype(f32)
    k = rng.standard_normal((b, hkv, sk, d_)).astype(f32)
    v = rng.standard_normal((b, hkv, sk, d_)).astype(f32)
    base = {"DTYPE": "bf16", "HEAD_DIM": d_}
    qkv = {"q": q, "k": k, "v": v}
    correctness("attn_varlen_window_causal", "attention_fwd", dict(base, CAUSAL=1, VARLEN=1, WINDOW=1),
                dict(qkv, total_lengths=np.array([100, 129], dtype=i32)), {"scale": 0.125, "window": 20})
    correctness("attn_mask_bhq_softcap", "attention_fwd", dict(base, MASK=1, SOFTCAP=1),
                dict(qkv, mask=rng.standard_normal((b * hq, sq, sk)).astype(f32)), {"scale": 0.125, "softcap": 5.0})
    correctness("attn_kv_offset_bshd", "attention_fwd", dict(base, CAUSAL=1, KV_OFFSET=1, OUT_LAYOUT="bshd"),
                dict(qkv, past_lengths=np.array([40, 53], dtype=i32)), {"scale": 0.125})
    # attention_bwd (o, lse from a float64 forward so the inputs are consistent).
    # Head dim 64 (both modes), and 128 at the defaults (causal and not: the dK/dV tile of the
    # default config), on ragged lengths.
    for det, dh, causal in [(1, 64, 0), (0, 64, 0), (1, 128, 0), (1, 128, 1)]:
        qb, kb, vb = (rng.standard_normal((1, 4, 100, dh)).astype(f32), rng.standard_normal((1, 2, 90, dh)).astype(f32),
                      rng.standard_normal((1, 2, 90, dh)).astype(f32))
        kk, vv = np.repeat(kb, 2, 1).astype(np.float64), np.repeat(vb, 2, 1).astype(np.float64)
        s_ = np.einsum("bhid,bhjd->bhij", qb.astype(np.float64), kk) * 0.125
        if causal:
            # Bottom-right aligned: row i sees keys j <= i + (Sk - Sq). The first rows see no key
            # (their P is 0 in kir); key 0 keeps their o and lse finite in these inputs.
            i_, j_ = np.arange(100)[:, None], np.arange(90)[None, :]
            s_ = np.where(j_ <= i_ + (90 - 100), s_, -np.inf)
            s_[..., :, 0] = np.where(np.isinf(s_[..., :, 0]), 0.0, s_[..., :, 0])
        m_ = s_.max(-1, keepdims=True)
        p_ = np.exp(s_ - m_)
        l_ = p_.sum(-1, keepdims=True)
        o_ = (np.einsum("bhij,bhjd->bhid", p_, vv) / l_).astype(f32)
        lse_ = (np.log(l_) + m_)[..., 0].astype(f32)
        correctness(f"attn_bwd_det{det}_d{dh}_c{causal}", "attention_bwd",
                    {"DTYPE": "bf16", "HEAD_DIM": dh, "DETERMINISTIC": det, "CAUSAL": causal},
                    {"q": qb, "k": kb, "v": vb, "o": o_, "do": rng.standard_normal(o_.shape).astype(f32), "lse": lse_},
                    {"scale": 0.125})

    # Fusion: the unfused program (--no-fuse) and its fused form (--fuse), checked and timed.
    fdef = {"DTYPE": "bf16", "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32}
    for prog in ["gate_up_swiglu", "rmsnorm_gemm"]:
        path = f"tests/in/fusion/{prog}.kir"
        if not os.path.exists(path):
            continue
        if prog == "gate_up_swiglu":
            ins = {"x": rng.standard_normal((130, 96)).astype(f32), "wg": rng.standard_normal((96, 70)).astype(f32),
                   "wu": rng.standard_normal((96, 70)).astype(f32)}
            sc = {}
        else:
            ins = {"x": rng.standard_normal((130, 96)).astype(f32), "w": rng.standard_normal(96).astype(f32),
                   "wm": rng.standard_normal((96, 70)).astype(f32)}
            sc = {"eps": 1e-5}
        for tag, extra in [("unfused", ("--no-fuse",)), ("fused", ("--fuse",))]:
            correctness(f"fuse_{prog}_{tag}", path, fdef, ins, sc, extra)
            tname = f"time_fuse_{prog}_{tag}"
            compile_case(a.kirc, a.out, tname, path, fdef, a.target, extra)
            cases.append({"name": tname, "op": "fusion", "program": prog, "variant": tag, "dir": tname, "mode": "time"})

    # Bigger tiles (8 warps) must be exactly as correct.
    q = rng.standard_normal((1, 3, 300, 128)).astype(f32)
    k = rng.standard_normal((1, 1, 257, 128)).astype(f32)
    correctness("attn_bf16_d128_c1_bm128", "attention_fwd", {"DTYPE": "bf16", "HEAD_DIM": 128, "CAUSAL": 1, "BLOCK_M": 128},
                {"q": q, "k": k, "v": k[:, :, ::-1].copy()}, {"scale": 0.088})
    correctness("gemm_bf16_128x128", "gemm", {"DTYPE": "bf16", "BLOCK_M": 128, "BLOCK_N": 128},
                {"a": rng.standard_normal((2, 300, 200)).astype(f32), "b": rng.standard_normal((2, 200, 260)).astype(f32)},
                {"alpha": 1.0})

    # Timing cases (inputs generated on the GPU).
    for d_, bm, bn in [(64, 128, 64), (128, 64, 64), (128, 128, 64), (128, 128, 32), (256, 64, 64)]:
        for causal in [0, 1]:
            name = f"time_attn_d{d_}_bm{bm}_bn{bn}_c{causal}"
            compile_case(a.kirc, a.out, name, "attention_fwd",
                         {"DTYPE": "bf16", "HEAD_DIM": d_, "CAUSAL": causal, "BLOCK_M": bm, "BLOCK_N": bn}, a.target)
            cases.append({"name": name, "op": "attention_fwd", "dir": name, "mode": "time", "head_dim": d_, "causal": causal})
    # The explicit 4-warp tile with 64-key blocks (`--warps 4`, the fastest at d128).
    for causal in [0, 1]:
        name = f"time_attn_d128_bm128_bn64_w4_c{causal}"
        compile_case(a.kirc, a.out, name, "attention_fwd",
                     {"DTYPE": "bf16", "HEAD_DIM": 128, "CAUSAL": causal, "BLOCK_M": 128, "BLOCK_N": 64}, a.target,
                     ["--warps", "4"])
        cases.append({"name": name, "op": "attention_fwd", "dir": name, "mode": "time", "head_dim": 128, "causal": causal})
    correctness("attn_bf16_d128_c1_bm128_w4", "attention_fwd",
                {"DTYPE": "bf16", "HEAD_DIM": 128, "CAUSAL": 1, "BLOCK_M": 128, "BLOCK_N": 64},
                {"q": q, "k": k, "v": k[:, :, ::-1].copy()}, {"scale": 0.088}, ["--warps", "4"])
    # The 4-warp attention tile (128 rows, 32-key blocks) must be exactly as correct.
    correctness("attn_bf16_d128_c1_bm128_bn32", "attention_fwd",
                {"DTYPE": "bf16", "HEAD_DIM": 128, "CAUSAL": 1, "BLOCK_M": 128, "BLOCK_N": 32},
                {"q": q, "k": k, "v": k[:, :, ::-1].copy()}, {"scale": 0.088})
    correctness("gemm_bf16_128x256x64", "gemm", {"DTYPE": "bf16", "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64},
                {"a": rng.standard_normal((2, 300, 200)).astype(f32), "b": rng.standard_normal((2, 200, 520)).astype(f32)},
                {"alpha": 1.0})
    for bm, bn, bk in [(64, 64, 32), (128, 128, 32), (128, 256, 64)]:
        name = f"time_gemm_{bm}x{bn}x{bk}"
        compile_case(a.kirc, a.out, name, "gemm", {"DTYPE": "bf16", "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, a.target)
        cases.append({"name": name, "op": "gemm", "dir": name, "mode": "time"})
    # wgmma on sm_90a: both operands K-major (TRANS_B = 1), K blocks of 64 or 128.
    wg = {"DTYPE": "bf16", "TRANS_B": 1, "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128}
    for bk in [64, 128]:
        name = f"time_gemm_wgmma_128x256x{bk}"
        compile_case(a.kirc, a.out, name, "gemm", dict(wg, BLOCK_K=bk), a.target)
        cases.append({"name": name, "op": "gemm", "dir": name, "mode": "time", "trans_b": 1})
    correctness("gemm_wgmma_bf16_128x256x128", "gemm", wg,
                {"a": rng.standard_normal((2, 300, 200)).astype(f32) * 3,
                 "b": rng.standard_normal((2, 520, 200)).astype(f32)}, {"alpha": 0.5})
    correctness("gemm_wgmma_bf16_64x256x64_w4_bias", "gemm", dict(wg, BLOCK_M=64, BLOCK_K=64, EPILOGUE="bias"),
                {"a": rng.standard_normal((1, 70, 300)).astype(f32),
                 "b": rng.standard_normal((1, 260, 300)).astype(f32),
                 "bias": rng.standard_normal((260,)).astype(f32)}, {"alpha": 1.0}, ["--warps", "4"])
    # Hopper tiles (wgmma for both attention dots on sm_90a): ragged, GQA, both causal modes,
    # checked at every tile shape that is timed ("hop" cases); bm = 0 is kir's default
    # configuration for the target (no tile flags).
    # (head dim, BLOCK_M, BLOCK_N, warps, stages (0: the compile driver's), causal modes)
    for d_, bm, bn, w, st, modes in [(128, 0, 0, 0, 0, [0, 1]), (64, 0, 0, 0, 0, [0, 1]), (256, 0, 0, 0, 0, [0, 1]),
                                     (128, 64, 128, 4, 2, [0, 1]), (256, 64, 64, 4, 2, [0, 1]),
                                     (128, 128, 64, 8, 0, [1]), (64, 128, 128, 8, 0, [1]),
                                     (64, 128, 64, 8, 0, [1])]:
        for causal in modes:
            qh = rng.standard_normal((1, 4, 300, d_)).astype(f32) * 2
            kh = rng.standard_normal((1, 2, 257, d_)).astype(f32)
            vh = rng.standard_normal((1, 2, 257, d_)).astype(f32)
            dfs = {"DTYPE": "bf16", "HEAD_DIM": d_, "CAUSAL": causal}
            extra = []
            if bm:
                dfs.update(BLOCK_M=bm, BLOCK_N=bn)
                extra = ["--warps", str(w)] + (["--stages", str(st)] if st else [])
            tag = f"d{d_}_bm{bm}_bn{bn}_w{w}_s{st}_c{causal}" if bm else f"d{d_}_default_c{causal}"
            correctness(f"attn_hop_{tag}", "attention_fwd", dfs,
                        {"q": qh, "k": kh, "v": vh}, {"scale": float(f32(1 / np.sqrt(d_)))}, extra)
            name = f"time_hop_attn_{tag}"
            compile_case(a.kirc, a.out, name, "attention_fwd", dfs, a.target, extra)
            cases.append({"name": name, "op": "attention_fwd", "dir": name, "mode": "time", "head_dim": d_,
                          "causal": causal})
    # GEMM on sm_90a: the default configuration and wgmma tiles at several ring depths.
    g = {"DTYPE": "bf16", "BLOCK_M": 128, "BLOCK_N": 256}
    for tag, dfs, extra in [("default", {"DTYPE": "bf16"}, []),
                            ("default_bias", {"DTYPE": "bf16", "EPILOGUE": "bias"}, []),
                            ("128x256x64_s4", dict(g, BLOCK_K=64), ["--stages", "4"]),
                            ("128x256x128_s2", dict(g, BLOCK_K=128), ["--stages", "2"]),
                            ("128x256x64_s2", dict(g, BLOCK_K=64), ["--stages", "2"])]:
        gin = {"a": rng.standard_normal((2, 300, 200)).astype(f32) * 3,
               "b": rng.standard_normal((2, 200, 520)).astype(f32)}
        if dfs.get("EPILOGUE") == "bias":
            gin["bias"] = rng.standard_normal(520).astype(f32)
        correctness(f"gemm_hop_{tag}", "gemm", dfs, gin, {"alpha": 0.5}, extra)
        name = f"time_hop_gemm_{tag}"
        compile_case(a.kirc, a.out, name, "gemm", dfs, a.target, extra)
        cases.append({"name": name, "op": "gemm", "dir": name, "mode": "time"})
    for blk in [1024, 4096]:
        name = f"time_rmsnorm_{blk}"
        compile_case(a.kirc, a.out, name, "rmsnorm_fwd", {"DTYPE": "bf16", "BLOCK": blk}, a.target)
        cases.append({"name": name, "op": "rmsnorm_fwd", "dir": name, "mode": "time"})
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump({"target": a.target, "cases": cases}, f, indent=1)
    print(f"{len(cases)} cases in {a.out}")


if __name__ == "__main__":
    main()
