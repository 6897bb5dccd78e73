"""The sweep oracle's per-batch ``rel`` metric: what it forgives and what it still catches."""

from __future__ import annotations

import torch

from kernelaudit.sweep.judge.metrics import Judgement, compare_rows, rel_floor


def _judge(got: torch.Tensor, ref: torch.Tensor, tol: float = 0.1) -> Judgement:
    j = Judgement("grad0", "rel", tol, got.shape[1])
    compare_rows(j, 0, got, ref, exact=False)
    return j


def test_rows_whose_true_values_underflow_the_dtype_are_not_wrong():
    # The float16 gradient of a mean over 16384 elements is g / 16384: for small g it
    # rounds to a subnormal or to 0, the correctly rounded answer (seen on the H200).
    g = torch.tensor([1.0, 3e-4, -2e-4, 1e-5], dtype=torch.float64)
    ref = (g / 16384).unsqueeze(1).expand(4, 16384)
    got = ref.to(torch.float16)
    assert got[3].eq(0).all() and ref[3].ne(0).all()  # the last row flushes to zero
    assert _judge(got, ref).bad_count == 0


def test_a_wrong_row_of_normal_values_is_still_caught():
    # values of magnitude 1 to 3, so that zeroing any one of them is an error above tol
    # (an unseeded randn could put a value near 0 first in the row: a flaky index)
    g = torch.Generator().manual_seed(0)
    ref = torch.rand(6, 512, dtype=torch.float64, generator=g) * 2 + 1
    ref = ref * torch.where(torch.rand(6, 512, generator=g) < 0.5, -1.0, 1.0).double()
    got = ref.to(torch.float16)
    got[4] = 0  # a batch lost
    j = _judge(got, ref)
    assert (j.bad_first, j.bad_count, j.first_bad_index) == (4, 1, 4 * 512)


def test_garbage_in_a_row_of_tiny_true_values_is_still_caught():
    ref = torch.full((3, 64), 1e-7, dtype=torch.float64)
    got = ref.to(torch.float16)
    got[1, 5] = 1e-3  # far above the dtype's absolute precision there
    j = _judge(got, ref)
    assert (j.bad_first, j.bad_count, j.first_bad_index) == (1, 1, 64 + 5)


def test_the_floor_is_the_smallest_normal_number_of_the_output_dtype():
    assert rel_floor(torch.float16) == torch.finfo(torch.float16).tiny
    assert rel_floor(torch.bfloat16) == torch.finfo(torch.bfloat16).tiny
    assert rel_floor(torch.int64) < 1e-200


def test_backward_reference_chunks_count_the_upstream_gradient():
    # An embedding's upstream gradient is 4096 times its index input: a chunk sized by
    # the index input and the weight gradient alone held 2^32 float64 values (32 GiB) on
    # the H200 and ran out of memory.
    from kernelaudit.sweep.cases import GridSpec, grid
    from kernelaudit.sweep.judge.reference import chunk_batches, forward_outputs
    from kernelaudit.sweep.judge.operands import placed_operands

    (case,) = grid(GridSpec(ops=("embedding",), dtypes=("float16",), layouts=("contig",), directions=("bwd",),
                            thresholds=("2^32",), positions=("at",)))
    placed = placed_operands(case)
    per_batch = forward_outputs(case, placed)[0].numel() // case.batch
    chunk = 2**27
    step = chunk_batches(case, placed, [], chunk)
    assert per_batch == 4 * 4096 and step * per_batch <= chunk


def test_the_one_launch_summary_gives_the_torch_summary_exactly(monkeypatch, summary_cases):
    """The Triton summary (one launch for a judgement's 5 numbers a row, what CUDA runs)
    equals the torch one bit for bit: worst metric and its first batch, the count of
    batches over the tolerance and the first and last of them, NaN as inf."""
    import pytest

    pytest.importorskip("triton")
    from kernelaudit.sweep.kernels.summary import summary_rows
    from kernelaudit.sweep.judge.metrics import summarize

    monkeypatch.setenv("KERNELAUDIT_FUSED_SUMMARY", "0")
    for pb, tols in summary_cases:
        want = summarize(pb, tols)
        got = summary_rows(pb, tols)
        assert torch.equal(got, want), (tols, got.tolist(), want.tolist())
    monkeypatch.setenv("KERNELAUDIT_FUSED_SUMMARY", "1")  # summarize itself takes the kernel
    pb, tols = summary_cases[0]
    assert torch.equal(summarize(pb, tols), summary_rows(pb, tols))
    assert summarize(pb, tols)[0, 1].item() == 7.0 and summarize(pb, tols)[1, 1].item() == 3.0  # first maxima


def test_the_one_launch_summary_refuses_more_rows_than_it_has_tolerances_for():
    import pytest

    pytest.importorskip("triton")
    from kernelaudit.sweep.kernels.summary import summary_rows

    with pytest.raises(ValueError, match="1..2 rows"):
        summary_rows(torch.zeros(3, 4, dtype=torch.float64), [0.1, 0.1, 0.1])


def test_spot_coordinates_are_cached_for_common_shapes_and_rebuilt_for_huge_batch_counts(monkeypatch):
    """The spot checks' coordinates of a judgement are cached per shape (the sweep meets
    the same shapes case after case) but only below a batch count, so that many tiny
    batches do not keep large index vectors alive between cases; cached or not, they
    are the same coordinates."""
    import torch

    from kernelaudit.sweep.judge import matmul

    matmul._spot_coords_cached.cache_clear()
    args = (3, 40, 2, 4, 8, 2**10, torch.device("cpu"))
    first = matmul._spot_coords(*args)
    assert matmul._spot_coords(*args)[0] is first[0]  # the same tensors: cached
    per = 2 * 4 * 8
    flat, bb, hh, ii, jj = first
    assert torch.equal(flat, bb * per + hh * 32 + ii * 8 + jj)
    assert flat.min() >= 0 and flat.max() < 40 * per
    monkeypatch.setattr(matmul, "SPOT_CACHE_MAX_BATCHES", 39)
    rebuilt = matmul._spot_coords(*args)
    assert rebuilt[0] is not first[0] and all(torch.equal(a, b) for a, b in zip(rebuilt, first))


def test_batches_recorded_exact_judge_as_a_tensor_of_zero_metrics_does():
    for tol in (None, 1e-6):
        summed, exact = Judgement("out0", "rel", tol, 400), Judgement("out0", "rel", tol, 400)
        for b0 in (0, 100, 200):
            summed.add(b0, torch.zeros(100, dtype=torch.float64))
            exact.add_exact(b0)
        assert summed == exact and exact.verdict().status.value == "ok"
        # a bad chunk after exact ones is located as before
        bad = torch.zeros(100, dtype=torch.float64)
        bad[7] = 1.0
        summed.add(300, bad)
        exact.add(300, bad)
        assert summed == exact
