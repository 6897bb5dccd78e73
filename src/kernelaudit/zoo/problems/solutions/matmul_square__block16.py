"""Known-correct variant of ``matmul_square``: 16x16x16 tiles (another accumulation order)."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import matmul

PROBLEM = "matmul_square"
EXPECT = "correct"
VARIANT = "16x16x16 tiles (another accumulation order)"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return matmul(A, B, block=(16, 16, 16))
