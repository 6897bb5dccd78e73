"""Input generation is deterministic, chunk-independent and device-independent."""

from __future__ import annotations

import os

import pytest
import torch

from kernelaudit.sweep import gen


def test_values_depend_only_on_seed_stream_and_storage_index():
    key = gen.stream_key(3, "bmm/out/0")
    whole = gen.fill_flat(1000, key, torch.float32, "cpu")
    part = gen.fill_flat(100, key, torch.float32, "cpu", start=450)
    assert torch.equal(whole[450:550], part)
    at = gen.values_at(torch.tensor([[7, 999], [0, 450]]), key, torch.float32)
    assert torch.equal(at, torch.stack([whole[[7, 999]], whole[[0, 450]]]))
    assert gen.stream_key(3, "bmm/out/0") != gen.stream_key(4, "bmm/out/0")


def test_indexes_past_2p32_hash_to_distinct_values_without_overflow():
    key = gen.stream_key(0, "x")
    idx = torch.tensor([5, 2**32 + 5, 2**33 + 5, 2**35 - 1])
    h = gen.hash32(idx, key)
    assert h.min() >= 0 and h.max() < 2**32 and len(set(h.tolist())) == 4


def test_float_values_are_exact_in_float32_and_uniform_on_minus_one_one():
    v = gen.fill_flat(100_000, gen.stream_key(0, "u"), torch.float64, "cpu")
    assert torch.equal(v, v.float().double())
    assert -1 <= v.min() and v.max() < 1 and abs(v.mean()) < 0.01


def test_strided_index_of_a_transposed_view_with_leading_rows():
    base = torch.arange(24).view(2, 4, 3)
    view = base.transpose(1, 2)
    idx = gen.strided_index(view.shape, view.stride(), 0, "cpu", lead=(1, 2))
    assert torch.equal(idx, view[1:2])


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs the Triton interpreter")
def test_triton_kernel_gives_the_same_bits_as_the_torch_hash():
    pytest.importorskip("triton")
    from kernelaudit.sweep.kernels import gen as fast

    key = gen.stream_key(1, "k")
    for dtype, high in ((torch.float32, None), (torch.float16, None), (torch.bfloat16, None),
                        (torch.int32, None), (torch.int64, 1000)):
        out = torch.empty(3000, dtype=dtype)
        fast.fill_range(out, 2**32 - 1500, key, high=high)
        ref = gen.values_at(torch.arange(2**32 - 1500, 2**32 + 1500), key, dtype, high=high)
        assert torch.equal(out, ref), dtype
        idx = torch.tensor([[3, 2**33], [2**31, 17]])
        assert torch.equal(fast.values_at(idx, key, dtype, high=high), gen.values_at(idx, key, dtype, high=high))


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs the Triton interpreter")
def test_triton_strided_values_equal_the_indexed_values_for_every_layout():
    pytest.importorskip("triton")
    from kernelaudit.sweep.kernels import gen as fast

    key = gen.stream_key(2, "s")
    for shape, strides, offset in (((5, 4, 3), (12, 1, 4), 0), ((5, 4, 3), (0, 3, 1), 7),
                                   ((6, 2, 4, 3), (24, 12, 1, 4), 24), ((9, 7), (7, 1), 2**32 + 3),
                                   ((3, 40, 31), (1240, 1, 40), 5)):  # whole blocks and a tail
        for dtype, high in ((torch.float32, None), (torch.bfloat16, None), (torch.int64, 50)):
            want = gen.values_at(gen.strided_index(shape, strides, offset, "cpu", lead=(1, 3)), key, dtype, high=high)
            got = fast.values_strided((2, *shape[1:]), strides, offset + strides[0], key, dtype, "cpu", high=high)
            assert torch.equal(got, want), (shape, dtype)


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs the Triton interpreter")
def test_triton_values_stored_wider_equal_the_values_cast_afterwards():
    pytest.importorskip("triton")
    from kernelaudit.sweep.kernels import gen as fast

    key = gen.stream_key(4, "w")
    for dtype, out_dtype in ((torch.bfloat16, torch.float64), (torch.float16, torch.float64),
                             (torch.float32, torch.float64), (torch.int32, torch.int64)):
        want = gen.values_at(torch.arange(2**32 - 1100, 2**32 + 1100), key, dtype).to(out_dtype)
        got = fast.fill_range(torch.empty(2200, dtype=out_dtype), 2**32 - 1100, key, dtype=dtype)
        assert got.dtype == out_dtype and torch.equal(got, want), dtype
        shape, strides = (3, 40, 31), (1240, 1, 40)
        want = gen.values_strided(shape, strides, 5, key, dtype, "cpu").to(out_dtype)
        got = fast.values_strided(shape, strides, 5, key, dtype, "cpu", out_dtype=out_dtype)
        assert torch.equal(got, want), dtype
        idx = torch.tensor([[3, 2**33], [2**31, 17]])
        assert torch.equal(fast.values_at(idx, key, dtype, out_dtype=out_dtype),
                           gen.values_at(idx, key, dtype).to(out_dtype))


def test_values_stored_wider_equal_the_values_cast_afterwards_on_the_cpu():
    key = gen.stream_key(5, "w")
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        want = gen.fill_flat(500, key, dtype, "cpu", start=2**32 - 250).to(torch.float64)
        got = gen.fill_flat(500, key, dtype, "cpu", start=2**32 - 250, out_dtype=torch.float64)
        assert got.dtype == torch.float64 and torch.equal(got, want)
        idx = torch.tensor([7, 2**32 + 1])
        assert torch.equal(gen.values_at(idx, key, dtype, out_dtype=torch.float64),
                           gen.values_at(idx, key, dtype).double())
