#!/usr/bin/env python3
"""Loads PTX files through the CUDA driver's JIT (cuModuleLoadDataEx) and prints, per file, the
result and the JIT's error and info logs: what `CUDA_ERROR_INVALID_PTX` from kir's launcher does
not say. Needs a GPU and cuda-python.

usage: python3 scripts/gpu_jit_log.py FILE.ptx...
Exit status 1 when any file fails to load.
"""
import sys

from cuda.bindings import driver as cu


def main(paths):
    (err,) = cu.cuInit(0)
    assert err == cu.CUresult.CUDA_SUCCESS, err
    err, dev = cu.cuDeviceGet(0)
    err, ctx = cu.cuDevicePrimaryCtxRetain(dev)
    (err,) = cu.cuCtxSetCurrent(ctx)
    failed = 0
    for path in paths:
        src = open(path, "rb").read() + b"\0"
        n = 1 << 16
        elog, ilog = bytearray(n), bytearray(n)
        opts = [cu.CUjit_option.CU_JIT_ERROR_LOG_BUFFER,
                cu.CUjit_option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                cu.CUjit_option.CU_JIT_INFO_LOG_BUFFER,
                cu.CUjit_option.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES]
        res = cu.cuModuleLoadDataEx(src, len(opts), opts, [elog, n, ilog, n])
        ok = res[0] == cu.CUresult.CUDA_SUCCESS
        failed += not ok
        print(f"{path}: {res[0]}")
        for name, log in (("error log", elog), ("info log", ilog)):
            text = bytes(log).split(b"\0")[0].decode(errors="replace").strip()
            if text:
                print(f"  {name}:\n    " + "\n    ".join(text.splitlines()[:60]))
        if ok:
            cu.cuModuleUnload(res[1])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
