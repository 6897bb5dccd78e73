"""Batched matrix multiplication (B, M, K) @ (B, K, N).

Project corpus problem (matmul), KernelBench format. Inputs follow the
official generator: ``torch.rand`` (uniform [0, 1)) at the fixed shape below.
"""

import torch
import torch.nn as nn

CATEGORY = "matmul"

BATCH = 128
M = 128
K = 256
N = 512

#: Tensor sizes the shapes oracle may vary, and their values for CPU runs.
SHAPE_PARAMS = ('BATCH', 'M', 'K', 'N')
SMALL_SHAPES = {'BATCH': 3, 'M': 16, 'K': 24, 'N': 20}

ERROR_MODEL = {"kind": "multilinear", "length": 'K'}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.bmm(A, B)


def get_inputs():
    return [torch.rand(BATCH, M, K), torch.rand(BATCH, K, N)]


def get_init_inputs():
    return []
