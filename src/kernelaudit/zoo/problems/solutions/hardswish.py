"""Verified Triton solution of ``hardswish``: HardSwish: x * relu6(x + 3) / 6."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import unary

PROBLEM = "hardswish"
EXPECT = "correct"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return unary(x, "hardswish")
