"""Known-wrong candidate for ``attention``.

Attention missing 1/sqrt(D): softmax(Q K^T) V. Delegates to the verified kernel with
the scale set to 1.
"""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import _attention_kernel, _pow2, triton

PROBLEM = "attention"
EXPECT = "wrong"
FAULT = "attention missing 1/sqrt(D): softmax(Q K^T) V"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.causal = False

    def forward(self, q, k, v):
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        *lead, s, d = q.shape
        o = torch.empty_like(q)
        bh = o.numel() // (s * d)
        scale = 1.0  # FAULT: should be 1 / sqrt(d)
        _attention_kernel[(triton.cdiv(s, 32), bh)](q, k, v, o, s, d, scale, CAUSAL=False, BM=32, BN=32, BD=_pow2(d))
        return o
