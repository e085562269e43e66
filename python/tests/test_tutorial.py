"""docs/tutorial.md from Python: its step 4 (`kir.run` against NumPy) run as written, and the
tutorial's kernel, docs/tutorial/softmax_xent.kir, through `kir.run` on random inputs.

Run with `python -m unittest discover -s python/tests` where the package is installed (as
test_kir.py). The oracle is written here from the definition of softmax cross-entropy (each row
summed with `math.fsum`, not with the tutorial's NumPy code nor the kernel's online form), on
inputs rounded to the kernel's dtype here; every case draws fresh random inputs: ragged shapes
around and far past the chunk size, rows shifted by up to ±100, scales above 1, ignored and
out-of-range labels, rows of −inf. The kernel computes in f32 and writes f32, so every dtype is
held to the project's f32 tolerance (tests/src/lib.rs, `tolerance`) on the rounded inputs.
`kirc/tests/tutorial.rs` runs the tutorial's shell steps.
"""

from __future__ import annotations

import ast
import contextlib
import io
import math
import os
import re
import unittest
from pathlib import Path

import numpy as np

import kir

REPO = Path(__file__).resolve().parents[2]
TUTORIAL = REPO / "docs" / "tutorial.md"
KERNEL = REPO / "docs" / "tutorial" / "softmax_xent.kir"
IGNORE = -100


def blocks(md: str):
    """The fenced blocks of a Markdown text: (info string, text, first line number). A fence may
    be indented (a block in a list item); its lines lose the fence's indentation."""
    out, cur = [], None
    for i, line in enumerate(md.splitlines(), 1):
        stripped = line.lstrip()
        if cur is None and stripped.startswith("```"):
            cur = (stripped[3:].strip(), [], i, len(line) - len(stripped))
        elif cur is not None and stripped == "```":
            out.append((cur[0], "\n".join(cur[1]) + "\n", cur[2]))
            cur = None
        elif cur is not None:
            cur[1].append(line[cur[3]:])
    assert cur is None, "docs/tutorial.md: a fenced block is never closed"
    return out


def round_to(a: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values rounded to `dtype` (nearest even), as float64."""
    a = np.asarray(a, dtype=np.float32)
    if dtype == "f16":
        return a.astype(np.float16).astype(np.float64)
    if dtype == "bf16":
        u = a.view(np.uint32).astype(np.uint64)
        finite = np.isfinite(a)
        r = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
        return np.where(finite, r, a).astype(np.float64)
    return a.astype(np.float64)


def oracle(x: np.ndarray, labels: np.ndarray):
    """(loss, lse) per row in float64, row by row: lse = m + ln Σ exp(x − m) with m the row's
    maximum (−inf for a row of −inf); loss = lse − x[label], 0 for IGNORE, NaN for any other
    label outside [0, V)."""
    r, v = x.shape
    loss, lse = np.zeros(r), np.zeros(r)
    for i in range(r):
        row = [float(a) for a in x[i]]
        m = max(row)
        s = -math.inf if m == -math.inf else m + math.log(math.fsum(math.exp(a - m) for a in row))
        lse[i] = s
        y = int(labels[i])
        if y == IGNORE:
            loss[i] = 0.0
        elif 0 <= y < v:
            loss[i] = s - row[y]  # Python floats: -inf - -inf is NaN, quietly
        else:
            loss[i] = math.nan
    return loss, lse


def check(test: unittest.TestCase, what: str, out: dict, ref_loss: np.ndarray, ref_lse: np.ndarray) -> None:
    """The kernel's outputs against the oracle's: the same NaNs, infinities and zeros, and
    each finite element within 2e-5 (the project's f32 tolerance) of its scale 1 + |ref|, as is
    the L2 norm of the errors against that of the scales. The floor 1 is f32's: a loss near 0
    is log s with s ≈ 1, known in f32 only to about 1e-7 absolutely. Relative to the loss, not
    lse: the kernel computes it as (m − x[label]) + log s, which does not cancel."""
    for name, ref in (("loss", ref_loss), ("lse", ref_lse)):
        got = out[name]
        test.assertEqual(got.dtype, np.float32, f"{what}: {name}")
        test.assertEqual(got.shape, ref.shape, f"{what}: {name}")
        got = got.astype(np.float64)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref), f"{what}: {name} NaNs")
        special = np.isinf(ref) | (ref == 0.0)
        np.testing.assert_array_equal(got[special], ref[special], f"{what}: {name} infinities and zeros")
        fin = np.isfinite(ref) & ~special
        if not fin.any():
            continue
        scale = 1.0 + np.abs(ref[fin])
        err = np.abs(got[fin] - ref[fin])
        worst = int(np.argmax(err / scale))
        test.assertTrue(
            np.all(err <= 2e-5 * scale),
            f"{what}: {name} error {err[worst]:.3e} over {2e-5 * scale[worst]:.3e} (got {got[fin][worst]}, expected {ref[fin][worst]})",
        )
        l2 = np.linalg.norm(err) / np.linalg.norm(scale)
        test.assertLessEqual(l2, 2e-5, f"{what}: {name} L2 error of the scales'")


class TutorialStep4(unittest.TestCase):
    """The Python block of step 4, executed as written from the repository root."""

    def test_the_python_block_runs_and_matches_the_oracle(self):
        bs = blocks(TUTORIAL.read_text())
        cpu = [(i, b) for i, b in enumerate(bs) if b[0] == "python" and "torch" not in b[1]]
        self.assertEqual(len(cpu), 1, "docs/tutorial.md has one Python block for the CPU")
        i, (_, code, line) = cpu[0]
        ns: dict = {"__name__": "__tutorial__"}
        printed = io.StringIO()
        cwd = os.getcwd()
        try:
            os.chdir(REPO)
            with contextlib.redirect_stdout(printed):
                exec(compile(code, f"docs/tutorial.md:{line}", "exec"), ns)
        finally:
            os.chdir(cwd)
        # The block checks itself (assert_allclose); check its result against this oracle too.
        logits, labels, out = ns["logits"], ns["labels"], ns["out"]
        self.assertEqual(logits.shape, (37, 50257))
        self.assertGreater(np.abs(logits).max(), 8.0)
        self.assertTrue(np.any(labels == IGNORE) and np.any(labels >= logits.shape[1]))
        loss, lse = oracle(round_to(logits.astype(np.float32), "f32"), labels)
        check(self, "step 4", out, loss, lse)
        # What it prints is what the page shows: the error line's form, then the rows.
        shown = bs[i + 1]
        self.assertEqual(shown[0], "", "the output block follows the Python block")
        want, got = shown[1].splitlines(), printed.getvalue().splitlines()
        self.assertEqual(len(want), len(got), printed.getvalue())
        self.assertRegex(want[0], r"^lse max error \d\.\de-0[5-7]$")
        self.assertRegex(got[0], r"^lse max error \d\.\de-0[5-7]$")
        self.assertEqual(want[1:], got[1:])

    def test_the_gpu_code_parses(self):
        """The GPU step cannot run here; its block and scripts/gpu_tutorial.py must at least be
        valid Python that calls kir.torch.launch on the tutorial's kernel."""
        gpu = [b for b in blocks(TUTORIAL.read_text()) if b[0] == "python" and "torch" in b[1]]
        self.assertEqual(len(gpu), 1)
        script = (REPO / "scripts" / "gpu_tutorial.py").read_text()
        for text in (gpu[0][1], script):
            ast.parse(text)
            self.assertIn("kir.torch.launch(", text)
            self.assertIn("docs/tutorial/softmax_xent.kir", text)


class TutorialKernel(unittest.TestCase):
    """docs/tutorial/softmax_xent.kir through kir.run and kir.compile."""

    def test_random_ragged_inputs_every_dtype(self):
        seed = int(os.environ.get("KIR_TEST_SEED") or np.random.SeedSequence().entropy % 2**63)
        rng = np.random.default_rng(seed)
        cases = [(1, 1, {}), (3, 7, {}), (5, 2047, {}), (4, 2048, {}), (6, 2049, {}), (5, 3001, {"BLOCK": 512}), (9, 700, {"BLOCK": 4096})]
        for dtype in ("f32", "f16", "bf16"):
            for r, v, consts in cases:
                shift = rng.uniform(-100, 100, size=(r, 1))
                scale = rng.uniform(1.5, 6.0, size=(r, 1))
                x = (shift + scale * rng.standard_normal((r, v))).astype(np.float32)
                labels = rng.integers(0, v, size=r).astype(np.int32)
                kinds = rng.integers(0, 6, size=r)
                labels[kinds == 0] = IGNORE
                labels[kinds == 1] = rng.choice([-1, -101, v, v + 5, np.iinfo(np.int32).max], size=int((kinds == 1).sum()))
                if r > 1 and v > 1:
                    lead = int(rng.integers(1, v))
                    x[0, :lead] = -np.inf            # masked classes, whole chunks of them
                    if 0 <= labels[0] < lead:
                        labels[0] = int(rng.integers(lead, v))
                    x[1, :] = -np.inf                # a row of -inf: lse -inf
                what = f"{dtype} R={r} V={v} {consts} (replay: KIR_TEST_SEED={seed})"
                out = kir.run(KERNEL, {"logits": x, "labels": labels}, DTYPE=dtype, **consts)
                loss, lse = oracle(round_to(x, dtype), labels)
                check(self, what, out, loss, lse)

    def test_constants_and_the_compile_the_tutorial_describes(self):
        c = kir.constants(KERNEL)
        self.assertEqual(list(c), ["DTYPE", "BLOCK", "IGNORE_INDEX"])
        self.assertEqual(c["DTYPE"]["values"], ["f32", "f16", "bf16"])
        self.assertEqual(c["BLOCK"]["tune"], [512, 1024, 2048, 4096, 8192])
        self.assertEqual(c["IGNORE_INDEX"]["default"], IGNORE)
        k = kir.compile(KERNEL, target="sm_90a", DTYPE="bf16", cache=False)
        meta = k.meta["kernels"][0]
        self.assertEqual(k.symbol, "softmax_xent_DTYPE_bf16_BLOCK_4096_IGNORE_INDEX_m100_WARPS_8")
        self.assertEqual(meta["block"], [256, 1, 1])
        self.assertEqual(meta["grid"], {"x": "R", "y": "1", "z": "1"})
        self.assertIn("warps: 8", k.report)
        with self.assertRaises(kir.CompileError) as e:
            kir.compile(KERNEL, target="sm_90a", BLOCK=0, cache=False)
        self.assertEqual((e.exception.line, e.exception.column), (17, 66))
        self.assertTrue(re.search(r"BLOCK` = 0 .*does not satisfy", str(e.exception)), str(e.exception))


if __name__ == "__main__":
    unittest.main()
