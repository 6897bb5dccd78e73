"""kernelaudit's own Triton kernels on CUDA give the bits the torch versions give."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("dtype,high", [(torch.float32, None), (torch.float16, None), (torch.bfloat16, None),
                                        (torch.int32, None), (torch.int64, 1000)])
def test_triton_generation_on_cuda_equals_the_torch_hash(dtype, high):
    from kernelaudit.sweep import gen
    from kernelaudit.sweep.kernels import gen as fast

    key = gen.stream_key(5, "gpu")
    start = 2**32 - 5000
    out = torch.empty(10000, dtype=dtype, device="cuda")
    fast.fill_range(out, start, key, high=high)
    idx = torch.arange(start, start + 10000, device="cuda")
    h = gen.hash32(idx, key)  # the torch int64 path, on the GPU
    if high is not None:
        want = (h % high).to(dtype)
    elif dtype.is_floating_point:
        want = ((h >> 8).to(torch.float32) * 2.0**-23 - 1.0).to(dtype)
    else:
        want = ((h >> 24) - 128).to(dtype)
    assert torch.equal(out, want)
    assert torch.equal(out.cpu(), gen.fill_flat(10000, key, dtype, "cpu", start=start, high=high))
    strided = fast.values_strided((4, 5, 6), (30, 1, 5), start, key, dtype, "cuda", high=high)
    assert torch.equal(strided.cpu(), gen.values_at(gen.strided_index((4, 5, 6), (30, 1, 5), start, "cpu"), key,
                                                    dtype, high=high))


@pytest.mark.parametrize("op,kernel", [(op, "") for op in ("bmm", "baddbmm", "mm", "addmm", "linear", "matmul4d",
                                                             "einsum")]
                         + [(op, "flat") for op in ("bmm", "mm", "matmul4d")]
                         + [(op, "regenerate") for op in ("bmm", "baddbmm")])
def test_fused_freivalds_on_cuda_agrees_with_the_torch_check(op, kernel, monkeypatch):
    """Each fused check (``flat`` where the layout allows, the row-sum kernel with
    projections made at generation elsewhere, or regenerating every operand with
    ``$KERNELAUDIT_PROJECT_AT_GENERATION=0``) gives the float64 torch check's verdicts."""
    from kernelaudit.config import PROJECT_AT_GENERATION
    from kernelaudit.sweep.cases import GridSpec, grid
    from kernelaudit.sweep.kernels import freivalds
    from kernelaudit.sweep.judge.execution import execute
    from kernelaudit.sweep.tolerance import calibrated

    if kernel == "regenerate":
        monkeypatch.setenv(PROJECT_AT_GENERATION.name, "0")
    flat_calls = []
    if kernel == "flat":  # the contiguous layouts must really take the flat kernel
        real = freivalds.freivalds_flat
        monkeypatch.setattr(freivalds, "freivalds_flat", lambda *a, **k: flat_calls.append(1) or real(*a, **k))

    cases = grid(GridSpec(ops=(op,), dtypes=("float16", "bfloat16", "float32"), thresholds=("2^32",),
                          positions=("above",), directions=("fwd",), scale=16))
    for case in cases:
        monkeypatch.setenv("KERNELAUDIT_FUSED_FREIVALDS", "0")
        tol = calibrated(execute(case.with_batch(8), "cuda", tolerances=None).worst, case.dtype)
        ref = execute(case, "cuda", fault_model="mps", tolerances=tol).verdict
        monkeypatch.delenv("KERNELAUDIT_FUSED_FREIVALDS")
        got = execute(case, "cuda", fault_model="mps", tolerances=tol).verdict
        assert (got.status, got.bad_batches, got.first_bad_index) == (ref.status, ref.bad_batches,
                                                                      ref.first_bad_index), case.id
    assert kernel != "flat" or flat_calls


@pytest.mark.parametrize("op", ["bmm", "baddbmm", "mm", "addmm", "linear", "matmul4d", "einsum"])
def test_gradient_projections_on_cuda_agree_with_the_float64_autograd_reference(op, monkeypatch):
    from kernelaudit.sweep.cases import GridSpec, grid
    from kernelaudit.sweep.predict import EITHER, predict
    from kernelaudit.sweep.judge.execution import execute
    from kernelaudit.sweep.tolerance import calibrated

    cases = grid(GridSpec(ops=(op,), dtypes=("float16", "bfloat16", "float32"), thresholds=("2^32",),
                          positions=("above",), directions=("bwd",), scale=16))
    for case in cases:
        monkeypatch.setenv("KERNELAUDIT_FUSED_FREIVALDS", "0")
        ref = execute(case, "cuda", fault_model="mps",
                      tolerances=calibrated(execute(case.with_batch(8), "cuda", tolerances=None).worst,
                                            case.dtype)).verdict
        monkeypatch.delenv("KERNELAUDIT_FUSED_FREIVALDS")
        cal = execute(case.with_batch(8), "cuda", tolerances=None).worst
        assert any(k.endswith(":freivalds") for k in cal), (case.id, cal)
        got = execute(case, "cuda", fault_model="mps", tolerances=calibrated(cal, case.dtype)).verdict
        if predict(case, "mps")[0] == EITHER:
            assert {got.status.value, ref.status.value} <= {"ok", "wrong"}, case.id
        else:
            assert got.status == ref.status, (case.id, got.explain(), ref.explain())


@pytest.mark.parametrize("op,fault", [("add", "wrap32"), ("softmax", "wrap32"), ("cumsum", "wrap32"),
                                      ("gather", "wrap32"), ("sum", "wrap32")])
def test_fused_comparison_on_cuda_gives_the_torch_verdicts(op, fault, monkeypatch):
    from kernelaudit.sweep.cases import GridSpec, grid
    from kernelaudit.sweep.judge.execution import execute
    from kernelaudit.sweep.tolerance import calibrated

    cases = grid(GridSpec(ops=(op,), dtypes=("float32", "bfloat16"), thresholds=("2^32",), positions=("above",),
                          scale=16))
    for case in cases:
        tol = calibrated(execute(case.with_batch(2), "cuda", tolerances=None).worst, case.dtype)
        monkeypatch.setenv("KERNELAUDIT_FUSED_COMPARE", "0")
        ref = execute(case, "cuda", fault_model=fault, tolerances=tol).verdict
        monkeypatch.delenv("KERNELAUDIT_FUSED_COMPARE")
        got = execute(case, "cuda", fault_model=fault, tolerances=tol).verdict
        assert (got.status, got.bad_batches, got.first_bad_index) == (ref.status, ref.bad_batches,
                                                                      ref.first_bad_index), case.id


def test_the_one_launch_summary_on_cuda_equals_the_torch_summary(monkeypatch, summary_cases):
    """What every judgement on CUDA reduces its per-batch metrics with: bit for bit the
    torch version (ties, NaN, no tolerance, zero tolerances, rows past one block)."""
    from kernelaudit.sweep.kernels.summary import summary_rows
    from kernelaudit.sweep.judge.metrics import summarize

    monkeypatch.setenv("KERNELAUDIT_FUSED_SUMMARY", "0")
    for pb, tols in summary_cases:
        want = summarize(pb, tols)
        got = summary_rows(pb.cuda(), tols).cpu()
        assert torch.equal(got, want), (tols, got.tolist(), want.tolist())
