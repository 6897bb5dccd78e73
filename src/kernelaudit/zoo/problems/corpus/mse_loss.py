"""Mean squared error.

Project corpus problem (loss), KernelBench format. Inputs follow the
official generator: ``torch.rand`` (uniform [0, 1)) at the fixed shape below.
"""

import torch
import torch.nn as nn

CATEGORY = "loss"

BATCH = 128
DIM = 4096

#: Tensor sizes the shapes oracle may vary, and their values for CPU runs.
SHAPE_PARAMS = ('BATCH', 'DIM')
SMALL_SHAPES = {'BATCH': 4, 'DIM': 30}

ERROR_MODEL = {"kind": "scaled", "length": ["BATCH", "DIM"]}


def error_scale(model, predictions, targets):
    """A mean of squares of differences: each term rounds at (|p| + |t|)^2."""
    return torch.mean((predictions.abs() + targets.abs()) ** 2)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return torch.mean((predictions - targets) ** 2)


def get_inputs():
    return [torch.rand(BATCH, DIM), torch.rand(BATCH, DIM)]


def get_init_inputs():
    return []
