"""LayerNorm over the last dim with a random weight and bias.

Project corpus problem (norm), KernelBench format. Inputs follow the
official generator: ``torch.rand`` (uniform [0, 1)) at the fixed shape below.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "norm"

BATCH = 128
DIM = 4096

#: Tensor sizes the shapes oracle may vary, and their values for CPU runs.
SHAPE_PARAMS = ('BATCH', 'DIM')
SMALL_SHAPES = {'BATCH': 4, 'DIM': 50}

ERROR_MODEL = {"kind": "scaled", "length": "DIM"}


def error_scale(model, x):
    """(x - mean) carries u(|x| + |mean|), amplified by 1/std and the weight."""
    mean = x.mean(dim=-1, keepdim=True)
    std = torch.sqrt(x.var(dim=-1, unbiased=False, keepdim=True) + 1e-5)
    return (x.abs() + mean.abs()) / std * model.weight.abs() + model.bias.abs()


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, eps=1e-5)


def get_inputs():
    return [torch.rand(BATCH, DIM)]


def get_init_inputs():
    return [DIM]
