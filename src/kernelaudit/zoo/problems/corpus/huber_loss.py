"""Huber (smooth L1, beta 1) loss, mean reduction.

Project corpus problem (loss), KernelBench format. Inputs follow the
official generator: ``torch.rand`` (uniform [0, 1)) at the fixed shape below.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "loss"

BATCH = 128
DIM = 4096

#: Tensor sizes the shapes oracle may vary, and their values for CPU runs.
SHAPE_PARAMS = ('BATCH', 'DIM')
SMALL_SHAPES = {'BATCH': 4, 'DIM': 30}

ERROR_MODEL = {"kind": "scaled", "length": ["BATCH", "DIM"]}


def error_scale(model, predictions, targets):
    """A mean of per-element terms bounded by (|p| + |t|)^2 + |p| + |t|."""
    s = predictions.abs() + targets.abs()
    return torch.mean(s * s + s)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return F.smooth_l1_loss(predictions, targets)


def get_inputs():
    return [torch.rand(BATCH, DIM) * 3, torch.rand(BATCH, DIM)]


def get_init_inputs():
    return []
