"""The checks and the call of :mod:`kir.torch`'s ops: cheap argument checks that name the
argument (:func:`check`, :func:`same`), the cached call of a built-in op (:func:`run_op`: one
dict lookup on a key of what determines the binding, then the prepared launch of
python/kir/_launch.py), and :class:`Op`, an op as a ``torch.library`` custom op that eager
mode calls without the custom op's dispatch.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ._errors import InputError
from ._launch import MAX_PLANS, _Plan, _sig, program

FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def check(name: str, t: object, dtypes=FLOATS, ndim: Optional[Tuple[int, ...]] = None) -> Tensor:
    """``t`` checked: a contiguous CUDA tensor of one of ``dtypes`` (and a rank in ``ndim``)."""
    if not isinstance(t, Tensor):
        raise InputError(f"{name}: expected a torch.Tensor, got {type(t).__name__}", argument=name)
    if not t.is_cuda:
        raise InputError(f"{name}: kir runs on CUDA tensors, got one on {t.device}", argument=name)
    if t.dtype not in dtypes:
        names = ", ".join(str(d) for d in dtypes)
        raise InputError(f"{name}: dtype {t.dtype} is not supported (takes {names})", argument=name)
    if ndim is not None and t.dim() not in ndim:
        raise InputError(f"{name}: expected {' or '.join(map(str, ndim))} dims, got shape {tuple(t.shape)}", argument=name)
    if not t.is_contiguous():
        raise InputError(f"{name}: kir takes contiguous tensors (strides {t.stride()} for shape {tuple(t.shape)}); call .contiguous()", argument=name)
    return t


def same(names: Sequence[str], ts: Sequence[Tensor]) -> None:
    """The tensors ``ts`` (named ``names``) share the first one's device and dtype."""
    first = ts[0]
    dev, dt = first.get_device(), first.dtype
    for n, t in zip(names[1:], ts[1:]):
        if t.get_device() != dev:
            raise InputError(f"{n}: on {t.device}, but {names[0]} is on {first.device}", argument=n)
        if t.dtype is not dt:
            raise InputError(f"{n}: dtype {t.dtype}, but {names[0]} is {first.dtype}", argument=n)


# Prepared plans by (op, constants, scalars, device index, each tensor's shape, strides and
# dtype): everything the binding depends on, so a hit needs no check the first call made.
_plans: Dict[Tuple[Any, ...], _Plan] = {}


def run_op(
    op: str,
    consts: Tuple[Tuple[str, Any], ...],
    names: Tuple[str, ...],
    tensors: Tuple[Tensor, ...],
    scalars: Tuple[Tuple[str, Any], ...],
    like: Tensor,
) -> Tuple[Tensor, ...]:
    """Runs built-in op ``op`` specialized with ``consts`` on ``tensors`` (its ``in`` and
    ``inout`` params ``names``) and ``scalars``, on the current stream of ``like``'s device;
    returns its ``out`` tensors in the entry's param order."""
    return plan_for(op, consts, names, tensors, scalars, like)(tensors)


def plan_for(
    op: str,
    consts: Tuple[Tuple[str, Any], ...],
    names: Tuple[str, ...],
    tensors: Tuple[Tensor, ...],
    scalars: Tuple[Tuple[str, Any], ...],
    like: Tensor,
) -> _Plan:
    """The prepared plan :func:`run_op` launches for these arguments (made on first use)."""
    index = like.get_device()
    key = (op, consts, scalars, index, tuple(map(_sig, tensors)))
    plan = _plans.get(key)
    if plan is None:
        shapes = tuple((n, tuple(t.shape)) for n, t in zip(names, tensors))
        p = program(op, tuple(sorted((k, str(v)) for k, v in consts)), index, shapes)
        plan = p.plan(key, names, tensors, scalars, like.device)
        if len(_plans) >= MAX_PLANS:
            _plans.clear()
        _plans[key] = plan
    return plan


class Seen:
    """The eager fast path of one op: calls whose arguments an earlier call has already checked.

    A key holds everything the argument checks and the binding read (each tensor's shape,
    strides, dtype and device, and the call's other arguments); its plan is registered only
    after a call with that key passed every check and ran. A later call with the same key, in
    eager mode (no torch.compile, no dispatch mode), with plain tensors that need no gradient,
    goes straight to the plan: no checks repeated, no custom op, no autograd node."""

    __slots__ = ("plans",)

    def __init__(self) -> None:
        self.plans: Dict[Tuple[Any, ...], _Plan] = {}

    def get(self, key: Tuple[Any, ...], tensors: Sequence[Tensor]) -> Optional[_Plan]:
        """The plan for ``key`` when the fast path may take this call, else None."""
        plan = self.plans.get(key)
        if plan is None or _compiling() or _dispatch_modes is None or _dispatch_modes():
            return None
        for t in tensors:
            if type(t) is not Tensor or t.requires_grad:
                return None
        return plan

    def put(self, key: Tuple[Any, ...], plan: _Plan) -> None:
        """Registers ``plan`` for ``key`` (after a checked call with that key)."""
        if len(self.plans) >= MAX_PLANS:
            self.plans.clear()
        self.plans[key] = plan


def signature(t: Tensor) -> Tuple[Any, ...]:
    """What the checks and the binding read of a tensor: shape, strides, dtype, device index."""
    return (t.shape, t.stride(), t.dtype, t.get_device())


# The number of active TorchDispatchModes (tracing by make_fx or AOTAutograd, fake tensor
# propagation): a private query PyTorch's own `torch.utils._python_dispatch` uses.
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", None)
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_compiling = torch.compiler.is_compiling


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
    needed), which skips the custom op's dispatch on every call. Both run the same code.

    Eager mode is: not under torch.compile, no dispatch mode (tracing) active, and every tensor
    argument a plain tensor (not a fake or functional one)."""

    def __init__(self, name, impl, fake, backward=None, setup=None) -> None:
        self.impl, self.backward, self.setup = impl, backward, setup
        self.custom = torch.library.custom_op(f"kir::{name}", impl, mutates_args=())
        self.custom.register_fake(fake)
        if backward is not None:
            self.custom.register_autograd(backward, setup_context=setup)

    def __call__(self, *args):
        if _compiling() or _dispatch_modes is None or _dispatch_modes():
            return self.custom(*args)
        grad = False
        for a in args:
            if isinstance(a, Tensor):
                if type(a) not in _PLAIN:
                    return self.custom(*args)
                if a.requires_grad:
                    grad = True
        if grad and self.backward is not None and torch.is_grad_enabled():
            return _Eager.apply(self, *args)
        return self.impl(*args)
