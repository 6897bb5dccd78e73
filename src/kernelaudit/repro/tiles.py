"""The tile tables: launch configurations chosen from the shape, never from the device.

``mma``: one configuration per (N, K, dtype), never per M. A tensor-core instruction's
internal accumulation can depend on the instruction shape, which a row-block size chosen
from M would change; keyed by (N, K, dtype) alone, a row of ``x[:M] @ W`` gets the same
instructions in the same order at every M.

``ieee``: the order is fixed by the shape alone, :func:`ieee_lanes` (N, K, weight dtype,
never M or the device): :data:`SEQUENTIAL` (one chain of fp32 FMAs over k = 0, 1, ...,
K-1 per output element) or K lanes (:class:`Lanes`: L chains over interleaved blocks of
K, then a fixed pairwise tree of fp32 adds). Whatever the tile, every output element is
that computation, so the bits are fixed by the inputs and the shape alone, and the launch
tables may also follow M (decode tiles for M <= 16, prefill tiles above) without
touching a bit: tested, not assumed (see :data:`IEEE_TABLE`, :data:`IEEE_LANES_TABLE`).

The table is data: edit it (after a sweep on the device, ``benchmarks/repro_gemm.py``),
never branch on the device. Tuning reaches a launch as the ``tiles=`` argument.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidArgument, check_choice

ORDERS = ("ieee", "mma")


@dataclass(frozen=True)
class Lanes:
    """The ``ieee`` order of one shape: K dealt to ``count`` lanes (L) in interleaved
    blocks of ``block`` (B) consecutive k: k belongs to lane ``(k // B) % L`` (block j =
    k // B goes to lane j mod L). Each lane is one fp32 FMA chain over its own k in
    increasing order from +0.0; the L lane sums are then added pairwise, neighbours first
    (``((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))`` for L = 8: level by level,
    ``t[i] = t[2i] + t[2i + 1]``), each add one IEEE-754 fp32 add. A lane that gets no k
    (K <= l * B) is +0.0. ``count`` 1 is the sequential order (``block`` then changes
    nothing). Both powers of two."""

    count: int = 1
    block: int = 1

    def __post_init__(self) -> None:
        for name in ("count", "block"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1 or v & (v - 1):
                raise InvalidArgument(f"Cannot have Lanes {name}={v!r}: allowed values are powers of two >= 1")
        if self.count > 64:
            raise InvalidArgument(f"Cannot have Lanes count={self.count}: allowed values are 1, 2, 4, ..., 64")

    @property
    def sequential(self) -> bool:
        return self.count == 1

    @property
    def round(self) -> int:
        """k per round: one block of every lane (L * B)."""
        return self.count * self.block


#: The sequential ``ieee`` order: acc = fma(a[m, k], b[k, n], acc) for k = 0..K-1.
SEQUENTIAL = Lanes(1, 1)

#: ``Tiles.loader_registers`` unless set: the registers a producer thread of the
#: warp-specialized prefill pass keeps.
LOADER_REGISTERS = 32


@dataclass(frozen=True)
class Tiles:
    """One launch configuration: output block ``bm x bn``, K step ``bk`` (the K loop is
    unrolled ``bk`` FMAs at a time in ``ieee``; one ``tl.dot`` per step in ``mma``).
    ``tile8`` (``ieee`` only, ``bk`` 8): each step loads an 8-wide K tile of both operands
    (coalesced when K is their contiguous dim) and takes its columns apart in registers,
    instead of loading one k at a time; the FMA order is the same. ``dot`` (``ieee``
    only, compiled kernels): the K step is one fp32 ``tl.dot(..., input_precision="ieee")``,
    which Triton lowers to the same per-element FMA chain in k order (with its own
    register blocking); under the interpreter it falls back to the explicit loop.
    ``tiled`` (``ieee`` only): the register-tiled kernel of :mod:`.ieee_kernels`: each
    step loads a ``bm x bk`` and a ``bn x bk`` tile (any power-of-two ``bk``) and takes
    their columns apart by halving in registers; ``prefetch`` loads the next K tile during
    this one's FMAs (decode). ``group_m`` (every kernel): row blocks that share the
    columns' pass (L2 reuse, prefill). None of these change a bit of the ``ieee`` order,
    and ``group_m`` none of ``mma``'s (it moves tiles between programs, not k).

    Where the shape's order has K lanes (:func:`ieee_lanes`, L > 1) every path computes
    that order instead: ``tiled`` runs the K-lanes kernel (:func:`.ieee_kernels.ieee_lanes_kernel`:
    a ``bm x bn x L`` accumulator, K steps of ``max(bk, L * B)``, so keep ``bm x bn``
    small: decode), ``dot`` and the explicit loop run the lanes one after the other
    (a ``bm x bn`` accumulator per level of the tree; with ``split_lanes`` each lane in a
    program of its own), ``tile8`` runs the explicit loop."""

    bm: int
    bn: int
    bk: int
    num_warps: int = 4
    num_stages: int = 3
    tile8: bool = False
    dot: bool = False
    tiled: bool = False
    group_m: int = 1
    prefetch: bool = False
    #: ``mma``: plain 2-d GEMMs that TMA can describe run the persistent, TMA-fed kernel
    #: (:mod:`.mma_tma`; the same bits); every other launch the plain one. ``ieee`` with
    #: ``tiled`` in a K-lanes order: in plain 2-d launches whose bf16 weights TMA can
    #: describe as words, the main loop's weight tiles arrive by tensor descriptor,
    #: ``num_stages`` deep in shared memory (decode: bytes in flight without registers);
    #: every other launch runs as without (``prefetch`` if set). The same bits either way.
    tma: bool = False
    #: ``ieee`` in a K-lanes order only (prefill): one program per (output tile, lane)
    #: computes that lane's chain (``dot`` or the explicit loop) on a ``bm x bn`` tile with
    #: one accumulator, and writes the lane sum to an fp32 scratch ([L, rows, N], rows cut
    #: so that it stays under :data:`SPLIT_LANES_SCRATCH_BYTES`); a second kernel adds the L
    #: sums by the order's pairwise tree and applies the epilogue. The same adds in the
    #: same order as lane after lane, with one accumulator live instead of log2(L) + 1, so
    #: the tile can be as large as the sequential order's. Which program computes a lane
    #: never changes a bit: the lanes are the order, fixed by (N, K, dtype).
    split_lanes: bool = False
    #: ``split_lanes``: the first pass runs :mod:`.ieee_gluon`'s kernel (explicit thread
    #: tiles and shared-memory K steps). ``tiled`` in the 8 x 8 K-lanes order (decode): the
    #: launch runs :mod:`.ieee_gluon_decode`'s kernel (a thread holds one lane of ``bn / (4
    #: * num_warps)`` columns, ``bk / 64`` rounds a K step; ``num_stages`` > 1: the weights that
    #: many steps minus one ahead in shared memory by cp.async). Compiled CUDA launches only;
    #: every other launch runs the Triton kernel. The same bits either way.
    gluon: bool = False
    #: ``split_lanes`` with ``gluon`` (prefill): at most this many registers a thread
    #: (ptxas's ``maxnreg``; 0, the default: the compiler's choice). Fewer registers let
    #: more blocks share an SM, at the price of spills. The same bits.
    max_registers: int = 0
    #: ``split_lanes`` with ``gluon`` (prefill) on sm_90 on: a producer partition of this
    #: many warps (4; 0, the default: none) loads and upcasts each K step into one of
    #: ``num_stages`` shared buffers, handed over by mbarriers, while the ``num_warps`` warps
    #: only run FMAs (Hopper's warp specialization); with ``max_registers`` the register
    #: budget of all ``num_warps + loader_warps`` warps, of which the producer keeps
    #: ``loader_registers``.
    #: Older GPUs run the pass without it. The same bits.
    loader_warps: int = 0
    #: ``split_lanes`` with ``gluon`` (prefill): ptxas's ``--register-usage-level`` (0 to 10;
    #: None, the default: ptxas's own, 5). From 7 on ptxas allocates the registers of the
    #: first pass's K loop otherwise: compiled for sm_90 (Triton 3.6's ptxas 12.8), the
    #: warp-specialized tile's FFMA that read two or three sources from one register bank
    #: (a two-bank model after the reuse cache, ``benchmarks/prefill_register_banks.py``)
    #: fall from 1,156 to 1,058 of 2,048, and those reading three from 124 to 74, at the
    #: same 168 registers. The same bits, and slower: level 10 ran the table's prefill
    #: tile at 34.1 TFLOP/s against 43.1 (H100, M = 4096, K = N = 8192, 2026-12-06,
    #: ``benchmarks/prefill_lanes_ab.py``), so the table leaves it unset.
    register_usage_level: int | None = None
    #: ``tiled`` with ``tma`` in a K-lanes order (decode): 16-bit activations stay 16-bit in
    #: memory and in the kernel's shared-memory stages, and are upcast in registers (exact)
    #: once they arrive; without it the launch upcasts them to fp32 in memory first. Half the
    #: shared-memory reads of the activations, which all of a program's warps read each K
    #: step: on sm_90 (Triton 3.6) 4 x 32 x 128 reads 12 LDS.128 a step for 20 (by their phases
    #: an estimated 48 shared wavefronts for the 144 ncu counted), at 328 instructions for 240.
    #: The same bits.
    act16: bool = False
    #: ``split_lanes`` with ``gluon`` (prefill): the accumulator's sub-tile a thread holds,
    #: (rows, columns), repeated over ``bm x bn`` (4 x 8 threads a warp, ``num_warps / 2`` x 2
    #: warps): it decides which registers ptxas gives each k's operands and accumulators,
    #: so how many FFMA read two sources from one register bank (compiled for sm_90 with
    #: Triton 3.9, the table's prefill tile: 4 x 4 1,144 of 2,048, 8 x 4 1,026, 4 x 8
    #: 1,304). Each output's FMA chain is the same: the same bits. None beat 4 x 4 on an
    #: H100 (2026-12-07, M = 4096, K = N = 8192: 42.8 TFLOP/s; 8 x 4 39.0, 4 x 8 42.2, 2 x 4
    #: 41.9; ``benchmarks/fma_issue_ab.py``), so the table leaves it unset.
    thread_tile: tuple[int, int] = (4, 4)
    #: ``loader_warps`` (prefill): a producer thread loads its row's whole K step (``bk / 8``
    #: 16-byte loads), so one store instruction writes one k of 32 rows to the K-major
    #: buffer, in 32 banks; without it ``bk / 8`` threads share a row, and a store writes
    #: two k eight apart, whose words fall in the same banks (at 256 x 128 x 16, 51% of the
    #: producers' shared-store wavefronts were bank conflicts on an H100, 2026-12-07;
    #: Triton 3.9 then packs the stores into STSM, 15 for 51). The same bits. In the table's
    #: tile (H100, 2026-12-07, ``benchmarks/prefill_lanes_ab.py``) 10% slower at 32 producer
    #: registers (it spills there), as fast with ``loader_registers`` 48 (43.1 TFLOP/s
    #: against 43.2): the table leaves it unset.
    loader_whole_rows: bool = False
    #: ``loader_warps`` (prefill): the registers a producer thread keeps (setmaxnreg, a
    #: multiple of 8 from 24 to 256): its loads, upcasts and addresses; the FMA warps may
    #: take the rest of the register file. Compiled for sm_90, the table's prefill tile
    #: spills in 32 local loads and stores at 32 and 2 at 48 with Triton 3.6 (the GPU
    #: machine's; 0 at 48 with ``loader_whole_rows``), 90 and 22 with Triton 3.9. The
    #: same bits; 48 ran the table's tile 3% slower on an H100 (2026-12-07).
    loader_registers: int = LOADER_REGISTERS
    #: ``loader_warps`` (prefill): K steps the FMA warps run before handing their stages
    #: back at once (1, the default: every step); ``num_stages`` must hold two such groups.
    #: Fewer barriers of the FMA warps: compiled for sm_90 with Triton 3.6 (the GPU
    #: machine's), two a step at 1, three a group at 2 or more (one a step at 3 with 6
    #: stages); a barrier a step cost the pass's K loop alone 4% on an H100. The same bits,
    #: and slower (H100, 2026-12-07: 35.9 TFLOP/s at 3 steps in 6 stages, against 43.2 at
    #: 1 in 3): the producers run at most one group ahead.
    handback_steps: int = 1
    #: ``split_lanes`` with ``gluon`` (prefill, sm_90 on, one batch): the launch casts both
    #: operands to fp32 once in memory (exact), each lane's k side by side, and one producer
    #: warp feeds ``num_stages`` shared stages by TMA (:mod:`.ieee_gluon_tma`): no thread
    #: loads, upcasts or stores an operand. The same bits. Launches it cannot take (several
    #: batches, before Hopper) run the pass ``loader_warps`` and the rest describe.
    cast_once: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.thread_tile, tuple):   # from JSON: a list
            object.__setattr__(self, "thread_tile", tuple(self.thread_tile))
        for name in ("bm", "bn", "bk"):
            v = getattr(self, name)
            if v < 1 or v & (v - 1):
                raise InvalidArgument(f"Cannot have {name}={v}: a tile side must be a power of two >= 1")
        if self.tile8 and self.bk != 8:
            raise InvalidArgument(f"Cannot have tile8=True with bk={self.bk}: allowed values are bk=8")
        if self.dot and self.tile8:
            raise InvalidArgument("Cannot have dot=True with tile8=True: allowed values are one of them or neither")
        if self.tiled and (self.dot or self.tile8):
            raise InvalidArgument("Cannot have tiled=True with dot=True or tile8=True: allowed values are one "
                                  "of tiled, dot, tile8 or none")
        if self.group_m < 1:
            raise InvalidArgument(f"Cannot have group_m={self.group_m}: allowed values are integers >= 1")
        if self.tma and (self.tile8 or self.dot):
            raise InvalidArgument("Cannot have tma=True with tile8 or dot: allowed values are tma=True alone "
                                  "(an mma tile), with tiled (a K-lanes ieee tile), or tma=False")
        if self.prefetch and not self.tiled:
            raise InvalidArgument("Cannot have prefetch=True without tiled=True: allowed values are "
                                  "prefetch=False")
        if self.split_lanes and (self.tiled or self.tile8 or self.tma or self.prefetch):
            raise InvalidArgument("Cannot have split_lanes=True with tiled, tile8, tma or prefetch: allowed "
                                  "values are split_lanes=True with dot=True or with the explicit loop")
        if self.gluon and not (self.split_lanes or (self.tiled and not self.tma)):
            raise InvalidArgument("Cannot have gluon=True without split_lanes=True or tiled=True (tma=False): "
                                  "allowed values are gluon=False, or gluon=True with split_lanes=True or "
                                  "with tiled=True")
        if self.max_registers and not (self.gluon and self.split_lanes):
            raise InvalidArgument(f"Cannot have max_registers={self.max_registers} without gluon=True and "
                                  "split_lanes=True: allowed values are max_registers=0")
        if self.max_registers and not 24 <= self.max_registers <= 255:
            raise InvalidArgument(f"Cannot have max_registers={self.max_registers}: allowed values are 0 or "
                                  "24 to 255")
        if self.register_usage_level is not None and not (self.gluon and self.split_lanes):
            raise InvalidArgument(f"Cannot have register_usage_level={self.register_usage_level} without "
                                  "gluon=True and split_lanes=True: allowed values are register_usage_level=None")
        if self.register_usage_level is not None and not 0 <= self.register_usage_level <= 10:
            raise InvalidArgument(f"Cannot have register_usage_level={self.register_usage_level}: allowed values "
                                  "are None or 0 to 10")
        if self.loader_warps not in (0, 4):
            raise InvalidArgument(f"Cannot have loader_warps={self.loader_warps}: allowed values are 0 or 4")
        if self.loader_warps and not (self.gluon and self.split_lanes and self.num_stages >= 2):
            raise InvalidArgument(f"Cannot have loader_warps={self.loader_warps} without gluon=True, "
                                  f"split_lanes=True and num_stages >= 2 (got num_stages={self.num_stages}): "
                                  "allowed values are loader_warps=0")
        if self.loader_registers % 8 or not 24 <= self.loader_registers <= 256:
            raise InvalidArgument(f"Cannot have loader_registers={self.loader_registers}: allowed values are "
                                  "multiples of 8 from 24 to 256")
        if (self.loader_whole_rows or self.loader_registers != LOADER_REGISTERS or self.handback_steps != 1) \
                and not self.loader_warps:
            raise InvalidArgument(f"Cannot have loader_whole_rows={self.loader_whole_rows}, loader_registers="
                                  f"{self.loader_registers} or handback_steps={self.handback_steps} without "
                                  "loader_warps: allowed values are loader_whole_rows=False, loader_registers="
                                  f"{LOADER_REGISTERS} and handback_steps=1")
        if self.handback_steps != 1 and (self.handback_steps < 1 or self.num_stages % self.handback_steps
                                         or self.num_stages < 2 * self.handback_steps):
            raise InvalidArgument(f"Cannot have handback_steps={self.handback_steps} with num_stages="
                                  f"{self.num_stages}: allowed values are 1, or a divisor of num_stages at most "
                                  "half of it")
        if self.cast_once and not (self.gluon and self.split_lanes and self.num_stages >= 2):
            raise InvalidArgument(f"Cannot have cast_once=True without gluon=True, split_lanes=True and "
                                  f"num_stages >= 2 (got gluon={self.gluon}, split_lanes={self.split_lanes}, "
                                  f"num_stages={self.num_stages}): allowed values are cast_once=False")
        if self.act16 and not (self.tiled and self.tma):
            raise InvalidArgument("Cannot have act16=True without tiled=True and tma=True: allowed values are "
                                  "act16=False, or act16=True on a K-lanes TMA tile")
        if len(self.thread_tile) != 2 or not set(self.thread_tile) <= {1, 2, 4, 8}:
            raise InvalidArgument(f"Cannot have thread_tile={self.thread_tile}: allowed values are (rows, columns), "
                                  "each 1, 2, 4 or 8")
        if self.thread_tile != (4, 4) and not (self.gluon and self.split_lanes):
            raise InvalidArgument(f"Cannot have thread_tile={self.thread_tile} without gluon=True and "
                                  "split_lanes=True: allowed values are thread_tile=(4, 4)")
        if self.dot and min(self.bm, self.bn, self.bk) < 16:
            raise InvalidArgument(f"Cannot have dot=True with tiles {self.bm}x{self.bn}x{self.bk}: "
                                  "allowed values are bm, bn, bk >= 16")


#: (order, size class of N, size class of K) -> tiles; a size class is "small" under 1024.
#: ``mma`` keys never mention M or the device (see the module docstring). The large/large
#: row is the fastest of twelve (eight plain, four TMA-fed) on the repro model's linear
#: shapes on the H200 (M = 8192; N, K = 6144/2048/8192 x 2048/8192;
#: ``benchmarks/repro_gemm.py --sections model_tiles``, 2026-12-04,
#: benchmarks/results/2026-12-04-h200-repro-tma-tiles): the persistent TMA kernel
#: (:mod:`.mma_tma`) at 128 x 256 x 64, 3 stages, 3.99 ms for the model's GEMMs against
#: 5.21 for the best plain tile and 3.83 with cuBLAS (0.96x), every tile with the same
#: bits. Launches TMA cannot describe run the plain kernel at the same tile. The other
#: rows: the least time summed over two shapes of the row's classes at M = 1024 and 8192
#: among eight tiles (``repro_gemm.py --sections mma_rows``, H100, 2026-12-07,
#: benchmarks/results/2026-12-07-h100-svdvals-guarded-mma-rows-slow-pass/tables/): 1.32x,
#: 1.49x and 1.39x faster than the 2026-12-03 tiles they replaced, 0.65x, 0.63x and 0.80x
#: cuBLAS bf16 there, every tile with the same bits as the old one at every shape. At
#: small/small the fastest (64 x 128 x 64, 4 warps) beat 128 x 128 x 64 by 3%, but under
#: the interpreter (CI), whose ``tl.dot`` is numpy's matmul, its 64 x 64 by 64 x 128 block
#: product is not the same for a row at every position of the block: the order would not
#: be batch-invariant there.
TABLE: dict[tuple[str, str, str], Tiles] = {
    ("mma", "small", "small"): Tiles(128, 128, 64, num_warps=8, num_stages=3, group_m=8),
    ("mma", "small", "large"): Tiles(128, 128, 64, num_warps=8, num_stages=3, group_m=8),
    ("mma", "large", "small"): Tiles(128, 256, 64, num_warps=8, num_stages=3, group_m=8, tma=True),
    ("mma", "large", "large"): Tiles(128, 256, 64, num_warps=8, num_stages=3, group_m=8, tma=True),
}

#: ``ieee``: (rows class, size class of N) -> tiles. Here, and only here, the tile may
#: follow M, by bucket: "decode1", "decode2", "decode4", "decode8", "decode16" (M rounded
#: up to a power of two, at most 16: the register-tiled kernel holds every row, so its
#: ``bm`` is the bucket) and "prefill" (M > 16). Every output element is the same FMA
#: chain whatever the tile, so a row's bits cannot depend on it. CI proves it under the
#: interpreter (every tile == the emulator, tests/repro/test_gemm_ieee_tiled.py) and
#: benchmarks/repro_gemm.py on the GPU (row 0 of x[:M] @ W identical for M = 1..8192).
#: Decode rows: the register-tiled kernel, BN columns per program (N / BN programs, for
#: memory parallelism), 16-bit K tiles double-buffered in registers. Large-N rows: the
#: H200 decode section's winners at K = N = 4096 and 8192 (2026-12-04,
#: benchmarks/results/2026-12-04-h200-repro-tiled-decode-bits); small-N rows: chosen from
#: compiled sm_90 register counts (no spills). Prefill rows: the fp32 ``tl.dot`` path,
#: the best of 7 at M = 2048, K = N = 4096 on the H200 (27.6 TFLOP/s,
#: benchmarks/results/2026-12-03-h200-repro-gemm). The small-N prefill row (N and K under
#: 1024: the sequential order): the least geometric mean of its time over the fastest's
#: across M = 1024, 4096, 8192 at K = N = 512 and 768, 1.13x (at worst 1.65x, M = 8192, N =
#: 512), where the 64 x 64 x 16 tile it replaced took 1.54x (the fastest only at M = 1024,
#: N = 512); the best of 15 tiles timed, every one the order's bits (H100, 2026-12-07 and
#: 08, benchmarks/results/2026-12-08-h100-small-prefill-row-grown-qr-ldl-2p32-ok/).
DECODE_ROWS = (1, 2, 4, 8, 16)
IEEE_TABLE: dict[tuple[str, str], Tiles] = {
    ("decode1", "small"): Tiles(1, 16, 64, num_warps=1, num_stages=1, tiled=True, prefetch=True),
    ("decode2", "small"): Tiles(2, 16, 64, num_warps=1, num_stages=1, tiled=True, prefetch=True),
    ("decode4", "small"): Tiles(4, 16, 32, num_warps=1, num_stages=1, tiled=True, prefetch=True),
    ("decode8", "small"): Tiles(8, 16, 16, num_warps=1, num_stages=1, tiled=True, prefetch=True),
    ("decode16", "small"): Tiles(16, 16, 8, num_warps=1, num_stages=1, tiled=True, prefetch=True),
    ("decode1", "large"): Tiles(1, 16, 64, num_warps=1, num_stages=1, tiled=True, prefetch=True),
    ("decode2", "large"): Tiles(2, 16, 64, num_warps=1, num_stages=1, tiled=True, prefetch=True),
    ("decode4", "large"): Tiles(4, 16, 32, num_warps=1, num_stages=1, tiled=True, prefetch=True),
    ("decode8", "large"): Tiles(8, 64, 16, num_warps=4, num_stages=1, tiled=True, prefetch=True),
    ("decode16", "large"): Tiles(16, 16, 8, num_warps=1, num_stages=1, tiled=True, prefetch=True),
    ("prefill", "small"): Tiles(64, 128, 16, num_warps=4, num_stages=4, dot=True, group_m=8),
    ("prefill", "large"): Tiles(128, 128, 32, num_warps=4, num_stages=2, dot=True),
}

#: ``ieee`` in a K-lanes order (:func:`ieee_lanes` gives L > 1): (rows class, size class of
#: N) -> tiles, read instead of :data:`IEEE_TABLE`. Decode rows: the K-lanes kernel, one
#: program per ``bn`` columns holding every row and every lane (``bm x bn x L`` fp32
#: accumulators), each K step ``bk`` k (whole rounds of L * B) of 16-bit weights loaded
#: K-contiguous, 16 bytes a thread per lane block: the next step prefetched in registers
#: (``prefetch``), or ``num_stages`` steps in flight by tensor descriptor (``tma``; weights
#: TMA cannot describe run the same order without). Large-N rows: decode1 the fastest over
#: K = N = 4096 and 8192 together in the H200 decode section of 2026-12-05
#: (``benchmarks/results/2026-12-05-h200-repro-gluon-prefill-tma-decode/``); decode2 to
#: decode16 the least summed time over both K on an H100 on 2026-12-06, TMA tiles with
#: 16-bit activations in shared memory (``act16``: by its LDS phases about a third of the wavefronts
#: that held M = 4; 0.93-1.01x cuBLAS bf16 at M = 4 where the fp32-stage tile gave
#: 0.76-0.82x, ``benchmarks/results/2026-12-06-h100-repro-decode-act16/``); ``bk`` = 256
#: at 8 or 16 rows spilled (1.1-3.8 ms against 0.05-0.18 ms at ``bk`` = 64, 2026-12-04).
#: Small-N rows: the 2026-12-04 tiles, but decode1 (the large row's tile: 0.0061 ms
#: against 0.0094 at N = 512, K = 4096 on an H100, 2026-12-07, the fastest of 14 there; at 2
#: rows the table's tile was within 4% of the best), decode4 and decode8 (8 columns a
#: program, 2 warps: 0.0085 and 0.0129 ms against 0.0104 and 0.0167 for the 2026-12-04
#: tiles, the fastest of 39 each; at 16 rows the table's tile was within 3% of the best;
#: H100, 2026-12-07, benchmarks/results/2026-12-07-h100-pinv-singular-wrong-small-n-decode/) and prefill
#: (the warp-specialized tile: 0.820 ms against 0.900 for the 4-warp tile at M = 4096, N =
#: 512, K = 8192, the fastest of 21; ``cast_once`` not timed there;
#: benchmarks/results/2026-12-07-h100-svdvals-guarded-mma-rows-slow-pass/tables/).
#: Prefill rows: ``split_lanes`` with its first pass in Gluon (:mod:`.ieee_gluon`: each
#: lane's fp32 chains from shared memory into 4 x 4 register tiles, into scratch; then the
#: pairwise tree in an epilogue), the
#: fastest of sixteen at M = 1024, 4096, 8192 and K = N = 8192 on the H200 (2026-12-05,
#: 39.4-41.5 TFLOP/s, 60-63% of the measured FMA ceiling, 0.82-0.83x CastFloat32; the
#: ``tl.dot`` first pass 24.7-25.3). Large N: warp-specialized since 2026-12-06 (4
#: producer warps feed 8 FMA warps, ``loader_warps``): 43.2 TFLOP/s at M = 4096 against
#: 41.1 for the 4-warp tile in the same run, the fastest of twenty-two
#: (``benchmarks/results/2026-12-06-h200-warp-specialized-prefill-segment-11/``); fed by
#: TMA from operands cast once (``cast_once``) where a launch allows it since 2026-12-07:
#: 47.9 TFLOP/s against 42.9 on an H100 at M = 4096 (45.4 and 48.5 at M = 1024 and 8192),
#: the casts 0.21 ms of 11.47 (``benchmarks/results/2026-12-07-h100-prefill-fast-cast-svdvals-wrong/``);
#: a 2 x 4 ``thread_tile`` gained 0.9% there and lost 2% in the warp-specialized pass. Where
#: Gluon cannot run, the Triton first pass runs the same tile (same bits); before Hopper,
#: the Gluon pass without producer warps.
IEEE_LANES_TABLE: dict[tuple[str, str], Tiles] = {
    ("decode1", "small"): Tiles(1, 16, 512, num_warps=4, num_stages=1, tiled=True, prefetch=True),
    ("decode2", "small"): Tiles(2, 16, 256, num_warps=4, num_stages=1, tiled=True, prefetch=True),
    ("decode4", "small"): Tiles(4, 8, 128, num_warps=2, num_stages=1, tiled=True, prefetch=True),
    ("decode8", "small"): Tiles(8, 8, 128, num_warps=2, num_stages=1, tiled=True, prefetch=True),
    ("decode16", "small"): Tiles(16, 16, 64, num_warps=4, num_stages=1, tiled=True, prefetch=True),
    ("decode1", "large"): Tiles(1, 16, 512, num_warps=4, num_stages=1, tiled=True, prefetch=True),
    ("decode2", "large"): Tiles(2, 16, 256, num_warps=4, num_stages=4, tiled=True, tma=True, act16=True),
    ("decode4", "large"): Tiles(4, 16, 256, num_warps=4, num_stages=3, tiled=True, tma=True, act16=True),
    ("decode8", "large"): Tiles(8, 16, 128, num_warps=4, num_stages=4, tiled=True, tma=True, act16=True),
    ("decode16", "large"): Tiles(16, 32, 64, num_warps=4, num_stages=4, tiled=True, tma=True, act16=True),
    ("prefill", "small"): Tiles(256, 128, 16, num_warps=8, num_stages=3, group_m=8, split_lanes=True, gluon=True,
                                loader_warps=4),
    ("prefill", "large"): Tiles(256, 128, 16, num_warps=8, num_stages=3, group_m=8, split_lanes=True, gluon=True,
                                loader_warps=4, cast_once=True),
}

#: The ``ieee`` order per shape: (size class of N, size class of K, weight dtype class)
#: -> :class:`Lanes`. Never M, never the device: this, and only this, fixes the bits.
#: K under 1024: sequential (short chains; every sequential path stays as it was). K
#: from 1024: 8 lanes, blocks of 16 bytes of weight (8 k of a 16-bit weight, 4 of an fp32
#: one): a thread's 16-byte load is one lane's block, so the K-lanes kernel needs no data
#: movement between threads, and a decode program has ``bn x 8`` independent chains
#: instead of ``bn``. Timed on the H200 (2026-12-04, bf16, K = N = 4096 and 8192): 8 x 8
#: lanes run decode 1.6-3.2x faster than the sequential order at M = 1..16, and prefill
#: at 0.37-0.39x of it (10.9 against 28.9 TFLOP/s: log2(L) + 1 accumulators in flight
#: force 64 x 64 tiles where the sequential order runs 128 x 128). Decode is where serving spends its GEMM time, so the
#: lanes stay; the fp32-weight rows (8 x 4) are not timed. A change here changes the bits
#: of those shapes, at every M alike.
IEEE_LANES: dict[tuple[str, str, str], Lanes] = {
    ("small", "small", "16bit"): SEQUENTIAL,
    ("large", "small", "16bit"): SEQUENTIAL,
    ("small", "small", "fp32"): SEQUENTIAL,
    ("large", "small", "fp32"): SEQUENTIAL,
    ("small", "large", "16bit"): Lanes(8, 8),
    ("large", "large", "16bit"): Lanes(8, 8),
    ("small", "large", "fp32"): Lanes(8, 4),
    ("large", "large", "fp32"): Lanes(8, 4),
}

#: The most bytes the fp32 lane sums of a ``split_lanes`` launch hold at once: a launch
#: whose ``L x rows x N`` sums (times the batch) would take more runs row block by row
#: block (a row's bits never depend on which block it is in).
SPLIT_LANES_SCRATCH_BYTES = 1 << 30

#: Under the Triton interpreter (CPU) every program is a Python loop: fewer, larger tiles.
#: The ``mma`` order keeps its table row (its bits may depend on the tile); ``ieee`` may
#: not care, and a test proves it (tests/repro/test_gemm_matches_emulator.py).
INTERPRETER_IEEE = Tiles(64, 64, 16)


def size_class(n: int) -> str:
    """The tables' size class of N or K: "small" under 1024, else "large"."""
    return "small" if n < 1024 else "large"


def rows_class(m: int | None) -> str:
    """The ``ieee`` table's M bucket: "decode<R>" with R the power of two >= M for M <= 16
    (R = 1, 2, 4, 8, 16), else (or M unknown) "prefill"."""
    if m is None or m > DECODE_ROWS[-1]:
        return "prefill"
    return f"decode{next(r for r in DECODE_ROWS if r >= max(m, 1))}"


def dtype_class(dtype) -> str:
    """"16bit" (bf16, fp16) or "fp32", from the weight dtype's size (torch or numpy dtype)."""
    size = getattr(dtype, "itemsize", None)
    if size == 2:
        return "16bit"
    if size == 4:
        return "fp32"
    raise InvalidArgument(f"Cannot have weight dtype={dtype}: allowed values are 16-bit or 32-bit floats")


def ieee_lanes(n: int, k: int, dtype) -> Lanes:
    """The ``ieee`` order of a shape: N, K and the weight dtype, nothing else (no M, no
    device), so a row's bits are the same at every batch size and on every GPU."""
    return IEEE_LANES[(size_class(n), size_class(k), dtype_class(dtype))]


def pick(order: str, n: int, k: int, dtype, *, m: int | None = None, lanes: Lanes | None = None) -> Tiles:
    """The tiles for ``order`` at (N, K, weight dtype); fp16 and bf16 share a row.
    ``m`` is read by ``ieee`` only (see :data:`IEEE_TABLE`), and so is ``lanes`` (the
    order, default :func:`ieee_lanes`): a K-lanes order reads :data:`IEEE_LANES_TABLE`."""
    check_choice("order", order, ORDERS)
    if order == "ieee":
        lanes = lanes if lanes is not None else ieee_lanes(n, k, dtype)
        table = IEEE_TABLE if lanes.sequential else IEEE_LANES_TABLE
        return table[(rows_class(m), size_class(n))]
    return TABLE[(order, size_class(n), size_class(k))]
