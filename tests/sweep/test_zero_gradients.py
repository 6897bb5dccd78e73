"""Autograd returns a ZeroTensor (no storage, a null data pointer) for a gradient known
to be zero, such as ``sgn``'s of a real input. The judge hands outputs and references to
Triton kernels that read data pointers (an illegal memory access on CUDA, found by the
full grid's calibration of ``sgn`` backward), so both reach it with storage."""

from __future__ import annotations

from kernelaudit.sweep.cases import GridSpec, calibration_batch, grid
from kernelaudit.sweep.judge.execution import execute, run_op
from kernelaudit.sweep.judge.reference import RefContext, _reference_chunk
from kernelaudit.verdict import Status


def _sgn_bwd():
    (case,) = grid(GridSpec(ops=("sgn",), dtypes=("float32",), layouts=("contig",), directions=("bwd",),
                            thresholds=("2^32",), positions=("below",), scale=20))
    return case.with_batch(calibration_batch(case), threshold="cal", position="below")


def test_a_zero_gradient_from_autograd_reaches_the_judge_with_storage():
    case = _sgn_bwd()
    placed, got, _, _ = run_op(case, "cpu", "none")
    assert got and all(not g._is_zerotensor() and g.data_ptr() != 0 for g in got)
    assert all(bool((g == 0).all()) for g in got)
    refs, _ = _reference_chunk(case, RefContext(case, placed, "cpu"), 0, 2, None)
    assert refs and all(not r._is_zerotensor() and r.data_ptr() != 0 for r in refs)


def test_sgn_backward_calibrates_and_is_judged_ok():
    out = execute(_sgn_bwd(), tolerances=None)
    assert out.verdict.status is Status.OK, out.verdict.explain()
