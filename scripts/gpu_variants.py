#!/usr/bin/env python3
"""Builds GPU artifacts for a list of attention_fwd / gemm variants (compile flags), on a machine
with Rust (no GPU): for each variant a timing case and, unless `--no-check`, a ragged correctness
case whose expected outputs come from the CPU interpreter (`kirc run`). The GPU side is
scripts/gpu_check_ptx.py, as for scripts/gpu_artifacts.py.

usage: scripts/gpu_variants.py OUT_DIR [--kirc target/release/kirc] VARIANT...
  VARIANT = NAME:OP:DEFINES[:FLAGS]
    OP      attention_fwd or gemm, or OP@FILE.kir to compile a modified source of that op
    DEFINES comma-separated NAME=VALUE (DTYPE defaults to bf16)
    FLAGS   extra `kirc compile` flags, space-separated (e.g. "--warp-specialize on --stages 3")
  e.g. ws_d128:attention_fwd:HEAD_DIM=128,BLOCK_M=128,BLOCK_N=128:--warps 8 --warp-specialize on
"""
import argparse, json, os, sys
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_artifacts import compile_case, interp_case  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--kirc", default="target/release/kirc")
    ap.add_argument("--target", default="sm_90a")
    ap.add_argument("--no-check", action="store_true")
    a = ap.parse_args()
    rng = np.random.default_rng(4321)
    f32 = np.float32
    cases = []
    for spec in a.variants:
        parts = spec.split(":", 3)
        if len(parts) < 3:
            sys.exit(f"bad variant {spec!r}: NAME:OP:DEFINES[:FLAGS]")
        name, op, dstr = parts[:3]
        op, _, src = op.partition("@")
        src = src or op
        flags = parts[3].split() if len(parts) == 4 else []
        defines = {"DTYPE": "bf16"}
        for kv in filter(None, dstr.split(",")):
            k, v = kv.split("=", 1)
            defines[k] = int(v) if v.lstrip("-").isdigit() else v
        for mode in ["time"] + ([] if a.no_check else ["check"]):
            cname = f"{mode}_{name}"
            compile_case(a.kirc, a.out, cname, src, defines, a.target, flags)
            case = {"name": cname, "op": op, "dir": cname, "mode": mode}
            if op == "attention_fwd":
                dh = int(defines.get("HEAD_DIM", 128))
                case.update(head_dim=dh, causal=int(defines.get("CAUSAL", 0)))
            if mode == "check":
                if op == "attention_fwd":
                    ins = {"q": rng.standard_normal((1, 4, 300, dh)).astype(f32) * 2,
                           "k": rng.standard_normal((1, 2, 257, dh)).astype(f32),
                           "v": rng.standard_normal((1, 2, 257, dh)).astype(f32)}
                    scalars = {"scale": float(f32(1 / np.sqrt(dh)))}
                    # The optional inputs of the features a variant turns on (docs/ops.md).
                    if defines.get("VARLEN"):
                        ins["total_lengths"] = np.array([200], dtype=np.int32)
                    if defines.get("KV_OFFSET"):
                        ins["past_lengths"] = np.array([40], dtype=np.int32)
                    if defines.get("MASK"):
                        ins["mask"] = rng.standard_normal((1, 300, 257)).astype(f32)
                    if defines.get("WINDOW"):
                        scalars["window"] = 50
                    if defines.get("SOFTCAP"):
                        scalars["softcap"] = 5.0
                else:
                    ins = {"a": rng.standard_normal((2, 300, 200)).astype(f32) * 3,
                           "b": rng.standard_normal((2, 200, 520)).astype(f32)}
                    if defines.get("EPILOGUE") == "bias":
                        ins["bias"] = rng.standard_normal(520).astype(f32)
                    scalars = {"alpha": 0.5}
                d = os.path.join(a.out, cname)
                files, expect = interp_case(a.kirc, d, src, defines, ins, scalars)
                case.update(defines=defines, inputs=files, scalars=scalars, expect=expect)
            cases.append(case)
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump({"target": a.target, "cases": cases}, f, indent=1)
    print(f"{len(cases)} cases in {a.out}")


if __name__ == "__main__":
    main()
