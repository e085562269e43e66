"""kir: a kernel compiler for a tile-level IR, from Python.

Kernels written once in kir's tile IR (the built-in op library: attention, normalization, GEMM,
SwiGLU; or a ``.kir`` module of your own) are specialized with constants and compiled to PTX
for sm_80, sm_90a, sm_100a and sm_120a or to CUDA C (:func:`compile`), or run on the CPU
interpreter, which needs no GPU (:func:`run`). Both go through the same library code as the
``kirc`` command line, so they accept, refuse and produce the same things, and their errors
carry ``kirc``'s messages (:class:`KirError`).

Example::

    import numpy as np, kir
    k = kir.compile("attention_fwd", target="sm_90a", DTYPE="bf16", HEAD_DIM=128, CAUSAL=1)
    print(k.symbol, k.meta["kernels"][0]["grid"])
    x, w = np.random.randn(8, 1000), np.random.randn(1000)
    y = kir.run("rmsnorm_fwd", {"x": x, "w": w, "eps": 1e-6}, DTYPE="f32")["y"]

A module argument is a built-in op's name (:func:`ops`), a path to a ``.kir`` file, or the
text of a module (a string holding a newline; its errors name it ``<source>``).
"""

from __future__ import annotations

import operator
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

# Cubins shipped with the package (`kirc cache prebuild` into kir/prebuilt when the wheel is
# built; docs/cache.md): the kir cache's read-only prebuilt directory, unless the environment
# names another (or `off`).
_PREBUILT = os.path.join(os.path.dirname(__file__), "prebuilt")
if os.path.isdir(_PREBUILT) and not os.environ.get("KIR_CACHE_PREBUILT"):
    os.environ["KIR_CACHE_PREBUILT"] = _PREBUILT

from . import _convert, _kir, _toolkit

# The ptxas of the CUDA toolkit's wheel or Triton's, where no other is found, so that a first
# launch is assembled by ptxas rather than JIT-compiled by the driver (kir/_toolkit.py).
_kir.add_ptxas_candidates(_toolkit.ptxas_candidates())
from ._convert import ConstantValue, InputValue, SourceArg
from ._errors import CompileError, InputError, KirError, RunError
from ._kernel import Kernel

__all__ = [
    "ops",
    "summary",
    "constants",
    "compile",
    "run",
    "Kernel",
    "KirError",
    "CompileError",
    "RunError",
    "InputError",
    "TARGETS",
    "EMITS",
    "SourceArg",
    "ConstantValue",
    "InputValue",
    "ptxas",
]

__version__: str = _kir.KIR_VERSION

TARGETS = ("sm_80", "sm_90a", "sm_100a", "sm_120a")
"""The targets :func:`compile` takes."""

EMITS = ("ptx", "cuda", "ir")
"""What :func:`compile` can emit."""


def ptxas() -> Optional[str]:
    """The ptxas that assembles the kir cache's cubins for a first launch on a GPU (``KIR_PTXAS``,
    else the first found on the ``PATH``, in ``CUDA_HOME``, ``CUDA_PATH``, ``/usr/local/cuda``,
    ``TRITON_PTXAS_PATH``, the wheels of ``VIRTUAL_ENV`` or ``CONDA_PREFIX``, the CUDA toolkit's
    wheel or Triton's where this Python finds them), or None where none is found:
    the PTX then goes through the driver's JIT, one kernel after another, and no cubin is kept in
    the kir cache (docs/cache.md, "Cubins")."""
    return _kir.ptxas()


def ops() -> List[str]:
    """The names of the built-in ops, sorted (``kirc ops``)."""
    return list(_kir.ops())


def summary(op: SourceArg) -> str:
    """The one-line summary of a module: the first line of its header comment, or ``""``."""
    return _kir.summary(_convert.source(op))


def constants(op: SourceArg) -> Dict[str, Dict[str, Any]]:
    """The specialization constants of a module (``kirc ops NAME``), in declaration order.

    Each value is a dict with the keys:

    - ``kind``: ``"int"`` (booleans are 0/1 ints) or ``"enum"``;
    - ``values``: an enum's allowed names (a dtype constant's are dtype names such as
      ``"bf16"``), ``None`` for an int;
    - ``default``: the value it takes when not given (int or str), with the other constants
      at their defaults;
    - ``default_expr``: the default as written (it may depend on earlier constants);
    - ``where``: the condition every value must satisfy, as written (``None``: any value);
      an int's allowed values are those for which it holds;
    - ``tune``: the values ``kirc tune`` tries (``None``: not tunable);
    - ``doc``: the comment lines written above the declaration.

    Raises :class:`InputError` for an unknown op or unreadable path and :class:`CompileError`
    for a module that does not parse.
    """
    return _kir.constants(_convert.source(op))


def compile(  # noqa: A001 - kir.compile is the name the API promises
    source: SourceArg,
    target: str = "sm_90a",
    emit: str = "ptx",
    *,
    kernel: Optional[str] = None,
    cache: bool = True,
    shapes: Optional[Mapping[str, Sequence[int]]] = None,
    **constants: ConstantValue,
) -> Kernel:
    """Compiles a module for a target, as ``kirc compile`` does.

    Args:
        source: a built-in op's name, a path to a ``.kir`` file, or a module's text.
        target: ``"sm_80"``, ``"sm_90a"``, ``"sm_100a"`` or ``"sm_120a"``.
        emit: ``"ptx"``, ``"cuda"`` (the scalar CUDA-C parity backend) or ``"ir"`` (the
            specialized, optimized IR the backends consume).
        kernel: compile only this kernel of the module, as the entry.
        cache: use the on-disk cache of compilations (docs/cache.md) where the environment
            enables it (``KIR_CACHE_DIR``; ``KIR_CACHE_DIR=off`` disables it); a hit returns
            exactly what compiling returns.
        shapes: the extents the caller will pass for entry tensors, by param name (e.g.
            ``{"a": (1, 16, 4096), "b": (1, 4096, 14336)}``): the dims they bind are features
            the per-target configuration reads (a GEMM of at most 32 rows takes its swapped
            tiles), as ``kirc bench --shape`` and the Rust API's ``Kernel::shape``. The code
            still runs for every shape.
        **constants: the module's specialization constants (``kirc compile -D NAME=VALUE``):
            ints, bools (0/1), floats, names such as ``DTYPE="bf16"``, or NumPy dtypes. Those
            not given take their defaults, and the per-target configuration fills the tile
            constants (see :func:`constants`).

    Returns:
        A :class:`Kernel`: ``.ptx`` (or ``.cuda``, ``.ir``), ``.meta`` (META.json as a dict),
        ``.symbol``.

    Raises:
        CompileError: the module does not compile (located in the source when the error has a
            place there: ``.file``, ``.line``, ``.column``), e.g. a constant outside its
            ``where`` condition.
        InputError: an unknown op, target, emit or kernel, or a constant of a type kir cannot
            take (a ``ValueError``).

    The GIL is released while compiling.
    """
    src = _convert.source(source)
    if not isinstance(target, str):
        raise InputError(f"target: expected a str such as 'sm_90a', got {target!r}", argument="target")
    if not isinstance(emit, str):
        raise InputError(f"emit: expected 'ptx', 'cuda' or 'ir', got {emit!r}", argument="emit")
    if kernel is not None and not isinstance(kernel, str):
        raise InputError(f"kernel: expected a kernel's name, got {kernel!r}", argument="kernel")
    native = _kir.compile(
        src, target, emit, _convert.defines(constants), kernel, bool(cache), _shapes(shapes)
    )
    return Kernel(native)


def _shapes(shapes: Optional[Mapping[str, Sequence[int]]]) -> List[Tuple[str, List[int]]]:
    """``shapes`` as ``(param, extents)`` pairs, or an InputError naming what is wrong."""
    if shapes is None:
        return []
    if not isinstance(shapes, Mapping):
        raise InputError(f"shapes: expected a mapping of param name to extents, got {shapes!r}", argument="shapes")
    out = []
    for name, extents in shapes.items():
        if not isinstance(name, str):
            raise InputError(f"shapes: expected param names, got {name!r}", argument="shapes")
        try:
            dims = [operator.index(e) for e in extents]
        except TypeError:
            raise InputError(f"shapes['{name}']: expected a sequence of ints, got {extents!r}", argument="shapes") from None
        if any(d < 0 for d in dims):
            raise InputError(f"shapes['{name}']: extents must be ≥ 0, got {dims}", argument="shapes")
        out.append((name, dims))
    return out


def run(
    source: SourceArg,
    inputs: Mapping[str, InputValue],
    *,
    kernel: Optional[str] = None,
    **constants: ConstantValue,
) -> Dict[str, np.ndarray]:
    """Runs a module's entry on the CPU interpreter, with the contract of ``kirc run``.

    Args:
        source: a built-in op's name, a path to a ``.kir`` file, or a module's text.
        inputs: one value per ``in`` and ``inout`` param of the entry (the program, the single
            kernel, or ``kernel``): an array for a tensor param, a number for a scalar param
            (a Python int is exact, up to the full range of i64; a 0-d array counts as its
            value). Arrays may have any of the dtypes float64, float32, float16, int64,
            int32, int16, uint32, uint8, int8 and bool, or ml_dtypes' bfloat16, in any
            memory order. Their shapes bind the symbolic dims, and their values are rounded
            to the param's dtype, round to nearest even (a float32 array for a bf16 param is
            rounded to bf16; NumPy has no bf16). A finite value that would round to infinity
            in the param's dtype is an error.
        kernel: run only this kernel of the module, as the entry.
        **constants: the module's specialization constants, as for :func:`compile`.

    Returns:
        Every ``out`` and ``inout`` tensor of the entry by name, in the entry's param order,
        as ``kirc run`` writes it: float dtypes as float32 arrays holding exactly the kernel
        dtype's values (a bf16 output is float32 values that are all bf16 values), i32 and
        i64 as int32 and int64, u8 and i1 as uint8. An element no kernel wrote is NaN (the
        interpreter's poison) for a float dtype.

    Raises:
        InputError: an input kir cannot take (a ``ValueError`` naming it in ``.argument``):
            missing, unknown, an array for a scalar or a number for a tensor, a wrong rank,
            dims that disagree between inputs or with the param's declared size, a failed
            ``requires`` condition of a kernel, a non-numeric or unsupported dtype, a value
            out of the param dtype's range; or an unknown op or kernel.
        CompileError: the module does not parse, verify or specialize with these constants.
        RunError: the interpreter stopped while running (located at the op at fault).

    The GIL is released while running; program instances run in parallel on the CPU.
    """
    src = _convert.source(source)
    if kernel is not None and not isinstance(kernel, str):
        raise InputError(f"kernel: expected a kernel's name, got {kernel!r}", argument="kernel")
    args = _convert.inputs(inputs)
    pairs = _kir.run(src, args, _convert.defines(constants), kernel)
    return _convert.outputs(pairs)
