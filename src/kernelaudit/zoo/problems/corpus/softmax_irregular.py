"""Softmax over a last dim that is no multiple of a block.

Project corpus problem (softmax), KernelBench format. Inputs follow the
official generator: ``torch.rand`` (uniform [0, 1)) at the fixed shape below.
"""

import torch
import torch.nn as nn

CATEGORY = "softmax"

BATCH = 33
DIM = 5003

#: Tensor sizes the shapes oracle may vary, and their values for CPU runs.
SHAPE_PARAMS = ('BATCH', 'DIM')
SMALL_SHAPES = {'BATCH': 3, 'DIM': 37}

ERROR_MODEL = {"kind": "scaled", "length": "DIM"}
#: Rows may hold -inf (masked positions), as attention masks produce.
ADVERSARIAL = ("neg_inf_rows",)

def error_scale(model, x):
    """Relative error of exp(x - max) grows with |x - max|; the row sum adds sqrt(DIM) u."""
    y = torch.softmax(x, dim=-1)
    m = x.amax(dim=-1, keepdim=True)
    return torch.where(y == 0, torch.zeros_like(y), y * (x.abs() + m.abs() + 1))


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.rand(BATCH, DIM)]


def get_init_inputs():
    return []
