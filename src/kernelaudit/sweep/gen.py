"""Deterministic, device-independent input generation.

Every input element is a pure function of (seed, stream, flat storage index): a
32-bit integer hash computed with int64 tensor arithmetic, which gives the same bits
on every device. So a reference can regenerate any slice of any input (a batch, a
row, a single element) without reading device memory back, and without ever
materialising a tensor past the thresholds under test.

Float values are k/2^23 - 1 for a 24-bit k: uniform on [-1, 1) and exactly
representable in float32 and float64; 16-bit dtypes round them (round to nearest
even on every device). Integer values are small (in [-128, 128)), index values are
uniform on [0, high).
"""

from __future__ import annotations

import torch

_M32 = 0xFFFFFFFF
#: Elements generated per step: bounds the int64 scratch memory (8 bytes each).
GEN_CHUNK = 2**24

_GOLDEN = 0x9E3779B1
_MUL1 = 0x7FEB352D
_MUL2 = 0x846CA68B


def stream_key(seed: int, stream: str) -> int:
    """A 32-bit key for one input of one case: stable across processes and runs."""
    h = 2166136261
    for byte in f"{seed}:{stream}".encode():
        h = ((h ^ byte) * 16777619) & _M32
    return h


def hash32(index: torch.Tensor, key: int) -> torch.Tensor:
    """Hash int64 indexes (any value below 2^40) with ``key`` to int64 values in [0, 2^32)."""
    x = (index & _M32) ^ (((index >> 32) * _GOLDEN) & _M32)
    x = (x + key) & _M32
    x = x ^ (x >> 16)
    x = (x * _MUL1) & _M32  # int64 product wraps; the low 32 bits are still exact
    x = x ^ (x >> 15)
    x = (x * _MUL2) & _M32
    x = x ^ (x >> 16)
    return x


def _fast():
    """The one-pass Triton kernels, or None where they cannot run (CPU, no Triton)."""
    try:
        from .kernels import gen as fast
    except Exception:  # no Triton, or a Triton that cannot compile here
        return None
    return fast


def values_at(index: torch.Tensor, key: int, dtype: torch.dtype, *, high: int | None = None,
              out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The generated values at int64 storage ``index`` (any shape), cast to ``dtype``.

    ``high`` makes integer index values in [0, high) (for gather, embedding, ...).
    ``out_dtype`` stores ``dtype``'s values in another dtype: ``values_at(..., dtype,
    out_dtype=torch.float64)`` equals ``values_at(..., dtype).to(torch.float64)``, in
    one pass on a GPU.
    """
    if index.device.type == "cuda" and dtype != torch.bool and (fast := _fast()) is not None:
        return fast.values_at(index, key, dtype, high=high, out_dtype=out_dtype)
    if out_dtype is not None and out_dtype != dtype:
        return values_at(index, key, dtype, high=high).to(out_dtype)
    h = hash32(index, key)
    if high is not None:
        return (h % high).to(dtype)
    if dtype.is_floating_point:
        # k/2^23 - 1 is exact in float32, so float32 -> float64/16-bit casts agree everywhere.
        return ((h >> 8).to(torch.float32) * (2.0**-23) - 1.0).to(dtype)
    if dtype == torch.bool:
        return (h & 1).bool()
    return ((h >> 24) - 128).to(dtype)


def fill_flat(numel: int, key: int, dtype: torch.dtype, device: torch.device | str, *,
              start: int = 0, high: int | None = None, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """A new 1-D tensor of the generated values at storage indexes [start, start+numel)
    (``dtype``'s values, stored as ``out_dtype``: see :func:`values_at`)."""
    out = torch.empty(numel, dtype=out_dtype or dtype, device=device)
    if out.device.type == "cuda" and dtype != torch.bool and (fast := _fast()) is not None:
        return fast.fill_range(out, start, key, high=high, dtype=dtype)
    for s in range(0, numel, GEN_CHUNK):
        n = min(GEN_CHUNK, numel - s)
        idx = torch.arange(start + s, start + s + n, dtype=torch.int64, device=device)
        out[s:s + n] = values_at(idx, key, dtype, high=high)
    return out


def strided_index(shape: tuple[int, ...], strides: tuple[int, ...], offset: int,
                  device: torch.device | str, *, lead: tuple[int, int] | None = None) -> torch.Tensor:
    """Storage indexes of every element of a strided view, optionally of rows [r0, r1) of dim 0.

    The result has the view's (sliced) shape; int64 throughout, so it passes 2^32.
    """
    shape = list(shape)
    base = offset
    if lead is not None:
        r0, r1 = lead
        base += r0 * strides[0]
        shape[0] = r1 - r0
    idx = torch.full((), base, dtype=torch.int64, device=device)
    for d, (n, st) in enumerate(zip(shape, strides)):
        ar = torch.arange(n, dtype=torch.int64, device=device) * st
        ar = ar.view([n if i == d else 1 for i in range(len(shape))])
        idx = idx + ar
    return idx


def values_strided(shape: tuple[int, ...], strides: tuple[int, ...], offset: int, key: int, dtype: torch.dtype,
                   device, *, high: int | None = None, lead: tuple[int, int] | None = None,
                   out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The generated values of a strided view (rows [r0, r1) of dim 0 with ``lead``),
    ``dtype``'s values stored as ``out_dtype`` (see :func:`values_at`).

    Equal to ``values_at(strided_index(...))``; on CUDA one pass, with no index tensor."""
    shape = tuple(shape)
    if lead is not None:
        r0, r1 = lead
        offset += r0 * strides[0]
        shape = (r1 - r0, *shape[1:])
    if torch.device(device).type == "cuda" and len(shape) <= 4 and dtype != torch.bool and (fast := _fast()):
        return fast.values_strided(shape, strides, offset, key, dtype, device, high=high, out_dtype=out_dtype)
    return values_at(strided_index(shape, strides, offset, device), key, dtype, high=high, out_dtype=out_dtype)
