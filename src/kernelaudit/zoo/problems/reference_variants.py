"""Candidates made from a problem's own ``Model``: the reference, a split-K reordering, precision downgrades.

They calibrate and test the error models with no hand-written kernel:

``reference``   ``Model`` itself as ``ModelNew`` (a correct candidate by definition);
``split``       ``Model`` with every matmul, batched matmul, linear and convolution
                (``groups=1``, transposed too) split in two along its reduction (inner
                dimension or input channels) and the halves added, and every sum and
                mean over one dimension split the same way: a correct candidate whose
                accumulation order no torch backend uses (a split-K kernel);
``bf16``, ``fp16``  ``Model`` with parameters and inputs cast to that dtype, the output cast
                back (an fp32 problem computed in half precision: wrong);
``tf32``        ``Model`` with the operands of every matmul, linear, convolution and
                ``scaled_dot_product_attention`` rounded to
                10 mantissa bits (TF32 tensor cores: wrong unless the problem allows TF32).

``variant_candidate(problem, kind)`` returns a :class:`~.loader.Candidate` that
``Subject`` runs like any candidate file.
"""

from __future__ import annotations

import copy
from types import ModuleType

import torch
from torch.overrides import TorchFunctionMode

from .loader import Candidate, Problem

#: Kinds :func:`variant_candidate` builds, and whether a correct checker must accept them.
VARIANT_KINDS = {"reference": True, "split": True, "bf16": False, "fp16": False, "tf32": False}

F = torch.nn.functional
#: Products split along their inner dimension: (a, b) -> a[..., h] @ b[..., h, :].
_MATMULS = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.mm, torch.Tensor.mm, torch.bmm,
            torch.Tensor.bmm}
#: Convolutions by their argument names (input channels split where groups == 1).
_CONVS = {F.conv1d: "conv", F.conv2d: "conv", F.conv3d: "conv", F.conv_transpose1d: "transpose",
          F.conv_transpose2d: "transpose", F.conv_transpose3d: "transpose"}
_CONV_ARGS = {"conv": ("input", "weight", "bias", "stride", "padding", "dilation", "groups"),
              "transpose": ("input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation")}
_REDUCTIONS = {torch.sum: "sum", torch.Tensor.sum: "sum", torch.mean: "mean", torch.Tensor.mean: "mean"}


def _round_tf32(t: torch.Tensor) -> torch.Tensor:
    """float32 rounded to 10 mantissa bits (nearest), as TF32 tensor cores read operands."""
    if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
        return t
    bits = t.contiguous().view(torch.int32)
    rounded = ((bits + 0x1000) & ~0x1FFF).view(torch.float32)
    return torch.where(torch.isfinite(t), rounded, t)


def _halves(n: int) -> tuple[slice, slice] | None:
    return (slice(0, n // 2), slice(n // 2, n)) if n >= 2 else None


def _bind(names: tuple[str, ...], args: tuple, kwargs: dict) -> dict:
    bound = dict(zip(names, args))
    bound.update(kwargs)
    return bound


class SplitReductions(TorchFunctionMode):
    """Split the reduction of matmul, linear, convolution, sum and mean over one dim in two halves.

    A ``TorchFunctionMode`` (the Python API level), not a dispatch mode: entering a
    dispatch mode imports ``torch._dynamo``, seconds of a test's budget.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        out = self._split(func, args, kwargs)
        return func(*args, **kwargs) if out is NotImplemented else out

    @staticmethod
    def _split(func, args, kwargs):  # noqa: ANN001, ANN205, C901 - one branch per op family
        if func in _MATMULS and len(args) == 2 and not kwargs:
            a, b = args
            if a.dim() >= 2 and b.dim() >= 2 and a.is_floating_point() and (h := _halves(a.shape[-1])):
                return func(a[..., h[0]], b[..., h[0], :]) + func(a[..., h[1]], b[..., h[1], :])
        elif func is F.linear:
            x, w = args[0], args[1]
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            if x.is_floating_point() and (h := _halves(x.shape[-1])):
                y = F.linear(x[..., h[0]], w[:, h[0]]) + F.linear(x[..., h[1]], w[:, h[1]])
                return y + bias if bias is not None else y
        elif func in _CONVS:
            kind = _CONV_ARGS[_CONVS[func]]
            bound = _bind(kind, args, kwargs)
            x, w, bias = bound["input"], bound["weight"], bound.get("bias")
            plain = bound.get("groups", 1) == 1 and isinstance(bound.get("padding", 0), (int, tuple))
            if plain and x.is_floating_point() and (h := _halves(x.shape[1])):
                rest = {k: v for k, v in bound.items() if k not in ("input", "weight", "bias")}
                wa, wb = (w[:, h[0]], w[:, h[1]]) if _CONVS[func] == "conv" else (w[h[0]], w[h[1]])
                y = func(x[:, h[0]], wa, None, **rest) + func(x[:, h[1]], wb, None, **rest)
                return y + bias.reshape((1, -1) + (1,) * (y.dim() - 2)) if bias is not None else y
        elif func in _REDUCTIONS:
            x = args[0]
            dim = args[1] if len(args) > 1 else kwargs.get("dim")
            keep = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
            if isinstance(dim, (list, tuple)) and len(dim) == 1:
                dim = dim[0]
            if (isinstance(x, torch.Tensor) and x.is_floating_point() and isinstance(dim, int) and x.dim() > 0
                    and set(kwargs) <= {"dim", "keepdim"} and len(args) <= 3):
                d = dim % x.dim()
                if h := _halves(x.shape[d]):
                    s = (x.narrow(d, 0, h[0].stop).sum(d, keepdim=keep)
                         + x.narrow(d, h[1].start, x.shape[d] - h[1].start).sum(d, keepdim=keep))
                    return s / x.shape[d] if _REDUCTIONS[func] == "mean" else s
        return NotImplemented


class RoundTF32Operands(TorchFunctionMode):
    """Round the operands of matmul, linear and convolution to TF32."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if func in _MATMULS or func in _CONVS or func in (F.linear, torch.addmm, torch.baddbmm,
                                                         F.scaled_dot_product_attention):
            args = tuple(_round_tf32(a) for a in args)
            kwargs = {k: _round_tf32(v) for k, v in kwargs.items()}
        return func(*args, **kwargs)


def _wrap(problem: Problem, kind: str) -> type:
    model_cls = problem.Model

    class ModelNew(torch.nn.Module):
        def __init__(self, *init):
            super().__init__()
            self.inner = model_cls(*init)  # same seed, same construction order: same parameters
            self._low: torch.nn.Module | None = None

        def forward(self, *inputs):
            if kind in ("bf16", "fp16"):
                low = torch.bfloat16 if kind == "bf16" else torch.float16
                if self._low is None:
                    self._low = copy.deepcopy(self.inner).to(low)
                out = self._low(*[x.to(low) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                                  for x in inputs])
                want = next((x.dtype for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point()),
                            torch.float32)
                cast = (lambda t: t.to(want) if t.is_floating_point() else t)  # noqa: E731
                return cast(out) if isinstance(out, torch.Tensor) else type(out)(cast(t) for t in out)
            mode = {"split": SplitReductions, "tf32": RoundTF32Operands}.get(kind)
            if mode is None:
                return self.inner(*inputs)
            with mode():
                return self.inner(*inputs)

    return ModelNew


def variant_candidate(problem: Problem, kind: str) -> Candidate:
    """A candidate of ``kind`` (see module docs) for ``problem``; ``EXPECT`` says whether it is correct."""
    if kind not in VARIANT_KINDS:
        from ...errors import InvalidArgument

        raise InvalidArgument(f"Cannot build variant kind={kind!r}: allowed kinds are {', '.join(VARIANT_KINDS)}")
    module = ModuleType(f"_kernelaudit_variant_{problem.name}_{kind}")
    module.ModelNew = _wrap(problem, kind)
    module.PROBLEM = problem.name
    module.EXPECT = "correct" if VARIANT_KINDS[kind] else "wrong"
    module.VARIANT = kind
    return Candidate(name=f"{problem.name}__{kind}", path=problem.path, module=module)
