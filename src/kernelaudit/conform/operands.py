"""Checks and shapes shared by the implementations under test (torch path, Triton kernel)."""

from __future__ import annotations

import torch

from kernelaudit.errors import InvalidArgument

from .recipe import Recipe
from .reference import TORCH_DTYPES, check_epilogue_args, check_int8_operands

__all__ = ["TORCH_DTYPES", "check_call", "scale_vector"]


def scale_vector(s: torch.Tensor, n: int, name: str, device) -> torch.Tensor:
    """A per-tensor ``[1]`` or per-row ``[n]`` scale as a contiguous fp32 ``[n]`` vector."""
    s = torch.as_tensor(s, dtype=torch.float32, device=device).reshape(-1)
    if s.numel() not in (1, n):
        raise InvalidArgument(f"Cannot have {name} with {s.numel()} elements: allowed are 1 or {n}")
    return s.expand(n).contiguous()


def check_call(xq, wq, sx, sw, bias, out_scale, recipe: Recipe) -> None:
    check_int8_operands(xq, wq)
    check_epilogue_args(recipe, bias, out_scale)
    if recipe.scale_order == "exact":
        raise InvalidArgument(
            "Cannot have scale_order='exact' in a kernel: allowed values are act_first, weight_first, product "
            "('exact' is the reference's single rounding)")
