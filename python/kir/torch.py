"""PyTorch ops on kir's kernels: attention, RMSNorm, LayerNorm, GEMM and SwiGLU on CUDA tensors.

Each op launches kir's built-in kernels through the CUDA driver on
``torch.cuda.current_stream()``, with the tensors' own device memory: no copies (varlen
attention aside, which pads its packed tokens), no extra synchronization. The kernels compile
once per process per (op, specialization, device) for the device's target (``sm_90a`` on a
Hopper GPU), and the driver loads them.

Every op is a ``torch.library.custom_op`` (namespace ``kir``) with a fake implementation, so
``torch.compile(fullgraph=True)`` traces through it (in eager mode the same implementation is
called without the custom op's dispatch, which halves the host time of a call, and a call of
attention, rms_norm or gemm like one already checked goes straight to its prepared plan,
`_ops.Seen`);
attention, rms_norm, layer_norm, gemm
(without an activation epilogue) and swiglu have autograd, the first three through kir's
backward kernels. Inputs kir cannot take raise :class:`kir.InputError` (a ``ValueError``)
naming the argument, before anything is launched.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Tuple

import torch
from torch import Tensor

from . import _launch
from ._errors import InputError

from ._ops import Op, Seen
from ._ops import check as _cuda, plan_for as _plan_for, run_op as _run, same as _same, signature as _sig


# ---- attention -------------------------------------------------------------------------------


def _attn_call(q: Tensor, causal: bool, scale: float, window: int, softcap: float, mask, total_lengths, past_lengths, bwd: bool):
    """The constants, the optional inputs (names and tensors) and the scalars of an attention
    call: only what its features use (attention_bwd takes only the constants of the features
    in use; a backward without one of them is a compile error naming it)."""
    consts: Tuple[Tuple[str, Any], ...] = (("DTYPE", _launch.DTYPES[q.dtype]), ("HEAD_DIM", q.shape[-1]), ("CAUSAL", int(causal)))
    names: Tuple[str, ...] = ()
    tensors: Tuple[Tensor, ...] = ()
    scalars: Tuple[Tuple[str, Any], ...] = (("scale", scale),)
    if window > 0:
        consts += (("WINDOW", 1),)
        scalars += (("window", window),)
    elif not bwd:
        consts += (("WINDOW", 0),)
    if softcap > 0.0:
        consts += (("SOFTCAP", 1),)
        scalars += (("softcap", softcap),)
    elif not bwd:
        consts += (("SOFTCAP", 0),)
    for const, name, t in (("MASK", "mask", mask), ("VARLEN", "total_lengths", total_lengths), ("KV_OFFSET", "past_lengths", past_lengths)):
        if t is not None:
            consts += ((const, 1),)
            names += (name,)
            tensors += (t,)
        elif not bwd:
            consts += ((const, 0),)
    return consts, names, tensors, scalars


def _attention_fwd_impl(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool,
    scale: float,
    window: int,
    softcap: float,
    mask: Optional[Tensor],
    total_lengths: Optional[Tensor],
    past_lengths: Optional[Tensor],
) -> Tuple[Tensor, Tensor]:
    if mask is None and total_lengths is None and past_lengths is None and window <= 0 and softcap <= 0.0:
        # The plain call, its constants spelled out (one tuple, no loop).
        consts = (("DTYPE", _launch.DTYPES[q.dtype]), ("HEAD_DIM", q.shape[-1]), ("CAUSAL", int(causal)), ("WINDOW", 0), ("SOFTCAP", 0), ("MASK", 0), ("VARLEN", 0), ("KV_OFFSET", 0))
        o, lse = _run("attention_fwd", consts, ("q", "k", "v"), (q, k, v), (("scale", scale),), q)
        return o, lse
    consts, names, tensors, scalars = _attn_call(q, causal, scale, window, softcap, mask, total_lengths, past_lengths, False)
    o, lse = _run("attention_fwd", consts, names + ("q", "k", "v"), tensors + (q, k, v), scalars, q)
    return o, lse


def _attention_fwd_fake(q, k, v, causal, scale, window, softcap, mask, total_lengths, past_lengths):
    return torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)


def _attention_bwd_impl(
    do: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    lse: Tensor,
    causal: bool,
    scale: float,
    window: int,
    softcap: float,
    mask: Optional[Tensor],
    total_lengths: Optional[Tensor],
    past_lengths: Optional[Tensor],
) -> Tuple[Tensor, Tensor, Tensor]:
    consts, names, tensors, scalars = _attn_call(q, causal, scale, window, softcap, mask, total_lengths, past_lengths, True)
    dq, dk, dv = _run("attention_bwd", consts, names + ("q", "k", "v", "o", "do", "lse"), tensors + (q, k, v, o, do, lse), scalars, q)
    return dq, dk, dv


def _attention_bwd_fake(do, q, k, v, o, lse, causal, scale, window, softcap, mask, total_lengths, past_lengths):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


_attention_bwd = Op("attention_bwd", _attention_bwd_impl, _attention_bwd_fake)


def _attention_setup(ctx, inputs, output):
    q, k, v, causal, scale, window, softcap, mask, total_lengths, past_lengths = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, mask, total_lengths, past_lengths)
    ctx.flags = (causal, scale, window, softcap)


def _attention_backward(ctx, do, dlse):
    q, k, v, o, lse, mask, total_lengths, past_lengths = ctx.saved_tensors
    causal, scale, window, softcap = ctx.flags
    dq, dk, dv = _attention_bwd(
        do.contiguous(), q, k, v, o, lse, causal, scale, window, softcap, mask, total_lengths, past_lengths
    )
    return dq, dk, dv, None, None, None, None, None, None, None


_attention_fwd = Op("attention_fwd", _attention_fwd_impl, _attention_fwd_fake, _attention_backward, _attention_setup)


def _mask_planes(mask: Tensor, q: Tensor, sk: int) -> Tensor:
    """An SDPA-style mask (bool: True attends; float: added to the scores) broadcastable to
    [B, H, Sq, Sk], as the [P, Sq, Sk] planes of the kernel (P = 1, B or B·H)."""
    b, h, sq = q.shape[0], q.shape[1], q.shape[2]
    if mask.device != q.device:
        raise InputError(f"mask: on {mask.device}, but q is on {q.device}", argument="mask")
    m = mask
    while m.dim() < 4:
        m = m.unsqueeze(0)
    if m.dim() != 4 or m.shape[2] != sq or m.shape[3] != sk:
        raise InputError(f"mask: shape {tuple(mask.shape)} does not broadcast to [B, H, {sq}, {sk}] as [.., Sq, Sk]", argument="mask")
    mb, mh = m.shape[0], m.shape[1]
    if mb not in (1, b) or mh not in (1, h) or (mb == 1 and mh != 1):
        raise InputError(f"mask: shape {tuple(mask.shape)}: kir takes one plane, one per batch or one per (batch, head)", argument="mask")
    if m.dtype == torch.bool:
        m = torch.zeros(m.shape, dtype=q.dtype, device=q.device).masked_fill(~m, float("-inf"))
    elif m.dtype != q.dtype:
        m = m.to(q.dtype)
    return m.reshape(mb * mh, sq, sk).contiguous()


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = False,
    scale: Optional[float] = None,
    window: Optional[int] = None,
    softcap: Optional[float] = None,
    cu_seqlens: Optional[Tensor] = None,
    mask: Optional[Tensor] = None,
    kv_offset: Optional[Tensor] = None,
    max_seqlen: Optional[int] = None,
) -> Tensor:
    """Scaled dot-product attention on kir's flash-attention kernels.

    Args:
        q, k, v: ``[B, H, S, D]`` as for ``torch.nn.functional.scaled_dot_product_attention``
            (k and v with fewer heads, a divisor of q's, is grouped-query attention); or, with
            ``cu_seqlens``, packed ``[total, H, D]`` tokens as FlashAttention's varlen
            functions take them. bf16, f16 or f32, contiguous, on one CUDA device.
        causal: each query sees the keys up to its own position (bottom-right aligned when the
            key length exceeds the query length, as FlashAttention).
        scale: the softmax scale, ``1/sqrt(D)`` by default; must be > 0.
        window: each query sees only the ``window`` keys ending at its causal position.
        softcap: scores become ``softcap * tanh(score / softcap)``.
        cu_seqlens: int32 ``[B + 1]`` offsets of each sequence in the packed tokens
            (self-attention: the same lengths for queries and keys). The tokens are padded to
            ``max_seqlen`` (the longest sequence; computed, with one device sync, when not
            given) and unpadded after.
        mask: added to the scores (float) or selecting them (bool, True attends), broadcastable
            to ``[B, H, Sq, Sk]`` with one plane, one per batch, or one per (batch, head).
        kv_offset: int32 ``[B]``: the cached keys before query 0 of each batch (KV-cache
            prefill); needs ``causal``.
        max_seqlen: with ``cu_seqlens``, the longest sequence.

    Returns:
        The attention output, shaped like ``q``.

    Autograd runs kir's attention backward kernels (causal and grouped-query attention; the
    other features need an attention backward that has them, else the backward raises
    :class:`kir.CompileError` naming the constant).
    """
    key = None
    if cu_seqlens is None and mask is None and kv_offset is None and not window and not softcap:
        if type(q) is Tensor and type(k) is Tensor and type(v) is Tensor:
            # A call like one already checked: straight to its plan (see `Seen`).
            key = (_sig(q), _sig(k), _sig(v), bool(causal), scale)
            plan = _plain_attention.get(key, (q, k, v))
            if plan is not None:
                return plan((q, k, v))[0]
    if cu_seqlens is not None:
        return _varlen(q, k, v, causal, scale, window, softcap, cu_seqlens, mask, kv_offset, max_seqlen)
    q = _cuda("q", q, ndim=(4,))
    k = _cuda("k", k, ndim=(4,))
    v = _cuda("v", v, ndim=(4,))
    _same(["q", "k", "v"], [q, k, v])
    if k.shape != v.shape:
        raise InputError(f"v: shape {tuple(v.shape)}, but k is {tuple(k.shape)}", argument="v")
    if k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3] or q.shape[1] % k.shape[1] != 0:
        raise InputError(
            f"k: shape {tuple(k.shape)} does not fit q {tuple(q.shape)} (same B and D, and heads "
            f"dividing q's)",
            argument="k",
        )
    d = q.shape[3]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    if not scale > 0.0:
        raise InputError(f"scale: must be > 0, got {scale}", argument="scale")
    if mask is not None:
        mask = _mask_planes(mask, q, k.shape[2])
    past = None
    if kv_offset is not None:
        if not causal:
            raise InputError("kv_offset: needs causal=True", argument="kv_offset")
        past = _cuda("kv_offset", kv_offset, dtypes=(torch.int32,), ndim=(1,))
    w = int(window) if window else 0
    sc = float(softcap) if softcap else 0.0
    o, _ = _attention_fwd(q, k, v, bool(causal), scale, w, sc, mask, None, past)
    if key is not None:
        # The constants and scalars `_attention_fwd_impl` ran with: its plan.
        consts = (("DTYPE", _launch.DTYPES[q.dtype]), ("HEAD_DIM", q.shape[-1]), ("CAUSAL", int(bool(causal))), ("WINDOW", 0), ("SOFTCAP", 0), ("MASK", 0), ("VARLEN", 0), ("KV_OFFSET", 0))
        _plain_attention.put(key, _plan_for("attention_fwd", consts, ("q", "k", "v"), (q, k, v), (("scale", scale),), q))
    return o


# Plain attention calls already checked (no mask, window, soft cap, varlen or KV offset).
_plain_attention = Seen()


def _varlen(q, k, v, causal, scale, window, softcap, cu_seqlens, mask, kv_offset, max_seqlen):
    q = _cuda("q", q, ndim=(3,))
    k = _cuda("k", k, ndim=(3,))
    v = _cuda("v", v, ndim=(3,))
    cu = _cuda("cu_seqlens", cu_seqlens, dtypes=(torch.int32,), ndim=(1,))
    if mask is not None or kv_offset is not None:
        arg = "mask" if mask is not None else "kv_offset"
        raise InputError(f"{arg}: not supported with cu_seqlens", argument=arg)
    if k.shape[0] != q.shape[0] or v.shape != k.shape:
        raise InputError("k: with cu_seqlens, q, k and v hold the same tokens (self-attention)", argument="k")
    b = cu.shape[0] - 1
    lengths = cu[1:] - cu[:-1]
    if max_seqlen is None:
        max_seqlen = int(lengths.max().item()) if b > 0 else 0
    total = q.shape[0]
    batch = torch.repeat_interleave(torch.arange(b, device=q.device), lengths.long(), output_size=total)
    pos = torch.arange(total, device=q.device) - cu[:-1].long()[batch]

    def pad(t: Tensor) -> Tensor:
        out = t.new_zeros(b, max_seqlen, t.shape[1], t.shape[2])
        out = out.index_put((batch, pos), t)
        return out.transpose(1, 2).contiguous()

    qp, kp, vp = pad(q), pad(k), pad(v)
    d = q.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    if not scale > 0.0:
        raise InputError(f"scale: must be > 0, got {scale}", argument="scale")
    # Queries past a sequence's length are padding: with causal, the kernel's KV offset of 0
    # aligns each sequence's causal mask at its own first token.
    past = torch.zeros(b, dtype=torch.int32, device=q.device) if causal else None
    w = int(window) if window else 0
    sc = float(softcap) if softcap else 0.0
    o, _ = _attention_fwd(qp, kp, vp, bool(causal), scale, w, sc, None, lengths.contiguous(), past)
    return o.transpose(1, 2)[batch, pos]


# ---- norms -------------------------------------------------------------------------------------


def _rms_norm_fwd_impl(x: Tensor, w: Tensor, eps: float) -> Tuple[Tensor, Tensor]:
    y, rstd = _run("rmsnorm_fwd", (("DTYPE", _launch.DTYPES[x.dtype]),), ("x", "w"), (x, w), (("eps", eps),), x)
    return y, rstd


def _rms_norm_fwd_fake(x, w, eps):
    return torch.empty_like(x), x.new_empty(x.shape[:1], dtype=torch.float32)


def _rms_norm_bwd_impl(dy: Tensor, x: Tensor, w: Tensor, eps: float) -> Tuple[Tensor, Tensor]:
    dx, dw = _run("rmsnorm_bwd", (("DTYPE", _launch.DTYPES[x.dtype]),), ("x", "w", "dy"), (x, w, dy), (("eps", eps),), x)
    return dx, dw


def _rms_norm_bwd_fake(dy, x, w, eps):
    return torch.empty_like(x), torch.empty_like(w)


_rms_norm_bwd = Op("rms_norm_bwd", _rms_norm_bwd_impl, _rms_norm_bwd_fake)


def _rms_setup(ctx, inputs, output):
    x, w, eps = inputs
    ctx.save_for_backward(x, w)
    ctx.eps = eps


def _rms_backward(ctx, dy, drstd):
    x, w = ctx.saved_tensors
    dx, dw = _rms_norm_bwd(dy.contiguous(), x, w, ctx.eps)
    return dx, dw, None


_rms_norm_fwd = Op("rms_norm_fwd", _rms_norm_fwd_impl, _rms_norm_fwd_fake, _rms_backward, _rms_setup)


def _rows(name: str, x: Tensor, weight: Tensor) -> Tensor:
    x = _cuda(name, x)
    weight = _cuda("weight", weight, ndim=(1,))
    _same([name, "weight"], [x, weight])
    if x.dim() == 0 or x.shape[-1] != weight.shape[0]:
        raise InputError(f"weight: {weight.shape[0]} elements, but {name} has {tuple(x.shape)} (the last dim is normalized)", argument="weight")
    return x.reshape(-1, x.shape[-1])


def rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    """RMSNorm over the last dim, as ``torch.nn.functional.rms_norm(x, (N,), weight, eps)``:
    ``y = x / sqrt(mean(x²) + eps) * weight``. bf16, f16 or f32, contiguous. Autograd through
    kir's rmsnorm_bwd (dx and dw; deterministic)."""
    key = None
    if type(x) is Tensor and type(weight) is Tensor:
        # A call like one already checked: straight to its plan (see `Seen`).
        key = (_sig(x), _sig(weight), eps)
        plan = _plain_rms_norm.get(key, (x, weight))
        if plan is not None:
            x2 = x if x.dim() == 2 else x.view(-1, x.shape[-1])
            y = plan((x2, weight))[0]
            return y if x2 is x else y.view(x.shape)
    x2 = _rows("x", x, weight)
    y, _ = _rms_norm_fwd(x2, weight, float(eps))
    if key is not None:
        # The plan `_rms_norm_fwd_impl` ran.
        consts = (("DTYPE", _launch.DTYPES[x2.dtype]),)
        _plain_rms_norm.put(key, _plan_for("rmsnorm_fwd", consts, ("x", "w"), (x2, weight), (("eps", float(eps)),), x2))
    return y.view(x.shape)


# rms_norm calls already checked.
_plain_rms_norm = Seen()


def _layer_norm_fwd_impl(x: Tensor, w: Tensor, b: Tensor, eps: float) -> Tuple[Tensor, Tensor, Tensor]:
    y, mean, rstd = _run("layernorm_fwd", (("DTYPE", _launch.DTYPES[x.dtype]),), ("x", "w", "b"), (x, w, b), (("eps", eps),), x)
    return y, mean, rstd


def _layer_norm_fwd_fake(x, w, b, eps):
    r = x.new_empty(x.shape[:1], dtype=torch.float32)
    return torch.empty_like(x), r, torch.empty_like(r)


def _layer_norm_bwd_impl(dy: Tensor, x: Tensor, w: Tensor, mean: Tensor, rstd: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    names = ("x", "w", "dy", "mean", "rstd")
    dx, dw, db = _run("layernorm_bwd", (("DTYPE", _launch.DTYPES[x.dtype]),), names, (x, w, dy, mean, rstd), (), x)
    return dx, dw, db


def _layer_norm_bwd_fake(dy, x, w, mean, rstd):
    return torch.empty_like(x), torch.empty_like(w), torch.empty_like(w)


_layer_norm_bwd = Op("layer_norm_bwd", _layer_norm_bwd_impl, _layer_norm_bwd_fake)


def _ln_setup(ctx, inputs, output):
    x, w, b, eps = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, w, mean, rstd)


def _ln_backward(ctx, dy, dmean, drstd):
    x, w, mean, rstd = ctx.saved_tensors
    dx, dw, db = _layer_norm_bwd(dy.contiguous(), x, w, mean, rstd)
    return dx, dw, db, None


_layer_norm_fwd = Op("layer_norm_fwd", _layer_norm_fwd_impl, _layer_norm_fwd_fake, _ln_backward, _ln_setup)


def layer_norm(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, eps: float = 1e-5) -> Tensor:
    """LayerNorm over the last dim, as ``torch.nn.functional.layer_norm(x, (N,), weight, bias,
    eps)``. bf16, f16 or f32, contiguous. Autograd through kir's layernorm_bwd (dx, dw, db;
    deterministic)."""
    x2 = _rows("x", x, weight)
    if bias is None:
        bias = torch.zeros_like(weight)
    else:
        bias = _cuda("bias", bias, ndim=(1,))
        _same(["weight", "bias"], [weight, bias])
        if bias.shape != weight.shape:
            raise InputError(f"bias: shape {tuple(bias.shape)}, but weight is {tuple(weight.shape)}", argument="bias")
    y, _, _ = _layer_norm_fwd(x2, weight, bias, float(eps))
    return y.view(x.shape)


from ._launch import Bound, bind, launch  # noqa: E402  (a user's own kernels on PyTorch tensors)
from ._torch_gemm import gemm, swiglu  # noqa: E402  (the GEMM and SwiGLU ops, same conventions)

__all__ = ["attention", "rms_norm", "layer_norm", "gemm", "swiglu", "launch", "bind", "Bound"]
