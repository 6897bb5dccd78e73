"""Known-wrong candidate for ``elu``.

drops the negative branch of ELU: x > 0 and x <= 0 both return x.
"""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import tl, triton

PROBLEM = "elu"
EXPECT = "wrong"
FAULT = "drops the negative branch of ELU: x > 0 and x <= 0 both return x"


@triton.jit
def _kernel(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.where(x > 0, x, x)  # FAULT: the negative branch should be alpha * (exp(x) - 1)
    tl.store(y_ptr + offs, y, mask=mask)


def _launch(x, alpha=0.0):
    x = x.contiguous()
    y = torch.empty_like(x)
    _kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), float(alpha), BLOCK=1024)
    return y


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return _launch(x, self.alpha)
