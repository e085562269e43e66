"""Tests of the Python package `kir` against independent NumPy float64 oracles and against
`kirc` itself.

Run with `python -m unittest discover -s python/tests` in an environment where the package is
installed (scripts/test.sh builds it into a fresh venv). The comparisons with `kirc` use the
binary `$KIRC` names (scripts/test.sh sets it), else the workspace's target/release/kirc; with
neither they are skipped, loudly, and `KIRC` set to a missing file fails them.

The oracles are written here from the ops' documented semantics (compiler/ops/*.kir headers),
not from kir's code, and every case draws its own random inputs: ragged shapes, magnitudes
above 1, Sq != Sk and grouped-query heads. Tolerances are the project's (tests/src/lib.rs,
`tolerance`): (relative L2 error, max error over max |reference|) per dtype.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import tempfile
import unittest
from pathlib import Path

import numpy as np

import kir

REPO = Path(__file__).resolve().parents[2]

TOLERANCE = {"f32": (2e-5, 2e-4), "f16": (2e-3, 1e-2), "bf16": (1.2e-2, 5e-2)}

AXPY = """// axpy: out = a·x + y, elementwise.
module axpy

const DTYPE: {f32, f16, bf16} = f32
const BLOCK: int = 128 where BLOCK >= 1 && BLOCK <= 1024

kernel @axpy(
  x: in tensor<DTYPE>[N],
  y: in tensor<DTYPE>[N],
  out: out tensor<DTYPE>[N],
  a: f32,
) grid [cdiv(N, BLOCK), 1, 1] {
  %pid = program_id 0 : i32
  %b = const BLOCK : i32
  %n0 = mul %pid, %b : i32
  %a = param a : f32
  %xt = load x[%n0] other 0.0 : tile<BLOCK x DTYPE>
  %yt = load y[%n0] other 0.0 : tile<BLOCK x DTYPE>
  %xf = cast %xt : tile<BLOCK x f32>
  %yf = cast %yt : tile<BLOCK x f32>
  %ax = mul %xf, %a : tile<BLOCK x f32>
  %s = add %ax, %yf : tile<BLOCK x f32>
  %o = cast %s : tile<BLOCK x DTYPE>
  store out[%n0], %o guard
}
"""


def round_bf16(a: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bf16 (ties to even), as float32."""
    u = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


def as_dtype(a: np.ndarray, dtype: str) -> np.ndarray:
    """Values of dtype `dtype`, held in float32 (what kir.run takes and gives for it)."""
    a = np.asarray(a, dtype=np.float32)
    if dtype == "bf16":
        return round_bf16(a)
    if dtype == "f16":
        return a.astype(np.float16).astype(np.float32)
    return a


def check_close(test: unittest.TestCase, name: str, out: np.ndarray, ref: np.ndarray, dtype: str) -> None:
    test.assertEqual(out.shape, ref.shape, name)
    test.assertTrue(np.all(np.isfinite(out)), f"{name}: non-finite output")
    l2_tol, max_tol = TOLERANCE[dtype]
    err = out.astype(np.float64) - ref
    l2 = np.linalg.norm(err) / np.linalg.norm(ref)
    mx = np.max(np.abs(err)) / np.max(np.abs(ref))
    test.assertLessEqual(l2, l2_tol, f"{name}: relative L2 error {l2:.3g} over {l2_tol} ({dtype})")
    test.assertLessEqual(mx, max_tol, f"{name}: max error {mx:.3g} of max |ref| over {max_tol} ({dtype})")


def rmsnorm_ref(x: np.ndarray, w: np.ndarray, eps: float):
    x = x.astype(np.float64)
    rstd = 1.0 / np.sqrt(np.mean(x * x, axis=1) + eps)
    return x * rstd[:, None] * w.astype(np.float64)[None, :], rstd


def attention_ref(q, k, v, scale: float, causal: bool):
    """o and lse of softmax(scale·q·kᵀ)·v per query head; query head h reads kv head
    h / (Hq / Hkv); causal is bottom-right aligned (query i sees keys j ≤ i + Sk − Sq); a row
    that sees no key has o = 0 and lse = −inf."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    b_, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    o = np.zeros((b_, hq, sq, d))
    lse = np.full((b_, hq, sq), -np.inf)
    visible = np.ones((sq, sk), dtype=bool)
    if causal:
        visible = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq
    rows = visible.any(axis=1)
    for b in range(b_):
        for h in range(hq):
            kv = h // (hq // hkv)
            s = scale * (q[b, h] @ k[b, kv].T)
            s = np.where(visible, s, -np.inf)[rows]
            m = s.max(axis=1, keepdims=True)
            p = np.exp(s - m)
            l = p.sum(axis=1)
            o[b, h][rows] = (p @ v[b, kv]) / l[:, None]
            lse[b, h][rows] = np.log(l) + m[:, 0]
    return o, lse


def kirc_path():
    """The kirc binary to compare with (see the module doc)."""
    given = os.environ.get("KIRC")
    path = Path(given) if given else REPO / "target" / "release" / "kirc"
    if path.is_file():
        return str(path)
    if given:
        raise AssertionError(f"KIRC={given} is not a file")
    msg = f"SKIPPED: no kirc at {path} (cargo build --release -p kirc, or set KIRC): the comparisons with kirc did not run"
    print(f"\n*** {msg} ***", flush=True)
    raise unittest.SkipTest(msg)


def kirc(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, KIR_CACHE_DIR="off")
    return subprocess.run([kirc_path(), *args], capture_output=True, text=True, env=env)


class OpsAndConstants(unittest.TestCase):
    def test_ops_lists_the_builtins(self):
        names = kir.ops()
        for op in ("attention_fwd", "attention_bwd", "gemm", "rmsnorm_fwd", "layernorm_fwd", "swiglu"):
            self.assertIn(op, names)
        self.assertEqual(names, sorted(names))
        self.assertTrue(kir.summary("rmsnorm_fwd").startswith("rmsnorm_fwd:"))

    def test_constants_have_kind_default_and_allowed_values(self):
        c = kir.constants("attention_fwd")
        self.assertEqual(list(c)[:3], ["DTYPE", "HEAD_DIM", "CAUSAL"])
        self.assertEqual(c["DTYPE"]["kind"], "enum")
        self.assertEqual(c["DTYPE"]["values"], ["f32", "f16", "bf16"])
        self.assertEqual(c["DTYPE"]["default"], "bf16")
        self.assertEqual(c["HEAD_DIM"]["kind"], "int")
        self.assertIsNone(c["HEAD_DIM"]["values"])
        self.assertEqual(c["HEAD_DIM"]["default"], 128)
        self.assertIn("HEAD_DIM % 8 == 0", c["HEAD_DIM"]["where"])
        self.assertEqual(c["BLOCK_N"]["tune"], [32, 64, 80, 128, 176])
        self.assertIsNone(c["CAUSAL"]["tune"])
        # A default that depends on other constants is evaluated at their defaults.
        g = kir.constants("gemm_nf4")
        self.assertIn("select", g["BLOCK_M"]["default_expr"])
        self.assertEqual(g["BLOCK_M"]["default"], 32)

    def test_constants_of_a_module_given_as_text(self):
        c = kir.constants(AXPY)
        self.assertEqual(c["BLOCK"]["default"], 128)
        self.assertEqual(c["BLOCK"]["where"], "BLOCK >= 1 && BLOCK <= 1024")


class Compile(unittest.TestCase):
    def compile_attention(self):
        return kir.compile("attention_fwd", target="sm_90a", DTYPE="bf16", HEAD_DIM=128, CAUSAL=1)

    def test_attention_meta(self):
        k = self.compile_attention()
        self.assertEqual((k.target, k.emit), ("sm_90a", "ptx"))
        meta = k.meta
        self.assertEqual(meta["name"], "attention_fwd")
        self.assertEqual(meta["target"], "sm_90a")
        self.assertEqual(len(meta["kernels"]), 1)
        kernel = meta["kernels"][0]
        self.assertEqual(k.symbol, kernel["symbol"])
        self.assertTrue(k.symbol.startswith("attention_fwd_DTYPE_bf16_HEAD_DIM_128_CAUSAL_1_"), k.symbol)
        self.assertIn(f".entry {k.symbol}(", k.ptx)
        self.assertIn(".target sm_90a", k.ptx)
        self.assertEqual(kernel["grid"]["y"], "B * Hq")
        self.assertTrue(kernel["grid"]["x"].startswith("cdiv(Sq, "), kernel["grid"])
        self.assertEqual(kernel["block"], meta["block"])
        self.assertEqual(kernel["block"][0] % 32, 0)
        self.assertTrue(0 < kernel["shared_bytes"] <= 232448, kernel["shared_bytes"])
        self.assertIn("Hq % Hkv == 0", kernel["requires"])
        params = {p["name"]: p for p in meta["entry_params"]}
        self.assertEqual(list(params), ["q", "k", "v", "o", "lse", "scale"])
        self.assertEqual(params["q"]["dims"], ["B", "Hq", "Sq", "128"])
        self.assertEqual(params["k"]["dims"], ["B", "Hkv", "Sk", "128"])
        self.assertEqual([params[n]["dtype"] for n in ("q", "k", "v", "o")], ["bf16"] * 4)
        self.assertEqual((params["o"]["access"], params["lse"]["dtype"]), ("out", "f32"))
        self.assertEqual((params["scale"]["kind"], params["scale"]["dtype"]), ("scalar", "f32"))
        self.assertLessEqual(tuple(int(x) for x in meta["ptx_version"].split(".")), (9, 0))

    def test_attention_matches_kirc_compile(self):
        k = self.compile_attention()
        with tempfile.TemporaryDirectory() as d:
            r = kirc("compile", "attention_fwd", "-D", "DTYPE=bf16", "-D", "HEAD_DIM=128", "-D", "CAUSAL=1",
                     "--target", "sm_90a", "-o", f"{d}/a.ptx", "--meta", f"{d}/a.json")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(k.meta, json.loads(Path(f"{d}/a.json").read_text()))
            self.assertEqual(k.ptx, Path(f"{d}/a.ptx").read_text())

    def test_cuda_and_ir(self):
        c = kir.compile("gemm", target="sm_80", emit="cuda", DTYPE="f16")
        self.assertIn(c.symbol, c.cuda)
        self.assertIn("__global__", c.cuda)
        self.assertEqual(c.meta["kernels"][0]["symbol"], c.symbol)
        with self.assertRaises(AttributeError):
            c.ptx
        ir = kir.compile("rmsnorm_fwd", emit="ir", DTYPE="f32", BLOCK=1024)
        self.assertIsNone(ir.meta)
        self.assertEqual(ir.symbols, [])
        self.assertIn("module rmsnorm_fwd", ir.ir)
        # Specialized: the constants are gone, the tiles have literal shapes.
        self.assertIn("tile<1x1024xf32>", ir.ir)
        self.assertNotIn("BLOCK", ir.ir.split("module rmsnorm_fwd", 1)[1])
        with self.assertRaises(AttributeError):
            ir.symbol

    def test_constants_of_every_python_type(self):
        k = kir.compile("attention_fwd", DTYPE=np.float16, HEAD_DIM=np.int64(64), CAUSAL=True)
        self.assertIn("_DTYPE_f16_HEAD_DIM_64_CAUSAL_1_", k.symbol)
        with self.assertRaises(kir.InputError) as e:
            kir.compile("attention_fwd", DTYPE=[1, 2])
        self.assertEqual(e.exception.argument, "DTYPE")
        self.assertIn("DTYPE", str(e.exception))

    def test_shapes_choose_the_configuration_by_shape(self):
        # A GEMM of 16 rows takes the swapped 16x128 tile on sm_90a, as `kirc compile --shape`;
        # without shapes, or with 8192 rows, the default 128x256 one.
        few = kir.compile("gemm", shapes={"a": (1, 16, 4096), "b": [1, 4096, 14336]}, cache=False)
        self.assertIn("_BLOCK_M_16_BLOCK_N_128_", few.symbol)
        with tempfile.TemporaryDirectory() as d:
            r = kirc("compile", "gemm", "--shape", "a=1x16x4096", "--shape", "b=1x4096x14336",
                     "--target", "sm_90a", "-o", f"{d}/g.ptx", "--no-cache")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(few.ptx, Path(f"{d}/g.ptx").read_text())
        for shapes in (None, {}, {"a": (1, 8192, 4096), "b": (1, 4096, 8192)}):
            k = kir.compile("gemm", shapes=shapes, cache=False)
            self.assertIn("_BLOCK_M_128_BLOCK_N_256_", k.symbol)
        for bad in ([("a", (1, 2, 3))], {"a": 16}, {"a": (1, -2, 3)}, {"a": ("x",)}, {3: (1,)}):
            with self.assertRaises(kir.InputError) as e:
                kir.compile("gemm", shapes=bad)
            self.assertEqual(e.exception.argument, "shapes")

    def test_plan_identity_separates_configurations_not_shapes(self):
        # kir.torch keys its loaded programs by this identity: equal exactly when the code is.
        ident = lambda op, defines, shapes: kir._kir.plan_identity(op, "sm_90a", defines, shapes)
        gemm = lambda m, n: ident("gemm", [], [("a", [1, m, 4096]), ("b", [1, 4096, n])])
        self.assertEqual(gemm(4096, 8192), gemm(8192, 8192))
        self.assertNotEqual(gemm(16, 8192), gemm(8192, 8192))
        self.assertNotEqual(gemm(16, 8192), gemm(64, 8192))
        self.assertNotEqual(gemm(8192, 8192), ident("gemm", [("DTYPE", "f16")], [("a", [1, 8192, 4096]), ("b", [1, 4096, 8192])]))
        # Each identity compiles to its own code: the 16-row one to the swapped tile.
        few = kir.compile("gemm", shapes={"a": (1, 16, 4096), "b": (1, 4096, 8192)}, cache=False)
        many = kir.compile("gemm", shapes={"a": (1, 4096, 4096), "b": (1, 4096, 8192)}, cache=False)
        self.assertNotEqual(few.ptx, many.ptx)
        bwd = lambda s: ident("attention_bwd", [("HEAD_DIM", "128")], [(n, [1, 16, s, 128]) for n in ("q", "k", "v", "o", "do")])
        self.assertEqual(bwd(8192), bwd(16384))
        self.assertNotEqual(bwd(1024), bwd(16384))
        with self.assertRaises(kir.InputError):
            ident("no_such_op", [], [])

    def test_a_module_given_as_text_compiles(self):
        k = kir.compile(AXPY, target="sm_80", BLOCK=256)
        self.assertTrue(k.symbol.startswith("axpy_DTYPE_f32_BLOCK_256"), k.symbol)
        self.assertIn("<source>", repr(k))


class Errors(unittest.TestCase):
    def test_a_constant_outside_its_where_is_a_located_compile_error(self):
        with self.assertRaises(kir.CompileError) as cm:
            kir.compile("attention_fwd", target="sm_90a", DTYPE="bf16", HEAD_DIM=100)
        e = cm.exception
        self.assertEqual(e.file, "attention_fwd.kir")
        self.assertIsInstance(e.line, int)
        self.assertIsInstance(e.column, int)
        text = str(e)
        first, source_line, caret = text.splitlines()[:3]
        self.assertEqual(first, f"attention_fwd.kir:{e.line}:{e.column}: error: {e.message}")
        self.assertIn("HEAD_DIM", e.message)
        self.assertIn("100", e.message)
        self.assertTrue(source_line.startswith(f"{e.line:>5} | const HEAD_DIM"), source_line)
        # The caret starts under column `column` of the source line.
        gutter = len(f"{e.line:>5} | ")
        self.assertEqual(caret.index("^"), gutter + e.column - 1, caret)
        self.assertEqual(source_line[gutter + e.column - 1:][:8], "HEAD_DIM")

    def test_the_message_is_kircs(self):
        with self.assertRaises(kir.CompileError) as cm:
            kir.compile("attention_fwd", HEAD_DIM=100)
        r = kirc("compile", "attention_fwd", "-D", "HEAD_DIM=100", "-o", "/dev/null")
        self.assertEqual(r.returncode, 2)
        self.assertEqual(str(cm.exception) + "\n", r.stderr)

    def test_an_unknown_constant_has_no_place(self):
        with self.assertRaises(kir.CompileError) as cm:
            kir.compile("rmsnorm_fwd", NO_SUCH=1)
        self.assertIsNone(cm.exception.line)
        self.assertIn("unknown constant `NO_SUCH`", str(cm.exception))

    def test_unknown_op_target_emit_and_kernel(self):
        cases = [
            (lambda: kir.compile("no_such_op"), "source", "no built-in op"),
            (lambda: kir.run("no_such_op", {}), "source", "attention_fwd"),
            (lambda: kir.constants("no_such_op"), "source", "no such file"),
            (lambda: kir.compile("gemm", target="sm_75"), "target", "sm_90a"),
            (lambda: kir.compile("gemm", emit="sass"), "emit", "ptx, cuda, ir"),
            (lambda: kir.compile("gemm", kernel="nope"), "kernel", "kernels: gemm"),
            (lambda: kir.compile(42), "source", "int"),
        ]
        for f, argument, text in cases:
            with self.assertRaises(ValueError) as cm:
                f()
            self.assertIsInstance(cm.exception, kir.InputError)
            self.assertEqual(cm.exception.argument, argument)
            self.assertIn(text, str(cm.exception))

    def test_errors_survive_pickling(self):
        with self.assertRaises(kir.CompileError) as cm:
            kir.compile("attention_fwd", HEAD_DIM=100)
        e = pickle.loads(pickle.dumps(cm.exception))
        self.assertEqual((type(e), str(e), e.line, e.column), (kir.CompileError, str(cm.exception), cm.exception.line, cm.exception.column))

    def test_a_runtime_fault_is_a_located_run_error(self):
        oob = AXPY.replace("%xt = load x[%n0] other 0.0", "%xt = load x[%n0]")
        x = np.ones(300, dtype=np.float32)
        with self.assertRaises(kir.RunError) as cm:
            kir.run(oob, {"x": x, "y": x, "a": 2.0})
        e = cm.exception
        self.assertNotIsInstance(e, ValueError)
        self.assertEqual(e.file, "<source>")
        self.assertEqual(e.line, 17)
        self.assertIn("out of bounds", e.message)


class RunInputs(unittest.TestCase):
    """Inputs kir cannot take are InputErrors (ValueErrors) naming the argument."""

    def setUp(self):
        rng = np.random.default_rng(7)
        self.x = rng.standard_normal((5, 300)).astype(np.float32)
        self.w = rng.standard_normal(300).astype(np.float32)

    def assert_input_error(self, inputs, argument, text):
        with self.assertRaises(ValueError) as cm:
            kir.run("rmsnorm_fwd", inputs, DTYPE="f32")
        e = cm.exception
        self.assertIsInstance(e, kir.InputError)
        self.assertEqual(e.argument, argument, str(e))
        self.assertIn(text, str(e))
        return e

    def test_bad_inputs(self):
        x, w = self.x, self.w
        e = self.assert_input_error({"x": x, "eps": 1e-5}, "w", "missing argument `w`")
        self.assertEqual((e.file, e.line), ("rmsnorm_fwd.kir", 22))
        self.assert_input_error({"x": x[0], "w": w, "eps": 1e-5}, "x", "has rank 2")
        self.assert_input_error({"x": x, "w": w[:7], "eps": 1e-5}, "w", "dim `N` is 300 from `x` but 7 from `w`")
        self.assert_input_error({"x": "abc", "w": w, "eps": 1e-5}, "x", "expected an array or a number")
        self.assert_input_error({"x": np.array([["a", "b"]]), "w": w, "eps": 1e-5}, "x", "non-numeric dtype")
        self.assert_input_error({"x": x.astype(np.complex64), "w": w, "eps": 1e-5}, "x", "complex")
        self.assert_input_error({"x": x, "w": w, "eps": x}, "eps", "is a scalar param but was given a tensor")
        self.assert_input_error({"x": x, "w": 2.0, "eps": 1e-5}, "w", "is a tensor param but was given a scalar")
        self.assert_input_error({"x": x, "w": w, "eps": 1e-5, "y": x}, "y", "`out` param")
        self.assert_input_error({"x": x, "w": w, "eps": 1e-5, "zz": 1}, "zz", "the entry params are: x, w, y, rstd, eps")
        self.assert_input_error({"x": x.astype(np.float64) * 1e39, "w": w, "eps": 1e-5}, "x", "out of range for f32")
        self.assert_input_error({"x": x, "w": w, "eps": 2**64}, "eps", "out of the range of i64")
        with self.assertRaises(kir.InputError) as cm:
            kir.run("rmsnorm_fwd", [("x", x)])
        self.assertEqual(cm.exception.argument, "inputs")

    def test_a_failed_requirement_is_an_input_error(self):
        q = np.zeros((1, 3, 4, 64), dtype=np.float32)
        kv = np.zeros((1, 2, 4, 64), dtype=np.float32)
        with self.assertRaises(kir.InputError) as cm:
            kir.run("attention_fwd", {"q": q, "k": kv, "v": kv, "scale": 0.125}, DTYPE="f32", HEAD_DIM=64)
        self.assertIn("Hq % Hkv == 0", str(cm.exception))

    def test_layouts_dtypes_and_scalars_are_taken_as_kirc_takes_them(self):
        rng = np.random.default_rng(11)
        x = rng.standard_normal((1000, 3))  # float64, and transposed below: not C order
        y = rng.standard_normal(1000).astype(np.float16)
        out = kir.run(AXPY, {"x": x[:, 1], "y": y.astype(">f2"), "a": np.float32(-1.5)})
        ref = -1.5 * x[:, 1].astype(np.float32).astype(np.float64) + y.astype(np.float64)
        np.testing.assert_allclose(out["out"], ref, rtol=1e-6, atol=1e-6)
        # A 0-d array is a scalar; an int is exact.
        out2 = kir.run(AXPY, {"x": x[:, 1], "y": y, "a": np.array(-1.5)})
        np.testing.assert_array_equal(out["out"], out2["out"])
        ints = kir.run(AXPY, {"x": np.arange(200, dtype=np.int32), "y": np.zeros(200, dtype=np.uint8), "a": 3})
        np.testing.assert_array_equal(ints["out"], 3.0 * np.arange(200))


class RunAgainstNumpy(unittest.TestCase):
    def test_rmsnorm_fwd(self):
        rng = np.random.default_rng(2024)
        cases = [("f32", 7, 1000), ("bf16", 13, 1000), ("f16", 3, 1000), ("bf16", 5, 5000), ("f32", 2, 4097)]
        for dtype, rows, cols in cases:
            with self.subTest(dtype=dtype, rows=rows, cols=cols):
                x = as_dtype(rng.standard_normal((rows, cols)) * 4.0 + 1.5, dtype)
                w = as_dtype(rng.uniform(0.5, 3.0, cols), dtype)
                eps = 1e-5
                out = kir.run("rmsnorm_fwd", {"x": x, "w": w, "eps": eps}, DTYPE=dtype)
                self.assertEqual(list(out), ["y", "rstd"])
                self.assertEqual((out["y"].dtype, out["rstd"].dtype), (np.float32, np.float32))
                y_ref, rstd_ref = rmsnorm_ref(x, w, eps)
                check_close(self, "y", out["y"], y_ref, dtype)
                check_close(self, "rstd", out["rstd"], rstd_ref, "f32")
                # The contract: float32 arrays holding exactly the kernel dtype's values.
                np.testing.assert_array_equal(out["y"], as_dtype(out["y"], dtype))

    def test_attention_fwd(self):
        rng = np.random.default_rng(99)
        cases = [
            # dtype, head dim, causal, B, Hq, Hkv, Sq, Sk
            ("bf16", 128, 1, 1, 4, 2, 70, 131),
            ("bf16", 64, 0, 2, 4, 1, 37, 53),
            ("f32", 64, 1, 2, 2, 2, 45, 30),  # Sq > Sk: the first rows see no key
            ("f16", 32, 1, 1, 6, 3, 64, 64),
        ]
        for dtype, d, causal, b, hq, hkv, sq, sk in cases:
            with self.subTest(dtype=dtype, d=d, causal=causal, shape=(b, hq, hkv, sq, sk)):
                q = as_dtype(rng.standard_normal((b, hq, sq, d)) * 2.0, dtype)
                k = as_dtype(rng.standard_normal((b, hkv, sk, d)) * 2.0, dtype)
                v = as_dtype(rng.standard_normal((b, hkv, sk, d)) * 3.0 + 0.5, dtype)
                scale = 1.0 / np.sqrt(d)
                out = kir.run(
                    "attention_fwd", {"q": q, "k": k, "v": v, "scale": scale}, DTYPE=dtype, HEAD_DIM=d, CAUSAL=causal
                )
                o_ref, lse_ref = attention_ref(q, k, v, scale, bool(causal))
                check_close(self, "o", out["o"], o_ref, dtype)
                lse = out["lse"]
                np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(lse_ref))
                seen = np.isfinite(lse_ref)
                check_close(self, "lse", lse[seen], lse_ref[seen], "f32")

    def test_outputs_are_kirc_runs_byte_for_byte(self):
        rng = np.random.default_rng(5)
        q = rng.standard_normal((1, 2, 33, 64)).astype(np.float32) * 2
        k = rng.standard_normal((1, 1, 47, 64)).astype(np.float32) * 2
        v = rng.standard_normal((1, 1, 47, 64)).astype(np.float32) * 2
        out = kir.run("attention_fwd", {"q": q, "k": k, "v": v, "scale": 0.125}, DTYPE="bf16", HEAD_DIM=64, CAUSAL=1)
        with tempfile.TemporaryDirectory() as d:
            for name, a in (("q", q), ("k", k), ("v", v)):
                np.save(f"{d}/{name}.npy", a)
            r = kirc("run", "attention_fwd", "-D", "DTYPE=bf16", "-D", "HEAD_DIM=64", "-D", "CAUSAL=1",
                     "--arg", f"q={d}/q.npy", "--arg", f"k={d}/k.npy", "--arg", f"v={d}/v.npy",
                     "--arg", "scale=0.125", "--out", f"{d}/out")
            self.assertEqual(r.returncode, 0, r.stderr)
            for name in ("o", "lse"):
                theirs = np.load(f"{d}/out/{name}.npy")
                self.assertEqual(out[name].dtype, theirs.dtype)
                np.testing.assert_array_equal(out[name], theirs)


if __name__ == "__main__":
    unittest.main()
