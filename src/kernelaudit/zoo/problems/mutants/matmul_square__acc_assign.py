"""Known-wrong candidate for ``matmul_square``.

acc = instead of acc += in the K loop: only the last K block counts.
"""

import torch
import torch.nn as nn

from kernelaudit.zoo.problems.solution_kernels import triton, tl

PROBLEM = "matmul_square"
EXPECT = "wrong"
FAULT = "acc = instead of acc += in the K loop: only the last K block counts"


@triton.jit
def _mm(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * s_am + kk[None, :] * s_ak, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * s_bk + rn[None, :] * s_bn, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, input_precision="ieee")  # FAULT: should be acc +=
    tl.store(c_ptr + rm[:, None] * s_cm + rn[None, :] * s_cn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty((M, N), device=A.device, dtype=torch.float32)
        bm = bn = bk = 32
        grid = (triton.cdiv(M, bm), triton.cdiv(N, bn))
        _mm[grid](A, B, C, M, N, K, *A.stride(), *B.stride(), *C.stride(), BM=bm, BN=bn, BK=bk)
        return C
