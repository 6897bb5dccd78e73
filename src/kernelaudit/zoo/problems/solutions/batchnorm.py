"""Verified Triton solution of ``batchnorm``: BatchNorm2d in inference mode (running statistics), NCHW."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import batch_norm_inference

PROBLEM = "batchnorm"
EXPECT = "correct"


class ModelNew(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)
        with torch.no_grad():
            self.bn.running_mean.copy_(torch.randn(channels))
            self.bn.running_var.copy_(torch.rand(channels) + 0.5)
            self.bn.weight.copy_(torch.randn(channels))
            self.bn.bias.copy_(torch.randn(channels))

    def forward(self, x):
        bn = self.bn
        return batch_norm_inference(x, bn.running_mean, bn.running_var, bn.weight, bn.bias, bn.eps)
