"""Verified Triton solution of ``elu``: ELU with alpha 1.0."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import unary

PROBLEM = "elu"
EXPECT = "correct"


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return unary(x, "elu", alpha=self.alpha)
