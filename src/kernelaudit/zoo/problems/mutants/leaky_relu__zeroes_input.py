"""Known-wrong candidate for ``leaky_relu``.

zeroes its input after computing a correct output.
"""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import tl, triton

PROBLEM = "leaky_relu"
EXPECT = "wrong"
FAULT = "zeroes its input after computing a correct output"


@triton.jit
def _kernel(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.where(x > 0, x, x * alpha)
    tl.store(y_ptr + offs, y, mask=mask)


def _launch(x, alpha=0.0):
    x = x.contiguous()
    y = torch.empty_like(x)
    _kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), float(alpha), BLOCK=1024)
    return y


class ModelNew(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        y = _launch(x, self.negative_slope)
        x.zero_()  # FAULT: the caller's input is clobbered
        return y
