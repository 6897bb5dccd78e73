"""The torch implementation under test: ``torch._int_mm`` followed by a torch epilogue.

Each step of the :class:`Recipe` is one eager torch operation in fp32 (no contraction
into fused multiply-adds), so this path rounds exactly where the recipe says. ``fault``
(a name from :data:`FAULTS`) plants one mistake, as a real implementation would make it.
"""

from __future__ import annotations

import torch

from .faults import get_fault, swapped_order
from .operands import TORCH_DTYPES, check_call, scale_vector
from .recipe import Recipe

PARTIAL_K = 32  # the slice of K that fp16_partial_sums passes through fp16


def int_mm(xq: torch.Tensor, wq: torch.Tensor) -> torch.Tensor:
    """``xq [M, K] @ wq[N, K]^T`` in int32 through ``torch._int_mm``; CUDA wants M > 16 and
    K, N multiples of 8, so rows and K are zero-padded there (zeros add nothing)."""
    m, k = xq.shape
    n = wq.shape[0]
    if xq.device.type != "cuda":
        return torch._int_mm(_packed(xq), _packed(wq.t()))
    mp, kp, np_ = max(m, 17), -(-k // 8) * 8, -(-n // 8) * 8
    if (mp, kp, np_) != (m, k, n):
        xq = torch.nn.functional.pad(xq, (0, kp - k, 0, mp - m))
        wq = torch.nn.functional.pad(wq, (0, kp - k, 0, np_ - n))
    return torch._int_mm(xq.contiguous(), wq.contiguous().t())[:m, :n]


def _packed(t: torch.Tensor) -> torch.Tensor:
    """``t`` in freshly allocated row-major memory, strides of size-1 dimensions included:
    torch 2.13's CPU ``_int_mm`` returns uninitialized memory for a [1, N] operand with
    strides (1, 1) (a transposed [N, 1] view, which torch calls contiguous). Found by this
    package's Hypothesis property, 2026-12-03."""
    return torch.empty(t.shape, dtype=t.dtype, device=t.device).copy_(t)


def round_bf16_truncating(t: torch.Tensor) -> torch.Tensor:
    bits = t.contiguous().view(torch.int32) & ~0xFFFF
    return bits.view(torch.float32).to(torch.bfloat16)  # exact: the low bits are zero


def round_half_away(v: torch.Tensor) -> torch.Tensor:
    a = v.abs()
    r = torch.floor(a)
    return torch.copysign(r + (a - r >= 0.5).to(v.dtype), v)  # a - r exact: no v + 0.5 trap


def torch_w8a8(xq, wq, sx, sw, *, bias=None, out_scale=None, recipe: Recipe = Recipe(), fault: str | None = None):
    """The W8A8 GEMM ``recipe`` with ``torch._int_mm`` and eager fp32 torch ops."""
    check_call(xq, wq, sx, sw, bias, out_scale, recipe)
    f = get_fault(fault)
    name = f.name if f is not None and f.applies(recipe) else None
    m, n = xq.shape[0], wq.shape[0]
    a = scale_vector(sx, m, "sx", xq.device)[:, None]  # [M, 1]
    w = scale_vector(sw, n, "sw", xq.device)[None, :]  # [1, N]
    if name == "scales_in_bf16":
        a, w = a.to(torch.bfloat16).float(), w.to(torch.bfloat16).float()
    if name == "neighbour_channel_scale" and n >= 2:
        w = w.clone()
        w[0, n // 2 - 1] = w[0, n // 2]
    if name == "neighbour_token_scale" and m >= 2:
        a = a.clone()
        a[m // 2 - 1, 0] = a[m // 2, 0]
    order = swapped_order(recipe.scale_order) if name == "scale_order_swapped" else recipe.scale_order
    if name == "fp16_partial_sums":
        t = _fp16_partial_sums(xq, wq, a, w)
    else:
        t = _scale(int_mm(xq, wq).to(torch.float32), a, w, order)
    b = None if bias is None else bias.to(device=xq.device, dtype=torch.float32)[None, :]
    if name == "bias_in_bf16":
        b = b.to(torch.bfloat16).float()
    bias_mode = "after_cast" if name == "bias_after_cast" else recipe.bias
    if bias_mode == "before_cast":
        t = t + b
    if recipe.out == "int8":
        return _requantize(t, out_scale, recipe, name)
    y = round_bf16_truncating(t) if name == "truncating_cast" else t.to(TORCH_DTYPES[recipe.out])
    if bias_mode == "after_cast":
        y = y + b.to(y.dtype)
    return y


def _fp16_partial_sums(xq, wq, a, w) -> torch.Tensor:
    t = torch.zeros(xq.shape[0], wq.shape[0], dtype=torch.float32, device=xq.device)
    for k0 in range(0, xq.shape[1], PARTIAL_K):
        part = int_mm(xq[:, k0:k0 + PARTIAL_K], wq[:, k0:k0 + PARTIAL_K]).to(torch.float32)
        t = t + ((part * a) * w).to(torch.float16).float()
    return t


def _scale(accf, a, w, order: str) -> torch.Tensor:
    if order == "act_first":
        return (accf * a) * w
    if order == "weight_first":
        return (accf * w) * a
    return accf * (a * w)


def _requantize(t, out_scale, recipe: Recipe, name) -> torch.Tensor:
    inv = (1.0 / torch.as_tensor(out_scale, dtype=torch.float64)).to(torch.float32).to(t.device)
    v = torch.clamp(t * inv, -2.0**20, 2.0**20)
    if name == "truncating_requant":
        r = torch.trunc(v)
    elif recipe.rounding == "half_away" or name == "half_away_rounding":
        r = round_half_away(v)
    else:
        r = torch.round(v)  # half to even
    lo, hi = (-128, 127) if name == "full_clamp_range" else recipe.clamp_range
    if name == "no_saturation":
        return r.to(torch.int32).to(torch.int8)  # wraps modulo 256
    return torch.clamp(r, lo, hi).to(torch.int8)
