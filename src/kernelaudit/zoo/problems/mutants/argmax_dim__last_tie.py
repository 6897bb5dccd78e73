"""Known-wrong candidate for ``argmax_dim``.

Ties resolved to the last index (``>=`` where torch keeps the first): invisible on
torch.rand inputs, where two equal maxima almost never occur.
"""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import tl, triton

PROBLEM = "argmax_dim"
EXPECT = "wrong"
FAULT = "argmax ties resolved to the last index (>= instead of >)"


@triton.jit
def _argmax(x_ptr, y_ptr, R, INNER, BLOCK_I: tl.constexpr):
    o = tl.program_id(0).to(tl.int64)
    ri = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    mask = ri < INNER
    best = tl.full((BLOCK_I,), float("-inf"), tl.float32)
    best_i = tl.zeros((BLOCK_I,), tl.int32)
    for r in range(0, R):
        x = tl.load(x_ptr + o * R * INNER + r * INNER + ri, mask=mask, other=float("-inf"))
        better = x >= best  # FAULT: should be x > best (first index wins ties)
        best_i = tl.where(better, r, best_i)
        best = tl.where(better, x, best)
    tl.store(y_ptr + o * INNER + ri, best_i.to(tl.int64), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x = x.contiguous()
        dim = self.dim % x.dim()
        shape = list(x.shape)
        outer = 1
        for s in shape[:dim]:
            outer *= s
        inner = 1
        for s in shape[dim + 1:]:
            inner *= s
        y = torch.empty(shape[:dim] + shape[dim + 1:], device=x.device, dtype=torch.int64)
        _argmax[(outer, triton.cdiv(inner, 32))](x, y, shape[dim], inner, BLOCK_I=32)
        return y
