"""Verified Triton solution of ``cumsum_reverse``: reverse cumulative sum over the last dim (y[i] = sum of x[j], j >= i)."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import scan

PROBLEM = "cumsum_reverse"
EXPECT = "correct"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return scan(x, "reverse")
