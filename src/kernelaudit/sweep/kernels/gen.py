"""One-pass Triton version of :mod:`kernelaudit.sweep.gen`'s hash, for GPUs.

The torch version takes a dozen int64 passes over memory per generated element; this
kernel takes one, in native 32-bit arithmetic that gives exactly the bits of the torch
version's int64-with-masks arithmetic (tested against it under the Triton interpreter
and on CUDA), and rounds bfloat16 to nearest even (:data:`_HW_BF16`).
"""

from __future__ import annotations


import torch
import triton
import triton.language as tl

from ...config import interpreter_requested

#: bfloat16 rounding by the hardware's conversion (on a GPU) or by integer operations on
#: the float32 bits (under the Triton interpreter, whose conversion truncates); the
#: integer version cost bf16 generation about a fifth more than float32 on the H200.
_HW_BF16 = tl.constexpr(not interpreter_requested())

_BLOCK = 1024
_KIND = {"float": 0, "int": 1, "index": 2}


_RANGE, _INDEX, _STRIDED = 0, 1, 2


@triton.jit
def hash_u32(idx, key):
    """kernelaudit.sweep.gen's hash of int64 storage indexes ``idx`` with ``key``, in native
    32-bit arithmetic (uint32 products wrap mod 2^32, shifts are logical): the same bits
    as the int64-with-masks torch version at a fraction of the instructions. uint32."""
    lo = (idx & 0xFFFFFFFF).to(tl.uint32)
    hi = (idx >> 32).to(tl.uint32)
    return _mix(lo, hi, key)


@triton.jit
def hash_u32_at(base, off, key):
    """``hash_u32(base + off, key)`` for an int64 scalar ``base`` and int32 ``off`` >= 0
    (offsets within one matrix): the index's 64-bit sum taken as two uint32 halves and a
    carry, three instructions an element instead of 64-bit products and sums."""
    blo = (base & 0xFFFFFFFF).to(tl.uint32)
    bhi = (base >> 32).to(tl.uint32)
    lo = blo + off.to(tl.uint32)
    hi = bhi + (lo < blo).to(tl.uint32)
    return _mix(lo, hi, key)


@triton.jit
def hash_u32_run(start, key, N: tl.constexpr):
    """``hash_u32(start + arange(N), key)`` for an int64 scalar ``start``: a run of N
    consecutive storage indexes. Where the run does not cross a multiple of 2^32 (all
    but one run in 2^32 / N) the high half is one scalar for the whole run, and an
    element costs an add and an xor before the avalanche instead of a carry, a select
    and a product: the flat kernel's A loop (in step with 8-row C chunks) went from 296
    to 244 sm_90 instructions a step (``benchmarks/sass_mix.py``), and its bf16 check
    from 1.14x to 0.95x the bmm with the tile changes of the same session (H200)."""
    slo = start & 0xFFFFFFFF
    lo = slo.to(tl.uint32) + tl.arange(0, N).to(tl.uint32)
    hi = (start >> 32).to(tl.uint32)
    if slo + (N - 1) <= 0xFFFFFFFF:
        x = lo ^ (hi * 0x9E3779B1)
    else:
        x = lo ^ ((hi + (lo < slo.to(tl.uint32)).to(tl.uint32)) * 0x9E3779B1)
    return _avalanche(x, key)


@triton.jit
def _mix(lo, hi, key):
    """The hash of the uint32 halves of an int64 storage index (wrapping uint32 maths)."""
    return _avalanche(lo ^ (hi * 0x9E3779B1), key)


@triton.jit
def _avalanche(x, key):
    """:func:`_mix` after its first step (the index's halves folded into ``x``)."""
    x = x + key.to(tl.uint32)
    x = x ^ (x >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x846CA68B
    x = x ^ (x >> 16)
    return x


@triton.jit
def unit_float(x, DT: tl.constexpr):
    """The float value of hash ``x`` (k/2^23 - 1 for the 24-bit k = x >> 8) as float32,
    rounded to DT's precision (0 float32, 1 float16, 2 bfloat16) and still held in
    float32. No int->float conversion (a quarter-rate instruction): 1.m from k's low 23
    bits as float bits, minus 1 or 2 by k's top bit. Exact."""
    f = (((x >> 8) & 0x7FFFFF) | 0x3F800000).to(tl.float32, bitcast=True)
    v = f - tl.where((x >> 31) != 0, 1.0, 2.0)
    if DT == 1:
        v = v.to(tl.float16).to(tl.float32)
    elif DT == 2:
        if _HW_BF16:  # the GPU's conversion rounds to nearest even: one instruction
            v = v.to(tl.bfloat16).to(tl.float32)
        else:
            # the interpreter truncates: round to nearest even on the float32 bits, the
            # GPU's rounding for these finite values
            b = v.to(tl.uint32, bitcast=True)
            b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
            v = b.to(tl.float32, bitcast=True)
    return v


# No specialisation on the integer arguments (start, pos0, key, sizes, strides): each
# distinct divisible-by-16 / equal-to-1 pattern would be another compile, and a sweep
# generates hundreds of layouts. The stores are contiguous whatever they are, and
# unmasked (EVEN) in every block but the last launch's one: a mask against a length
# Triton knows nothing about splits every store into single elements. That is the
# likely cause of bfloat16 generation measuring slower than float32 on the H200 (8.7
# against 3.7 ms for half the bytes); the unmasked version is not yet measured there.
@triton.jit(do_not_specialize=["start", "n", "pos0", "key", "high", "d1", "d2", "d3", "t0", "t1", "t2", "t3"])
def _hash_kernel(out_ptr, idx_ptr, start, n, pos0, key, high,
                 d1, d2, d3, t0, t1, t2, t3,
                 KIND: tl.constexpr, SOURCE: tl.constexpr, DT: tl.constexpr, WIDE: tl.constexpr,
                 EVEN: tl.constexpr, BLOCK: tl.constexpr):
    # Output element ``offs`` of this launch is position ``pos0 + offs`` of the whole.
    # WIDE: positions reach 2^31, they need int64; else the strided source's divisions
    # run in int32 (a 64-bit division is several times the instructions).
    if WIDE:
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    else:
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    pos = offs + pos0
    mask = offs < n
    if SOURCE == 1:    # indexes read from a tensor
        if EVEN:
            idx = tl.load(idx_ptr + pos)
        else:
            idx = tl.load(idx_ptr + pos, mask=mask, other=0)
    elif SOURCE == 2:  # indexes of a strided view of up to 4 dims, from its storage offset
        p = pos
        i3 = p % d3
        p = p // d3
        i2 = p % d2
        p = p // d2
        i1 = p % d1
        i0 = p // d1
        idx = start + i0.to(tl.int64) * t0 + i1.to(tl.int64) * t1 + i2.to(tl.int64) * t2 + i3.to(tl.int64) * t3
    else:              # a contiguous range of storage
        idx = pos.to(tl.int64) + start
    x = hash_u32(idx, key)
    if KIND == 0:
        v = unit_float(x, DT)
    elif KIND == 1:
        v = (x >> 24).to(tl.int32) - 128
    else:
        v = x.to(tl.int64) % high
    if EVEN:
        tl.store(out_ptr + offs, v.to(out_ptr.dtype.element_ty))
    else:
        tl.store(out_ptr + offs, v.to(out_ptr.dtype.element_ty), mask=mask)


_DT = {torch.float16: 1, torch.bfloat16: 2}


def _launch(out: torch.Tensor, idx: torch.Tensor, start: int, n: int, key: int, high, dims, strides,
            source: int, dtype: torch.dtype | None = None) -> None:
    """Generate the ``n`` elements of contiguous ``out``: whole blocks in one unmasked
    launch, the remainder in a masked one. The values are ``dtype``'s (default:
    ``out``'s), stored in ``out``'s dtype (a wider one holds them exactly)."""
    dtype = dtype or out.dtype
    flat = out.view(-1)
    full = n - n % _BLOCK
    for pos0, count, even in ((0, full, True), (full, n - full, False)):
        if count:
            _hash_kernel[(triton.cdiv(count, _BLOCK),)](
                flat[pos0:], idx, start, count, pos0, key, high or 1, *dims, *strides,
                KIND=_kind(dtype, high), SOURCE=source, DT=_DT.get(dtype, 0), WIDE=n >= 2**31,
                EVEN=even, BLOCK=_BLOCK)


def _kind(dtype: torch.dtype, high) -> int:
    if high is not None:
        return _KIND["index"]
    return _KIND["float"] if dtype.is_floating_point else _KIND["int"]


def fill_range(out: torch.Tensor, start: int, key: int, *, high: int | None = None,
               dtype: torch.dtype | None = None) -> torch.Tensor:
    """Write the values at storage indexes [start, start + out.numel()) into 1-D ``out``
    (``dtype``'s values, default ``out``'s, stored in ``out``'s dtype)."""
    n = out.numel()
    if n:
        _launch(out, out, start, n, key, high, (1, 1, 1), (0, 0, 0, 0), _RANGE, dtype)
    return out


def values_at(index: torch.Tensor, key: int, dtype: torch.dtype, *, high: int | None = None,
              out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The values at int64 ``index`` (any shape), in ``dtype`` (stored as ``out_dtype``)."""
    idx = index.contiguous().view(-1)
    out = torch.empty(idx.numel(), dtype=out_dtype or dtype, device=index.device)
    if idx.numel():
        _launch(out, idx, 0, idx.numel(), key, high, (1, 1, 1), (0, 0, 0, 0), _INDEX, dtype)
    return out.view(index.shape)


def values_strided(shape, strides, offset: int, key: int, dtype: torch.dtype, device, *,
                   high: int | None = None, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The values of a strided view (up to 4 dims) of the generated storage, without
    materialising its int64 storage indexes; ``dtype``'s values stored as
    ``out_dtype`` (one pass instead of a generation and a cast)."""
    if len(shape) > 4:
        raise ValueError(f"values_strided handles up to 4 dims, got shape {tuple(shape)}")
    pad = 4 - len(shape)
    d = [1] * pad + list(shape)
    t = [0] * pad + list(strides)
    out = torch.empty(tuple(shape), dtype=out_dtype or dtype, device=device)
    n = out.numel()
    if n:
        _launch(out, out, offset, n, key, high, (d[1], d[2], d[3]), tuple(t), _STRIDED, dtype)
    return out
