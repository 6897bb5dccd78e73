"""Verified Triton solution of ``maxpool1d``: MaxPool1d, kernel 4, stride 2, no padding."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import pool2d

PROBLEM = "maxpool1d"
EXPECT = "correct"


class ModelNew(nn.Module):
    def __init__(self, kernel_size, stride):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride

    def forward(self, x):
        return pool2d(x.unsqueeze(-2), (1, self.kernel_size), (1, self.stride), op="max").squeeze(-2)
