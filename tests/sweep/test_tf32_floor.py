"""float32 convolutions on CUDA may run in TF32 (cuDNN's choice, per call): their
tolerances get TF32's floor there, and nowhere else; a size fault still shows."""

from __future__ import annotations

import pytest

from kernelaudit.sweep.tolerance import FLOOR_EPS, TF32_EPS, tf32_floor, with_floor


@pytest.mark.parametrize("op,family,dtype,device,allowed,floor", [
    ("nn.functional.conv3d", "conv_pool", "float32", "cuda", True, FLOOR_EPS * TF32_EPS),
    ("nn.functional.conv_transpose3d", "conv_pool", "float32", "cuda", True, FLOOR_EPS * TF32_EPS),
    ("nn.functional.conv3d", "conv_pool", "float16", "cuda", True, None),       # not float32
    ("nn.functional.conv3d", "conv_pool", "float32", "cpu", True, None),        # no cuDNN
    ("nn.functional.conv3d", "conv_pool", "float32", "cuda", False, None),      # TF32 off
    ("nn.functional.avg_pool1d", "conv_pool", "float32", "cuda", True, None),   # a pool: no TF32
    ("bmm", "matmul", "float32", "cuda", True, None),                           # cuBLAS: its own switch
])
def test_tf32_floor_applies_to_float32_convolutions_on_cuda_only(op, family, dtype, device, allowed, floor):
    assert tf32_floor(op, family, dtype, device, allowed) == floor


def test_the_floor_raises_calibrated_tolerances_and_leaves_exact_metrics_at_zero():
    tol = with_floor({"out0:rel": 1.4e-6, "out1:exact": 0.0, "grad0:rel": 0.5}, 2e-3)
    assert tol == {"out0:rel": 2e-3, "out1:exact": 0.0, "grad0:rel": 0.5}


def test_a_tf32_level_error_passes_under_the_floor_and_a_size_fault_does_not():
    # the judge with the floor on a real conv on the CPU: its own error (float32) and a
    # TF32-sized one pass, an unwritten tail past 2^32 (errors near 1) is still wrong
    from kernelaudit.sweep.cases import GridSpec, calibration_batch, grid
    from kernelaudit.sweep.judge.execution import execute
    from kernelaudit.sweep.tolerance import calibrated
    from kernelaudit.verdict import Status

    (case,) = grid(GridSpec(ops=("nn.functional.conv3d",), dtypes=("float32",), layouts=("contig",),
                            directions=("fwd",), thresholds=("2^32",), positions=("above",), scale=14))
    cal = case.with_batch(calibration_batch(case), threshold="cal", position="below")
    tol = with_floor(calibrated(execute(cal, tolerances=None).worst, "float32"), FLOOR_EPS * TF32_EPS)
    assert execute(case, tolerances=tol, mode="full").verdict.status is Status.OK
    assert execute(case, tolerances=tol, fault_model="unwritten-tail", mode="full").verdict.status is Status.WRONG
