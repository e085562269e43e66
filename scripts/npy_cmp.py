#!/usr/bin/env python3
"""Compares a GPU run's outputs with a reference run's (each a folder of .npy files, as `kirc run
--out DIR` writes them): per output the relative L2 error over the reference's finite elements,
PASS when it is under 1e-2 and both have their non-finite elements in the same places.

usage: python3 scripts/npy_cmp.py NAME DIR DIR_REF OUTPUT...
"""
import sys

import numpy as np


def main(argv):
    name, a, r, *outs = argv
    for n in outs:
        x = np.load(f"{a}/{n}.npy").astype(np.float64)
        y = np.load(f"{r}/{n}.npy").astype(np.float64)
        fin = np.isfinite(y)
        diff = np.where(fin, x - y, 0)
        rel = np.linalg.norm(diff) / max(np.linalg.norm(np.where(fin, y, 0)), 1e-30)
        ok = rel < 1e-2 and bool(np.all(np.isfinite(x) == fin))
        print(f"{'PASS' if ok else 'FAIL'} {name} {n}: rel L2 {rel:.2e}")


if __name__ == "__main__":
    main(sys.argv[1:])
