"""BatchNorm2d in inference mode (running statistics), NCHW.

Project corpus problem (norm), KernelBench format. Inputs follow the
official generator: ``torch.rand`` (uniform [0, 1)) at the fixed shape below.
"""

import torch
import torch.nn as nn

CATEGORY = "norm"

BATCH = 16
CHANNELS = 64
H = 64
W = 64

#: Tensor sizes the shapes oracle may vary, and their values for CPU runs.
SHAPE_PARAMS = ('BATCH', 'CHANNELS', 'H', 'W')
SMALL_SHAPES = {'BATCH': 2, 'CHANNELS': 3, 'H': 5, 'W': 7}

ERROR_MODEL = {"kind": "scaled", "length": 1}


def error_scale(model, x):
    """(x - mean) / sqrt(var + eps) * w + b: each term rounds at its own magnitude."""
    bn = model.bn
    shape = (1, -1) + (1,) * (x.dim() - 2)
    inv = 1 / torch.sqrt(bn.running_var + bn.eps)
    return ((x.abs() + bn.running_mean.abs().view(shape)) * (inv * bn.weight.abs()).view(shape)
            + bn.bias.abs().view(shape))


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)
        with torch.no_grad():
            self.bn.running_mean.copy_(torch.randn(channels))
            self.bn.running_var.copy_(torch.rand(channels) + 0.5)
            self.bn.weight.copy_(torch.randn(channels))
            self.bn.bias.copy_(torch.randn(channels))
        self.eval()  # inference is the problem: running statistics, whatever mode the checker leaves

    def forward(self, x):
        return self.bn(x)


def get_inputs():
    return [torch.rand(BATCH, CHANNELS, H, W)]


def get_init_inputs():
    return [CHANNELS]
