"""Realistic epilogue faults of W8A8 GEMMs, as data.

Each :class:`Fault` is a mistake seen in real quantized kernels that moves outputs by
about one bfloat16 spacing or less (``control`` marks the one that moves them a lot, to
show the tolerance checks are not blind to everything). The Triton kernel and the torch
path both implement every fault: the kernel through its ``FAULT`` constexpr (``code``),
the torch path by ``name``. A fault ``applies`` to a recipe when it changes anything
there (bias faults need a bias, requantization faults int8 output, ...).
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelaudit.errors import check_choice

from .recipe import Recipe


@dataclass(frozen=True)
class Fault:
    name: str
    code: int  # the Triton kernel's FAULT constexpr; 0 is the correct kernel
    doc: str
    outs: tuple[str, ...] = ("fp32", "bf16", "fp16", "int8")
    needs_bias: bool = False
    control: bool = False

    def applies(self, recipe: Recipe) -> bool:
        if recipe.out not in self.outs or recipe.scale_order == "exact":
            return False
        if self.needs_bias and recipe.bias != "before_cast":
            return False
        if self.name == "half_away_rounding":
            return recipe.rounding == "half_even"
        if self.name == "full_clamp_range":
            return recipe.clamp == "symmetric"
        return True


_FP = ("fp32", "bf16", "fp16")
FAULTS: dict[str, Fault] = {f.name: f for f in (
    Fault("scales_in_bf16", 1, "sx and sw rounded to bf16 before they are applied"),
    Fault("scale_order_swapped", 2, "the two scales applied in the other order (act_first <-> weight_first; "
                                    "product -> act_first)"),
    Fault("bias_after_cast", 3, "bias added after the cast to the output dtype instead of in fp32 before it",
          outs=("bf16", "fp16"), needs_bias=True),
    Fault("bias_in_bf16", 4, "bias rounded to bf16 before the fp32 addition", outs=_FP, needs_bias=True),
    Fault("truncating_cast", 5, "fp32 -> bf16 by dropping the low 16 bits (round toward zero)", outs=("bf16",)),
    Fault("half_away_rounding", 6, "requantization rounds ties away from zero instead of to even", outs=("int8",)),
    Fault("truncating_requant", 7, "requantization truncates toward zero instead of rounding", outs=("int8",)),
    Fault("full_clamp_range", 8, "requantization saturates to [-128, 127] instead of [-127, 127]", outs=("int8",)),
    Fault("neighbour_channel_scale", 9, "output channel N//2 - 1 takes the weight scale of channel N//2"),
    Fault("neighbour_token_scale", 10, "row M//2 - 1 takes the activation scale of row M//2"),
    Fault("fp16_partial_sums", 11, "each K slice's sum, scaled, is stored in fp16 (a split-K workspace in "
                                   "half precision) and the slices are added in fp32"),
    Fault("no_saturation", 12, "requantization wraps modulo 256 instead of saturating (control: a large "
                               "error)", outs=("int8",), control=True),
)}


def get_fault(name: str | None) -> Fault | None:
    if name is None:
        return None
    check_choice("fault", name, FAULTS)
    return FAULTS[name]


def swapped_order(order: str) -> str:
    """The order a ``scale_order_swapped`` kernel uses instead of ``order``."""
    return {"act_first": "weight_first", "weight_first": "act_first", "product": "act_first"}[order]
