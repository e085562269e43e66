"""How Python values become what the native module takes: sources, constants (``-D NAME=VALUE``
strings) and the inputs of :func:`kir.run` (``.npy`` bytes or exact numbers), and how its
outputs become NumPy arrays. Everything kir cannot take is an :class:`kir.InputError` (a
``ValueError``) naming the argument."""

from __future__ import annotations

import io
import os
from typing import Any, Dict, List, Mapping, Tuple, Union

import numpy as np

from ._errors import InputError

SourceArg = Union[str, "os.PathLike[str]"]
"""A module: a built-in op's name (``"attention_fwd"``), a path to a ``.kir`` file, or the text
of a module (any string holding a newline)."""

ConstantValue = Union[int, float, bool, str, np.dtype, type]
"""A constant's value: an int, a bool (0/1), a float, a name (an enum member or a dtype name
such as ``"bf16"``), or a NumPy dtype (float32, float16, ml_dtypes' bfloat16, int32, int64,
uint8)."""

InputValue = Union[np.ndarray, float, int]
"""An input of :func:`kir.run`: an array for a tensor param, a number for a scalar param."""

# The element types the `.npy` reader of `kirc run` takes, by NumPy's dtype code (without
# the byte-order mark).
_NPY_CODES = ("f8", "f4", "f2", "i8", "i4", "i2", "u4", "u1", "i1", "b1")
_ACCEPTED = (
    "float64, float32, float16, bfloat16 (ml_dtypes; taken as its float32 values), int64, "
    "int32, int16, uint32, uint8, int8 and bool"
)

# NumPy dtypes given as constants, by dtype name.
_DTYPE_NAMES = {
    "float32": "f32",
    "float16": "f16",
    "bfloat16": "bf16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
}


def source(value: Any) -> str:
    """The string the native module takes for a module argument."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, bytes):
        raise InputError(
            "source: expected an op name, a path or the module's text as str, got bytes",
            argument="source",
        )
    if not isinstance(value, str):
        raise InputError(
            f"source: expected an op name, a path or the module's text, got {type(value).__name__}",
            argument="source",
        )
    if not value.strip():
        raise InputError("source: empty (expected an op name, a path or a module's text)", argument="source")
    return value


def defines(constants: Mapping[str, Any]) -> List[Tuple[str, str]]:
    """The ``-D NAME=VALUE`` pairs of keyword constants."""
    out = []
    for name, value in constants.items():
        out.append((name, _constant(name, value)))
    return out


def _constant(name: str, value: Any) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "1" if value else "0"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    if isinstance(value, str):
        if not value.strip() or any(c.isspace() for c in value.strip()):
            raise InputError(
                f"constant {name}={value!r}: expected a single word (an enum member or dtype name)",
                argument=name,
            )
        return value.strip()
    if isinstance(value, (np.dtype, type)):
        try:
            dtype_name = np.dtype(value).name
        except TypeError:
            dtype_name = None
        if dtype_name in _DTYPE_NAMES:
            return _DTYPE_NAMES[dtype_name]
        raise InputError(
            f"constant {name}={value!r}: no kir dtype for it (kir dtypes: f32, f16, bf16, i32, i64, u8)",
            argument=name,
        )
    raise InputError(
        f"constant {name}={value!r}: expected an int, a bool, a float, a name (str) or a NumPy "
        f"dtype, got {type(value).__name__}",
        argument=name,
    )


def inputs(values: Mapping[str, Any]) -> List[Tuple[str, str, Any]]:
    """``(name, kind, value)`` for each input: kind ``npy`` with the bytes of a C-order
    ``.npy`` file, ``int`` with an int, ``float`` with a float."""
    if not isinstance(values, Mapping):
        raise InputError(
            f"inputs: expected a dict from param names to arrays and numbers, got {type(values).__name__}",
            argument="inputs",
        )
    out = []
    for name, value in values.items():
        if not isinstance(name, str):
            raise InputError(f"inputs: keys are param names (str), got {name!r}", argument="inputs")
        out.append((name,) + _input(name, value))
    return out


def _input(name: str, value: Any) -> Tuple[str, Any]:
    where = f"inputs[{name!r}]"
    if isinstance(value, (bool, np.bool_)):
        return ("int", int(value))
    if isinstance(value, (int, np.integer)):
        return ("int", int(value))
    if isinstance(value, (float, np.floating)):
        return ("float", float(value))
    if value is None or isinstance(value, (str, bytes, complex, np.complexfloating)):
        raise InputError(
            f"{where}: expected an array or a number, got {type(value).__name__} {value!r:.60}",
            argument=name,
        )
    try:
        a = np.asarray(value)
    except Exception as e:  # noqa: BLE001 - whatever NumPy refuses, say which input it was
        raise InputError(f"{where}: not an array ({e})", argument=name) from None
    if a.dtype.name == "bfloat16":
        # ml_dtypes' bfloat16: every value is exact in float32.
        a = a.astype(np.float32)
    code = a.dtype.str[1:]
    if a.dtype.kind not in "fiub" or code not in _NPY_CODES:
        what = "non-numeric" if a.dtype.kind in "OUSVMm" else "unsupported"
        raise InputError(
            f"{where}: {what} dtype {a.dtype} (kir takes {_ACCEPTED})",
            argument=name,
        )
    # Little-endian and C order, as the `.npy` files of `kirc run`; values are unchanged.
    a = np.asarray(a.astype(a.dtype.newbyteorder("<"), copy=False), order="C")
    buf = io.BytesIO()
    np.lib.format.write_array(buf, a, allow_pickle=False)
    return ("npy", buf.getvalue())


def outputs(pairs: List[Tuple[str, bytes]]) -> Dict[str, np.ndarray]:
    """The arrays of the native module's ``(name, npy bytes)`` outputs."""
    return {name: np.load(io.BytesIO(data), allow_pickle=False) for name, data in pairs}
