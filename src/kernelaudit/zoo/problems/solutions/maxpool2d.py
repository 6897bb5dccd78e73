"""Verified Triton solution of ``maxpool2d``: MaxPool2d, kernel 3, stride 2, no padding."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import pool2d

PROBLEM = "maxpool2d"
EXPECT = "correct"


class ModelNew(nn.Module):
    def __init__(self, kernel_size, stride):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride

    def forward(self, x):
        return pool2d(x, self.kernel_size, self.stride, op="max")
