"""Verified Triton solution of ``layernorm``: LayerNorm over the last dim with a random weight and bias."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import row_norm

PROBLEM = "layernorm"
EXPECT = "correct"


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return row_norm(x, "layer", weight=self.weight, bias=self.bias, eps=1e-5)
