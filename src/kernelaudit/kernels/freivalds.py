"""Fused Freivalds check of a batched matmul output, inputs generated on the fly.

For every (batch, head) the kernel computes, in float64,

* ``lhs   = y . C x``                       reading the device's output C once;
* ``rhs   = alpha (y A)(B x) + beta y M x``  with A, B, M regenerated in registers from
  their storage indexes (the same hash as :mod:`kernelaudit.gen`), never read from the
  device under test;
* ``bound = |alpha| (|y||A|)(|B||x|) + |beta| |y||M||x|``.

So one pass over C and no memory traffic for the inputs at all. Operands are given as
strided descriptors of their generated storage (:class:`Desc`), which covers every
layout: transposed views, storage offsets, stride-0 (expanded or shared) batches.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

_DT = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


@dataclass(frozen=True)
class Desc:
    """A (batch, head, rows, cols) strided view of a generated storage."""

    key: int
    offset: int
    strides: tuple[int, int, int, int]


@triton.jit
def _gen(idx, key, DT: tl.constexpr):
    # The hash of kernelaudit.gen in native 32-bit arithmetic (uint32 products wrap
    # mod 2^32, shifts are logical): the same bits as the int64-with-masks version,
    # at a fraction of the instructions; this kernel is bound by it.
    lo = (idx & 0xFFFFFFFF).to(tl.uint32)
    hi = (idx >> 32).to(tl.uint32)
    x = lo ^ (hi * 0x9E3779B1)
    x = x + key.to(tl.uint32)
    x = x ^ (x >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x846CA68B
    x = x ^ (x >> 16)
    v = (x >> 8).to(tl.float32) * (2.0 ** -23) - 1.0
    if DT == 1:
        v = v.to(tl.float16).to(tl.float32)
    elif DT == 2:
        v = v.to(tl.bfloat16).to(tl.float32)
    return v.to(tl.float64)


@triton.jit
def _freivalds_kernel(c_ptr, sc0, sc1, sc2, sc3, x_ptr, y_ptr, out_ptr,
                      a_key, a_off, sa0, sa1, sa2, sa3,
                      b_key, b_off, sb0, sb1, sb2, sb3,
                      m_key, m_off, sm0, sm1, sm2, sm3,
                      H, Mdim, Ndim, Kdim, alpha, beta,
                      HAS_M: tl.constexpr, DT: tl.constexpr,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    b = pid // H
    h = pid % H
    ks = tl.arange(0, BK).to(tl.int64)
    kmask = ks < Kdim
    # u = B x and |B||x|, over column blocks of B (K x N)
    u = tl.zeros([BK], dtype=tl.float64)
    ua = tl.zeros([BK], dtype=tl.float64)
    for n0 in range(0, Ndim, BN):
        ns = n0 + tl.arange(0, BN).to(tl.int64)
        nmask = ns < Ndim
        xv = tl.load(x_ptr + ns, mask=nmask, other=0.0)
        bidx = b_off + b * sb0 + h * sb1 + ks[:, None] * sb2 + ns[None, :] * sb3
        bm = kmask[:, None] & nmask[None, :]
        bv = tl.where(bm, _gen(bidx, b_key, DT), 0.0)
        u += tl.sum(bv * xv[None, :], axis=1)
        ua += tl.sum(tl.abs(bv) * tl.abs(xv)[None, :], axis=1)
    lhs = tl.zeros([BM], dtype=tl.float64)
    rhs_m = tl.zeros([BM], dtype=tl.float64)
    bound_m = tl.zeros([BM], dtype=tl.float64)
    v = tl.zeros([BK], dtype=tl.float64)
    va = tl.zeros([BK], dtype=tl.float64)
    for m0 in range(0, Mdim, BM):
        ms = m0 + tl.arange(0, BM).to(tl.int64)
        mmask = ms < Mdim
        yv = tl.load(y_ptr + ms, mask=mmask, other=0.0)
        aidx = a_off + b * sa0 + h * sa1 + ms[:, None] * sa2 + ks[None, :] * sa3
        am = mmask[:, None] & kmask[None, :]
        av = tl.where(am, _gen(aidx, a_key, DT), 0.0)
        v += tl.sum(av * yv[:, None], axis=0)
        va += tl.sum(tl.abs(av) * tl.abs(yv)[:, None], axis=0)
        for n0 in range(0, Ndim, BN):
            ns = n0 + tl.arange(0, BN).to(tl.int64)
            nmask = ns < Ndim
            xv = tl.load(x_ptr + ns, mask=nmask, other=0.0)
            cm = mmask[:, None] & nmask[None, :]
            cv = tl.load(c_ptr + b * sc0 + h * sc1 + ms[:, None] * sc2 + ns[None, :] * sc3, mask=cm, other=0.0)
            lhs += yv * tl.sum(cv.to(tl.float64) * xv[None, :], axis=1)
            if HAS_M:
                midx = m_off + b * sm0 + h * sm1 + ms[:, None] * sm2 + ns[None, :] * sm3
                mv = tl.where(cm, _gen(midx, m_key, DT), 0.0)
                rhs_m += yv * tl.sum(mv * xv[None, :], axis=1)
                bound_m += tl.abs(yv) * tl.sum(tl.abs(mv) * tl.abs(xv)[None, :], axis=1)
    rhs = alpha * tl.sum(v * u, axis=0) + beta * tl.sum(rhs_m, axis=0)
    bound = tl.abs(alpha) * tl.sum(va * ua, axis=0) + tl.abs(beta) * tl.sum(bound_m, axis=0)
    tl.store(out_ptr + pid * 3 + 0, tl.sum(lhs, axis=0))
    tl.store(out_ptr + pid * 3 + 1, rhs)
    tl.store(out_ptr + pid * 3 + 2, bound)


def freivalds(C: torch.Tensor, x: torch.Tensor, y: torch.Tensor, A: Desc, B: Desc, M: Desc | None,
              K: int, alpha: float, beta: float, dtype: torch.dtype) -> torch.Tensor:
    """(nb, H, 3) float64: lhs, rhs, bound per (batch, head) of C (nb, H, M, N)."""
    nb, H, Mdim, Ndim = C.shape
    out = torch.empty((nb, H, 3), dtype=torch.float64, device=C.device)
    m = M or Desc(0, 0, (0, 0, 0, 0))
    BK = max(16, triton.next_power_of_2(K))
    BN = max(16, min(64, triton.next_power_of_2(Ndim)))
    BM = max(16, min(64, 8192 // max(BN, BK)))
    _freivalds_kernel[(nb * H,)](C, *C.stride(), x, y, out,
                                 A.key, A.offset, *A.strides, B.key, B.offset, *B.strides,
                                 m.key, m.offset, *m.strides,
                                 H, Mdim, Ndim, K, float(alpha), float(beta),
                                 HAS_M=M is not None, DT=_DT[dtype], BM=BM, BN=BN, BK=BK)
    return out
