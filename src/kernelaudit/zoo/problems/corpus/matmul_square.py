"""Square matrix multiplication C = A @ B.

Project corpus problem (matmul), KernelBench format. Inputs follow the
official generator: ``torch.rand`` (uniform [0, 1)) at the fixed shape below.
"""

import torch
import torch.nn as nn

CATEGORY = "matmul"

N = 2048

#: Tensor sizes the shapes oracle may vary, and their values for CPU runs.
SHAPE_PARAMS = ('N',)
SMALL_SHAPES = {'N': 64}

ERROR_MODEL = {"kind": "multilinear", "length": 'N'}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    return [torch.rand(N, N), torch.rand(N, N)]


def get_init_inputs():
    return []
