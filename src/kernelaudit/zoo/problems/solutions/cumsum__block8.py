"""Known-correct variant of ``cumsum``: 8-wide scan blocks (more carries)."""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import scan

PROBLEM = "cumsum"
EXPECT = "correct"
VARIANT = "8-wide scan blocks (more carries)"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return scan(x, "inclusive", block=8)
