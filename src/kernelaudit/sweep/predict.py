"""What the rules predict for a case, derived from metadata alone.

:func:`predict` runs the case's op (forward, and backward for ``bwd`` cases) on
``meta`` tensors - shapes and strides only, no data - under a dispatch mode that
applies the fault model's rules to every covered call and tracks taint: the outputs
of a call the rules corrupt are tainted, and so is everything computed from a
tainted tensor. The prediction is ``error`` if any call raises by the rules,
``wrong`` if a judged output (forward outputs, or input gradients) is tainted, and
``ok`` otherwise. Tests compare it, case by case, with the sweep's verdicts on real
data: the sweep must find exactly what the rules say is there.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .ops.spec import DTYPES
from ..faults.mps import MATMUL_OPERANDS, _math_attention_only, _out_shape
from ..faults.predicates import Effect, TensorMeta, mps_matmul_decision

_TAINT = "_kernelaudit_taint"
#: Selection reductions: a wrapped read changes their result only if the selected
#: element lies past the wrap, which depends on the data.
_DATA_DEPENDENT = frozenset({torch.ops.aten.argmax, torch.ops.aten.amax, torch.ops.aten.max,
                             torch.ops.aten.argmin, torch.ops.aten.amin, torch.ops.aten.min})


def _tainted(x) -> bool:
    return isinstance(x, torch.Tensor) and getattr(x, _TAINT, False)


class _Predictor(TorchDispatchMode):
    def __init__(self, fault_model: str, th) -> None:
        super().__init__()
        self.fault_model = fault_model
        self.th = th
        self.raised: str | None = None
        self.corrupted: list[str] = []
        self.maybe: list[str] = []

    def _decide(self, func, args) -> Effect:
        packet = func.overloadpacket
        if self.fault_model in ("mps", "mps-abort") and packet in MATMUL_OPERANDS:
            mats = [args[i] for i in MATMUL_OPERANDS[packet]]
            d = mps_matmul_decision(_out_shape(packet, mats), [TensorMeta.of(m) for m in mats], self.th)
            if d.effect is Effect.RAISE:
                self.raised = self.raised or f"rule {d.rule}: {d.reason}"
            elif d.effect is not Effect.OK:
                self.corrupted.append(f"{packet.__name__} rule {d.rule}")
            return d.effect
        if self.fault_model == "wrap32":
            from ..faults.wrap32 import WRAP32_OPS
            if packet in WRAP32_OPS:
                flat, _ = tree_flatten(args)
                if any(isinstance(t, torch.Tensor) and t.numel() > self.th.t32 for t in flat):
                    if packet in _DATA_DEPENDENT:
                        self.maybe.append(f"{packet.__name__} wrap32 (data-dependent)")
                        return Effect.OK
                    self.corrupted.append(f"{packet.__name__} wrap32")
                    return Effect.WRAP
        return Effect.OK

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        effect = self._decide(func, args)
        out = func(*args, **kwargs)
        flat_in, _ = tree_flatten((args, kwargs))
        taint = effect in (Effect.PACKED, Effect.WRAP) or any(_tainted(t) for t in flat_in)
        if self.fault_model == "wrap32" and not taint:
            from ..faults.wrap32 import WRAP32_OPS
            flat_out, _ = tree_flatten(out)
            if func.overloadpacket in WRAP32_OPS and \
                    any(isinstance(t, torch.Tensor) and t.numel() > self.th.t32 for t in flat_out):
                self.corrupted.append(f"{func.overloadpacket.__name__} wrap32 (output)")
                taint = True
        if taint:
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    setattr(t, _TAINT, True)
            # in-place and out= ops taint their destination too
            if func._schema.is_mutable:
                for a in flat_in:
                    if isinstance(a, torch.Tensor):
                        setattr(a, _TAINT, True)
        return out


#: Predicted status when the rules say a result may or may not change visibly (see
#: _DATA_DEPENDENT, and corruption diluted in a 16-bit weight gradient).
EITHER = "ok|wrong"
_SIXTEEN_BIT = ("float16", "bfloat16")


def predict(case, fault_model: str) -> tuple[str, str]:
    """(predicted status, reason) for ``case`` under ``fault_model``, from metadata only.

    The status is ``ok``, ``wrong``, ``error``, :data:`EITHER` (data-dependent) or
    ``unknown`` (the op has no meta kernel)."""
    from .judge.operands import _as_tuple, placed_operands

    if fault_model == "none":
        return "ok", "honest backend"
    if fault_model == "hang":
        return "ok", "late past 2^31 elements, never wrong"
    spec = case.spec
    placed = placed_operands(case)
    bwd = case.direction == "bwd"
    shared: tuple[bool, ...] = ()
    bases, views = [], []
    for p in placed:
        base = torch.empty(p.storage_numel, dtype=p.dtype, device="meta")
        if bwd and p.operand.grad and p.dtype.is_floating_point:
            base.requires_grad_(True)
        bases.append(base)
        views.append(base.as_strided(p.shape, p.strides, p.offset))
    mode = _Predictor(fault_model, case.thresholds)
    try:
        with _math_attention_only(), mode:
            if spec.call is None:
                n = case.batch * spec.out_rows(case.series, case.thresholds)[0]
                outs = (spec.extra["factory"](n, DTYPES[case.dtype], "meta"),)
            else:
                outs = _as_tuple(spec.call(*views))
        if bwd:
            with mode:
                used = outs[: spec.bwd_outputs]
                # fresh tensors: an empty_like of a tainted output would be tainted
                torch.autograd.backward(used, [torch.empty(o.shape, dtype=o.dtype, device="meta") for o in used])
            shared = tuple(not p.batched for p, b in zip(placed, bases) if b.grad is not None)
            outs = tuple(b.grad for b in bases if b.grad is not None)
    except NotImplementedError as e:  # data-dependent ops (nonzero) have no meta kernel
        if fault_model in ("mps", "mps-abort") and not (mode.raised or mode.corrupted):
            # the mps rules cover matmuls only, and none ran before the op stopped tracing
            return "ok", "no call the mps rules cover"
        return "unknown", f"cannot predict on meta tensors: {e}"
    if mode.raised:
        return "error", mode.raised
    tainted = [_tainted(o) for o in outs]
    if any(tainted):
        why = "; ".join(dict.fromkeys(mode.corrupted))
        if case.dtype in _SIXTEEN_BIT and spec.extra.get("dilutes"):
            # a reduction of the whole tensor: the few wrapped elements past 2^32 move a
            # 16-bit result by a fraction of one rounding step
            return EITHER, why + " (diluted in a 16-bit full reduction)"
        if bwd and case.dtype in _SIXTEEN_BIT and all(sh for sh, t in zip(shared, tainted) if t):
            # Only gradients of shared operands (weights, biases) are tainted: each sums
            # every batch, so a few corrupted batches move it by a fraction of one
            # 16-bit rounding step, which no oracle on the 16-bit output can resolve.
            return EITHER, why + " (diluted in a 16-bit weight gradient)"
        return "wrong", why
    if mode.maybe:
        return EITHER, "; ".join(dict.fromkeys(mode.maybe))
    return "ok", "no covered call corrupts a judged output"
