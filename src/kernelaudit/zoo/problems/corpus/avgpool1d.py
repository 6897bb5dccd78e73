"""AvgPool1d, kernel 4, stride 4, no padding.

Project corpus problem (pooling), KernelBench format. Inputs follow the
official generator: ``torch.rand`` (uniform [0, 1)) at the fixed shape below.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "pooling"

BATCH = 16
CHANNELS = 64
LENGTH = 4096

#: Tensor sizes the shapes oracle may vary, and their values for CPU runs.
SHAPE_PARAMS = ('BATCH', 'CHANNELS', 'LENGTH')
SMALL_SHAPES = {'BATCH': 2, 'CHANNELS': 3, 'LENGTH': 17}

ERROR_MODEL = {"kind": "multilinear", "length": 4}


class Model(nn.Module):
    def __init__(self, kernel_size, stride):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride

    def forward(self, x):
        return F.avg_pool1d(x, self.kernel_size, self.stride)


def get_inputs():
    return [torch.rand(BATCH, CHANNELS, LENGTH)]


def get_init_inputs():
    return [4, 4]
