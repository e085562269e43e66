#!/usr/bin/env python3
"""Runs generated kir programs (the random-program generator, tests/src/rpg) on a GPU through both
backends and compares every output with the CPU interpreter's.

usage: python3 scripts/gpu_rpg.py ARTIFACTS_DIR [--backend ptx|cuda|both] [--sample]
                                  [--limit N] [--json OUT.json]
       compute-sanitizer --tool memcheck --error-exitcode 1 \
           python3 scripts/gpu_rpg.py ARTIFACTS_DIR --sample

ARTIFACTS_DIR comes from `cargo run --release -p kir-tests --bin rpg -- --gpu DIR --seeds A..B
--count N` (run where Rust and NVRTC are): per program the PTX for sm_90a and the CUDA C already
compiled to PTX by NVRTC (cu/), each with its META.json and lowered module, inputs, the
interpreter's outputs and a bound per output.
Launches go through scripts/gpu_check_ptx.py's Program: kir's own launcher (`kir.Kernel.from_ptx`,
`kir.torch.bind`; the driver JIT-compiles the PTX). Outputs are poisoned with the interpreter's
values before each launch (NaN, -0x5A5A5A5A, 0xA5, 1).

Each output has a class (tests/src/rpg/bounds.rs, gpu_bounds): `exact` must match bit for bit
(NaN = NaN, +0 = -0); `bounded` must match within its relative bound (plus 2^-126 absolute for
flushed subnormals; an infinity only where the finite side is at the overflow threshold); `loose`
(sums, dots, FMA contraction, log/tanh approximations, and outputs reached through a bitcast of a
possibly op-made NaN, whose sign and payload bits are unspecified: docs/ir.md, "NaNs") is reported
with its relative L2 error and is off (reported, never a failure) when its NaN/inf pattern differs
or the error exceeds twice the dtype's tolerance (zero for integers).
`mutant` cases run a deliberately changed kernel and must fail (the check can fail).
--sample runs only the programs marked for the sanitizer sample (every tenth).
Exit status 1 when any program fails.
"""
import argparse, json, math, os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
import torch
import gpu_check_ptx as g  # Program, TDT; imports kir

LOOSE_TOL = {"f32": 2e-5, "f16": 2e-3, "bf16": 1.2e-2}
MAX = {"f32": 3.4028234663852886e38, "bf16": 3.3895313892515355e38, "f16": 65504.0}


def compare(out, ref, bound, dtype):
    """(ok, loose_ok, note) for one output; out/ref are float64 numpy arrays."""
    if out.shape != ref.shape:
        return False, False, f"shape {out.shape} vs {ref.shape}"
    cls, rel = bound["class"], bound["rel"]
    both_nan = np.isnan(out) & np.isnan(ref)
    same = (out == ref) | both_nan
    if cls == "exact":
        bad = ~same
        return (not bad.any()), True, (f"{int(bad.sum())} differ, first at {int(np.argmax(bad))}: "
                                        f"{out.flat[np.argmax(bad)]!r} vs {ref.flat[np.argmax(bad)]!r}" if bad.any() else "")
    fin_o, fin_r = np.isfinite(out), np.isfinite(ref)
    if cls == "bounded":
        ok = same.copy()
        both = fin_o & fin_r
        ok |= both & (np.abs(out - ref) <= rel * np.maximum(np.abs(out), np.abs(ref)) + 2.0 ** -126)
        m = MAX.get(dtype, MAX["f32"])
        inf_o = np.isinf(out) & fin_r & (np.sign(out) == np.sign(ref)) & (np.abs(ref) * (1 + rel) >= m)
        inf_r = np.isinf(ref) & fin_o & (np.sign(out) == np.sign(ref)) & (np.abs(out) * (1 + rel) >= m)
        ok |= inf_o | inf_r
        bad = ~ok
        return (not bad.any()), True, (f"{int(bad.sum())} outside {rel:.2e}, first at {int(np.argmax(bad))}: "
                                        f"{out.flat[np.argmax(bad)]!r} vs {ref.flat[np.argmax(bad)]!r}" if bad.any() else "")
    # loose
    pattern = np.array_equal(np.isnan(out), np.isnan(ref)) and np.array_equal(np.isposinf(out), np.isposinf(ref)) \
        and np.array_equal(np.isneginf(out), np.isneginf(ref))
    both = fin_o & fin_r
    d = np.linalg.norm((out - ref)[both])
    n = np.linalg.norm(ref[both])
    err = float(d / n) if n > 0 else float(d)
    tol = 2 * LOOSE_TOL.get(dtype, 0.0)
    loose_ok = pattern and err <= tol
    return True, loose_ok, f"rel L2 {err:.2e} (tol {tol:.1e}){'' if pattern else ', NaN/inf pattern differs'}"


def run(root, c, kind):
    d = os.path.join(root, c["dir"], "cu" if kind == "cuda" else "")
    prog = g.Program(d, "ptx")
    meta = {p["name"]: p for p in prog.meta["entry_params"]}
    tensors = {}
    for name, f in c["inputs"].items():
        arr = np.load(os.path.join(root, c["dir"], f))
        tensors[name] = torch.from_numpy(np.ascontiguousarray(arr)).to(device="cuda", dtype=g.TDT[meta[name]["dtype"]])
    bufs = prog.prepare(tensors, c["scalars"])
    prog.launch(bufs)
    torch.cuda.synchronize()
    res = {"ok": True, "loose_ok": True, "outputs": {}}
    for name, f in c["expect"].items():
        ref = np.load(os.path.join(root, c["dir"], f)).astype(np.float64)
        out = bufs[name].cpu()
        out = (out.float() if out.dtype in (torch.bfloat16, torch.float16) else out).numpy().astype(np.float64)
        ok, lok, note = compare(out, ref, c["bounds"][name], meta[name]["dtype"])
        res["outputs"][name] = {"class": c["bounds"][name]["class"], "ok": ok, "loose_ok": lok, "note": note}
        res["ok"] &= ok
        res["loose_ok"] &= lok
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--backend", choices=["ptx", "cuda", "both"], default="both")
    ap.add_argument("--sample", action="store_true", help="only the programs marked for the sanitizer sample")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--json")
    a = ap.parse_args()
    man = json.load(open(os.path.join(a.root, "manifest.json")))
    cases = [c for c in man["cases"] if not a.sample or c.get("sanitizer_sample") or c.get("mutant")]
    if a.limit:
        cases = cases[:a.limit]
    kinds = ["ptx", "cuda"] if a.backend == "both" else [a.backend]
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}; {len(cases)} programs "
          f"(seeds {man['seeds'][0]}..{man['seeds'][1]}), backends {kinds}", flush=True)
    t0 = time.time()
    counts = {k: {"programs": 0, "failed": 0, "loose_off": 0, "exact": 0, "bounded": 0, "loose": 0} for k in kinds}
    failures, mutants, results = [], [], []
    for c in cases:
        for kind in kinds:
            try:
                r = run(a.root, c, kind)
            except Exception as e:  # a launch error is a failure of that program
                r = {"ok": False, "loose_ok": False, "outputs": {}, "error": f"{type(e).__name__}: {e}"}
            r.update(name=c["name"], backend=kind)
            results.append(r)
            if c.get("mutant"):
                mutants.append((c["name"], kind, not r["ok"]))
                continue
            k = counts[kind]
            k["programs"] += 1
            for o in r["outputs"].values():
                k[o["class"]] += 1
            if not r["ok"]:
                k["failed"] += 1
                failures.append(r)
                print(f"FAIL {kind:4} {c['name']} ({c.get('shape', '')}): " + (r.get("error") or "; ".join(
                    f"{n} [{o['class']}] {o['note']}" for n, o in r["outputs"].items() if not o["ok"])), flush=True)
            elif not r["loose_ok"]:
                k["loose_off"] += 1
                print(f"LOOSE {kind:4} {c['name']}: " + "; ".join(
                    f"{n} {o['note']}" for n, o in r["outputs"].items() if not o["loose_ok"]), flush=True)
    for name, kind, caught in mutants:
        print(f"{'PASS' if caught else 'FAIL'} mutant {name} {kind}: {'the changed kernel is caught' if caught else 'NOT caught'}")
    for kind, k in counts.items():
        print(f"{kind}: {k['programs']} programs, {k['failed']} failed; outputs exact {k['exact']}, bounded "
              f"{k['bounded']}, loose {k['loose']} ({k['loose_off']} programs with a loose output off)")
    print(f"{time.time() - t0:.0f}s")
    if a.json:
        json.dump({"counts": counts, "mutants": mutants, "results": results}, open(a.json, "w"), indent=1)
    bad = sum(k["failed"] for k in counts.values()) + sum(1 for m in mutants if not m[2])
    print(f"gpu_rpg: {'ALL OK' if bad == 0 else f'{bad} FAILED'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
