"""The W8A8 GEMM epilogue spelled out: every option a real implementation picks.

A :class:`Recipe` names, step by step, what happens after the exact int32
accumulation ``acc[m, n] = sum_k xq[m, k] * wq[n, k]``:

1. ``accf = fp32(acc)``                       (round to nearest even; exact while |acc| <= 2^24)
2. the two scales, in the order ``scale_order`` says, each product rounded to fp32:
   ``act_first``    ``(accf * sx[m]) * sw[n]``
   ``weight_first`` ``(accf * sw[n]) * sx[m]``
   ``product``      ``accf * fp32(sx[m] * sw[n])``
   ``exact``        ``acc * sx[m] * sw[n] (+ bias[n])`` computed exactly, rounded once at the end
3. ``bias`` (fp32, per output channel): ``none``; ``before_cast`` (``fp32(t + bias)``);
   ``after_cast`` (``out(out(t) + out(bias))``: the cast first, then the bias in the
   output dtype, as ``linear(...).to(bf16) + bias`` does).
4. the output: ``fp32``, ``bf16`` or ``fp16`` (round to nearest even, overflow to inf), or
   ``int8``: ``q = clamp(round(fp32(t * inv_out_scale)), *clamp)`` with ``rounding``
   ``half_even`` or ``half_away`` and ``clamp`` ``symmetric`` ([-127, 127]) or ``full``
   ([-128, 127]).

This module imports no torch: a recipe is plain data, checked when it is built.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import InvalidArgument, check_choice

SCALE_ORDERS = ("act_first", "weight_first", "product", "exact")
BIAS_MODES = ("none", "before_cast", "after_cast")
OUT_DTYPES = ("fp32", "bf16", "fp16", "int8")
ROUNDINGS = ("half_even", "half_away")
CLAMPS = {"symmetric": (-127, 127), "full": (-128, 127)}


@dataclass(frozen=True)
class Recipe:
    """One variant of the W8A8 epilogue (see the module docstring for each step)."""

    out: str = "bf16"
    scale_order: str = "act_first"
    bias: str = "before_cast"
    rounding: str = "half_even"
    clamp: str = "symmetric"

    def __post_init__(self) -> None:
        check_choice("out", self.out, OUT_DTYPES)
        check_choice("scale_order", self.scale_order, SCALE_ORDERS)
        check_choice("bias", self.bias, BIAS_MODES)
        check_choice("rounding", self.rounding, ROUNDINGS)
        check_choice("clamp", self.clamp, CLAMPS)
        if self.out == "int8" and self.bias == "after_cast":
            raise InvalidArgument(
                "Cannot have bias='after_cast' with out='int8': allowed values are none, before_cast")

    @property
    def clamp_range(self) -> tuple[int, int]:
        return CLAMPS[self.clamp]

    def but(self, **changes) -> "Recipe":
        """A copy with some options changed (checked again)."""
        return replace(self, **changes)

    def describe(self) -> str:
        parts = [f"out={self.out}", f"scales={self.scale_order}", f"bias={self.bias}"]
        if self.out == "int8":
            parts += [f"rounding={self.rounding}", f"clamp={self.clamp}"]
        return " ".join(parts)
