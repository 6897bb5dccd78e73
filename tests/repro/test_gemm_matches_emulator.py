"""The ``ieee`` kernels (Triton interpreter) equal the CPU emulator bit for bit, whatever
the shape, dtype, tiles or batch; ``mma`` is batch-invariant and close to float64."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from kernelaudit.errors import InvalidArgument
from kernelaudit.repro import emulate, gemm
from kernelaudit.repro.tiles import Tiles

DTYPES = (torch.bfloat16, torch.float16)


@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 9), n=st.integers(1, 40), k=st.integers(1, 70),
       wdt=st.sampled_from(DTYPES), adt=st.sampled_from(DTYPES + (torch.float32,)),
       bias=st.booleans(), seed=st.integers(0, 2**16), scale=st.sampled_from([1.0, 1e-3, 300.0]))
def test_ieee_addmm_equals_emulator_bit_for_bit(m, n, k, wdt, adt, bias, seed, scale, bits_equal, draw):
    a = draw((m, k), adt, seed, scale)
    b = draw((k, n), wdt, seed + 1)
    x = draw((n,), wdt, seed + 2) if bias else None
    got = gemm.addmm(x, a, b)
    assert bits_equal(got, emulate.addmm_ieee(x, a, b))


@settings(max_examples=6, deadline=None)
@given(bsz=st.integers(1, 3), m=st.integers(1, 6), n=st.integers(1, 20), k=st.integers(1, 40),
       dt=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_ieee_bmm_and_linear_equal_emulator_bit_for_bit(bsz, m, n, k, dt, seed, bits_equal, draw):
    a, b = draw((bsz, m, k), dt, seed), draw((bsz, k, n), dt, seed + 1)
    assert bits_equal(gemm.bmm(a, b), emulate.bmm_ieee(a, b))
    w, x = draw((n, k), dt, seed + 2), draw((n,), dt, seed + 3)
    assert bits_equal(gemm.linear(a, w, x), emulate.linear_ieee(a, w, x))


def test_ieee_bits_do_not_depend_on_tiles(bits_equal, draw):
    a, b = draw((7, 45), torch.bfloat16, 0), draw((45, 21), torch.bfloat16, 1)
    tiles = (Tiles(4, 8, 1), Tiles(8, 16, 4), Tiles(16, 32, 64), Tiles(8, 8, 8, tile8=True),
             Tiles(16, 16, 16, dot=True), Tiles(8, 8, 16, tiled=True, prefetch=True),
             Tiles(16, 32, 4, tiled=True, group_m=2), None)
    outs = [gemm.mm(a, b, tiles=t) for t in tiles]
    assert all(bits_equal(o, outs[0]) for o in outs)


@pytest.mark.parametrize("tiles", [None, Tiles(4, 16, 8, tile8=True)])
def test_ieee_addmm_alpha_beta_and_transposed_operands_match_emulator(tiles, bits_equal, draw):
    a = draw((20, 6), torch.float16, 4).t()          # a [6, 20], column-major view
    b = draw((13, 20), torch.float16, 5).t()         # b [20, 13], transposed weight
    x = draw((6, 13), torch.float16, 6)
    got = gemm.addmm(x, a, b, beta=0.5, alpha=-3.0, tiles=tiles)
    assert bits_equal(got, emulate.addmm_ieee(x, a, b, beta=0.5, alpha=-3.0))


@settings(max_examples=5, deadline=None)
@given(m=st.integers(1, 9), n=st.integers(1, 40), k=st.integers(1, 70), wdt=st.sampled_from(DTYPES),
       seed=st.integers(0, 2**16))
def test_ieee_tile8_linear_equals_emulator_bit_for_bit(m, n, k, wdt, seed, bits_equal, draw):
    x, w, b = draw((m, k), wdt, seed), draw((n, k), wdt, seed + 1), draw((n,), wdt, seed + 2)
    got = gemm.linear(x, w, b, tiles=Tiles(8, 16, 8, tile8=True))
    assert bits_equal(got, emulate.linear_ieee(x, w, b))


@pytest.mark.parametrize("order", ["ieee", "mma"])
def test_rows_are_the_same_bits_at_every_batch_size_and_position(order, bits_equal, draw):
    w = draw((48, 40), torch.bfloat16, 7)
    x = draw((70, 40), torch.bfloat16, 8)
    full = gemm.linear(x, w, order=order)
    for rows in (slice(0, 1), slice(0, 3), slice(5, 69), slice(69, 70)):
        assert bits_equal(gemm.linear(x[rows], w, order=order), full[rows])


def test_mma_is_close_to_float64(draw):
    a, b = draw((33, 64), torch.bfloat16, 9), draw((64, 17), torch.bfloat16, 10)
    ref = a.double() @ b.double()
    err = (gemm.mm(a, b, order="mma").double() - ref).norm() / ref.norm()
    assert err < 1e-2


@pytest.mark.parametrize("call, kwargs", [
    (gemm.mm, dict(a=torch.ones(2, 3), b=torch.ones(3, 2), order="fast")),
    (gemm.mm, dict(a=torch.ones(2, 3), b=torch.ones(4, 2))),
    (gemm.mm, dict(a=torch.ones(2, 3, dtype=torch.int32), b=torch.ones(3, 2))),
    (gemm.bmm, dict(a=torch.ones(2, 2, 3), b=torch.ones(3, 3, 2))),
    (gemm.linear, dict(x=torch.ones(2, 3), weight=torch.ones(1, 2, 3))),
    (Tiles, dict(bm=3, bn=8, bk=8)),
    (Tiles, dict(bm=8, bn=8, bk=16, tile8=True)),
    (Tiles, dict(bm=8, bn=16, bk=16, dot=True)),
    (Tiles, dict(bm=16, bn=16, bk=8, dot=True, tile8=True)),
])
def test_bad_arguments_raise_invalid_argument(call, kwargs):
    with pytest.raises(InvalidArgument, match="Cannot"):
        call(**kwargs)
