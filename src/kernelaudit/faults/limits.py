"""Fault models for the size axes beyond element counts (:mod:`kernelaudit.sweep.axes`).

* ``grid16``: a kernel that launches one block per row of dim 0 on a grid dimension
  capped at 65535 (a CUDA grid's y/z limit) and never covers the rest: every output of
  a covered call whose dim 0 has more than ``dim_limit - 1`` rows keeps its rows from
  ``dim_limit - 1`` on unwritten (zero). Attention under the math path is covered
  through its batched matmuls, whose dim 0 is batch x heads.
* ``bytes32``: a kernel whose byte offsets wrap at 2^32: an input whose storage,
  counted in bytes from the storage start to the end of the view, passes 2^32 is read
  with byte offset ``o mod 2^32`` (a storage offset counts: a small view far into its
  storage is read from the wrong place), and an output of more than 2^32 bytes is
  written at ``o mod 2^32``. For 1-byte dtypes this is ``wrap32``; for float32 it
  wraps at 2^30 elements.

Both scale with the thresholds: ``dim_limit`` is 2^(bits//2), 2^32 is 2^bits.
"""

from __future__ import annotations

import torch

from .base import FaultModel, wrapped_writing
from .wrap32 import WRAP32_OPS


def _storage_index(x: torch.Tensor) -> torch.Tensor:
    """The storage index (in elements) of every logical element of ``x``, int64."""
    n = x.untyped_storage().nbytes() // x.element_size()
    return torch.arange(n, dtype=torch.int64, device=x.device).as_strided(x.shape, x.stride(), x.storage_offset())


def bytes_wrapped_reading(x: torch.Tensor, t32: int) -> torch.Tensor | None:
    """``x`` read with byte offsets wrapped at ``t32`` bytes, or None where no offset
    passes it."""
    size = x.element_size()
    idx = _storage_index(x)
    if idx.numel() == 0 or int(idx.max()) * size + size <= t32:
        return None
    wrapped = (idx * size % t32) // size
    base = x.as_strided((x.untyped_storage().nbytes() // size,), (1,), 0)
    return base[wrapped.reshape(-1)].view(x.shape).clone()


class _Tensors:
    """Apply a function to every tensor of (nested) args, noting whether any changed."""

    def __init__(self, fn) -> None:
        self.fn = fn
        self.changed = False

    def __call__(self, x):
        if isinstance(x, torch.Tensor):
            y = self.fn(x)
            if y is None:
                return x
            self.changed = True
            return y
        if isinstance(x, (list, tuple)):
            return type(x)(self(v) for v in x)
        return x


class Grid16FaultModel(FaultModel):
    """Rows of dim 0 past the grid limit (65535, scaled) are never written."""

    name = "grid16"
    covered = WRAP32_OPS

    def handle(self, func, args, kwargs):
        rows = self.th.dim_limit - 1
        out = func(*args, **kwargs)

        def drop(y: torch.Tensor):
            if y.dim() == 0 or y.shape[0] <= rows:
                return None
            y = y.clone()
            y[rows:] = 0
            return y

        t = _Tensors(drop)
        out = t(out)
        if t.changed:
            self.stats.hit("grid16")
        return out

    def extra_contexts(self):
        from .mps import _math_attention_only  # attention through covered bmm calls
        return [_math_attention_only()]


class Bytes32FaultModel(FaultModel):
    """Byte offsets wrap at 2^32 (scaled), in reads (storage offsets included) and writes."""

    name = "bytes32"
    covered = WRAP32_OPS | {torch.ops.aten._to_copy}

    def handle(self, func, args, kwargs):
        t32 = self.th.t32
        reads = _Tensors(lambda x: bytes_wrapped_reading(x, t32))
        out = func(*reads(list(args)), **{k: reads(v) for k, v in kwargs.items()})

        def write(y: torch.Tensor):
            if y.numel() * y.element_size() <= t32:
                return None
            return wrapped_writing(y, t32 // y.element_size())

        writes = _Tensors(write)
        out = writes(out)
        if reads.changed or writes.changed:
            self.stats.hit("bytes32")
        return out

    def extra_contexts(self):
        from .mps import _math_attention_only
        return [_math_attention_only()]
