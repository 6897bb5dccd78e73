"""Verified Triton solution of ``matvec``: matrix-vector product (M, K) @ (K, 1)."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import matmul

PROBLEM = "matvec"
EXPECT = "correct"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return matmul(A, B)
