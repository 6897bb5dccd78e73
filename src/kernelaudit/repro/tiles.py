"""The tile tables: launch configurations chosen from the shape, never from the device.

``mma``: one configuration per (N, K, dtype), never per M. A tensor-core instruction's
internal accumulation can depend on the instruction shape, which a row-block size chosen
from M would change; keyed by (N, K, dtype) alone, a row of ``x[:M] @ W`` gets the same
instructions in the same order at every M.

``ieee``: every output element is one chain of fp32 FMAs over k = 0, 1, ..., K-1 whatever
the tile, so the bits are fixed by the inputs and K alone, and the table may also follow
M (decode tiles for M <= 16, prefill tiles above) without touching a bit: tested, not
assumed (see :data:`IEEE_TABLE`).

The table is data: edit it (after a sweep on the device, ``benchmarks/repro_gemm.py``),
never branch on the device. Tuning reaches a launch as the ``tiles=`` argument.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidArgument, check_choice

ORDERS = ("ieee", "mma")


@dataclass(frozen=True)
class Tiles:
    """One launch configuration: output block ``bm x bn``, K step ``bk`` (the K loop is
    unrolled ``bk`` FMAs at a time in ``ieee``; one ``tl.dot`` per step in ``mma``).
    ``tile8`` (``ieee`` only, ``bk`` 8): each step loads an 8-wide K tile of both operands
    (coalesced when K is their contiguous dim) and takes its columns apart in registers,
    instead of loading one k at a time; the FMA order is the same. ``dot`` (``ieee``
    only, compiled kernels): the K step is one fp32 ``tl.dot(..., input_precision="ieee")``,
    which Triton lowers to the same per-element FMA chain in k order (with its own
    register blocking); under the interpreter it falls back to the explicit loop."""

    bm: int
    bn: int
    bk: int
    num_warps: int = 4
    num_stages: int = 3
    tile8: bool = False
    dot: bool = False

    def __post_init__(self) -> None:
        for name in ("bm", "bn", "bk"):
            v = getattr(self, name)
            if v < 1 or v & (v - 1):
                raise InvalidArgument(f"Cannot have {name}={v}: a tile side must be a power of two >= 1")
        if self.tile8 and self.bk != 8:
            raise InvalidArgument(f"Cannot have tile8=True with bk={self.bk}: allowed values are bk=8")
        if self.dot and self.tile8:
            raise InvalidArgument("Cannot have dot=True with tile8=True: allowed values are one of them or neither")
        if self.dot and min(self.bm, self.bn, self.bk) < 16:
            raise InvalidArgument(f"Cannot have dot=True with tiles {self.bm}x{self.bn}x{self.bk}: "
                                  "allowed values are bm, bn, bk >= 16")


#: (order, size class of N, size class of K) -> tiles; a size class is "small" under 1024.
#: ``mma`` keys never mention M or the device (see the module docstring).
TABLE: dict[tuple[str, str, str], Tiles] = {
    ("mma", "small", "small"): Tiles(64, 64, 32, num_warps=4, num_stages=3),
    ("mma", "small", "large"): Tiles(64, 64, 64, num_warps=4, num_stages=4),
    ("mma", "large", "small"): Tiles(128, 128, 32, num_warps=8, num_stages=3),
    ("mma", "large", "large"): Tiles(128, 128, 64, num_warps=8, num_stages=3),
}

#: ``ieee``: (rows class, size class of N) -> tiles. Here, and only here, the tile may
#: follow M ("decode": M <= 16): every output element is the same FMA chain whatever the
#: tile, so a row's bits cannot depend on it. CI proves it under the interpreter
#: (every tile == the emulator) and benchmarks/repro_gemm.py on the GPU (row 0 of
#: x[:M] @ W identical for M = 1..8192, across both classes).
IEEE_TABLE: dict[tuple[str, str], Tiles] = {
    ("decode", "small"): Tiles(16, 32, 32, num_warps=2, num_stages=3, dot=True),
    # best of 8 at M = 4, K = N = 8192 on the H200 (benchmarks/results/2026-12-03-h200-repro-gemm)
    ("decode", "large"): Tiles(16, 64, 64, num_warps=4, num_stages=3, dot=True),
    ("prefill", "small"): Tiles(64, 64, 16, num_warps=4, num_stages=3, dot=True),
    # best of 7 at M = 2048, K = N = 4096 on the H200 (same folder): 27.6 TFLOP/s
    ("prefill", "large"): Tiles(128, 128, 32, num_warps=4, num_stages=2, dot=True),
}

#: Under the Triton interpreter (CPU) every program is a Python loop: fewer, larger tiles.
#: The ``mma`` order keeps its table row (its bits may depend on the tile); ``ieee`` may
#: not care, and a test proves it (tests/repro/test_gemm_matches_emulator.py).
INTERPRETER_IEEE = Tiles(64, 64, 16)


def _size_class(n: int) -> str:
    return "small" if n < 1024 else "large"


def pick(order: str, n: int, k: int, dtype, *, m: int | None = None) -> Tiles:
    """The tiles for ``order`` at (N, K, weight dtype); fp16 and bf16 share a row.
    ``m`` is read by ``ieee`` only (see :data:`IEEE_TABLE`)."""
    check_choice("order", order, ORDERS)
    if order == "ieee":
        return IEEE_TABLE[("decode" if m is not None and m <= 16 else "prefill", _size_class(n))]
    return TABLE[(order, _size_class(n), _size_class(k))]
