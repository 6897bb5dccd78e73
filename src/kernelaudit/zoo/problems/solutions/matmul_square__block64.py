"""Known-correct variant of ``matmul_square``: 64x64x64 tiles (another accumulation order)."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import matmul

PROBLEM = "matmul_square"
EXPECT = "correct"
VARIANT = "64x64x64 tiles (another accumulation order)"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return matmul(A, B, block=(64, 64, 64))
