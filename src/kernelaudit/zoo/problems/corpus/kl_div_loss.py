"""KL divergence kl_div(log(predictions), targets), batchmean.

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
INPUT_KINDS = ("probability", "probability")


def error_scale(model, predictions, targets):
    """A sum of t (log t - log p) over rows: each term rounds at t (|log t| + |log p| + 1)."""
    t = targets
    terms = torch.where(t > 0, t * (torch.log(t).abs() + torch.log(predictions).abs() + 1), torch.zeros_like(t))
    return terms.sum() / predictions.shape[0]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return F.kl_div(torch.log(predictions), targets, reduction="batchmean")


def get_inputs():
    return [torch.rand(BATCH, DIM).softmax(dim=-1), torch.rand(BATCH, DIM).softmax(dim=-1)]


def get_init_inputs():
    return []
