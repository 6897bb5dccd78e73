"""Verified Triton solution of ``matmul_rect``: rectangular matrix multiplication (M, K) @ (K, N)."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import matmul

PROBLEM = "matmul_rect"
EXPECT = "correct"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return matmul(A, B)
