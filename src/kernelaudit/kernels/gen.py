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


_RANGE, _INDEX, _STRIDED = 0, 1, 2


# No specialisation on the integer arguments (start, n, key, sizes, strides): each
# distinct divisible-by-16 / equal-to-1 pattern would be another compile, and a sweep
# generates hundreds of layouts. The stores are contiguous whatever they are.
@triton.jit(do_not_specialize=["start", "n", "key", "high", "d1", "d2", "d3", "t0", "t1", "t2", "t3"])
def _hash_kernel(out_ptr, idx_ptr, start, n, key, high,
                 d1, d2, d3, t0, t1, t2, t3,
                 KIND: tl.constexpr, SOURCE: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    mask = offs < n
    if SOURCE == 1:    # indexes read from a tensor
        idx = tl.load(idx_ptr + offs, mask=mask, other=0)
    elif SOURCE == 2:  # indexes of a strided view of up to 4 dims, from its storage offset
        p = offs
        i3 = p % d3
        p = p // d3
        i2 = p % d2
        p = p // d2
        i1 = p % d1
        i0 = p // d1
        idx = start + i0 * t0 + i1 * t1 + i2 * t2 + i3 * t3
    else:              # a contiguous range of storage
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
    _hash_kernel[grid](out, out, start, n, key, high or 1, 1, 1, 1, 0, 0, 0, 0,
                       KIND=_kind(out.dtype, high), SOURCE=_RANGE, BLOCK=_BLOCK)
    return out


def values_at(index: torch.Tensor, key: int, dtype: torch.dtype, *, high: int | None = None) -> torch.Tensor:
    """The values at int64 ``index`` (any shape), in ``dtype``."""
    if dtype == torch.bfloat16 and high is None:
        return values_at(index, key, torch.float32).to(torch.bfloat16)
    idx = index.contiguous().view(-1)
    out = torch.empty(idx.numel(), dtype=dtype, device=index.device)
    grid = (triton.cdiv(idx.numel(), _BLOCK),)
    _hash_kernel[grid](out, idx, 0, idx.numel(), key, high or 1, 1, 1, 1, 0, 0, 0, 0,
                       KIND=_kind(dtype, high), SOURCE=_INDEX, BLOCK=_BLOCK)
    return out.view(index.shape)


def values_strided(shape, strides, offset: int, key: int, dtype: torch.dtype, device, *,
                   high: int | None = None) -> torch.Tensor:
    """The values of a strided view (up to 4 dims) of the generated storage, without
    materialising its int64 storage indexes."""
    if len(shape) > 4:
        raise ValueError(f"values_strided handles up to 4 dims, got shape {tuple(shape)}")
    if dtype == torch.bfloat16 and high is None:
        return values_strided(shape, strides, offset, key, torch.float32, device).to(torch.bfloat16)
    pad = 4 - len(shape)
    d = [1] * pad + list(shape)
    t = [0] * pad + list(strides)
    out = torch.empty(tuple(shape), dtype=dtype, device=device)
    n = out.numel()
    if n == 0:
        return out
    _hash_kernel[(triton.cdiv(n, _BLOCK),)](out, out, offset, n, key, high or 1, d[1], d[2], d[3],
                                            t[0], t[1], t[2], t[3], KIND=_kind(dtype, high), SOURCE=_STRIDED,
                                            BLOCK=_BLOCK)
    return out
