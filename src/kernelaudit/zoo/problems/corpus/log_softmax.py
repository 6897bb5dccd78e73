"""LogSoftmax over the last dim.

Project corpus problem (softmax), KernelBench format. Inputs follow the
official generator: ``torch.rand`` (uniform [0, 1)) at the fixed shape below.
"""

import torch
import torch.nn as nn

CATEGORY = "softmax"

BATCH = 64
DIM = 16384

#: Tensor sizes the shapes oracle may vary, and their values for CPU runs.
SHAPE_PARAMS = ('BATCH', 'DIM')
SMALL_SHAPES = {'BATCH': 4, 'DIM': 64}

ERROR_MODEL = {"kind": "scaled", "length": "DIM"}
#: Rows may hold -inf (masked positions), as attention masks produce.
ADVERSARIAL = ("neg_inf_rows",)

def error_scale(model, x):
    """x - max - log(sum): each term carries a rounding of its own magnitude."""
    m = x.amax(dim=-1, keepdim=True)
    lse = torch.logsumexp(x, dim=-1, keepdim=True)
    return torch.where(torch.isinf(x), torch.zeros_like(x), x.abs() + 2 * m.abs() + lse.abs() + 1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.log_softmax(x, dim=-1)


def get_inputs():
    return [torch.rand(BATCH, DIM)]


def get_init_inputs():
    return []
