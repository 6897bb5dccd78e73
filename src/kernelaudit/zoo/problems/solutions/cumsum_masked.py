"""Verified Triton solution of ``cumsum_masked``: cumulative sum over the last dim of the elements a boolean mask keeps."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import scan

PROBLEM = "cumsum_masked"
EXPECT = "correct"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, mask):
        return scan(x, "masked", mask=mask)
