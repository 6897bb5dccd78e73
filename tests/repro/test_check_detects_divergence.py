"""The invariance checker finds each planted divergence where it is, measures it in
ULPs, and stays quiet on the fixed-order kernels."""

from __future__ import annotations

import pytest
import torch

from kernelaudit.errors import InvalidArgument
from kernelaudit.repro import gemm
from kernelaudit.repro.invariance import check, compare, ordered
from kernelaudit.repro.report import summary

K, N = 64, 24
F32 = torch.float32


def _operands(rows=80, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(0)
    return torch.randn(rows, K, generator=g).to(dtype), torch.randn(K, N, generator=g).to(dtype)


def split_by_m_mm(a, b):
    """cuBLAS-like: from M = 64 on, K is split in two halves summed at the end (split-K).
    fp32 output: a bf16 row of 24 elements could round the difference away."""
    if a.shape[0] < 64:
        return gemm.mm(a, b, out_dtype=F32)
    h = a.shape[1] // 2
    return gemm.mm(a[:, :h], b[:h], out_dtype=F32) + gemm.mm(a[:, h:], b[h:], out_dtype=F32)


def test_checker_finds_cublas_like_split_from_m_64_on():
    x, w = _operands()
    r = check(lambda t: split_by_m_mm(t, w), x, batch_sizes=(1, 2, 8, 32, 63, 64, 65, 80), runs=2)
    assert r.judged and not r.invariant
    assert r.diverges_from("batch") == 64
    assert [p.setting for p in r.of("batch") if not p.equal] == [64, 65, 80]
    assert all(1 <= p.max_ulps < 2**10 for p in r.of("batch") if not p.equal)
    assert "diverges from batch = 64 on" in summary(r)


def test_checker_stays_quiet_on_fixed_order_kernels():
    x, w = _operands()
    for order in ("ieee", "mma"):
        r = check(lambda t: gemm.mm(t, w, order=order, out_dtype=F32), x,
                  batch_sizes=(1, 2, 8, 32, 63, 64, 65, 80), runs=2)
        assert r.invariant, summary(r)
        assert "identical bits" in summary(r)


def test_checker_finds_run_to_run_noise():
    x, w = _operands(16)
    state = {"calls": 0}

    def noisy(t):  # every other call sums K in a different (reversed) order, like atomics
        state["calls"] += 1
        if state["calls"] % 2:
            return gemm.mm(t, w, out_dtype=F32)
        return gemm.mm(t.flip(1), w.flip(0), out_dtype=F32)
    r = check(noisy, x, batch_sizes=(1, 16), runs=3)
    assert [p.equal for p in r.of("run")] == [False, True]


def test_checker_finds_position_dependence():
    x, w = _operands(16)

    def by_position(t):  # odd rows take the split order
        out = gemm.mm(t, w, out_dtype=F32)
        h = K // 2
        out[1::2] = gemm.mm(t[1::2, :h], w[:h], out_dtype=F32) + gemm.mm(t[1::2, h:], w[h:], out_dtype=F32)
        return out
    r = check(by_position, x, batch_sizes=(1, 16), positions=(1, 2, 15), runs=1)
    assert [(p.setting, p.equal) for p in r.of("position")] == [(1, False), (2, True), (15, False)]
    assert r.of("batch")[-1].equal  # row 0 is always even


def test_compare_counts_ulps_across_zero_and_nan():
    a = torch.tensor([1.0, -0.0, float("nan"), 2.0], dtype=torch.bfloat16)
    b = torch.tensor([1.0, 0.0, float("nan"), 2.0], dtype=torch.bfloat16)
    b[3] = torch.nextafter(b[3:4].float(), torch.tensor([10.0])).bfloat16()[0]  # still 2.0 in bf16
    assert compare("batch", 1, a, b).equal
    c = a.clone()
    c.view(torch.int16)[3] += 3     # 3 bf16 steps above 2.0
    p = compare("batch", 1, c, a)
    assert (p.mismatched, p.max_ulps, p.first_index) == (1, 3, (3,))
    tiny = torch.tensor([-1.4e-45, 1.4e-45], dtype=torch.float32)
    assert int((ordered(tiny)[1] - ordered(tiny)[0])) == 2


def test_checker_records_a_subject_that_raises_as_not_judged():
    def broken(t):
        raise RuntimeError("CUDA error: an illegal memory access")
    r = check(broken, torch.ones(4, 2), batch_sizes=(1, 4))
    assert not r.judged and "illegal memory access" in r.error


@pytest.mark.parametrize("kwargs", [dict(batch_sizes=()), dict(batch_sizes=(0, 2)), dict(batch_sizes=(1, 9)),
                                    dict(runs=0), dict(positions=(4,))])
def test_checker_bad_arguments_raise_invalid_argument(kwargs):
    with pytest.raises(InvalidArgument, match="Cannot have"):
        check(lambda t: t, torch.ones(4, 2), **kwargs)


def test_progress_is_told_before_every_call_of_the_subject_with_the_total():
    calls, told = [], []

    def fn(t):
        calls.append(t.shape[0])
        return t * 2

    x = torch.arange(8.0).reshape(8, 1)
    check(fn, x, batch_sizes=(1, 2, 8), runs=2, progress=lambda d, t, what: told.append((d, t, what)))
    assert [d for d, _, _ in told] == list(range(len(calls)))            # once before each call
    assert {t for _, t, _ in told} == {len(calls)}                        # the total known up front
    assert [w for _, _, w in told][:3] == ["batch 1", "batch 8", "run 2"]
