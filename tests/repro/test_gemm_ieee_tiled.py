"""The register-tiled ``ieee`` kernel (``Tiles(tiled=True)``, decode and prefill) under
the Triton interpreter equals the CPU emulator bit for bit, whatever the tile, the M
bucket, the K tail or the signs of zeros; the table's buckets follow M without touching
a bit."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from kernelaudit.errors import InvalidArgument
from kernelaudit.repro import emulate, gemm
from kernelaudit.repro.tiles import DECODE_ROWS, IEEE_TABLE, Tiles, pick, rows_class

DTYPES = (torch.bfloat16, torch.float16)


_TILED = st.builds(lambda bm, bn, bk, pre, grp: Tiles(bm, bn, bk, num_warps=1, tiled=True, prefetch=pre, group_m=grp),
                   st.sampled_from([1, 2, 4, 8, 16]), st.sampled_from([4, 8, 16]),
                   st.sampled_from([1, 2, 4, 8, 16]), st.booleans(), st.sampled_from([1, 3]))


@settings(max_examples=8, deadline=None)
@given(m=st.integers(1, 9), n=st.integers(1, 20), k=st.integers(1, 40), tiles=_TILED,
       wdt=st.sampled_from(DTYPES), adt=st.sampled_from(DTYPES + (torch.float32,)),
       bias=st.booleans(), seed=st.integers(0, 2**16), scale=st.sampled_from([1.0, 1e-3, 300.0]))
def test_tiled_linear_equals_emulator_bit_for_bit(m, n, k, tiles, wdt, adt, bias, seed, scale, bits_equal, draw):
    x = draw((m, k), adt, seed, scale)
    w = draw((n, k), wdt, seed + 1)
    b = draw((n,), wdt, seed + 2) if bias else None
    assert bits_equal(gemm.linear(x, w, b, tiles=tiles), emulate.linear_ieee(x, w, b))


def test_tiled_addmm_bmm_and_strided_operands_equal_emulator(bits_equal, draw):
    t = Tiles(4, 8, 8, num_warps=1, tiled=True, prefetch=True)
    a = draw((20, 6), torch.float16, 4).t()          # a [6, 20], column-major view
    b = draw((20, 13), torch.float16, 5)             # b [20, 13], N contiguous (not K)
    x = draw((6, 13), torch.float16, 6)
    assert bits_equal(gemm.addmm(x, a, b, beta=0.5, alpha=-3.0, tiles=t),
                       emulate.addmm_ieee(x, a, b, beta=0.5, alpha=-3.0))
    a3, b3 = draw((2, 3, 19), torch.bfloat16, 7), draw((2, 19, 5), torch.bfloat16, 8)
    assert bits_equal(gemm.bmm(a3, b3, tiles=Tiles(2, 4, 4, tiled=True, group_m=2)), emulate.bmm_ieee(a3, b3))


@pytest.mark.parametrize("tiles", [Tiles(1, 4, 2, num_warps=1, tiled=True),
                                   Tiles(1, 4, 2, num_warps=1, tiled=True, prefetch=True)])
def test_k_tail_padding_keeps_a_negative_zero_accumulator(tiles, bits_equal):
    """acc underflows to -0.0 at k = 0 and every later product is -0.0, so the exact
    result is -0.0; K = 3 with bk = 2 leaves one padded step, which must add -0.0 (a
    padding of fma(+0, +0, acc) would turn the result into +0.0)."""
    x = torch.tensor([[-1e-30, 0.0, 0.0]], dtype=torch.float32)
    w = torch.tensor([[1e-30, -1.0, -1.0]] * 4, dtype=torch.float32)
    got = gemm.linear(x, w, tiles=tiles)
    want = emulate.linear_ieee(x, w)
    assert torch.equal(want.view(torch.int32), torch.full((1, 4), -2**31, dtype=torch.int32))  # -0.0 bits
    assert bits_equal(got, want)


def test_table_buckets_follow_m_without_changing_a_bit(bits_equal, draw):
    """Row 0 of x[:M] @ W.T through each M's own table tiles (decode buckets 1..16 and
    prefill, both N classes' decode rows) equals the emulator's row 0 at M = 1."""
    w = draw((20, 24), torch.bfloat16, 9)
    x = draw((17, 24), torch.bfloat16, 10)
    want = emulate.linear_ieee(x[:1], w)
    seen = set()
    for m in (1, 2, 3, 8, 16, 17):
        t = pick("ieee", 8192, 8192, w.dtype, m=m)
        seen.add(rows_class(m))
        assert t.bm >= min(m, 16) or rows_class(m) == "prefill"
        assert bits_equal(gemm.linear(x[:m], w, tiles=t)[:1], want), (m, t)
    small = [IEEE_TABLE[(f"decode{r}", "small")] for r in DECODE_ROWS]
    assert all(bits_equal(gemm.linear(x[:1], w, tiles=t), want) for t in small[:2])
    assert seen == {"decode1", "decode2", "decode4", "decode8", "decode16", "prefill"}


def test_the_small_prefill_row_gives_the_emulators_bits_across_row_and_column_blocks(bits_equal, draw):
    """The sequential order's small-N prefill row (64 x 128 x 16, grouped row blocks)
    through partial row and column blocks and 20 K steps: the emulator's bits, where
    torch's own fp32 matmul (another order) differs."""
    k = 320
    w = draw((140, k), torch.bfloat16, 11)
    x = draw((70, k), torch.float32, 12) * torch.logspace(-3, 3, k)
    t = pick("ieee", 140, k, w.dtype, m=70)
    assert t == IEEE_TABLE[("prefill", "small")] and t.dot and t.group_m > 1
    want = emulate.linear_ieee(x, w)
    assert bits_equal(gemm.linear(x, w, tiles=t), want)
    assert not bits_equal(x @ w.float().t(), want)         # the comparison sees the order


def test_rows_class_buckets():
    assert [rows_class(m) for m in (None, 1, 2, 3, 5, 9, 16, 17, 4096)] == [
        "prefill", "decode1", "decode2", "decode4", "decode8", "decode16", "decode16", "prefill", "prefill"]


@pytest.mark.parametrize("kwargs", [dict(bm=4, bn=8, bk=8, tiled=True, dot=True),
                                    dict(bm=4, bn=8, bk=8, tiled=True, tile8=True),
                                    dict(bm=4, bn=8, bk=8, tiled=True, group_m=0),
                                    dict(bm=4, bn=8, bk=8, prefetch=True)])
def test_bad_tiled_arguments_raise_invalid_argument(kwargs):
    with pytest.raises(InvalidArgument, match="Cannot"):
        Tiles(**kwargs)


@pytest.mark.parametrize("order, tiles", [("ieee", Tiles(16, 16, 4)), ("ieee", Tiles(16, 16, 8, tile8=True)),
                                          ("mma", Tiles(16, 16, 16))])
def test_grouped_tile_order_moves_tiles_between_programs_not_bits(order, tiles, bits_equal):
    """``group_m`` changes which program computes a tile (L2 reuse), never the tile's k
    order: every path gives the same bits grouped or not, partial blocks included."""
    import dataclasses

    g = torch.Generator().manual_seed(5)
    a = torch.randn(2, 40, 16, generator=g).bfloat16()
    b = torch.randn(2, 16, 36, generator=g).bfloat16()
    plain = gemm.bmm(a, b, order=order, tiles=tiles)
    for group in (2, 8):
        assert bits_equal(gemm.bmm(a, b, order=order, tiles=dataclasses.replace(tiles, group_m=group)), plain)
