"""Verified Triton solution of ``attention_causal``: causal scaled dot-product attention."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import attention

PROBLEM = "attention_causal"
EXPECT = "correct"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.causal = True

    def forward(self, q, k, v):
        return attention(q, k, v, causal=self.causal)
