"""Verified Triton solution of ``rmsnorm``: RMSNorm over the last dim with a random weight."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import row_norm

PROBLEM = "rmsnorm"
EXPECT = "correct"


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return row_norm(x, "rms", weight=self.weight, eps=1e-5)
