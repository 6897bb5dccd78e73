"""Known-correct variant of ``matmul_rect``: 64x32x16 tiles."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import matmul

PROBLEM = "matmul_rect"
EXPECT = "correct"
VARIANT = "64x32x16 tiles"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return matmul(A, B, block=(64, 32, 16))
