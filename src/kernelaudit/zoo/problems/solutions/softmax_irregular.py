"""Verified Triton solution of ``softmax_irregular``: softmax over a last dim that is no multiple of a block."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import softmax

PROBLEM = "softmax_irregular"
EXPECT = "correct"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return softmax(x)
