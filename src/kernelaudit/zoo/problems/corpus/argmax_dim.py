"""Argmax over dim 1 of a 3-D tensor (ties: first index).

Project corpus problem (reduction), KernelBench format. Inputs follow the
official generator: ``torch.rand`` (uniform [0, 1)) at the fixed shape below.
"""

import torch
import torch.nn as nn

CATEGORY = "reduction"

BATCH = 16
D1 = 256
D2 = 256

#: Tensor sizes the shapes oracle may vary, and their values for CPU runs.
SHAPE_PARAMS = ('BATCH', 'D1', 'D2')
SMALL_SHAPES = {'BATCH': 3, 'D1': 10, 'D2': 6}

ERROR_MODEL = {"kind": "exact"}
#: Repeated values make the tie-break (first index) visible.
ADVERSARIAL = ("ties",)


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.argmax(x, dim=self.dim)


def get_inputs():
    return [torch.rand(BATCH, D1, D2)]


def get_init_inputs():
    return [1]
