"""Cross-entropy of (BATCH, CLASSES) logits against class indexes, mean reduction.

Project corpus problem (loss), KernelBench format. Inputs follow the
official generator: ``torch.rand`` (uniform [0, 1)) at the fixed shape below.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "loss"

BATCH = 4096
CLASSES = 1000

#: Tensor sizes the shapes oracle may vary, and their values for CPU runs.
SHAPE_PARAMS = ('BATCH', 'CLASSES')
SMALL_SHAPES = {'BATCH': 8, 'CLASSES': 33}

ERROR_MODEL = {"kind": "scaled", "length": ["BATCH", "CLASSES"]}
INPUT_KINDS = ("real", "fixed")


def error_scale(model, logits, targets):
    """max + log(sum exp(x - max)) - x[t] per row, averaged: terms at their magnitudes."""
    m = logits.amax(dim=-1)
    lse = torch.logsumexp(logits, dim=-1)
    picked = logits.gather(1, targets.view(-1, 1)).squeeze(1)
    return torch.mean(m.abs() + lse.abs() + picked.abs() + 1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        return F.cross_entropy(logits, targets)


def get_inputs():
    return [torch.rand(BATCH, CLASSES), torch.randint(0, CLASSES, (BATCH,))]


def get_init_inputs():
    return []
