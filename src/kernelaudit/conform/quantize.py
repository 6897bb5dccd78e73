"""Symmetric int8 quantization of weights and activations, with free or power-of-two scales.

``scale = amax / 127`` (fp32) per tensor, per output channel (weights, ``[N, K]``) or per
token (activations, ``[M, K]``); ``q = clamp(round_half_even(v / scale), -127, 127)``.
A power-of-two scale is ``2^ceil(log2(scale))``: the smallest power of two that is not
below the free scale, so nothing saturates and each scaling step of the epilogue is
exact (a multiplication by 2^k only moves the exponent).
"""

from __future__ import annotations

import torch

from kernelaudit.errors import check_choice

GRANULARITIES = ("per_tensor", "per_row")  # per_row: per token (activations), per channel (weights)
SCALES = ("free", "pow2")


def pow2_scale(scale: torch.Tensor) -> torch.Tensor:
    """The smallest power of two >= each fp32 scale (exact: frexp gives the exponent)."""
    mant, exp = torch.frexp(scale.to(torch.float32))
    exp = torch.where(mant == 0.5, exp - 1, exp)  # already a power of two: keep it
    return torch.ldexp(torch.ones_like(scale, dtype=torch.float32), exp)


def quantize_rows(v: torch.Tensor, *, granularity: str = "per_row", scales: str = "free"):
    """``v [R, K]`` float -> ``(q int8 [R, K], scale fp32 [R] or [1])``."""
    check_choice("granularity", granularity, GRANULARITIES)
    check_choice("scales", scales, SCALES)
    v = v.to(torch.float32)
    amax = v.abs().amax(dim=1) if granularity == "per_row" else v.abs().amax().reshape(1)
    scale = torch.clamp(amax, min=1e-12) / 127.0
    if scales == "pow2":
        scale = pow2_scale(scale)
    s = scale[:, None] if granularity == "per_row" else scale
    q = torch.clamp(torch.round(v / s), -127, 127).to(torch.int8)
    return q, scale


def dequantize_rows(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    s = scale[:, None] if scale.numel() == q.shape[0] and q.shape[0] > 1 else scale
    return q.to(torch.float32) * s
