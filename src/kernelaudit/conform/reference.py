"""The exact CPU reference for W8A8 GEMMs: every :class:`Recipe` variant, correctly rounded.

The accumulation is exact (int64 on the CPU) and checked against int32's range: since
int32 additions wrap modulo 2^32, an int32 accumulator returns the exact sum in any
order exactly when the final sum fits, so the final value is all that must be checked.

Every step that the recipe says rounds is computed in float64 and rounded with
:func:`round_to_format`. That is the correctly rounded fp32 result: a product of two fp32
numbers is exact in float64, and a sum rounded first to float64 then to fp32 is
correctly rounded because 53 >= 2 * 24 + 2 (double rounding is innocuous). The
``exact`` scale order is computed in rational arithmetic and rounded once.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import torch

from kernelaudit.errors import InvalidArgument

from .formats import FORMATS, round_fraction, round_fraction_integer, round_integer, round_to_format
from .recipe import Recipe

INT32_MAX = 2**31 - 1
TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "int8": torch.int8}


def exact_accumulate(xq: torch.Tensor, wq: torch.Tensor) -> np.ndarray:
    """``acc[m, n] = sum_k xq[m, k] * wq[n, k]`` exactly (int64); raises if it leaves int32."""
    check_int8_operands(xq, wq)
    acc = (xq.cpu().long() @ wq.cpu().long().T).numpy()
    bad = np.flatnonzero(np.abs(acc) > INT32_MAX)
    if bad.size:
        first = int(bad[0])
        n = acc.shape[1]
        raise InvalidArgument(
            f"Cannot accumulate int8 GEMM {tuple(xq.shape)} x {tuple(wq.shape)}^T in int32: "
            f"{bad.size} sums leave [-2^31, 2^31 - 1], first at flat index {first} "
            f"(row {first // n}, column {first % n}) = {int(acc.flat[first])}")
    return acc


def check_int8_operands(xq: torch.Tensor, wq: torch.Tensor) -> None:
    if xq.dtype != torch.int8 or wq.dtype != torch.int8:
        raise InvalidArgument(f"Cannot have xq.dtype={xq.dtype}, wq.dtype={wq.dtype}: allowed values are torch.int8")
    if xq.dim() != 2 or wq.dim() != 2 or xq.shape[1] != wq.shape[1]:
        raise InvalidArgument(
            f"Cannot multiply xq {tuple(xq.shape)} by wq {tuple(wq.shape)}^T: allowed shapes are [M, K] and [N, K]")


def _f64(t: torch.Tensor | None, n: int) -> np.ndarray:
    """A scale or bias as float64 values of its fp32 numbers, broadcast to length ``n``."""
    v = t.detach().cpu().to(torch.float32).reshape(-1).double().numpy()
    return np.broadcast_to(v, (n,)) if v.size == 1 else v


def reference_gemm(xq, wq, sx, sw, *, bias=None, out_scale=None, recipe: Recipe = Recipe()) -> torch.Tensor:
    """``recipe`` applied to ``xq [M, K] int8``, ``wq [N, K] int8``, ``sx [M] or [1]``,
    ``sw [N] or [1]`` (fp32), ``bias [N]`` (fp32) and, for int8 output, ``out_scale``
    (fp32 scalar: the output is divided by it). Returns a CPU tensor of the output dtype."""
    acc = exact_accumulate(xq, wq)
    m, n = acc.shape
    check_epilogue_args(recipe, bias, out_scale)
    a, w = _f64(sx, m)[:, None], _f64(sw, n)[None, :]
    b = None if bias is None else _f64(bias, n)[None, :]
    if recipe.scale_order == "exact":
        y = _exact_epilogue(acc, a, w, b, out_scale, recipe)
    else:
        y = _stepwise_epilogue(acc.astype(np.float64), a, w, b, out_scale, recipe)
    return _as_torch(y, recipe.out)


def check_epilogue_args(recipe: Recipe, bias, out_scale) -> None:
    if (bias is None) != (recipe.bias == "none"):
        raise InvalidArgument(
            f"Cannot have bias={'None' if bias is None else 'a tensor'} with recipe bias={recipe.bias!r}: "
            "give a bias exactly when the recipe adds one")
    if (out_scale is None) != (recipe.out != "int8"):
        raise InvalidArgument(
            f"Cannot have out_scale={out_scale!r} with out={recipe.out!r}: int8 output needs one, others none")


def _stepwise_epilogue(acc, a, w, b, out_scale, r: Recipe) -> np.ndarray:
    r32 = lambda v: round_to_format(v, "fp32")  # noqa: E731
    accf = r32(acc)
    if r.scale_order == "act_first":
        t = r32(r32(accf * a) * w)
    elif r.scale_order == "weight_first":
        t = r32(r32(accf * w) * a)
    else:  # product
        t = r32(accf * r32(a * w))
    if r.bias == "before_cast":
        t = r32(t + b)
    if r.out == "int8":
        return _requantize(r32(t * _inverse(out_scale)), r)
    y = round_to_format(t, r.out)
    if r.bias == "after_cast":
        y = round_to_format(y + round_to_format(b, r.out), r.out)
    return y


def _inverse(out_scale) -> float:
    """The fp32 multiplier ``1 / out_scale`` rounded to fp32, as implementations hold it."""
    s = float(torch.as_tensor(out_scale, dtype=torch.float32))
    return float(round_to_format(np.float64(1.0) / s, "fp32"))


def _requantize(v: np.ndarray, r: Recipe) -> np.ndarray:
    lo, hi = r.clamp_range
    return np.clip(round_integer(v, r.rounding), lo, hi)


def _exact_epilogue(acc, a, w, b, out_scale, r: Recipe) -> np.ndarray:
    """One rounding at the end: ``round(acc * sx * sw (+ bias) (* inv))`` in rationals."""
    fa = [Fraction(float(v)) for v in a[:, 0]]
    fw = [Fraction(float(v)) for v in w[0]]
    fb = None if b is None else [Fraction(float(v)) for v in b[0]]
    inv = None if out_scale is None else Fraction(_inverse(out_scale))
    out = np.empty(acc.shape, dtype=np.float64)
    fmt = FORMATS.get(r.out)
    for i, j in np.ndindex(acc.shape):
        v = int(acc[i, j]) * fa[i] * fw[j]
        if fb is not None and r.bias == "before_cast":
            v += fb[j]
        if r.out == "int8":
            lo, hi = r.clamp_range
            out[i, j] = min(max(round_fraction_integer(v * inv, r.rounding), lo), hi)
        else:
            out[i, j] = round_fraction(v, fmt)
    if r.bias == "after_cast":
        out = round_to_format(out + round_to_format(b, r.out), r.out)
    return out


def _as_torch(y: np.ndarray, out: str) -> torch.Tensor:
    # y holds numbers of the output format already, so these casts are exact
    if out == "int8":
        return torch.from_numpy(y.astype(np.int8))
    return torch.from_numpy(y.astype(np.float32)).to(TORCH_DTYPES[out])
