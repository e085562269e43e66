"""`kir.Kernel.from_ptx` and `Kernel.lowered` (python/kir/_kernel.py, python/src/kernel.rs):
a compiled kernel's PTX, META.json and lowered module give back a kernel equal in every field
a launch uses; `kirc compile --lowered` writes the same module text; files that do not belong
together (a META.json of another specialization, a module that does not parse, PTX without a
kernel's `.entry`) are `kir.InputError`s naming the argument. Run against the installed
package; the comparison with kirc uses test_kir.py's `kirc` (skipped loudly without one).
"""

import json
import os
import tempfile
import unittest

import kir
from test_kir import kirc


def attention(head_dim: int, dtype: str = "bf16") -> "kir.Kernel":
    return kir.compile("attention_fwd", target="sm_90a", cache=False, DTYPE=dtype, HEAD_DIM=head_dim, CAUSAL=1)


class FromPtx(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.k64 = attention(64)
        # The same launch ABI as k64 (same rows and params), another symbol.
        cls.k64_f16 = attention(64, "f16")

    def test_round_trip(self):
        k = self.k64
        for meta in (k.meta, json.dumps(k.meta)):
            back = kir.Kernel.from_ptx(k.ptx, meta, k.lowered)
            self.assertEqual(back.emit, "ptx")
            self.assertEqual(back.target, "sm_90a")
            self.assertEqual(back.ptx, k.ptx)
            self.assertEqual(back.meta, k.meta)
            self.assertEqual(back.lowered, k.lowered)
            self.assertEqual(back.symbols, k.symbols)
            self.assertEqual(back.cache, "cache: off")
            self.assertEqual(back.report, "")
        # The lowered module is the scheduled one (it has the TMA ring the PTX uses), not the
        # front end's output that emit="ir" prints.
        ir = kir.compile("attention_fwd", target="sm_90a", emit="ir", cache=False, DTYPE="bf16", HEAD_DIM=64, CAUSAL=1)
        self.assertNotEqual(k.lowered, ir.ir)
        self.assertIn("module ", k.lowered)

    def test_a_program_of_several_kernels(self):
        k = kir.compile("attention_bwd", target="sm_90a", cache=False, DTYPE="bf16", HEAD_DIM=64, CAUSAL=0)
        self.assertGreater(len(k.symbols), 1)
        back = kir.Kernel.from_ptx(k.ptx, k.meta, k.lowered)
        self.assertEqual(back.symbols, k.symbols)
        self.assertEqual(back.meta["launches"], k.meta["launches"])
        # A META.json that lists only the first kernel leaves the program's others unlisted.
        short = dict(k.meta, kernels=k.meta["kernels"][:1])
        self.assertRefused("meta", k.ptx, short, k.lowered, "does not list")

    def test_cuda_c_metadata_round_trips_too(self):
        c = kir.compile("rmsnorm_fwd", target="sm_90a", emit="cuda", cache=False, DTYPE="bf16")
        # The CUDA C backend's kernels are `extern "C"`: NVRTC's PTX has `.entry SYMBOL(`.
        fake_ptx = "".join(f".visible .entry {s}(\n)\n{{\n}}\n" for s in c.symbols)
        back = kir.Kernel.from_ptx(fake_ptx, c.meta, c.lowered)
        self.assertEqual(back.meta, c.meta)
        self.assertEqual(back.symbols, c.symbols)

    def test_kirc_writes_the_same_module(self):
        with tempfile.TemporaryDirectory() as d:
            out, meta, low = (os.path.join(d, f) for f in ("k.ptx", "meta.json", "lowered.kir"))
            r = kirc("compile", "attention_fwd", "--target", "sm_90a", "-D", "DTYPE=bf16", "-D", "HEAD_DIM=64",
                     "-D", "CAUSAL=1", "-o", out, "--meta", meta, "--lowered", low)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(low) as f:
                self.assertEqual(f.read(), self.k64.lowered)
            with open(out) as f, open(meta) as g:
                back = kir.Kernel.from_ptx(f.read(), g.read(), self.k64.lowered)
            self.assertEqual(back.meta, self.k64.meta)
            r = kirc("compile", "attention_fwd", "--emit", "ir", "-o", out, "--lowered", low)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("--lowered needs --emit ptx or cuda", r.stderr)

    def assertRefused(self, argument: str, ptx: str, meta, lowered: str, words: str) -> None:
        with self.assertRaises(kir.InputError) as cm:
            kir.Kernel.from_ptx(ptx, meta, lowered)
        self.assertEqual(cm.exception.argument, argument, str(cm.exception))
        self.assertIn(words, str(cm.exception))

    def test_files_that_do_not_belong_together(self):
        a, b = self.k64, self.k64_f16
        rms = kir.compile("rmsnorm_fwd", target="sm_90a", cache=False, DTYPE="bf16")
        self.assertRefused("meta", a.ptx, rms.meta, a.lowered, "does not describe the lowered module")
        # Another specialization's META.json: its kernels' symbols (which spell the constants)
        # are not the PTX's.
        self.assertRefused("ptx", a.ptx, b.meta, a.lowered, ".entry attention_fwd_DTYPE_f16_HEAD_DIM_64")
        self.assertRefused("meta", a.ptx, "{not json", a.lowered, "not JSON")
        self.assertRefused("meta", a.ptx, dict(a.meta, target="sm_99"), a.lowered, "unknown target")
        meta = dict(a.meta)
        del meta["target"]
        self.assertRefused("meta", a.ptx, meta, a.lowered, "no `target`")
        self.assertRefused("lowered", a.ptx, a.meta, a.lowered.replace("kernel @", "kernel #", 1), "does not parse")
        self.assertRefused("ptx", a.ptx.replace(a.symbol, a.symbol + "_x"), a.meta, a.lowered, f".entry {a.symbol}")
        # A symbol that is only a prefix of the one defined is not the kernel's entry.
        self.assertRefused("ptx", b.ptx, dict(a.meta, kernels=[dict(a.meta["kernels"][0], symbol=a.symbol[:-3])]),
                           a.lowered, ".entry")


if __name__ == "__main__":
    unittest.main()
