"""The fused Triton Freivalds check agrees with the float64 torch check, case by case."""

from __future__ import annotations

import os

import pytest

from kernelaudit.cases import GridSpec, grid
from kernelaudit.oracle import execute
from kernelaudit.tolerance import calibrated

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs the Triton interpreter")


@pytest.mark.parametrize("op", ["bmm", "baddbmm", "mm", "linear", "matmul4d"])
def test_fused_freivalds_gives_the_same_verdicts_and_metrics_as_the_torch_check(op, monkeypatch):
    pytest.importorskip("triton")
    cases = grid(GridSpec(ops=(op,), dtypes=("float16",), thresholds=("2^32",), positions=("above",),
                          directions=("fwd",), scale=12))
    statuses = set()
    for case in cases:
        monkeypatch.setenv("KERNELAUDIT_FUSED_FREIVALDS", "0")
        tol = calibrated(execute(case.with_batch(4), tolerances=None).worst, case.dtype)
        ref = execute(case, fault_model="mps", tolerances=tol).verdict
        monkeypatch.setenv("KERNELAUDIT_FUSED_FREIVALDS", "1")
        got = execute(case, fault_model="mps", tolerances=tol).verdict
        assert (got.status, got.bad_batches, got.first_bad_index) == (ref.status, ref.bad_batches, ref.first_bad_index)
        for a, b in zip(ref.details.get("outputs", []), got.details.get("outputs", [])):
            assert a["metric"] == b["metric"]
            # 16-bit outputs are projected with float32 sums (kernels.freivalds.ACCUMULATE):
            # the metric may move, but by far less than its tolerance.
            assert a["value"] == pytest.approx(b["value"], rel=1e-6, abs=1e-3 * a["tolerance"])
        statuses.add(ref.status.value)
    assert "wrong" in statuses  # the planted faults are there to be found
