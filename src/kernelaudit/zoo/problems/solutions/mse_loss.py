"""Verified Triton solution of ``mse_loss``: mean squared error."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import loss_sum

PROBLEM = "mse_loss"
EXPECT = "correct"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return loss_sum(predictions, targets, "mse") / predictions.numel()
