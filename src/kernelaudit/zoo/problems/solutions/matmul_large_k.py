"""Verified Triton solution of ``matmul_large_k``: matrix multiplication with a large reduction dim (M, K) @ (K, N), K >> M, N."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import matmul

PROBLEM = "matmul_large_k"
EXPECT = "correct"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return matmul(A, B)
