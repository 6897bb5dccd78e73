"""GELU (exact, erf form).

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

ERROR_MODEL = {"kind": "scaled"}


def error_scale(model, x, *rest):
    """0.5 x (1 + erf(x / sqrt 2)): for negative x, 1 + erf cancels, so the absolute
    error is about u |x| / 2 however small the result (measured on the H200: a correct
    fp32 kernel is off by 6e-8 at gelu(-4.4) = -5.8e-5)."""
    return torch.maximum(torch.nn.functional.gelu(x).abs(), 0.5 * x.abs())


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x)


def get_inputs():
    return [torch.rand(BATCH, DIM)]


def get_init_inputs():
    return []
