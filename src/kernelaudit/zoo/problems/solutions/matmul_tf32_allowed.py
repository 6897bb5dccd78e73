"""Verified Triton solution of ``matmul_tf32_allowed``: square matrix multiplication whose users accept TF32 operand rounding."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import matmul

PROBLEM = "matmul_tf32_allowed"
EXPECT = "correct"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return matmul(A, B)
