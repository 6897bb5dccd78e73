"""RMSNorm over the last dim with a random weight.

Project corpus problem (norm), KernelBench format. Inputs follow the
official generator: ``torch.rand`` (uniform [0, 1)) at the fixed shape below.
"""

import torch
import torch.nn as nn

CATEGORY = "norm"

BATCH = 128
DIM = 4096

#: Tensor sizes the shapes oracle may vary, and their values for CPU runs.
SHAPE_PARAMS = ('BATCH', 'DIM')
SMALL_SHAPES = {'BATCH': 4, 'DIM': 50}

ERROR_MODEL = {"kind": "scaled", "length": "DIM"}


def error_scale(model, x):
    """Only relative errors: the mean of squares (sqrt(DIM) u) and a few roundings."""
    rms = torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + 1e-5)
    return x.abs() / rms * model.weight.abs()


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return x / torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + 1e-5) * self.weight


def get_inputs():
    return [torch.rand(BATCH, DIM)]


def get_init_inputs():
    return [DIM]
