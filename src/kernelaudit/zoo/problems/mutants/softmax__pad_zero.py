"""Known-wrong candidate for ``softmax``.

Softmax padding with 0 instead of -inf: one block per row rounded up to a power of
two, padded lanes load 0.0, so exp(0 - max) enters the row sum whenever the row
length is no power of two.
"""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import tl, triton

PROBLEM = "softmax"
EXPECT = "wrong"
FAULT = "softmax padding with 0 instead of -inf: padded lanes enter the row sum when the row is no power of two"


@triton.jit
def _softmax(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0)  # FAULT: other=float("-inf")
    e = tl.exp(x - tl.max(x, 0))
    tl.store(y_ptr + row * N + cols, e / tl.sum(e, 0), mask=cols < N)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        n = x.shape[-1]
        y = torch.empty_like(x)
        _softmax[(x.numel() // n,)](x, y, n, BLOCK=triton.next_power_of_2(n))
        return y
