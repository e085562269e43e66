"""The GEMM and SwiGLU ops of :mod:`kir.torch` (same conventions: custom ops in namespace
``kir`` with fake implementations, launched on the current stream with the tensors' memory).

GEMM's backward runs kir's GEMM twice with transposed operands read in place (``TRANS_A`` /
``TRANS_B``): dA = dC·Bᵀ and dB = Aᵀ·dC; the bias gradient sums dC's rows in PyTorch. An
activation epilogue (relu, silu, gelu) has no backward: asking for one raises.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _launch
from ._errors import InputError
from ._ops import Op, Seen, check, plan_for, run_op, same, signature

_EPILOGUES = ("relu", "silu", "gelu")


def _gemm_consts(a: Tensor, epilogue: str, trans_a: int, trans_b: int) -> tuple:
    return (("DTYPE", _launch.DTYPES[a.dtype]), ("EPILOGUE", epilogue), ("TRANS_A", trans_a), ("TRANS_B", trans_b))


def _gemm_impl(a: Tensor, b: Tensor, bias: Optional[Tensor], epilogue: str, trans_a: int, trans_b: int) -> Tensor:
    ep = "bias" if bias is not None else epilogue
    consts = _gemm_consts(a, ep, trans_a, trans_b)
    if bias is None:
        (c,) = run_op("gemm", consts, ("a", "b"), (a, b), (("alpha", 1.0),), a)
    else:
        (c,) = run_op("gemm", consts, ("a", "b", "bias"), (a, b, bias), (("alpha", 1.0),), a)
    return c


def _gemm_fake(a, b, bias, epilogue, trans_a, trans_b):
    m = a.shape[2] if trans_a else a.shape[1]
    n = b.shape[1] if trans_b else b.shape[2]
    return a.new_empty(a.shape[0], m, n)


def _gemm_setup(ctx, inputs, output):
    a, b, bias, epilogue, trans_a, trans_b = inputs
    ctx.save_for_backward(a, b)
    ctx.has_bias = bias is not None
    # Which of a, b and bias need a gradient (the eager path's ctx has one more input).
    ctx.needs = tuple(isinstance(t, Tensor) and t.requires_grad for t in (a, b, bias))
    ctx.epilogue = epilogue


def _gemm_backward(ctx, dc):
    if ctx.epilogue != "none":
        raise InputError(f"kir.torch.gemm: no backward for epilogue={ctx.epilogue!r}", argument="epilogue")
    a, b = ctx.saved_tensors
    dc = dc.contiguous()
    da = _gemm(dc, b, None, "none", 0, 1) if ctx.needs[0] else None
    db = _gemm(a, dc, None, "none", 1, 0) if ctx.needs[1] else None
    dbias = dc.sum(dim=(0, 1)) if ctx.has_bias and ctx.needs[2] else None
    return da, db, dbias, None, None, None


_gemm = Op("gemm", _gemm_impl, _gemm_fake, _gemm_backward, _gemm_setup)


def gemm(a: Tensor, b: Tensor, bias: Optional[Tensor] = None, epilogue: Optional[str] = None) -> Tensor:
    """``a @ b`` (+ ``bias``, or an activation ``epilogue``) on kir's GEMM.

    Args:
        a: ``[M, K]``, or ``[B, M, K]`` batched. bf16, f16 or f32, contiguous.
        b: ``[K, N]``, or ``[B, K, N]`` (the same batch as ``a``).
        bias: ``[N]``, added to every row (the GEMM's bias epilogue).
        epilogue: ``"relu"``, ``"silu"`` or ``"gelu"`` applied to the product in the kernel
            (not with ``bias``; no backward).

    Returns:
        ``[M, N]`` (or ``[B, M, N]``) in ``a``'s dtype, accumulated in f32.
    """
    key = None
    if bias is None and type(a) is Tensor and type(b) is Tensor:
        # A call like one already checked: straight to its plan (see `_ops.Seen`).
        key = (signature(a), signature(b), epilogue)
        plan = _plain_gemm.get(key, (a, b))
        if plan is not None:
            # A 2-D call's plan takes the 2-D tensors and allocates a 2-D result (`unbatched`).
            return plan((a, b))[0]
    a = check("a", a, ndim=(2, 3))
    b = check("b", b, ndim=(2, 3))
    same(["a", "b"], [a, b])
    if a.dim() != b.dim():
        raise InputError(f"b: {b.dim()} dims, but a has {a.dim()}", argument="b")
    a3, b3 = (a, b) if a.dim() == 3 else (a.unsqueeze(0), b.unsqueeze(0))
    if a3.shape[0] != b3.shape[0] or a3.shape[2] != b3.shape[1]:
        raise InputError(f"b: shape {tuple(b.shape)} does not multiply a {tuple(a.shape)}", argument="b")
    if epilogue is not None and epilogue not in _EPILOGUES:
        raise InputError(f"epilogue: {epilogue!r} is not one of {_EPILOGUES}", argument="epilogue")
    if epilogue is not None and bias is not None:
        raise InputError("epilogue: kir's GEMM applies a bias or an activation, not both", argument="epilogue")
    if bias is not None:
        bias = check("bias", bias, ndim=(1,))
        same(["a", "bias"], [a, bias])
        if bias.shape[0] != b3.shape[2]:
            raise InputError(f"bias: {bias.shape[0]} elements, but the product has {b3.shape[2]} columns", argument="bias")
    if epilogue is not None and torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        raise InputError(f"epilogue: {epilogue!r} has no backward; use epilogue=None and the activation in PyTorch", argument="epilogue")
    c = _gemm(a3, b3, bias, epilogue or "none", 0, 0)
    if key is not None:
        # The plan `_gemm_impl` ran.
        consts = _gemm_consts(a3, epilogue or "none", 0, 0)
        plan = plan_for("gemm", consts, ("a", "b"), (a3, b3), (("alpha", 1.0),), a3)
        _plain_gemm.put(key, plan if a.dim() == 3 else plan.unbatched())
    return c if a.dim() == 3 else c.squeeze(0)


# gemm calls without a bias already checked.
_plain_gemm = Seen()


def _swiglu_impl(gate: Tensor, up: Tensor) -> Tensor:
    (out,) = run_op("swiglu", (("DTYPE", _launch.DTYPES[gate.dtype]),), ("gate", "up"), (gate, up), (), gate)
    return out


def _swiglu_fake(gate, up):
    return torch.empty_like(gate)


def _swiglu_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _swiglu_backward(ctx, dy) -> Tuple[Tensor, Tensor]:
    gate, up = ctx.saved_tensors
    g, u, d = gate.float(), up.float(), dy.float()
    s = torch.sigmoid(g)
    dgate = d * u * s * (1.0 + g * (1.0 - s))
    dup = d * g * s
    return dgate.to(gate.dtype), dup.to(up.dtype)


_swiglu = Op("swiglu", _swiglu_impl, _swiglu_fake, _swiglu_backward, _swiglu_setup)


def swiglu(gate: Tensor, up: Tensor) -> Tensor:
    """``silu(gate) * up`` elementwise on kir's SwiGLU kernel (any shape; the last dim is a
    row). bf16, f16 or f32, contiguous, the same shape. The backward runs in PyTorch."""
    gate = check("gate", gate)
    up = check("up", up)
    same(["gate", "up"], [gate, up])
    if gate.shape != up.shape:
        raise InputError(f"up: shape {tuple(up.shape)}, but gate is {tuple(gate.shape)}", argument="up")
    n = gate.shape[-1] if gate.dim() > 0 else 1
    out = _swiglu(gate.reshape(-1, n), up.reshape(-1, n))
    return out.view(gate.shape)
