"""Matrix-vector product (M, K) @ (K, 1).

Project corpus problem (matmul), KernelBench format. Inputs follow the
official generator: ``torch.rand`` (uniform [0, 1)) at the fixed shape below.
"""

import torch
import torch.nn as nn

CATEGORY = "matmul"

M = 2048
K = 32768

#: Tensor sizes the shapes oracle may vary, and their values for CPU runs.
SHAPE_PARAMS = ('M', 'K')
SMALL_SHAPES = {'M': 20, 'K': 100}

ERROR_MODEL = {"kind": "multilinear", "length": 'K'}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    return [torch.rand(M, K), torch.rand(K, 1)]


def get_init_inputs():
    return []
