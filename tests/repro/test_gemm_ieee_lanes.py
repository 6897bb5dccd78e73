"""The K-lanes ``ieee`` order (:class:`tiles.Lanes`): the Triton kernels under the
interpreter equal the CPU emulator bit for bit (the K-lanes kernel, the lane-after-lane
explicit loop, the dot path's gather), whatever the tile, the K tail, K < L, the signs
of zeros, infinities or NaN; and the table fixes the order from (N, K, dtype) alone."""

from __future__ import annotations

import inspect

import pytest
import torch
from hypothesis import given, settings, strategies as st

from kernelaudit.config import interpreter_requested
from kernelaudit.errors import InvalidArgument
from kernelaudit.repro import emulate, gemm, tiles as tiles_mod
from kernelaudit.repro.tiles import IEEE_LANES, SEQUENTIAL, Lanes, Tiles, ieee_lanes, pick, rows_class

DTYPES = (torch.bfloat16, torch.float16)


_LANES = st.builds(Lanes, st.sampled_from([2, 4, 8]), st.sampled_from([1, 2, 4, 8]))
_LANE_TILES = st.builds(lambda bm, bn, bk, pre, grp: Tiles(bm, bn, bk, num_warps=1, tiled=True, prefetch=pre,
                                                           group_m=grp),
                        st.sampled_from([1, 2, 4, 8, 16]), st.sampled_from([4, 8, 16]),
                        st.sampled_from([1, 8, 32, 64]), st.booleans(), st.sampled_from([1, 3]))


@settings(max_examples=10, deadline=None)
@given(m=st.integers(1, 9), n=st.integers(1, 20), k=st.integers(1, 80), lanes=_LANES, tiles=_LANE_TILES,
       wdt=st.sampled_from(DTYPES), adt=st.sampled_from(DTYPES + (torch.float32,)),
       bias=st.booleans(), seed=st.integers(0, 2**16), scale=st.sampled_from([1.0, 1e-3, 300.0]))
def test_lanes_kernel_linear_equals_emulator_bit_for_bit(m, n, k, lanes, tiles, wdt, adt, bias, seed, scale,
                                                        bits_equal, draw):
    """The K-lanes kernel ([BM, BN, L] accumulator): any tile, K any (tails, K < L * B)."""
    x = draw((m, k), adt, seed, scale)
    w = draw((n, k), wdt, seed + 1)
    b = draw((n,), wdt, seed + 2) if bias else None
    got = gemm.linear(x, w, b, tiles=tiles, lanes=lanes)
    assert bits_equal(got, emulate.linear_ieee(x, w, b, lanes=lanes))


@settings(max_examples=6, deadline=None)
@given(m=st.integers(1, 9), n=st.integers(1, 30), k=st.integers(1, 60), lanes=_LANES,
       tiles=st.sampled_from([None, Tiles(4, 8, 1), Tiles(8, 16, 8, tile8=True), Tiles(16, 16, 16, dot=True)]),
       dt=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_lane_after_lane_paths_equal_emulator_bit_for_bit(m, n, k, lanes, tiles, dt, seed, bits_equal, draw):
    """The explicit loop (and the tile8 / dot requests, which run it here) lane by lane."""
    a, b = draw((m, k), torch.float32, seed, 10.0), draw((k, n), dt, seed + 1)
    x = draw((n,), dt, seed + 2)
    got = gemm.addmm(x, a, b, beta=0.5, alpha=-2.0, tiles=tiles, lanes=lanes)
    assert bits_equal(got, emulate.addmm_ieee(x, a, b, beta=0.5, alpha=-2.0, lanes=lanes))


@pytest.mark.parametrize("k", [1, 3, 7, 8, 9, 33])
@pytest.mark.parametrize("lanes", [Lanes(8, 1), Lanes(4, 4), Lanes(2, 16)])
def test_k_below_a_round_and_below_l_leaves_empty_lanes_at_plus_zero(k, lanes, bits_equal, draw):
    """K < L * B (and K < L): the lanes past K hold +0.0, every path agrees."""
    x, w = draw((3, k), torch.float32, k), draw((5, k), torch.bfloat16, k + 1)
    want = emulate.linear_ieee(x, w, lanes=lanes)
    for t in (None, Tiles(4, 8, 2, num_warps=1, tiled=True), Tiles(1, 4, 1, num_warps=1, tiled=True, prefetch=True)):
        assert bits_equal(gemm.linear(x, w, tiles=t, lanes=lanes), want), t


def _lane_starts(k: int, lanes: Lanes) -> list[int]:
    return [ks[0] for ks in emulate.lane_ks(k, lanes) if ks]


@pytest.mark.parametrize("k, lanes", [(19, Lanes(4, 2)), (37, Lanes(2, 8)), (70, Lanes(8, 4))])
def test_negative_zero_survives_every_lane_the_tail_and_the_tree(k, lanes, bits_equal):
    """Each lane starts with a product that underflows to -0.0 and adds only -0.0 after
    it, so every lane sum is -0.0 and so is the tree's; K is not a multiple of a round, so
    the kernels pad the tail (fma(+0, -1, acc) must keep -0.0)."""
    assert k % lanes.round and k >= lanes.round
    x = torch.zeros(1, k)
    w = -torch.ones(4, k)
    for s in _lane_starts(k, lanes):
        x[0, s], w[:, s] = -1e-30, 1e-30
    want = emulate.linear_ieee(x, w, lanes=lanes)
    assert torch.equal(want.view(torch.int32), torch.full((1, 4), -2**31, dtype=torch.int32))   # -0.0 bits
    for t in (None, Tiles(1, 4, 2, num_warps=1, tiled=True), Tiles(1, 4, 2, num_warps=1, tiled=True, prefetch=True),
              Tiles(4, 4, 8, tile8=True), Tiles(4, 4, 8, split_lanes=True)):
        assert bits_equal(gemm.linear(x, w, tiles=t, lanes=lanes), want), t


def test_an_empty_lane_turns_a_negative_zero_total_into_plus_zero(bits_equal):
    """The order, not an accident: with K = 3 < L * B, lane 1 is empty (+0.0) and
    -0.0 + +0.0 = +0.0, where the sequential order keeps -0.0."""
    lanes = Lanes(2, 4)
    x = torch.tensor([[-1e-30, 0.0, 0.0]])
    w = torch.tensor([[1e-30, -1.0, -1.0]] * 3)
    want = emulate.linear_ieee(x, w, lanes=lanes)
    assert torch.equal(want.view(torch.int32), torch.zeros(1, 3, dtype=torch.int32))             # +0.0
    assert torch.equal(emulate.linear_ieee(x, w, lanes=SEQUENTIAL).view(torch.int32),
                       torch.full((1, 3), -2**31, dtype=torch.int32))
    for t in (None, Tiles(1, 4, 4, num_warps=1, tiled=True, prefetch=True)):
        assert bits_equal(gemm.linear(x, w, tiles=t, lanes=lanes), want)


@pytest.mark.filterwarnings("ignore:invalid value encountered")   # numpy, under the interpreter: inf - inf
def test_inf_and_nan_in_lanes_and_the_tree(draw):
    """inf in one lane, -inf in another (NaN only at the tree's add), NaN inputs, fp16
    activations that overflow to inf: NaN positions and every other bit agree."""
    lanes = Lanes(4, 2)
    k = 21
    x = draw((6, k), torch.float32, 3)
    w = draw((7, k), torch.bfloat16, 4)
    x[0, 0] = float("inf")                 # lane 0: inf (or NaN where w = 0)
    x[1, 0], x[1, 2] = float("inf"), float("-inf")   # lanes 0 and 1: inf + -inf = NaN in the tree
    x[2, 5] = float("nan")
    x[3] = x[3] * 1e30                     # overflows in fp16 below
    w[2, 7] = float("inf")
    xs = (x, x.half())
    for xx in xs:
        want = emulate.linear_ieee(xx, w, lanes=lanes)
        assert torch.isnan(want).any() and torch.isinf(want).any()
        for t in (None, Tiles(4, 4, 4, num_warps=1, tiled=True), Tiles(8, 8, 2, num_warps=1, tiled=True,
                                                                          prefetch=True),
                  Tiles(4, 8, 4, split_lanes=True)):
            got = gemm.linear(xx, w, tiles=t, lanes=lanes)
            assert emulate.bit_mismatches(got, want) == 0, (xx.dtype, t)


@pytest.mark.parametrize("lanes, bk", [(Lanes(4, 4), 16), (Lanes(8, 8), 16), (Lanes(2, 16), 32), (Lanes(8, 2), 64),
                                       (Lanes(2, 32), 16)])
def test_dot_path_gathers_each_lanes_k_in_order(lanes, bk, bits_equal):
    """The compiled ``dot`` path's gather (QB blocks of one lane per tl.dot), run under the
    interpreter on integer data, where every order gives the exact sum: a wrong k, a lost
    block or padding that is not neutral would change it. (Its FMA order is checked on
    the GPU: tests/gpu/test_repro_ieee_tiled_gpu.py.)"""
    if not interpreter_requested():
        pytest.skip("the interpreter's tl.dot is exact here; compiled, the GPU tests check this path")
    g = torch.Generator().manual_seed(bk)
    m, n = 5, 9
    for k in (1, lanes.round - 1, lanes.round * 3 + 5, 97):
        a = torch.randint(-3, 4, (m, k), generator=g).float()
        b = torch.randint(-3, 4, (k, n), generator=g).bfloat16()
        out = torch.empty(1, m, n)
        a3, b3 = a.unsqueeze(0), b.unsqueeze(0)
        gemm._ieee_kernel[(1, 1, 1)](a3, b3, out, out, m, n, k, *a3.stride(), *b3.stride(), *out.stride(),
                                     *out.stride(), 1.0, 0.0, 0, 0, 0, 0, HAS_BIAS=False, OUT_BF16=False, TILE8=False,
                                     DOT=True, BM=16, BN=16, BK=bk, LANES=lanes.count, LB=lanes.block)
        assert bits_equal(out[0], emulate.mm_ieee(a, b, lanes=lanes)), k
        assert torch.equal(out[0], a.double().mm(b.double()).float())


_SPLIT_TILES = st.builds(lambda bm, bn, bk, grp: Tiles(bm, bn, bk, group_m=grp, split_lanes=True),
                        st.sampled_from([1, 4, 16]), st.sampled_from([2, 8, 16]), st.sampled_from([1, 8, 16]),
                        st.sampled_from([1, 2]))


@settings(max_examples=5, deadline=None)
@given(m=st.integers(1, 20), n=st.integers(1, 20), k=st.integers(1, 70), lanes=_LANES, tiles=_SPLIT_TILES,
       wdt=st.sampled_from(DTYPES), adt=st.sampled_from(DTYPES + (torch.float32,)), bias=st.booleans(),
       seed=st.integers(0, 2**16))
def test_split_lanes_equal_emulator_bit_for_bit(m, n, k, lanes, tiles, wdt, adt, bias, seed, bits_equal, draw):
    """``split_lanes``: each lane's sum in a program of its own, written to the fp32
    scratch, then the tree and the epilogue in a second kernel: the order's bits, any
    tile, K any (tails, empty lanes), with and without bias."""
    x = draw((m, k), adt, seed, 3.0)
    w = draw((n, k), wdt, seed + 1)
    b = draw((n,), wdt, seed + 2) if bias else None
    assert bits_equal(gemm.linear(x, w, b, tiles=tiles, lanes=lanes), emulate.linear_ieee(x, w, b, lanes=lanes))


def test_split_lanes_bmm_addmm_and_row_blocks_equal_emulator(bits_equal, draw, monkeypatch):
    """Batched, strided and addmm launches; and a scratch cap that cuts the rows into
    blocks (three launches of each pass) changes no bit."""
    lanes, t = Lanes(4, 2), Tiles(4, 8, 8, split_lanes=True)
    a3, b3 = draw((3, 11, 19), torch.bfloat16, 7), draw((3, 19, 5), torch.bfloat16, 8)
    want = emulate.bmm_ieee(a3, b3, lanes=lanes)
    assert bits_equal(gemm.bmm(a3, b3, tiles=t, lanes=lanes), want)
    a = draw((21, 6), torch.float16, 4).t()          # a [6, 21], column-major view
    b = draw((21, 13), torch.float16, 5)
    x = draw((6, 13), torch.float16, 6)
    want2 = emulate.addmm_ieee(x, a, b, beta=0.5, alpha=-3.0, lanes=lanes)
    assert bits_equal(gemm.addmm(x, a, b, beta=0.5, alpha=-3.0, tiles=t, lanes=lanes), want2)
    monkeypatch.setattr(gemm, "SPLIT_LANES_SCRATCH_BYTES", lanes.count * 3 * 5 * 4 * 4)   # 4 rows of sums
    launches = []
    real = gemm._ieee_lane_sums_kernel
    monkeypatch.setattr(gemm, "_ieee_lane_sums_kernel", _Counting(real, launches))
    assert bits_equal(gemm.bmm(a3, b3, tiles=t, lanes=lanes), want)
    assert len(launches) == 3                        # rows 0-3, 4-7, 8-10


class _Counting:
    """A kernel whose launches are counted (``kernel[grid](...)``)."""

    def __init__(self, kernel, calls: list) -> None:
        self.kernel, self.calls = kernel, calls

    def __getitem__(self, grid):
        self.calls.append(grid)
        return self.kernel[grid]


@pytest.mark.parametrize("lanes, bk", [(Lanes(4, 4), 16), (Lanes(8, 8), 16), (Lanes(2, 16), 32)])
def test_split_lanes_dot_path_gathers_its_lanes_k(lanes, bk, bits_equal):
    """The first pass's compiled ``dot`` path, run under the interpreter on integer data
    (every order gives the exact sum there): each program's lane sum is that lane's k,
    no more, no fewer, and the second pass adds them (the FMA order is checked on the GPU)."""
    if not interpreter_requested():
        pytest.skip("the interpreter's tl.dot is exact here; compiled, the GPU tests check this path")
    g = torch.Generator().manual_seed(bk)
    m, n = 5, 9
    for k in (1, lanes.round - 1, lanes.round * 3 + 5, 97):
        a = torch.randint(-3, 4, (1, 1, m, k), generator=g).float()
        b = torch.randint(-3, 4, (1, 1, k, n), generator=g).bfloat16()
        sums = torch.full((lanes.count, 1, 1, m, n), float("nan"))
        gemm._ieee_lane_sums_kernel[(lanes.count, 1, 1)](
            a, b, sums, m, n, k, *a.stride()[1:], *b.stride()[1:], a.stride(0), b.stride(0), *sums.stride()[:4],
            DOT=True, BM=16, BN=16, BK=bk, LANES=lanes.count, LB=lanes.block, GROUP_M=1)
        for lane, ks in enumerate(emulate.lane_ks(k, lanes)):
            # exact on integers; + 0.0 because a chain starts at +0.0 (an exact -0 sum is +0 there)
            want = (a[0, 0, :, ks].double().mm(b[0, 0, ks, :].double()) + 0.0).float()
            assert bits_equal(sums[lane, 0, 0], want), (k, lane)


def test_split_lanes_with_a_register_tiled_kernel_raises_invalid_argument():
    with pytest.raises(InvalidArgument, match="split_lanes"):
        Tiles(4, 8, 8, tiled=True, split_lanes=True)


def test_lanes_bmm_and_strided_operands_equal_emulator(bits_equal, draw):
    lanes = Lanes(4, 2)
    a = draw((21, 6), torch.float16, 4).t()          # a [6, 21], column-major view
    b = draw((21, 13), torch.float16, 5)             # b [21, 13], N contiguous (not K)
    x = draw((6, 13), torch.float16, 6)
    for t in (None, Tiles(4, 8, 8, num_warps=1, tiled=True, prefetch=True)):
        assert bits_equal(gemm.addmm(x, a, b, beta=0.5, alpha=-3.0, tiles=t, lanes=lanes),
                           emulate.addmm_ieee(x, a, b, beta=0.5, alpha=-3.0, lanes=lanes))
    a3, b3 = draw((2, 3, 19), torch.bfloat16, 7), draw((2, 19, 5), torch.bfloat16, 8)
    for t in (None, Tiles(2, 4, 4, tiled=True, group_m=2)):
        assert bits_equal(gemm.bmm(a3, b3, tiles=t, lanes=lanes), emulate.bmm_ieee(a3, b3, lanes=lanes))


# -- the table: the order from (N, K, dtype) alone ------------------------------------------
def test_the_order_is_a_function_of_n_k_and_dtype_alone():
    assert list(inspect.signature(ieee_lanes).parameters) == ["n", "k", "dtype"]
    assert all(len(key) == 3 for key in IEEE_LANES)   # (N class, K class, dtype class): no M, no device
    assert {key[2] for key in IEEE_LANES} == {"16bit", "fp32"}
    for n in (1, 100, 1023, 1024, 4096, 8192):
        for k in (1, 64, 1023, 1024, 4099, 8192):
            for dt in (torch.bfloat16, torch.float16, torch.float32):
                got = ieee_lanes(n, k, dt)
                assert got == ieee_lanes(n, k, dt) and isinstance(got, Lanes)
                assert ieee_lanes(n, k, torch.float16) == ieee_lanes(n, k, torch.bfloat16)
                # the launch table follows the order, and only the launch table follows M
                for m in (1, 2, 5, 16, 17, 4096):
                    table = tiles_mod.IEEE_TABLE if got.sequential else tiles_mod.IEEE_LANES_TABLE
                    assert pick("ieee", n, k, dt, m=m) == table[(rows_class(m), "small" if n < 1024 else "large")]
    assert ieee_lanes(4096, 64, torch.bfloat16) == SEQUENTIAL               # short K stays sequential
    assert not ieee_lanes(4096, 4096, torch.bfloat16).sequential            # decode shapes get lanes
    assert not ieee_lanes(8192, 8192, torch.bfloat16).sequential
    with pytest.raises(InvalidArgument, match="Cannot"):
        ieee_lanes(64, 64, torch.int8)


def test_a_lanes_shape_keeps_row_0_bits_through_every_m_bucket_of_the_table(bits_equal, draw):
    """K = 1024 (the lanes class): row 0 of x[:M] @ W.T through each M's table tiles
    (the K-lanes kernel in every decode bucket, the prefill row's path above 16) equals
    the emulator's row 0 at M = 1 in the shape's order, which is not the sequential one."""
    k, n = 1024, 8
    w = draw((n, k), torch.bfloat16, 9)
    x = draw((17, k), torch.float32, 10)
    lanes = ieee_lanes(n, k, w.dtype)
    assert not lanes.sequential
    want = emulate.linear_ieee(x[:1], w)
    assert bits_equal(want, emulate.linear_ieee(x[:1], w, lanes=lanes))
    assert not bits_equal(want, emulate.linear_ieee(x[:1], w, lanes=SEQUENTIAL))   # fp32 out: the order shows
    for m in (1, 2, 3, 8, 16, 17):
        t = pick("ieee", n, k, w.dtype, m=m)
        assert bits_equal(gemm.linear(x[:m], w, tiles=t)[:1], want), (m, t)
    assert bits_equal(gemm.linear(x[:5], w)[:1], want)                      # tiles=None


@pytest.mark.parametrize("kwargs", [dict(count=3, block=2), dict(count=4, block=0), dict(count=128, block=1),
                                    dict(count=2.0, block=2)])
def test_bad_lanes_raise_invalid_argument(kwargs):
    with pytest.raises(InvalidArgument, match="Cannot"):
        Lanes(**kwargs)


def test_lanes_with_the_mma_order_raise_invalid_argument():
    with pytest.raises(InvalidArgument, match="Cannot have lanes"):
        gemm.mm(torch.ones(2, 3), torch.ones(3, 2), order="mma", lanes=Lanes(2, 2))
    with pytest.raises(InvalidArgument, match="Cannot have lanes"):
        gemm.mm(torch.ones(2, 3), torch.ones(3, 2), lanes=(2, 2))


@pytest.mark.parametrize("k, lanes", [(64, Lanes(8, 8)), (150, Lanes(8, 8)), (46, Lanes(4, 2)), (96, Lanes(2, 16))])
def test_bf16_weights_read_as_words_equal_emulator_bit_for_bit(k, lanes, bits_equal, draw, monkeypatch):
    """K-contiguous bf16 weights with even strides go through the word path (two weights a
    32-bit load word, taken apart by shift and mask); an odd row stride (K odd) or fp16
    weights do not. Either way the bits are the emulator's, K tail included."""
    taken = []
    real = gemm._weight_words
    monkeypatch.setattr(gemm, "_weight_words", lambda b3: taken.append(real(b3)) or taken[-1])
    tiles = Tiles(4, 8, 64, num_warps=1, tiled=True, prefetch=True)
    for kk, wdt in ((k, torch.bfloat16), (k + 1, torch.bfloat16), (k, torch.float16)):
        x = draw((3, kk), torch.float32, kk, 300.0)
        w = draw((10, kk), wdt, kk + 1)
        b = draw((10,), wdt, kk + 2)
        got = gemm.linear(x, w, b, tiles=tiles, lanes=lanes)
        assert bits_equal(got, emulate.linear_ieee(x, w, b, lanes=lanes)), (kk, wdt)
    assert taken == [True, False, False]


_TMA_TILES = st.builds(lambda bm, bn, bk, stages, pre, act16: Tiles(bm, bn, bk, num_warps=1, num_stages=stages,
                                                                    tiled=True, tma=True, prefetch=pre, act16=act16),
                       st.sampled_from([1, 4, 16]), st.sampled_from([4, 8, 16]), st.sampled_from([8, 32, 64]),
                       st.sampled_from([1, 3]), st.booleans(), st.booleans())


@settings(max_examples=8, deadline=None)
@given(m=st.integers(1, 9), n=st.integers(1, 20), k8=st.integers(1, 24), tail=st.sampled_from([0, 3]),
       lanes=st.builds(Lanes, st.sampled_from([2, 4, 8]), st.sampled_from([2, 4, 8])), tiles=_TMA_TILES,
       adt=st.sampled_from(DTYPES + (torch.float32,)), bias=st.booleans(), seed=st.integers(0, 2**16))
def test_tma_weight_tiles_equal_emulator_bit_for_bit_and_fall_back_where_tma_cannot_describe_them(
        m, n, k8, tail, lanes, tiles, adt, bias, seed, bits_equal, draw):
    """``tma`` K-lanes tiles: bf16 weights with K a multiple of 8 arrive by tensor
    descriptor (the main loop; the tail as before); an odd K, which TMA cannot describe as
    words, runs the same order without it. Both equal the emulator, with 16-bit
    activations upcast in memory by the launch or (``act16``) in the kernel's registers."""
    from kernelaudit.repro import mma_tma

    k = 8 * k8 + tail
    x = draw((m, k), adt, seed, 1.0)
    w = draw((n, k), torch.bfloat16, seed + 1)
    b = draw((n,), torch.bfloat16, seed + 2) if bias else None
    b3 = w.t()[None, None]
    assert (gemm._weight_words(b3) and mma_tma.weights_eligible(b3)) == (tail == 0)  # the path this case takes
    got = gemm.linear(x, w, b, tiles=tiles, lanes=lanes)
    assert bits_equal(got, emulate.linear_ieee(x, w, b, lanes=lanes))


def test_tma_is_refused_with_tile8_or_dot_and_ignored_where_the_order_is_sequential(bits_equal, draw):
    with pytest.raises(InvalidArgument, match="tma=True with tile8 or dot"):
        Tiles(16, 16, 16, dot=True, tma=True)
    with pytest.raises(InvalidArgument, match="act16=True without tiled=True and tma=True"):
        Tiles(4, 16, 64, tiled=True, act16=True)
    x, w = draw((3, 64), torch.bfloat16, 1), draw((8, 64), torch.bfloat16, 2)
    got = gemm.linear(x, w, None, tiles=Tiles(4, 8, 8, num_warps=1, tiled=True, tma=True), lanes=SEQUENTIAL)
    assert bits_equal(got, emulate.linear_ieee(x, w, None, lanes=SEQUENTIAL))


@pytest.mark.parametrize("adt", [torch.bfloat16, torch.float16])
def test_act16_tma_tiles_hand_the_kernel_16_bit_activations_with_the_emulators_bits(adt, monkeypatch, bits_equal,
                                                                                     draw):
    """``act16``: the K-lanes TMA kernel reads the 16-bit activations themselves and
    upcasts them in registers (exact), where without it the launch hands it fp32 copies;
    the bits are the emulator's either way."""
    real = gemm.ieee_lanes_kernel
    seen = []

    class Spy:
        def __getitem__(self, grid):
            return lambda *args, **kw: (seen.append(args[0].dtype), real[grid](*args, **kw))[1]

    monkeypatch.setattr(gemm, "ieee_lanes_kernel", Spy())
    lanes = Lanes(8, 8)
    x, w, b = draw((3, 256), adt, 1, 4.0), draw((24, 256), torch.bfloat16, 2), draw((24,), torch.bfloat16, 3)
    want = emulate.linear_ieee(x, w, b, lanes=lanes)
    for act16 in (True, False):
        tiles = Tiles(4, 8, 64, num_warps=1, num_stages=2, tiled=True, tma=True, act16=act16)
        assert bits_equal(gemm.linear(x, w, b, tiles=tiles, lanes=lanes), want), act16
    assert seen == [adt, torch.float32]


@pytest.mark.parametrize("m", [4, 16, pytest.param(2, marks=pytest.mark.slow), pytest.param(8, marks=pytest.mark.slow)])
def test_the_tables_large_n_decode_tiles_give_the_emulators_bits(m, bits_equal, draw):
    """The large-N decode rows of ``IEEE_LANES_TABLE`` (TMA stages, 16-bit activations in
    shared memory since 2026-12-06) at K = N = 1024: the table's own tiles, through the
    interpreter, equal the emulator in the shape's order (first 64 columns)."""
    k = n = 1024
    w = draw((n, k), torch.bfloat16, 11)
    x = draw((m, k), torch.float32, 12)
    t = pick("ieee", n, k, w.dtype, m=m)
    assert t.tma and t.act16, t   # the rows this test is for
    lanes = ieee_lanes(n, k, w.dtype)
    assert bits_equal(gemm.linear(x, w, tiles=t)[:, :64], emulate.linear_ieee(x, w[:64], lanes=lanes))


@pytest.mark.slow   # the kernel path is CI's (other tiles); these rows' own bits: -m slow and the GPU run
@pytest.mark.parametrize("m", [4, 8])
def test_the_tables_small_n_decode_tiles_give_the_emulators_bits(m, bits_equal, draw):
    """The small-N decode rows of ``IEEE_LANES_TABLE`` for 4 and 8 rows (8 columns a
    program, 2 warps, since 2026-12-07) at K = 1024, N = 512: the table's own tiles,
    through the interpreter, equal the emulator in the shape's order (first 64 columns)."""
    k, n = 1024, 512
    w = draw((n, k), torch.bfloat16, 13)
    x = draw((m, k), torch.bfloat16, 14)
    t = pick("ieee", n, k, w.dtype, m=m)
    assert (t.bn, t.num_warps, t.prefetch) == (8, 2, True), t   # the rows this test is for
    lanes = ieee_lanes(n, k, w.dtype)
    assert bits_equal(gemm.linear(x, w, tiles=t)[:, :64], emulate.linear_ieee(x, w[:64], lanes=lanes))
