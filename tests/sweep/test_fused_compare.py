"""The fused per-batch comparison gives the torch comparison's verdicts and metrics."""

from __future__ import annotations

import math
import os

import pytest
import torch

from kernelaudit.sweep.cases import GridSpec, grid
from kernelaudit.sweep.judge.execution import execute
from kernelaudit.sweep.tolerance import calibrated

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs the Triton interpreter")


def test_row_max_matches_torch_with_nans_scales_and_ragged_rows():
    pytest.importorskip("triton")
    from kernelaudit.sweep.kernels.compare import row_max

    g = torch.randn(5, 3001).to(torch.float16)
    r = g.double() + torch.randn(5, 3001).double() * 1e-3
    g[2, 17] = float("nan")
    r[4, 3000] = float("nan")
    s = torch.rand(5, 3001).double() + 0.5
    for scale in (None, s):
        err, mag = row_max(g, r, scale, 1e-300)
        e = (g.double() - r).abs() / (scale if scale is not None else 1.0)
        e = torch.where(torch.isnan(g.double()) | torch.isnan(r), torch.full_like(e, math.inf), e)
        assert torch.equal(err, e.amax(1))
        assert torch.equal(mag[[0, 1, 2, 3]], r.abs().amax(1)[[0, 1, 2, 3]])


@pytest.mark.parametrize("shape", [(37, 400), (5, 7), (1, 1), (130, 33)])
def test_row_max_packs_short_rows_several_to_a_program_and_misses_none(shape):
    # Rows shorter than the tile share a program; a row count that is no multiple of the
    # rows per program leaves the last program part empty, which must not be written.
    pytest.importorskip("triton")
    from kernelaudit.sweep.kernels.compare import row_max

    r = torch.randn(*shape, dtype=torch.float64)
    g = (r + torch.randn(*shape, dtype=torch.float64) * 1e-3).float()
    g[-1, -1] = float("nan")
    err, mag = row_max(g, r, None, 1e-300)
    e = (g.double() - r).abs()
    e = torch.where(torch.isnan(g.double()), torch.full_like(e, math.inf), e)
    assert torch.equal(err, e.amax(1)) and torch.equal(mag, r.abs().amax(1))


# One op per comparison path (elementwise, row-wise, reduction, copy, matmul); gelu ran the
# add path again and cat's bfloat16 cases cost a minute under the interpreter.
@pytest.mark.parametrize("op,fault", [("add", "wrap32"), ("softmax", "wrap32"), ("sum", "wrap32"),
                                      ("cat", "wrap32"), ("bmm", "mps")])
def test_fused_comparison_gives_the_same_verdicts_as_torch(op, fault, monkeypatch):
    pytest.importorskip("triton")
    dtypes = ("float32",) if op == "cat" else ("float32", "bfloat16")
    cases = grid(GridSpec(ops=(op,), dtypes=dtypes, layouts=("contig",), thresholds=("2^32",),
                          positions=("above",), scale=12))
    statuses = set()
    for case in cases:
        monkeypatch.setenv("KERNELAUDIT_FUSED_COMPARE", "0")
        tol = calibrated(execute(case.with_batch(2), tolerances=None).worst, case.dtype)
        ref = execute(case, fault_model=fault, tolerances=tol, mode="full").verdict
        monkeypatch.setenv("KERNELAUDIT_FUSED_COMPARE", "1")
        got = execute(case, fault_model=fault, tolerances=tol, mode="full").verdict
        assert (got.status, got.bad_batches, got.first_bad_index) == (ref.status, ref.bad_batches,
                                                                      ref.first_bad_index), case.id
        for a, b in zip(ref.details.get("outputs", []), got.details.get("outputs", [])):
            assert a["metric"] == b["metric"] and a["value"] == pytest.approx(b["value"], rel=1e-12, abs=0)
        statuses.add(ref.status.value)
    assert "wrong" in statuses  # the planted faults are there to be found


def test_the_same_infinity_or_nan_on_both_sides_is_no_error_in_either_comparison():
    # fp16 atanh at 2^32 elements meets its poles: got and ref are both -inf there.
    pytest.importorskip("triton")
    from kernelaudit.sweep.judge import metrics
    from kernelaudit.sweep.kernels.compare import row_max

    r = torch.randn(3, 64, dtype=torch.float64)
    g = (r + 1e-4).float()
    r[0, 5], g[0, 5] = -math.inf, -math.inf        # matched: no error, not the row's scale
    r[1, 7], g[1, 7] = math.inf, 3.0               # infinity against a finite value: infinite error
    r[2, 9], g[2, 9] = math.inf, -math.inf         # opposite infinities: infinite error
    r[0, 11], g[0, 11] = math.nan, math.nan         # NaN on both sides (the op's own domain): none
    err, mag = row_max(g, r, None, 1e-300)
    e = metrics._elementwise_error(g.double(), r)
    assert torch.equal(err, e.amax(1)) and err[0] < 1e-3 and math.isinf(err[1]) and math.isinf(err[2])
    assert torch.equal(mag, metrics._finite_abs(r).amax(1)) and math.isfinite(mag[0])
    g[0, 11] = 1.0  # NaN on one side only: infinite
    assert math.isinf(row_max(g, r, None, 1e-300)[0][0])


def test_a_reference_past_the_dtypes_range_expects_its_infinity():
    # float16 1/x's gradient -1/x^2 passes 65504 for |x| < 0.004: torch's fp16 answer is
    # -inf, right to the last bit; the float32 reference holds -70000.
    pytest.importorskip("triton")
    from kernelaudit.sweep.judge import metrics
    from kernelaudit.sweep.kernels.compare import row_max

    assert metrics.overflow_threshold(torch.float16) == 65520.0
    assert torch.tensor(65520.0).half().isinf() and not torch.tensor(65519.0).half().isinf()
    r = torch.full((2, 8), 3.0, dtype=torch.float32)
    g = r.half()
    r[0, 1], g[0, 1] = -70000.0, -math.inf      # rounds to -inf in fp16: right
    r[1, 2], g[1, 2] = 65000.0, math.inf        # rounds to 64992 in fp16: inf is wrong
    err, mag = row_max(g, r, None, 1e-300)
    assert err[0] == 0 and math.isinf(err[1])
    rr = metrics._overflowed(r.double(), torch.float16)
    assert torch.equal(err, metrics._elementwise_error(g.double(), rr).amax(1))
