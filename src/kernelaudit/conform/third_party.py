"""Third-party W8A8 paths under test, where installed: torchao's ``int_scaled_matmul``.

torchao's int8 dynamic-activation / int8-weight linear computes
``int_scaled_matmul(xq, wq^T, sx) * sw (+ bias)``: the int32 product times the per-token
scale, then the per-channel scale, then the bias, each a rounding step in the scales'
dtype. With fp32 scales that is the recipe ``act_first`` / ``before_cast``, which is
what it is judged against; other recipes are not its own and are refused.
(In a bf16 model torchao holds the scales in bf16: the ``scales_in_bf16`` fault's
numbers, by design.)
"""

from __future__ import annotations

import torch

from kernelaudit import config
from kernelaudit.errors import InvalidArgument

from .operands import TORCH_DTYPES, check_call, scale_vector
from .recipe import Recipe



def torchao_supports(recipe: Recipe) -> bool:
    return recipe.scale_order == "act_first" and recipe.out != "int8" and recipe.bias != "after_cast"


def torchao_w8a8(xq, wq, sx, sw, *, bias=None, out_scale=None, recipe: Recipe = Recipe(), fault=None):
    """The W8A8 GEMM through ``torchao.kernel.intmm.int_scaled_matmul`` (faults: none)."""
    check_call(xq, wq, sx, sw, bias, out_scale, recipe)
    if not torchao_supports(recipe) or fault is not None:
        raise InvalidArgument(f"Cannot run torchao with {recipe.describe()}, fault={fault!r}: allowed is "
                              "scales=act_first, bias none or before_cast, out fp32/bf16/fp16, no fault")
    config.use_interpreter_without_cuda()  # torchao imports triton: the interpreter switch comes first
    try:
        from torchao.kernel.intmm import int_scaled_matmul
    except ImportError as e:
        raise InvalidArgument("Cannot have implementation='torchao': torchao is not installed") from e
    m, n = xq.shape[0], wq.shape[0]
    a = scale_vector(sx, m, "sx", xq.device)[:, None].contiguous()
    w = scale_vector(sw, n, "sw", xq.device)[None, :]
    y = int_scaled_matmul(xq.contiguous(), wq.t(), a) * w
    if bias is not None:
        y = y + bias.to(device=xq.device, dtype=torch.float32)
    return y.to(TORCH_DTYPES[recipe.out])
