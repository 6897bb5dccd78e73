"""Verified Triton solution of ``hardtanh``: HardTanh clamping to [-1, 1]."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import unary

PROBLEM = "hardtanh"
EXPECT = "correct"


class ModelNew(nn.Module):
    def __init__(self, min_val, max_val):
        super().__init__()
        self.min_val = min_val
        self.max_val = max_val

    def forward(self, x):
        return unary(x, "hardtanh", alpha=self.min_val, beta=self.max_val)
