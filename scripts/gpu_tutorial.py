#!/usr/bin/env python3
"""The GPU step of docs/tutorial.md: docs/tutorial/softmax_xent.kir launched from PyTorch with
kir.torch.launch, against torch.nn.functional.cross_entropy and torch.logsumexp in float64.

For bf16 and f32 logits, on ragged R and V (1 × 1 up to 2048 × 128,256; row shifts up to ±50,
scale 4) with every 7th row labelled -100:

- loss and lse are f32 tensors of shape [R] on the logits' device;
- ignored rows have loss exactly 0; rows whose label is out of range (V, -1) have loss NaN and
  a correct lse; every other element is finite and within 2e-5 (the project's f32 tolerance)
  of its scale 1 + |reference| from the float64 reference on the same (bf16 or f32) values,
  and so is the L2 norm of the errors against that of the scales (the floor 1: a loss near 0
  is log s with s near 1, which f32 knows only to about 1e-7 absolutely);
- PyTorch's own f32 error on the same inputs is printed beside kir's, for context.

It also checks that a dtype the kernel refuses (DTYPE=f32 on bf16 logits, int64 labels) raises
kir.InputError before anything launches.

usage: python3 scripts/gpu_tutorial.py   (kir and PyTorch installed, a CUDA GPU, sm_80 or newer)
Exit code: 0 when every check passes, 1 otherwise.
"""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import kir
import kir.torch

KERNEL = str(Path(__file__).resolve().parents[1] / "docs/tutorial/softmax_xent.kir")
IGNORE = -100
DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32}
SHAPES = [(1, 1), (3, 5), (37, 2047), (64, 4097), (513, 32000), (1000, 50257), (4096, 50257), (2048, 128256)]
dev = torch.device("cuda")
failures = []


def fail(what):
    print(f"  FAIL: {what}")
    failures.append(what)


def case(dtype, r, v, gen):
    what = f"{dtype} R={r} V={v}"
    shift = torch.empty(r, 1, device=dev, dtype=torch.float64).uniform_(-50, 50, generator=gen)
    x64 = shift + 4.0 * torch.randn(r, v, device=dev, dtype=torch.float64, generator=gen)
    logits = x64.to(DTYPES[dtype])
    labels = torch.randint(0, v, (r,), device=dev, dtype=torch.int32, generator=gen)
    labels[::7] = IGNORE
    bad = torch.zeros(r, dtype=torch.bool, device=dev)
    if r >= 6:
        labels[3], labels[5] = v, -1  # out of range: loss NaN
        bad[3] = bad[5] = True

    out = kir.torch.launch(KERNEL, {"logits": logits, "labels": labels}, {}, DTYPE=dtype)
    loss, lse = out["loss"], out["lse"]
    for name, t in (("loss", loss), ("lse", lse)):
        if t.dtype != torch.float32 or tuple(t.shape) != (r,) or t.device != logits.device:
            fail(f"{what}: {name} is {t.dtype} {tuple(t.shape)} on {t.device}")
            return

    # The references on the same values: float64, and PyTorch's own f32 for context.
    xs = logits.double()
    safe = torch.where(bad, torch.full_like(labels, IGNORE), labels).long()
    ref_lse = torch.logsumexp(xs, dim=1)
    ref_loss = F.cross_entropy(xs, safe, reduction="none", ignore_index=IGNORE)
    torch_loss = F.cross_entropy(logits.float(), safe, reduction="none", ignore_index=IGNORE)
    ignored = labels == IGNORE
    good = ~ignored & ~bad

    if not torch.equal(loss[ignored], torch.zeros_like(loss[ignored])):
        fail(f"{what}: ignored rows have nonzero loss")
    if bad.any() and not torch.isnan(loss[bad]).all():
        fail(f"{what}: out-of-range labels do not give NaN: {loss[bad].tolist()}")
    if not torch.isfinite(lse).all() or not torch.isfinite(loss[good | ignored]).all():
        fail(f"{what}: non-finite values where finite ones are expected")
        return

    line = [what]
    for name, got, ref, rows in (("loss", loss, ref_loss, good), ("lse", lse, ref_lse, torch.ones_like(good))):
        if not rows.any():
            continue
        g, rf = got[rows].double(), ref[rows]
        err = (g - rf).abs()
        scale = 1.0 + rf.abs()
        worst = (err / scale).max().item()
        l2 = (err.norm() / scale.norm()).item()
        line.append(f"{name} max err/scale {worst:.1e} L2 {l2:.1e}")
        if worst > 2e-5 or l2 > 2e-5:
            fail(f"{what}: {name} error {worst:.2e} of its scale, L2 {l2:.2e} (bounds 2e-5)")
    if good.any():
        t_err = ((torch_loss[good].double() - ref_loss[good]).abs() / (1.0 + ref_loss[good].abs())).max().item()
        line.append(f"(torch f32 loss {t_err:.1e})")
    print("  " + ", ".join(line))


def refused(what, fn):
    try:
        fn()
    except kir.InputError as e:
        print(f"  {what}: kir.InputError ({e.argument}) ok")
        return
    except Exception as e:  # noqa: BLE001 (any other exception is the failure reported)
        fail(f"{what}: raised {type(e).__name__}: {e}")
        return
    fail(f"{what}: no error")


def main():
    if not torch.cuda.is_available():
        print("gpu_tutorial.py: no CUDA device", file=sys.stderr)
        return 1
    print(f"device: {torch.cuda.get_device_name()}; kernel {KERNEL}")
    gen = torch.Generator(device=dev)
    gen.manual_seed(20261203)
    for dtype in DTYPES:
        for r, v in SHAPES:
            case(dtype, r, v, gen)
    torch.cuda.synchronize()

    x = torch.randn(4, 100, device=dev).to(torch.bfloat16)
    y = torch.randint(0, 100, (4,), device=dev, dtype=torch.int32)
    refused("DTYPE=f32 on bf16 logits", lambda: kir.torch.launch(KERNEL, {"logits": x, "labels": y}, {}, DTYPE="f32"))
    refused("int64 labels", lambda: kir.torch.launch(KERNEL, {"logits": x, "labels": y.long()}, {}, DTYPE="bf16"))

    print("FAILED: " + "; ".join(failures) if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
