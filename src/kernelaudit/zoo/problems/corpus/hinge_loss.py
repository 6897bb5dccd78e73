"""Hinge loss mean(clamp(1 - p * t, min=0)) with targets in {-1, 1}.

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
INPUT_KINDS = ("real", "fixed")


def error_scale(model, predictions, targets):
    """A mean of terms bounded by 1 + |p t|."""
    return torch.mean(1 + (predictions * targets).abs())


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


def get_inputs():
    return [torch.rand(BATCH, DIM), torch.randint(0, 2, (BATCH, DIM)).float() * 2 - 1]


def get_init_inputs():
    return []
