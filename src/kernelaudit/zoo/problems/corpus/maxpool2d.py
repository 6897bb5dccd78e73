"""MaxPool2d, kernel 3, stride 2, no padding.

Project corpus problem (pooling), KernelBench format. Inputs follow the
official generator: ``torch.rand`` (uniform [0, 1)) at the fixed shape below.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "pooling"

BATCH = 16
CHANNELS = 32
H = 128
W = 128

#: Tensor sizes the shapes oracle may vary, and their values for CPU runs.
SHAPE_PARAMS = ('BATCH', 'CHANNELS', 'H', 'W')
SMALL_SHAPES = {'BATCH': 2, 'CHANNELS': 3, 'H': 9, 'W': 11}

ERROR_MODEL = {"kind": "exact"}


class Model(nn.Module):
    def __init__(self, kernel_size, stride):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride

    def forward(self, x):
        return F.max_pool2d(x, self.kernel_size, self.stride)


def get_inputs():
    return [torch.rand(BATCH, CHANNELS, H, W)]


def get_init_inputs():
    return [3, 2]
