"""Known-correct variant of ``attention``: 16x16 query/key tiles (more online-softmax steps)."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import attention

PROBLEM = "attention"
EXPECT = "correct"
VARIANT = "16x16 query/key tiles (more online-softmax steps)"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.causal = False

    def forward(self, q, k, v):
        return attention(q, k, v, causal=self.causal, block=(16, 16))
