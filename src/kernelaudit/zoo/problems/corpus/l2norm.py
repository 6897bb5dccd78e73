"""L2 normalisation of each row.

Project corpus problem (norm), KernelBench format. Inputs follow the
official generator: ``torch.rand`` (uniform [0, 1)) at the fixed shape below.
"""

import torch
import torch.nn as nn

CATEGORY = "norm"

BATCH = 128
DIM = 16384

#: Tensor sizes the shapes oracle may vary, and their values for CPU runs.
SHAPE_PARAMS = ('BATCH', 'DIM')
SMALL_SHAPES = {'BATCH': 4, 'DIM': 70}

ERROR_MODEL = {"kind": "scaled", "length": "DIM"}


def error_scale(model, x):
    """Only relative errors: the sum of squares (sqrt(DIM) u) and a few roundings."""
    return x.abs() / torch.norm(x, p=2, dim=-1, keepdim=True)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x / torch.norm(x, p=2, dim=-1, keepdim=True)


def get_inputs():
    return [torch.rand(BATCH, DIM)]


def get_init_inputs():
    return []
