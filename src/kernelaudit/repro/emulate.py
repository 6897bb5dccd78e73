"""A CPU emulator of the ``ieee`` order: the same fp32 FMAs, in the same order, bit for bit.

:func:`fma32` is IEEE-754 binary32 ``fma(a, b, c)``: ``round32(a * b + c)`` with one
rounding. How, without a hardware fp32 FMA in torch:

1. ``p = a * b`` in float64 is exact (24 + 24 significant bits <= 53; exponents of
   binary32 products stay far inside float64's range, subnormals included).
2. ``s = fl64(p + c)`` and its exact error ``e = (p + c) - s`` (Knuth's TwoSum).
3. Round ``p + c`` to float64 *to odd*: keep ``s`` if its last significand bit is 1 or
   ``e == 0``, else step one float64 ulp toward ``e``. Rounding to odd at 53 bits and then
   to nearest at 24 bits equals one rounding to nearest at 24 bits (53 >= 24 + 2; Boldo &
   Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using
   rounding to odd", IEEE TC 2008). Plain ``fl64`` then ``fl32`` rounds twice and is wrong
   exactly when ``s`` lands on a binary32 midpoint: tests/repro/test_emulate_fma.py holds
   such cases, checked against exact rational arithmetic.

:func:`mm_ieee` computes the shape's ``ieee`` order (:func:`.tiles.ieee_lanes`: N, K and
the weight dtype; or ``lanes=``, as :mod:`.gemm` takes it): sequential, it folds
:func:`fma32` over k = 0..K-1 from +0.0, like the kernel; with K lanes it folds each lane
over its own k (k with ``(k // B) % L == l``, increasing) from +0.0, then adds the lane
sums pairwise, neighbours first (``t[i] = t[2i] + t[2i + 1]`` level by level, IEEE fp32
adds, as ``fma32(x, 1, y)``). Then the same epilogue, then one rounding to the output dtype. It never pads K:
the kernels' padding (fma(+0, -1, acc) = acc) is theirs to prove, here it is absent.
"""

from __future__ import annotations

import torch

from .tiles import Lanes, ieee_lanes


def _round_to_odd64(s: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    bits = s.view(torch.int64)
    even = (bits & 1) == 0
    toward = torch.where(e > 0, torch.full_like(s, float("inf")), torch.full_like(s, float("-inf")))
    step = torch.nextafter(s, toward)
    return torch.where((e != 0) & even & torch.isfinite(s), step, s)


def fma32(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """binary32 ``fma(a, b, c)`` of float32 tensors (broadcasting), one rounding."""
    a64, b64, c64 = a.double(), b.double(), c.double()
    p = a64 * b64                                  # exact
    s = p + c64
    bb = s - p                                     # TwoSum: e = (p + c) - s exactly
    e = (p - (s - bb)) + (c64 - bb)
    e = torch.where(torch.isfinite(s), e, torch.zeros_like(e))
    return _round_to_odd64(s, e).float()


def _chain(a3: torch.Tensor, b3: torch.Tensor, ks) -> torch.Tensor:
    """fma32 folded over ``ks`` in the given order from +0.0 (a3, b3 fp32)."""
    acc = torch.zeros(a3.shape[0], a3.shape[1], b3.shape[2], dtype=torch.float32, device=a3.device)
    for k in ks:
        acc = fma32(a3[:, :, k, None], b3[:, None, k, :], acc)
    return acc


def pairwise_tree(sums: list[torch.Tensor]) -> torch.Tensor:
    """fp32 ``((s0 + s1) + (s2 + s3)) + ...``: neighbours first, level by level (a power
    of two of them), each ``+`` one IEEE-754 binary32 add, computed as
    ``fma32(x, 1, y)`` (x * 1 is exact, so it is x + y rounded once: the same proven
    rounding as the chains, whatever the CPU's own fp32 add does)."""
    if not sums or len(sums) & (len(sums) - 1):
        raise ValueError(f"pairwise_tree: {len(sums)} sums, not a power of two")
    while len(sums) > 1:
        one = torch.ones((), dtype=torch.float32, device=sums[0].device)
        sums = [fma32(sums[2 * i], one, sums[2 * i + 1]) for i in range(len(sums) // 2)]
    return sums[0]


def lane_ks(k: int, lanes: Lanes) -> list[list[int]]:
    """The k of each lane, increasing: k goes to lane ``(k // block) % count``."""
    out: list[list[int]] = [[] for _ in range(lanes.count)]
    for kk in range(k):
        out[(kk // lanes.block) % lanes.count].append(kk)
    return out


def _mm3(a3: torch.Tensor, b3: torch.Tensor, lanes: Lanes | None = None) -> torch.Tensor:
    # a3: [B, M, K], b3: [B, K, N]; the order from b3's (weight) dtype before the upcast
    if lanes is None:
        lanes = ieee_lanes(b3.shape[2], b3.shape[1], b3.dtype)
    a3, b3 = a3.float(), b3.float()
    if lanes.sequential:
        return _chain(a3, b3, range(a3.shape[2]))
    return pairwise_tree([_chain(a3, b3, ks) for ks in lane_ks(a3.shape[2], lanes)])


def _epilogue(acc, bias, alpha: float, beta: float, out_dtype):
    alpha32 = torch.tensor(alpha, dtype=torch.float32, device=acc.device)
    if bias is None:
        return (acc * alpha32).to(out_dtype)
    beta32 = torch.tensor(beta, dtype=torch.float32, device=acc.device)
    return fma32(acc, alpha32, bias.float() * beta32).to(out_dtype)


def addmm_ieee(bias, a, b, *, beta: float = 1.0, alpha: float = 1.0, out_dtype=None,
               lanes: Lanes | None = None) -> torch.Tensor:
    """What ``gemm.addmm(..., order="ieee", lanes=lanes)`` returns, computed on the
    tensors' device in float64 torch ops that round exactly as the kernel's fp32 FMAs do
    (and fp32 adds for the lane tree)."""
    out_dtype = out_dtype or torch.promote_types(a.dtype, b.dtype)
    acc = _mm3(a.unsqueeze(0), b.unsqueeze(0), lanes)[0]
    return _epilogue(acc, bias, alpha, beta, out_dtype)


def mm_ieee(a, b, *, out_dtype=None, lanes: Lanes | None = None) -> torch.Tensor:
    return addmm_ieee(None, a, b, out_dtype=out_dtype, lanes=lanes)


def bmm_ieee(a, b, *, out_dtype=None, lanes: Lanes | None = None) -> torch.Tensor:
    out_dtype = out_dtype or torch.promote_types(a.dtype, b.dtype)
    return _mm3(a, b, lanes).to(out_dtype)


def linear_ieee(x, weight, bias=None, *, lanes: Lanes | None = None) -> torch.Tensor:
    out = addmm_ieee(bias, x.reshape(-1, x.shape[-1]), weight.t(), lanes=lanes)
    return out.reshape(*x.shape[:-1], weight.shape[0])


def bit_mismatches(got: torch.Tensor, want: torch.Tensor) -> int:
    """How many elements of ``got`` and ``want`` differ in their bits, NaN payloads aside.

    IEEE 754 leaves the sign and payload of a NaN an operation produces to the
    implementation: an NVIDIA GPU writes ``0x7fffffff`` for ``inf - inf``, an x86 CPU
    ``0xffc00000``. So a NaN matches any NaN (the positions must agree); every other value,
    signed zeros and infinities included, must match bit for bit.
    """
    if got.shape != want.shape or got.dtype != want.dtype:
        raise ValueError(f"bit_mismatches: got {tuple(got.shape)} {got.dtype}, want {tuple(want.shape)} {want.dtype}")
    ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[want.element_size()]
    g, w = got.contiguous(), want.contiguous()
    differ = g.view(ints) != w.view(ints)
    if g.is_floating_point():
        differ &= ~(torch.isnan(g) & torch.isnan(w))
    return int(differ.sum())


def same_bits(got: torch.Tensor, want: torch.Tensor) -> bool:
    """``got`` equals ``want`` bit for bit, a NaN matching any NaN (see :func:`bit_mismatches`)."""
    return bit_mismatches(got, want) == 0
