"""One-pass per-batch comparison of a device output with its reference.

:func:`kernelaudit.sweep.judge.metrics.compare_rows` needs, per batch, the largest error (optionally
divided elementwise by a scale) and the largest ``|ref|``. In torch that is half a
dozen float64 passes over every chunk (cast, subtract, abs, NaN test, select, max);
this kernel reads ``got`` and ``ref`` in their own dtypes (float64, or the case's
dtype for exact ops) and ``scale`` once, and works in float64.
A NaN on either side counts as an infinite error, as in the torch version.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_BLOCK = 2048


@triton.jit
def _rowmax_kernel(g_ptr, r_ptr, s_ptr, out_ptr, row_len,
                   HAS_S: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1).to(tl.int64)
    nparts = tl.num_programs(1).to(tl.int64)
    base = row * row_len
    err = tl.zeros([BLOCK], dtype=tl.float64)
    mag = tl.zeros([BLOCK], dtype=tl.float64)
    for off in range(part * BLOCK, row_len, nparts * BLOCK):
        idx = off + tl.arange(0, BLOCK).to(tl.int64)
        m = idx < row_len
        g = tl.load(g_ptr + base + idx, mask=m, other=0.0).to(tl.float64)
        r = tl.load(r_ptr + base + idx, mask=m, other=0.0).to(tl.float64)
        e = tl.abs(g - r)
        if HAS_S:
            s = tl.load(s_ptr + base + idx, mask=m, other=1.0).to(tl.float64)
            e = e / s  # clamped on the host: a float scalar argument would be float32
        e = tl.where((g != g) | (r != r), float("inf"), e)
        err = tl.maximum(err, e)
        mag = tl.maximum(mag, tl.abs(r))
    tl.store(out_ptr + (row * nparts + part) * 2, tl.max(err, axis=0))
    tl.store(out_ptr + (row * nparts + part) * 2 + 1, tl.max(mag, axis=0))


def row_max(got: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor | None, tiny: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(max error, max |ref|) per row of 2-D ``got`` and ``ref`` (same shape, any
    dtypes), each a
    float64 tensor of one value per row; the error is ``|got - ref|`` or, with
    ``scale``, ``|got - ref| / max(scale, tiny)``."""
    nb, row_len = ref.shape
    g = got.contiguous()
    r = ref.contiguous()
    s = scale.clamp_min(tiny).contiguous() if scale is not None else r
    # Enough programs to fill the GPU when there are few long rows.
    parts = max(1, min(64, triton.cdiv(row_len, _BLOCK), triton.cdiv(4096, max(nb, 1))))
    out = torch.empty((nb, parts, 2), dtype=torch.float64, device=ref.device)
    if nb and row_len:
        _rowmax_kernel[(nb, parts)](g, r, s, out, row_len, HAS_S=scale is not None, BLOCK=_BLOCK)
    else:
        out.zero_()
    red = out.amax(1)
    return red[:, 0], red[:, 1]
