"""Known-correct variant of ``matmul_tf32_allowed``: TF32 operands, which this problem allows."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import matmul

PROBLEM = "matmul_tf32_allowed"
EXPECT = "correct"
VARIANT = "TF32 operands, which this problem allows"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return matmul(A, B, tf32=True)
