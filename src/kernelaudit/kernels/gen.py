"""One-pass Triton version of :mod:`kernelaudit.gen`'s hash, for GPUs.

The torch version takes a dozen int64 passes over memory per generated element; this
kernel takes one. It computes exactly the same int64-with-masks arithmetic, so the
bits are identical (tested against the torch version under the Triton interpreter).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_BLOCK = 1024
_KIND = {"float": 0, "int": 1, "index": 2}


@triton.jit
def _hash_kernel(out_ptr, idx_ptr, start, n, key, high, KIND: tl.constexpr, FROM_INDEX: tl.constexpr,
                 BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    mask = offs < n
    if FROM_INDEX:
        idx = tl.load(idx_ptr + offs, mask=mask, other=0)
    else:
        idx = offs + start
    M: tl.constexpr = 0xFFFFFFFF
    x = (idx & M) ^ (((idx >> 32) * 0x9E3779B1) & M)
    x = (x + key) & M
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & M
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & M
    x = x ^ (x >> 16)
    if KIND == 0:
        v = (x >> 8).to(tl.float32) * (2.0 ** -23) - 1.0
    elif KIND == 1:
        v = (x >> 24) - 128
    else:
        v = x % high
    tl.store(out_ptr + offs, v.to(out_ptr.dtype.element_ty), mask=mask)


def _kind(dtype: torch.dtype, high) -> int:
    if high is not None:
        return _KIND["index"]
    return _KIND["float"] if dtype.is_floating_point else _KIND["int"]


#: bfloat16 is rounded by torch (round to nearest even everywhere; Triton's
#: interpreter truncates), through float32 chunks of this many elements.
_BF16_CHUNK = 2**27


def fill_range(out: torch.Tensor, start: int, key: int, *, high: int | None = None) -> torch.Tensor:
    """Write the values at storage indexes [start, start + out.numel()) into 1-D ``out``."""
    n = out.numel()
    if out.dtype == torch.bfloat16 and high is None:
        for s in range(0, n, _BF16_CHUNK):
            e = min(n, s + _BF16_CHUNK)
            out[s:e].copy_(fill_range(torch.empty(e - s, dtype=torch.float32, device=out.device), start + s, key))
        return out
    grid = (triton.cdiv(n, _BLOCK),)
    _hash_kernel[grid](out, out, start, n, key, high or 1, KIND=_kind(out.dtype, high), FROM_INDEX=False,
                       BLOCK=_BLOCK)
    return out


def values_at(index: torch.Tensor, key: int, dtype: torch.dtype, *, high: int | None = None) -> torch.Tensor:
    """The values at int64 ``index`` (any shape), in ``dtype``."""
    if dtype == torch.bfloat16 and high is None:
        return values_at(index, key, torch.float32).to(torch.bfloat16)
    idx = index.contiguous().view(-1)
    out = torch.empty(idx.numel(), dtype=dtype, device=index.device)
    grid = (triton.cdiv(idx.numel(), _BLOCK),)
    _hash_kernel[grid](out, idx, 0, idx.numel(), key, high or 1, KIND=_kind(dtype, high), FROM_INDEX=True,
                       BLOCK=_BLOCK)
    return out.view(index.shape)
