"""Known-wrong candidate for ``rmsnorm``.

RMSNorm missing its sqrt: divides by mean(x^2) + eps instead of its square root.
"""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import tl, triton

PROBLEM = "rmsnorm"
EXPECT = "wrong"
FAULT = "RMSNorm missing sqrt: x / (mean(x^2) + eps) * w"


@triton.jit
def _rmsnorm(x_ptr, w_ptr, y_ptr, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for c0 in range(0, N, BLOCK):
        x = tl.load(x_ptr + row * N + c0 + cols, mask=c0 + cols < N, other=0.0)
        acc += x * x
    inv = 1.0 / (tl.sum(acc, 0) / N + eps)  # FAULT: should be 1 / sqrt(...)
    for c0 in range(0, N, BLOCK):
        mask = c0 + cols < N
        x = tl.load(x_ptr + row * N + c0 + cols, mask=mask, other=0.0)
        w = tl.load(w_ptr + c0 + cols, mask=mask, other=0.0)
        tl.store(y_ptr + row * N + c0 + cols, x * inv * w, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))

    def forward(self, x):
        x = x.contiguous()
        n = x.shape[-1]
        y = torch.empty_like(x)
        _rmsnorm[(x.numel() // n,)](x, self.weight, y, n, 1e-5, BLOCK=min(1024, max(16, triton.next_power_of_2(n))))
        return y
