"""Matrix multiplication with a small reduction dim (M, K) @ (K, N), K << M, N.

Project corpus problem (matmul), KernelBench format. Inputs follow the
official generator: ``torch.rand`` (uniform [0, 1)) at the fixed shape below.
"""

import torch
import torch.nn as nn

CATEGORY = "matmul"

M = 4096
K = 32
N = 4096

#: Tensor sizes the shapes oracle may vary, and their values for CPU runs.
SHAPE_PARAMS = ('M', 'K', 'N')
SMALL_SHAPES = {'M': 40, 'K': 8, 'N': 40}

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
