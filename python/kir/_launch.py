"""The launcher under :mod:`kir.torch`: a module compiled for the tensors' GPU (once per
process per module, constants and device), loaded by the driver, and launched on PyTorch's
current stream with the tensors' own device memory. The binding (shapes, dtypes, strides,
``requires``, grids, TMA tensor maps) is the runtime's, in Rust (``kir._kir.Loaded``); this file
only allocates the outputs and temps it lists, with PyTorch's allocator, and passes addresses.

Nothing here copies a tensor or synchronizes the device. Temps are allocated on the current
stream and released when the call returns: PyTorch's caching allocator reuses their memory
only for work queued after the launches on the same stream.
"""

from __future__ import annotations

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

# Compiled and loaded modules by (source, constants, device index): each compiles and loads once
# per process. The shapes of the outputs and temps, by input shapes, are kept beside them.
_programs: Dict[Tuple[str, Tuple[Tuple[str, str], ...], int], "_Program"] = {}
_lock = threading.Lock()


class _Program:
    """A module loaded on one GPU and the buffer specs seen so far."""

    __slots__ = ("loaded", "specs", "kernel")

    def __init__(self, kernel: Kernel, loaded: Any) -> None:
        self.kernel = kernel
        self.loaded = loaded
        self.specs: Dict[Tuple[Any, ...], Any] = {}


def _target(index: int) -> str:
    major, minor = torch.cuda.get_device_capability(index)
    target = _kir.target_for(major, minor)
    if target is None:
        raise InputError(
            f"cuda:{index} has compute capability {major}.{minor}; kir targets sm_80 and later",
            argument="device",
        )
    return target


def program(source: str, constants: Tuple[Tuple[str, str], ...], index: int) -> _Program:
    """The module ``source`` specialized with ``constants`` (sorted ``(NAME, value)`` strings),
    compiled for and loaded on device ``index``: compiled once per process."""
    key = (source, constants, index)
    p = _programs.get(key)
    if p is not None:
        return p
    with _lock:
        p = _programs.get(key)
        if p is None:
            from . import compile as kir_compile

            kernel = kir_compile(source, target=_target(index), **dict(constants))
            p = _Program(kernel, _kir.load(kernel._native, index))
            _programs[key] = p
    return p


def _arg(name: str, t: torch.Tensor) -> Tuple[str, int, str, Sequence[int], Sequence[int]]:
    dt = DTYPES.get(t.dtype)
    if dt is None:
        raise InputError(f"{name}: kir takes no tensors of dtype {t.dtype}", argument=name)
    return (name, t.data_ptr(), dt, t.shape, t.stride())


def run(
    p: _Program,
    inputs: Mapping[str, torch.Tensor],
    scalars: Mapping[str, Any],
    device: torch.device,
    outs: Optional[Mapping[str, torch.Tensor]] = None,
) -> Dict[str, torch.Tensor]:
    """Launches ``p`` on ``inputs`` (every ``in``/``inout`` tensor param by name) and
    ``scalars`` on the current stream of ``device``; returns the ``out`` tensors by name. An
    ``out`` tensor given in ``outs`` is written in place instead of allocated."""
    args = [_arg(n, t) for n, t in inputs.items()]
    sc = list(scalars.items())
    key = tuple((n, tuple(t.shape)) for n, t in inputs.items())
    specs = p.specs.get(key)
    if specs is None:
        specs = p.loaded.buffer_specs(args, sc)
        p.specs[key] = specs
    result: Dict[str, torch.Tensor] = {}
    keep = []
    for name, dt, shape, strides, role in specs:
        t = outs.get(name) if outs is not None else None
        if t is None:
            t = torch.empty_strided(shape, strides, dtype=TORCH_DTYPES[dt], device=device)
        if role == "out":
            result[name] = t
        else:
            keep.append(t)
        args.append(_arg(name, t))
    p.loaded.launch(args, sc, _stream(device))
    return result


def _stream(device: torch.device) -> int:
    """The raw ``CUstream`` of PyTorch's current stream on ``device``."""
    if _raw_stream is not None:
        return _raw_stream(device.index if device.index is not None else torch.cuda.current_device())
    return torch.cuda.current_stream(device).cuda_stream


# PyTorch's raw current-stream query (what Triton's launcher calls): one C call, where
# `torch.cuda.current_stream()` builds a Stream object per call.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def launch(
    source: str,
    inputs: Mapping[str, torch.Tensor],
    scalars: Optional[Mapping[str, Any]] = None,
    **constants: Any,
) -> Dict[str, torch.Tensor]:
    """Runs a module's entry on a GPU with PyTorch tensors: the general form of the ops in
    :mod:`kir.torch`, for a user's own kernels.

    Args:
        source: a built-in op's name, a path to a ``.kir`` file, or a module's text.
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
            a dtype kir has no name for, a shape, dtype or stride the entry refuses).
        CompileError: the module does not compile with these constants.
        RunError: the driver failed (loading the module or launching it).
    """
    from . import _convert

    if not inputs:
        raise InputError("inputs: at least one CUDA tensor is needed", argument="inputs")
    devices = {t.device for t in inputs.values()}
    if len(devices) != 1:
        raise InputError(f"inputs: tensors on several devices {sorted(map(str, devices))}", argument="inputs")
    (device,) = devices
    if device.type != "cuda":
        name = next(iter(inputs))
        raise InputError(f"{name}: kir launches on CUDA tensors, got one on {device}", argument=name)
    src = _convert.source(source)
    defines = tuple(sorted(_convert.defines(constants)))
    p = program(src, defines, device.index if device.index is not None else torch.cuda.current_device())
    return run(p, dict(inputs), dict(scalars or {}), device)


# ---- the checks and the call of kir.torch's ops ----

FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def check(name: str, t: object, dtypes=FLOATS, ndim: Optional[Tuple[int, ...]] = None) -> Tensor:
    """``t`` checked: a contiguous CUDA tensor of one of ``dtypes`` (and a rank in ``ndim``)."""
    if not isinstance(t, Tensor):
        raise InputError(f"{name}: expected a torch.Tensor, got {type(t).__name__}", argument=name)
    if t.device.type != "cuda":
        raise InputError(f"{name}: kir runs on CUDA tensors, got one on {t.device}", argument=name)
    if t.dtype not in dtypes:
        names = ", ".join(str(d) for d in dtypes)
        raise InputError(f"{name}: dtype {t.dtype} is not supported (takes {names})", argument=name)
    if ndim is not None and t.dim() not in ndim:
        raise InputError(f"{name}: expected {' or '.join(map(str, ndim))} dims, got shape {tuple(t.shape)}", argument=name)
    if not t.is_contiguous():
        raise InputError(f"{name}: kir takes contiguous tensors (strides {t.stride()} for shape {tuple(t.shape)}); call .contiguous()", argument=name)
    return t


def same(names: List[str], ts: List[Tensor]) -> None:
    """The tensors ``ts`` (named ``names``) share the first one's device and dtype."""
    for n, t in zip(names[1:], ts[1:]):
        if t.device != ts[0].device:
            raise InputError(f"{n}: on {t.device}, but {names[0]} is on {ts[0].device}", argument=n)
        if t.dtype != ts[0].dtype:
            raise InputError(f"{n}: dtype {t.dtype}, but {names[0]} is {ts[0].dtype}", argument=n)


def _index(t: Tensor) -> int:
    """The index of the CUDA device ``t`` is on."""
    return t.device.index if t.device.index is not None else torch.cuda.current_device()


# Loaded programs by (op, the constants as given, device index): a call with the same
# specialization finds its program with one dict lookup.
_by_consts: Dict[Tuple[Any, ...], _Program] = {}


def run_op(op: str, consts: dict, inputs: dict, scalars: dict, like: Tensor) -> dict:
    """Runs built-in op ``op`` specialized with ``consts`` on the device of ``like``."""
    index = _index(like)
    fast = (op, tuple(consts.items()), index)
    p = _by_consts.get(fast)
    if p is None:
        p = program(op, tuple(sorted((k, str(v)) for k, v in consts.items())), index)
        _by_consts[fast] = p
    return run(p, inputs, scalars, like.device)


# The number of active TorchDispatchModes (tracing by make_fx or AOTAutograd, fake tensor
# propagation): a private query PyTorch's own `torch.utils._python_dispatch` uses.
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", None)
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _eager(args) -> bool:
    """Whether a call may skip the custom op: not under torch.compile, no dispatch mode
    (tracing) active, and every tensor argument a plain tensor (not a fake or functional
    one)."""
    if torch.compiler.is_compiling():
        return False
    if _dispatch_modes is None or _dispatch_modes() != 0:
        return False
    return all(type(a) in _PLAIN for a in args if isinstance(a, Tensor))


class _Eager(torch.autograd.Function):
    """The eager autograd path of an :class:`Op`: its implementation, then its own setup and
    backward, without the custom op's dispatch."""

    @staticmethod
    def forward(ctx, op, *args):  # type: ignore[override]
        out = op.impl(*args)
        op.setup(ctx, args, out)
        ctx.kir_op = op
        return out

    @staticmethod
    def backward(ctx, *grads):  # type: ignore[override]
        return (None, *ctx.kir_op.backward(ctx, *grads))


class Op:
    """One kir op in two forms: the ``torch.library`` custom op ``kir::NAME`` with its fake
    implementation and autograd (what ``torch.compile`` traces), and, in eager mode, the
    implementation called directly (through one ``torch.autograd.Function`` when a gradient is
    needed), which skips the custom op's dispatch on every call. Both run the same code."""

    def __init__(self, name, impl, fake, backward=None, setup=None) -> None:
        self.impl, self.backward, self.setup = impl, backward, setup
        self.custom = torch.library.custom_op(f"kir::{name}", impl, mutates_args=())
        self.custom.register_fake(fake)
        if backward is not None:
            self.custom.register_autograd(backward, setup_context=setup)

    def __call__(self, *args):
        if not _eager(args):
            return self.custom(*args)
        if (
            self.backward is not None
            and torch.is_grad_enabled()
            and any(isinstance(a, Tensor) and a.requires_grad for a in args)
        ):
            return _Eager.apply(self, *args)
        return self.impl(*args)
