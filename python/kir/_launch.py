"""The launcher under :mod:`kir.torch`: a module compiled for the tensors' GPU and the
configuration its input shapes select (once per process per module, resolved configuration and
device: a 16-row GEMM gets the few-rows tile, and every M that takes the general row shares one
program), loaded by the driver, and launched on PyTorch's current stream with the tensors' own
device memory. The binding (shapes, dtypes, strides,
``requires``, grids, TMA tensor maps) is the runtime's, in Rust (``kir._kir.Loaded``); this file
only allocates the outputs and temps it lists, with PyTorch's allocator, and passes addresses.

The first call with given input shapes, strides, dtypes and scalars binds with every check and
keeps the binding as a :class:`_Plan` (``kir._kir.Prepared``: evaluated grids, tensor-map
templates, the buffers to allocate). A later call with the same key allocates the outputs and
passes the native side one list of addresses; the runtime rewrites only the arguments whose
address changed (docs/python.md, "How a call runs").

Nothing here copies a tensor or synchronizes the device. Temps are allocated on the current
stream and released when the call returns: PyTorch's caching allocator reuses their memory
only for work queued after the launches on the same stream.
"""

from __future__ import annotations

import math
import threading
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import Tensor

from . import _kir
from ._errors import InputError
from ._kernel import Kernel

# kir's element types by torch dtype, and back.
DTYPES: Dict[torch.dtype, str] = {
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.uint8: "u8",
    torch.bool: "i1",
}
TORCH_DTYPES: Dict[str, torch.dtype] = {v: k for k, v in DTYPES.items()}

# Compiled and loaded modules by (source, plan identity, device index): each compiles and loads
# once per process. The identity (`CompilePlan::identity`) holds the constants and the
# configuration the call's shapes resolved to, so calls whose shapes take the same configuration
# share a program.
_programs: Dict[Tuple[str, str, int], "_Program"] = {}
# The program of each (source, constants, device index, input shapes) seen, so a call with
# known shapes resolves nothing.
_by_call: Dict[Tuple[Any, ...], "_Program"] = {}
_lock = threading.Lock()

# Prepared bindings kept per program; past this many the program's plans are dropped and made
# again as calls come (a workload of ever new shapes stays bounded).
MAX_PLANS = 4096


class _Plan:
    """One binding of a program, prepared for calls with the same key: the native prepared
    binding, and the out tensors and temps to allocate for each call (``(shape, strides,
    dtype, contiguous)``, outs first)."""

    __slots__ = ("prepared", "alloc", "n_out", "out_names", "device", "index")

    def __init__(self, prepared: Any, alloc: tuple, out_names: Tuple[str, ...], device: torch.device) -> None:
        self.prepared = prepared
        self.alloc = alloc
        self.n_out = len(out_names)
        self.out_names = out_names
        self.device = device
        self.index = device.index

    def __call__(self, tensors: Sequence[Tensor]) -> Tuple[Tensor, ...]:
        """Allocates the outs and temps, launches on the current stream; returns the outs."""
        dev = self.device
        bufs = [
            torch.empty(shape, dtype=dt, device=dev) if contiguous else torch.empty_strided(shape, strides, dtype=dt, device=dev)
            for shape, strides, dt, contiguous in self.alloc
        ]
        ptrs = [t.data_ptr() for t in tensors]
        ptrs.extend([b.data_ptr() for b in bufs])
        self.prepared.launch(ptrs, _raw_stream(self.index) if _raw_stream is not None else torch.cuda.current_stream(dev).cuda_stream)
        return tuple(bufs[: self.n_out])

    def unbatched(self) -> "_Plan":
        """This binding for calls that pass 2-D views of the 3-D tensors it was bound with (their
        leading dim of 1 dropped: the same addresses, dtypes and strides), with each out of
        shape ``[1, ...]`` allocated without its leading dim (the same memory layout). A 2-D
        call then needs no view of its inputs or of the result."""
        alloc = tuple(
            (shape[1:], strides[1:], dt, contiguous) if i < self.n_out and len(shape) == 3 and shape[0] == 1 else (shape, strides, dt, contiguous)
            for i, (shape, strides, dt, contiguous) in enumerate(self.alloc)
        )
        return _Plan(self.prepared, alloc, self.out_names, self.device)


class _Program:
    """A module loaded on one GPU and its prepared bindings by key."""

    __slots__ = ("loaded", "plans", "kernel")

    def __init__(self, kernel: Kernel, loaded: Any) -> None:
        self.kernel = kernel
        self.loaded = loaded
        self.plans: Dict[Tuple[Any, ...], _Plan] = {}

    def plan(
        self, key: Tuple[Any, ...], names: Sequence[str], tensors: Sequence[Tensor], scalars: Sequence[Tuple[str, Any]], device: torch.device
    ) -> _Plan:
        """The plan for ``key``: made on the first call with it, binding ``tensors`` (named
        ``names``) and ``scalars`` with every check of the runtime."""
        p = self.plans.get(key)
        if p is not None:
            return p
        args = [_arg(n, t) for n, t in zip(names, tensors)]
        sc = list(scalars)
        specs = self.loaded.buffer_specs(args, sc)
        alloc, outs, temps = [], [], []
        for name, dt, shape, strides, role in specs:
            t = torch.empty_strided(shape, strides, dtype=TORCH_DTYPES[dt], device=device)
            (outs if role == "out" else temps).append((name, t))
            alloc.append((role, (tuple(shape), tuple(strides), TORCH_DTYPES[dt], t.is_contiguous())))
        ordered = outs + temps
        prepared = self.loaded.prepare(args + [_arg(n, t) for n, t in ordered], sc)
        alloc.sort(key=lambda a: a[0] != "out")
        p = _Plan(prepared, tuple(a for _, a in alloc), tuple(n for n, _ in outs), device)
        if len(self.plans) >= MAX_PLANS:
            self.plans.clear()
        self.plans[key] = p
        return p


def _target(index: int) -> str:
    major, minor = torch.cuda.get_device_capability(index)
    target = _kir.target_for(major, minor)
    if target is None:
        raise InputError(
            f"cuda:{index} has compute capability {major}.{minor}; kir targets sm_80 and later",
            argument="device",
        )
    return target


def program(
    source: str, constants: Tuple[Tuple[str, str], ...], index: int, shapes: Tuple[Tuple[str, Tuple[int, ...]], ...] = ()
) -> _Program:
    """The module ``source`` specialized with ``constants`` (sorted ``(NAME, value)`` strings)
    and configured for entry tensors of ``shapes`` (``(param, extents)``: the configurations by
    shape, docs/configs.md), compiled for and loaded on device ``index``: compiled once per
    process per resolved configuration."""
    call = (source, constants, index, shapes)
    p = _by_call.get(call)
    if p is not None:
        return p
    with _lock:
        p = _by_call.get(call)
        if p is None:
            target = _target(index)
            shape_list = [(n, list(e)) for n, e in shapes]
            key = (source, _kir.plan_identity(source, target, list(constants), shape_list), index)
            p = _programs.get(key)
            if p is None:
                from . import compile as kir_compile

                kernel = kir_compile(source, target=target, shapes=dict(shapes), **dict(constants))
                p = _Program(kernel, _kir.load(kernel._native, index))
                _programs[key] = p
            if len(_by_call) >= MAX_PLANS:
                _by_call.clear()
            _by_call[call] = p
    return p


def loaded(kernel: Kernel, index: int) -> _Program:
    """``kernel`` (PTX, from :func:`kir.compile` or :meth:`kir.Kernel.from_ptx`) loaded on
    device ``index``: once per process per kernel object and device."""
    key = ("", (("kernel", str(id(kernel))),), index)
    with _lock:
        p = _programs.get(key)
        if p is None or p.kernel is not kernel:
            p = _Program(kernel, _kir.load(kernel._native, index))
            _programs[key] = p
    return p


def _arg(name: str, t: Tensor) -> Tuple[str, int, str, Sequence[int], Sequence[int]]:
    dt = DTYPES.get(t.dtype)
    if dt is None:
        raise InputError(f"{name}: kir takes no tensors of dtype {t.dtype}", argument=name)
    return (name, t.data_ptr(), dt, t.shape, t.stride())


def _sig(t: Tensor) -> Tuple[Any, ...]:
    """What of a tensor its binding depends on: shape, strides and dtype."""
    return (t.shape, t.stride(), t.dtype)


def run(
    p: _Program,
    inputs: Mapping[str, Tensor],
    scalars: Mapping[str, Any],
    device: torch.device,
) -> Dict[str, Tensor]:
    """Launches ``p`` on ``inputs`` (every ``in``/``inout`` tensor param by name) and
    ``scalars`` on the current stream of ``device``; returns the ``out`` tensors by name."""
    names = tuple(inputs)
    tensors = tuple(inputs.values())
    sc = tuple(scalars.items())
    key = (names, sc, tuple(map(_sig, tensors)))
    plan = p.plan(key, names, tensors, sc, device)
    return dict(zip(plan.out_names, plan(tensors)))


def _stream(device: torch.device) -> int:
    """The raw ``CUstream`` of PyTorch's current stream on ``device``."""
    if _raw_stream is not None:
        return _raw_stream(device.index if device.index is not None else torch.cuda.current_device())
    return torch.cuda.current_stream(device).cuda_stream


# PyTorch's raw current-stream query (what Triton's launcher calls): one C call, where
# `torch.cuda.current_stream()` builds a Stream object per call.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _device_of(inputs: Mapping[str, Tensor]) -> torch.device:
    """The one CUDA device of ``inputs`` (with its index), or an InputError naming why not."""
    if not inputs:
        raise InputError("inputs: at least one CUDA tensor is needed", argument="inputs")
    for name, t in inputs.items():
        if not isinstance(t, Tensor):
            raise InputError(f"{name}: expected a torch.Tensor, got {type(t).__name__}", argument=name)
    devices = {t.device for t in inputs.values()}
    if len(devices) != 1:
        raise InputError(f"inputs: tensors on several devices {sorted(map(str, devices))}", argument="inputs")
    (device,) = devices
    if device.type != "cuda":
        name = next(iter(inputs))
        raise InputError(f"{name}: kir launches on CUDA tensors, got one on {device}", argument=name)
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def launch(
    source: Any,
    inputs: Mapping[str, Tensor],
    scalars: Optional[Mapping[str, Any]] = None,
    **constants: Any,
) -> Dict[str, Tensor]:
    """Runs a module's entry on a GPU with PyTorch tensors: the general form of the ops in
    :mod:`kir.torch`, for a user's own kernels.

    Args:
        source: a built-in op's name, a path to a ``.kir`` file, or a module's text; or a
            :class:`kir.Kernel` compiled to PTX (:func:`kir.compile`,
            :meth:`kir.Kernel.from_ptx`), launched as it is (then no ``constants``).
        inputs: one CUDA tensor per ``in`` and ``inout`` tensor param of the entry, all on one
            device, with the param's dtype and strides (C order unless the param declares
            strides).
        scalars: one number per scalar param.
        **constants: the module's specialization constants, as for :func:`kir.compile`.

    Returns:
        Every ``out`` tensor of the entry by name, allocated on the inputs' device. The kernels
        are queued on PyTorch's current stream; the call does not wait for them.

    Raises:
        InputError: a tensor kir cannot take (not on a CUDA device, tensors on several devices,
            a dtype kir has no name for, a shape, dtype or stride the entry refuses), or
            constants with a :class:`kir.Kernel`.
        CompileError: the module does not compile with these constants.
        RunError: the driver failed (loading the module or launching it).
    """
    device = _device_of(inputs)
    return run(_program_of(source, constants, device.index, inputs), dict(inputs), dict(scalars or {}), device)


def _program_of(source: Any, constants: Mapping[str, Any], index: int, inputs: Mapping[str, Tensor]) -> _Program:
    if isinstance(source, Kernel):
        if constants:
            raise InputError("constants: a compiled kir.Kernel takes none (they were fixed when it was compiled)", argument=next(iter(constants)))
        return loaded(source, index)
    from . import _convert

    return program(_convert.source(source), tuple(sorted(_convert.defines(constants))), index, shapes_of(inputs))


def shapes_of(inputs: Mapping[str, Tensor]) -> Tuple[Tuple[str, Tuple[int, ...]], ...]:
    """``(param, extents)`` of each input tensor, for :func:`program`."""
    return tuple((n, tuple(t.shape)) for n, t in inputs.items())


# The interpreter's poison by kir dtype (backends/src/interp/tile.rs, `poison`).
_POISON = {"f32": math.nan, "f16": math.nan, "bf16": math.nan, "i32": -0x5A5A5A5A, "i64": -0x5A5A5A5A, "u8": 0xA5, "i1": True}


class Bound:
    """A kernel bound once to its tensors, to be launched again and again (see :func:`bind`).

    Attributes:
        outputs: every ``out`` tensor of the entry by name.
        temps: the program's temps by name (scratch its launches use).
    """

    __slots__ = ("outputs", "temps", "_prepared", "_ptrs", "_index", "_keep")

    def __init__(self, prepared: Any, ptrs: List[int], index: int, outputs: Dict[str, Tensor], temps: Dict[str, Tensor], keep: tuple) -> None:
        self._prepared, self._ptrs, self._index = prepared, ptrs, index
        self.outputs, self.temps, self._keep = outputs, temps, keep

    def launch(self) -> None:
        """Queues every launch of the program on PyTorch's current stream of the tensors'
        device, with the bound tensors; nothing else is done on the host (no checks, grids or
        tensor maps: they were made by :func:`bind`)."""
        self._prepared.launch(self._ptrs, _stream(torch.device("cuda", self._index)))


def bind(
    source: Any,
    inputs: Mapping[str, Tensor],
    scalars: Optional[Mapping[str, Any]] = None,
    *,
    poison: bool = False,
    **constants: Any,
) -> Bound:
    """Binds a module's entry to ``inputs`` once, for launching many times: the outs and temps
    are allocated here (with ``poison``, filled with the interpreter's poison: NaN for floats,
    -0x5A5A5A5A for i32 and i64, 0xA5 for u8, True for i1, so an element no kernel writes
    shows), the binding is checked as by :func:`launch`, and :meth:`Bound.launch` then only
    queues the kernels. For timing launches back to back.

    Args are those of :func:`launch`. The tensors must stay alive and unchanged in size while
    the bound kernels may run (the returned object keeps references to all of them).
    """
    device = _device_of(inputs)
    p = _program_of(source, constants, device.index, inputs)
    names = list(inputs)
    tensors = list(inputs.values())
    args = [_arg(n, t) for n, t in zip(names, tensors)]
    sc = list((scalars or {}).items())
    outs: Dict[str, Tensor] = {}
    temps: Dict[str, Tensor] = {}
    for name, dt, shape, strides, role in p.loaded.buffer_specs(args, sc):
        t = torch.empty_strided(shape, strides, dtype=TORCH_DTYPES[dt], device=device)
        if poison:
            t.fill_(_POISON[dt])
        (outs if role == "out" else temps)[name] = t
        args.append(_arg(name, t))
        names.append(name)
        tensors.append(t)
    prepared = p.loaded.prepare(args, sc)
    return Bound(prepared, [a[1] for a in args], device.index, outs, temps, tuple(tensors))
