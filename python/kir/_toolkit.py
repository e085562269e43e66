"""Where a ptxas may be in this Python environment, for the kir cache's cubins.

A program's first launch on a GPU is assembled by ptxas when one is found, and JIT-compiled by
the driver otherwise (docs/cache.md, "Cubins"): ptxas assembles a program's kernels on threads
of their own, and the kir cache keeps its cubin for every later process. kir's native
library looks where a CUDA toolkit puts ptxas (``KIR_PTXAS``, the ``PATH``, ``CUDA_HOME``,
``CUDA_PATH``, ``/usr/local/cuda``, ``TRITON_PTXAS_PATH``); many PyTorch environments have one
only inside a wheel: the CUDA toolkit's PyPI wheel (``nvidia-cuda-nvcc``, under
``site-packages/nvidia``) or Triton's, which ships its own. :func:`ptxas_candidates` lists
those, found without importing either package, and ``kir`` registers them at import.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Iterable, List, Optional

# Under a location of the ``nvidia`` namespace package: the CUDA 12 wheels' layout
# (``nvidia/cuda_nvcc``) and the CUDA 13 wheels' (``nvidia/cu13``).
_NVIDIA_DIRS = (("cuda_nvcc", "bin", "ptxas"), ("cu13", "bin", "ptxas"))

# Under the ``triton`` package: the ptxas its NVIDIA backend runs.
_TRITON_DIR = ("backends", "nvidia", "bin", "ptxas")


def _locations(name: str) -> List[str]:
    """The directories of the top-level package ``name`` (several for a namespace package),
    found without importing it; none where it is not installed."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    return [str(p) for p in (spec.submodule_search_locations or [])]


def ptxas_candidates(
    nvidia: Optional[Iterable[str]] = None, triton: Optional[Iterable[str]] = None
) -> List[str]:
    """The ptxas executables of the CUDA toolkit's wheel, then Triton's, that exist here, in
    that order (a wheel of the toolkit is the newer one where both are installed).

    ``nvidia`` and ``triton`` give the packages' directories (by default, where this Python
    finds them)."""
    nv = _locations("nvidia") if nvidia is None else list(nvidia)
    tr = _locations("triton") if triton is None else list(triton)
    found = []
    for roots, tails in ((nv, _NVIDIA_DIRS), (tr, (_TRITON_DIR,))):
        for root in roots:
            for tail in tails:
                p = os.path.join(root, *tail)
                if os.path.isfile(p) and os.access(p, os.X_OK) and p not in found:
                    found.append(p)
    return found
