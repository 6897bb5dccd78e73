"""Known-wrong candidate for ``gelu``.

GELU missing its 0.5: x * (1 + erf(x / sqrt(2))).
"""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import tl, triton

PROBLEM = "gelu"
EXPECT = "wrong"
FAULT = "GELU missing its 0.5: x * (1 + erf(x / sqrt(2)))"


@triton.jit
def _kernel(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = x * (1.0 + tl.math.erf(x * 0.7071067811865476))  # FAULT: missing the factor 0.5
    tl.store(y_ptr + offs, y, mask=mask)


def _launch(x, alpha=0.0):
    x = x.contiguous()
    y = torch.empty_like(x)
    _kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), float(alpha), BLOCK=1024)
    return y


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _launch(x)
