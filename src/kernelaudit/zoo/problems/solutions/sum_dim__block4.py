"""Known-correct variant of ``sum_dim``: 4-row reduction tiles (another summation order)."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import reduce

PROBLEM = "sum_dim"
EXPECT = "correct"
VARIANT = "4-row reduction tiles (another summation order)"


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return reduce(x, self.dim, "sum", block_r=4, block_i=8)
