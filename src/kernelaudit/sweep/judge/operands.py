"""The inputs of a case: its operands placed in storage, and as device tensors.
"""

from __future__ import annotations

import torch

from .. import gen
from ..cases import Case
from ..ops.spec import DTYPES, Placed, layout_roles, place


def placed_operands(case: Case) -> list[Placed]:
    """The case's operands placed in storage (layouts applied), with their stream keys."""
    spec = case.spec
    ops = spec.operands(case.series, case.batch, case.thresholds)
    roles = layout_roles(case.layout, len(ops), [o.transposable for o in ops]) if ops else []
    out = []
    for i, (o, role) in enumerate(zip(ops, roles)):
        dt = torch.int64 if o.kind == "index" else DTYPES[case.dtype]
        out.append(place(o, role, dt, gen.stream_key(case.seed, f"{case.op}/{case.series}/{i}")))
    return out


def device_inputs(placed: list[Placed], device, *, grad: bool) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(bases, views): storage tensors (the autograd leaves) and the views the op gets."""
    bases, views = [], []
    for p in placed:
        base = gen.fill_flat(p.storage_numel, p.key, p.dtype, device, high=p.operand.high)
        if grad and p.operand.grad and p.dtype.is_floating_point:
            base.requires_grad_(True)
        bases.append(base)
        views.append(base.as_strided(p.shape, p.strides, p.offset))
    return bases, views


def _as_tuple(x) -> tuple:
    if isinstance(x, torch.Tensor):
        return (x,)
    return tuple(x)


def materialized(t: torch.Tensor) -> torch.Tensor:
    """``t`` with storage: autograd returns a ZeroTensor (no storage, a null data
    pointer) for gradients known to be zero, such as ``sgn``'s of a real input; the
    judge's Triton kernels read data pointers, and a null one is an illegal memory
    access on CUDA."""
    return t.clone() if t._is_zerotensor() else t


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
