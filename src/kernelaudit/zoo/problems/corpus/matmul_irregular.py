"""Matrix multiplication at irregular sizes (no dim a multiple of a block).

Project corpus problem (matmul), KernelBench format. Inputs follow the
official generator: ``torch.rand`` (uniform [0, 1)) at the fixed shape below.
"""

import torch
import torch.nn as nn

CATEGORY = "matmul"

M = 1237
K = 2999
N = 1931

#: Tensor sizes the shapes oracle may vary, and their values for CPU runs.
SHAPE_PARAMS = ('M', 'K', 'N')
SMALL_SHAPES = {'M': 13, 'K': 29, 'N': 11}

ERROR_MODEL = {"kind": "multilinear", "length": 'K'}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    return [torch.rand(M, K), torch.rand(K, N)]


def get_init_inputs():
    return []
