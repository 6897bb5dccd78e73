"""Verified Triton solution of ``matmul_transposed_a``: c = A.T @ B with A stored as (K, M)."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import matmul

PROBLEM = "matmul_transposed_a"
EXPECT = "correct"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return matmul(A.T, B)
