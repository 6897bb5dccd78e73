"""Verified Triton solution of ``avgpool1d``: AvgPool1d, kernel 4, stride 4, no padding."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import pool2d

PROBLEM = "avgpool1d"
EXPECT = "correct"


class ModelNew(nn.Module):
    def __init__(self, kernel_size, stride):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride

    def forward(self, x):
        return pool2d(x.unsqueeze(-2), (1, self.kernel_size), (1, self.stride), op="avg").squeeze(-2)
