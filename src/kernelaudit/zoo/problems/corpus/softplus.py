"""Softplus (beta 1, threshold 20).

Project corpus problem (activation), KernelBench format. Inputs follow the
official generator: ``torch.rand`` (uniform [0, 1)) at the fixed shape below.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "activation"

BATCH = 64
DIM = 16384

#: Tensor sizes the shapes oracle may vary, and their values for CPU runs.
SHAPE_PARAMS = ('BATCH', 'DIM')
SMALL_SHAPES = {'BATCH': 4, 'DIM': 200}

ERROR_MODEL = {"kind": "elementwise"}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.softplus(x)


def get_inputs():
    return [torch.rand(BATCH, DIM)]


def get_init_inputs():
    return []
