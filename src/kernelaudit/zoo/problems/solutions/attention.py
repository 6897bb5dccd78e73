"""Verified Triton solution of ``attention``: scaled dot-product attention softmax(Q K^T / sqrt(D)) V."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import attention

PROBLEM = "attention"
EXPECT = "correct"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.causal = False

    def forward(self, q, k, v):
        return attention(q, k, v, causal=self.causal)
