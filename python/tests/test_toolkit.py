"""Where kir looks for the ptxas that assembles a first launch's cubin (kir/_toolkit.py and
``kir.ptxas``): the CUDA toolkit's wheels (both layouts) and Triton's, found without importing
them, in that order; then, in a fresh interpreter each, the native library's order:
``KIR_PTXAS`` first, the ``PATH`` before the registered wheels, a registered one where the
environment has none. Needs no GPU."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
import unittest

import kir
from kir import _toolkit


def _exe(path: str, mode: int = 0o755) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n")
    os.chmod(path, mode)
    return path


class Candidates(unittest.TestCase):
    def test_wheels_in_order_and_only_executables(self):
        with tempfile.TemporaryDirectory() as d:
            nv12 = os.path.join(d, "a", "nvidia")
            nv13 = os.path.join(d, "b", "nvidia")
            tr = os.path.join(d, "c", "triton")
            p12 = _exe(os.path.join(nv12, "cuda_nvcc", "bin", "ptxas"))
            p13 = _exe(os.path.join(nv13, "cu13", "bin", "ptxas"))
            ptr = _exe(os.path.join(tr, "backends", "nvidia", "bin", "ptxas"))
            got = _toolkit.ptxas_candidates(nvidia=[nv12, nv13], triton=[tr])
            self.assertEqual(got, [p12, p13, ptr])
            # Not executable: passed over; a directory of that name too.
            os.chmod(p13, stat.S_IRUSR | stat.S_IWUSR)
            os.remove(ptr)
            os.makedirs(ptr)
            self.assertEqual(_toolkit.ptxas_candidates(nvidia=[nv12, nv13], triton=[tr]), [p12])
            self.assertEqual(_toolkit.ptxas_candidates(nvidia=[], triton=[]), [])

    def test_the_environments_packages_are_found_without_importing_them(self):
        before = set(sys.modules)
        got = _toolkit.ptxas_candidates()
        self.assertFalse({"triton"} & (set(sys.modules) - before))
        for p in got:
            self.assertTrue(os.access(p, os.X_OK), p)


def _ptxas_in_fresh_python(env: dict, register: list) -> str:
    code = (
        "import json, sys, kir\n"
        "kir._kir.add_ptxas_candidates(json.loads(sys.argv[1]))\n"
        "print(json.dumps(kir.ptxas()))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(register)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


class NativeOrder(unittest.TestCase):
    def test_kir_ptxas_then_path_then_registered(self):
        with tempfile.TemporaryDirectory() as d:
            on_path = _exe(os.path.join(d, "path", "ptxas"))
            wheel = _exe(os.path.join(d, "wheel", "ptxas"))
            base = {
                k: v
                for k, v in os.environ.items()
                if k
                not in (
                    "KIR_PTXAS",
                    "PATH",
                    "CUDA_HOME",
                    "CUDA_PATH",
                    "TRITON_PTXAS_PATH",
                    "VIRTUAL_ENV",
                    "CONDA_PREFIX",
                )
            }
            base["PYTHONPATH"] = os.pathsep.join(sys.path)
            self.assertEqual(
                _ptxas_in_fresh_python(dict(base, KIR_PTXAS="/nowhere/ptxas"), [wheel]),
                "/nowhere/ptxas",
            )
            self.assertEqual(
                _ptxas_in_fresh_python(dict(base, PATH=os.path.dirname(on_path)), [wheel]),
                on_path,
            )
            # Nothing on the environment's side: the registered wheel, unless this machine has
            # a toolkit in the default place, which comes first.
            got = _ptxas_in_fresh_python(dict(base, PATH=d), [wheel])
            default = "/usr/local/cuda/bin/ptxas"
            self.assertEqual(got, default if os.access(default, os.X_OK) else wheel)

    def test_this_process_reports_the_ptxas_it_would_run(self):
        want = os.environ.get("KIR_PTXAS")
        if want:
            self.assertEqual(kir.ptxas(), want)
        else:
            got = kir.ptxas()
            self.assertTrue(got is None or os.access(got, os.X_OK), got)


if __name__ == "__main__":
    unittest.main()
