"""Verified Triton solution of ``leaky_relu``: LeakyReLU with negative slope 0.01."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import unary

PROBLEM = "leaky_relu"
EXPECT = "correct"


class ModelNew(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return unary(x, "leaky_relu", alpha=self.negative_slope)
