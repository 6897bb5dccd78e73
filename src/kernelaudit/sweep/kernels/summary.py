"""One-launch version of :func:`kernelaudit.sweep.judge.metrics.summarize`, for GPUs.

A judgement's per-batch metrics are reduced on the device to 5 numbers a row (the
worst metric, its batch, how many batches exceed the tolerance, the first and the last
of them) before one transfer to the host. In torch that is about twenty small kernels
(NaN tests, selects, max, comparisons, argmaxes over a flipped copy, conversions, stacks)
after every projection; here it is one program per row.
"""

from __future__ import annotations

import struct

import torch
import triton
import triton.language as tl

_BLOCK = 1024
#: Rows :func:`summary_rows` takes (one tolerance argument each).
MAX_ROWS = 2


# Not specialised on its integers: each distinct pattern (a length or a tolerance's
# bits divisible by 16, equal to 1) would be one more compile in a sweep.
@triton.jit(do_not_specialize=["n", "stride", "t0_bits", "t1_bits"])
def _summary_kernel(pb_ptr, out_ptr, n, stride, t0_bits, t1_bits, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    # the tolerances come as float64 bit patterns: a float scalar argument is float32
    tol = tl.where(row == 0, t0_bits.to(tl.int64), t1_bits.to(tl.int64)).to(tl.float64, bitcast=True)
    big = n + 1
    best = tl.full([BLOCK], float("-inf"), tl.float64)
    besti = tl.zeros([BLOCK], dtype=tl.int64)
    count = tl.zeros([BLOCK], dtype=tl.int64)
    first = tl.full([BLOCK], big, tl.int64)
    last = tl.full([BLOCK], -1, tl.int64)
    for s in range(0, n, BLOCK):
        idx = s + tl.arange(0, BLOCK).to(tl.int64)
        m = idx < n
        v = tl.load(pb_ptr + row * stride + idx, mask=m, other=0.0).to(tl.float64)
        v = tl.where(v != v, float("inf"), v)  # NaN counts as inf
        v = tl.where(m, v, float("-inf"))
        better = v > best  # strict: a lane keeps its first maximum
        best = tl.where(better, v, best)
        besti = tl.where(better, idx, besti)
        bad = m & (v > tol)
        count += bad.to(tl.int64)
        first = tl.minimum(first, tl.where(bad, idx, big))
        last = tl.maximum(last, tl.where(bad, idx, -1))
    worst = tl.max(best, axis=0)
    arg = tl.min(tl.where(best == worst, besti, big), axis=0)  # the first batch at the maximum
    cnt = tl.sum(count, axis=0)
    f = tl.where(cnt > 0, tl.min(first, axis=0), 0)
    lst = tl.where(cnt > 0, tl.max(last, axis=0), 0)
    o = out_ptr + row * 5
    tl.store(o + 0, worst)
    tl.store(o + 1, arg.to(tl.float64))
    tl.store(o + 2, cnt.to(tl.float64))
    tl.store(o + 3, f.to(tl.float64))
    tl.store(o + 4, lst.to(tl.float64))


def _bits(tol: float | None) -> int:
    """The float64 bit pattern of a tolerance (None: inf, nothing exceeds it), as int64."""
    return struct.unpack("<q", struct.pack("<d", float("inf") if tol is None else float(tol)))[0]


def summary_rows(per_batch: torch.Tensor, tols: list[float | None]) -> torch.Tensor:
    """:func:`kernelaudit.sweep.judge.metrics.summarize` of a (k, n) tensor, k <= :data:`MAX_ROWS`,
    n >= 1, in one launch: (k, 5) float64 on its device."""
    k, n = per_batch.shape
    if not 1 <= k <= MAX_ROWS or len(tols) != k or n < 1:
        raise ValueError(f"summary_rows takes 1..{MAX_ROWS} rows of at least one batch and a tolerance a row, "
                         f"not shape {tuple(per_batch.shape)} with {len(tols)} tolerances")
    pb = per_batch.contiguous()
    out = torch.empty((k, 5), dtype=torch.float64, device=pb.device)
    t = [_bits(x) for x in tols] + [_bits(None)] * (MAX_ROWS - k)
    _summary_kernel[(k,)](pb, out, n, pb.stride(0), t[0], t[1], BLOCK=_BLOCK)
    return out
