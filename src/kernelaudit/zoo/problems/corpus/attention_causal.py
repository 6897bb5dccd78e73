"""Causal scaled dot-product attention.

Project corpus problem (attention), KernelBench format. Inputs follow the
official generator: ``torch.rand`` (uniform [0, 1)) at the fixed shape below.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "attention"

BATCH = 4
HEADS = 8
SEQ = 512
HEAD_DIM = 64

#: Tensor sizes the shapes oracle may vary, and their values for CPU runs.
SHAPE_PARAMS = ('BATCH', 'HEADS', 'SEQ', 'HEAD_DIM')
SMALL_SHAPES = {'BATCH': 1, 'HEADS': 2, 'SEQ': 20, 'HEAD_DIM': 16}

ERROR_MODEL = {"kind": "scaled", "length": 1}

def error_scale(model, q, k, v):
    """Logit errors sqrt(D) u |q|.|k| / sqrt(D) and u |s - max| move each weight p by that
    relative amount; the output sums p |v| (and the row sum adds sqrt(S) u)."""
    d = q.shape[-1]
    s = q @ k.transpose(-1, -2) / d**0.5
    s_abs = q.abs() @ k.abs().transpose(-1, -2) / d**0.5
    if model.causal:
        keep = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
        s_abs = s_abs.masked_fill(~keep, 0.0)
    m = s.amax(dim=-1, keepdim=True)
    p = torch.softmax(s, dim=-1)
    spread = torch.where(torch.isinf(s), torch.zeros_like(s), (s - m).abs()).amax(dim=-1, keepdim=True)
    logit_err = d**0.5 * s_abs.amax(dim=-1, keepdim=True) + spread + s.shape[-1] ** 0.5 + 1
    return logit_err * (p @ v.abs()) + (p @ v).abs()


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.causal = True

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)


def get_inputs():
    return [torch.rand(BATCH, HEADS, SEQ, HEAD_DIM) for _ in range(3)]


def get_init_inputs():
    return []
