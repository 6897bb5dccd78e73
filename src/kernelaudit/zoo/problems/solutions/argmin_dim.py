"""Verified Triton solution of ``argmin_dim``: argmin over dim 2 of a 3-D tensor (ties: first index)."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import reduce

PROBLEM = "argmin_dim"
EXPECT = "correct"


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return reduce(x, self.dim, "argmin")
