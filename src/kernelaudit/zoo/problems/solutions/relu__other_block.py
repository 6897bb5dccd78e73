"""Known-correct variant of ``relu``: 128-element blocks."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import unary

PROBLEM = "relu"
EXPECT = "correct"
VARIANT = "128-element blocks"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return unary(x, "relu", block=128)
