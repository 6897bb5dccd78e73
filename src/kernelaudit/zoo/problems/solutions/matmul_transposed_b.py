"""Verified Triton solution of ``matmul_transposed_b``: c = A @ B.T with B stored as (N, K)."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import matmul

PROBLEM = "matmul_transposed_b"
EXPECT = "correct"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return matmul(A, B.T)
