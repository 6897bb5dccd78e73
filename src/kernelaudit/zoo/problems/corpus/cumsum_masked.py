"""Cumulative sum over the last dim of the elements a boolean mask keeps.

Project corpus problem (scan), KernelBench format. Inputs follow the
official generator: ``torch.rand`` (uniform [0, 1)) at the fixed shape below.
"""

import torch
import torch.nn as nn

CATEGORY = "scan"

BATCH = 128
LENGTH = 4000

#: Tensor sizes the shapes oracle may vary, and their values for CPU runs.
SHAPE_PARAMS = ('BATCH', 'LENGTH')
SMALL_SHAPES = {'BATCH': 3, 'LENGTH': 50}

ERROR_MODEL = {"kind": "multilinear", "length": 'LENGTH'}
INPUT_KINDS = ("real", "fixed")


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, mask):
        return torch.cumsum(x * mask, dim=-1)


def get_inputs():
    return [torch.rand(BATCH, LENGTH), torch.rand(BATCH, LENGTH) > 0.5]


def get_init_inputs():
    return []
