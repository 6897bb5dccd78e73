"""The fused Triton Freivalds check agrees with the float64 torch check, case by case."""

from __future__ import annotations

import os

import pytest

from kernelaudit.cases import GridSpec, grid
from kernelaudit.faults.predict import EITHER, predict
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


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_spot_kernel_regenerates_the_exact_operands(dtype):
    """The spot kernel's dot products are those of the generated values (same hash, same
    rounding), over transposed and offset descriptors."""
    pytest.importorskip("triton")
    import torch

    from kernelaudit import gen
    from kernelaudit.kernels.freivalds import Desc, spots
    from kernelaudit.ops.spec import DTYPES

    dt = DTYPES[dtype]
    nb, M, K, N = 3, 5, 7, 6
    ka, kb = gen.stream_key(1, "a"), gen.stream_key(1, "b")
    dA = Desc(ka, 11, (M * K, 0, 1, M))         # A stored transposed per batch, offset 11
    dB = Desc(kb, 2**32 - 40, (K * N, 0, N, 1))  # B contiguous, indexes past 2^32
    A = gen.values_strided((nb, 1, M, K), dA.strides, dA.offset, ka, dt, "cpu").double()
    B = gen.values_strided((nb, 1, K, N), dB.strides, dB.offset, kb, dt, "cpu").double()
    C = torch.randn(nb, 1, M, N).to(dt)
    bb, ii, jj = torch.tensor([0, 1, 2, 2]), torch.tensor([0, 4, 2, 4]), torch.tensor([0, 5, 3, 0])
    hh = torch.zeros_like(bb)
    got, ref, scale = spots(C, dA, dB, None, K, 2.0, 0.0, dt, bb, hh, ii, jj)
    want = 2.0 * (A[bb, 0, ii, :] * B[bb, 0, :, jj]).sum(-1)
    assert torch.equal(got, C[bb, 0, ii, jj].double())
    assert torch.allclose(ref, want, rtol=1e-14, atol=0)
    assert torch.allclose(scale, 2.0 * (A[bb, 0, ii, :] * B[bb, 0, :, jj]).abs().sum(-1), rtol=1e-14, atol=0)


@pytest.mark.parametrize("op", ["bmm", "baddbmm", "mm", "addmm", "linear", "matmul4d"])
def test_gradients_judged_by_projection_agree_with_the_float64_autograd_reference(op, monkeypatch):
    """Backward of every bilinear op, every layout: the projection check of each gradient
    (per batch, shared weight, bias) gives the float64 autograd reference's verdicts, and
    the mps fault model's corrupted gradients are found."""
    pytest.importorskip("triton")
    cases = grid(GridSpec(ops=(op,), dtypes=("float16",), thresholds=("2^32",), positions=("above",),
                          directions=("bwd",), scale=12))
    statuses, predicted = set(), set()
    for case in cases:
        monkeypatch.setenv("KERNELAUDIT_FUSED_FREIVALDS", "0")
        tol_ref = calibrated(execute(case.with_batch(4), tolerances=None).worst, case.dtype)
        ref = execute(case, fault_model="mps", tolerances=tol_ref).verdict
        monkeypatch.setenv("KERNELAUDIT_FUSED_FREIVALDS", "1")
        cal = execute(case.with_batch(4), tolerances=None).worst
        assert any(k.endswith(":freivalds") for k in cal), cal  # the projection path ran
        got = execute(case, fault_model="mps", tolerances=calibrated(cal, case.dtype)).verdict
        expected, _ = predict(case, "mps")
        predicted.add(expected)
        if expected == EITHER:  # corruption diluted in a sum: either verdict is right
            assert {got.status.value, ref.status.value} <= {"ok", "wrong"}, case.id
            continue
        assert got.status == ref.status, (case.id, got.explain(), ref.explain())
        if ref.status.value == "wrong" and ref.bad_batches and got.bad_batches and got.first_bad_index is not None:
            assert got.bad_batches.first == ref.bad_batches.first, case.id
        statuses.add(ref.status.value)
    assert "wrong" in statuses or "wrong" not in predicted  # the planted faults are found


def test_a_wrong_shared_weight_gradient_is_located_by_the_full_reference(monkeypatch):
    """The projection flags a shared gradient (a weight: one matrix for every batch);
    only then is its float64 reference summed, to name the first bad element."""
    pytest.importorskip("triton")
    import torch

    from kernelaudit.oracle import _judge, run_op

    monkeypatch.setenv("KERNELAUDIT_FUSED_FREIVALDS", "1")
    case = grid(GridSpec(ops=("linear",), dtypes=("float32",), layouts=("contig",), thresholds=("2^32",),
                         positions=("below",), directions=("bwd",), scale=12))[0]
    tol = calibrated(execute(case.with_batch(4), tolerances=None).worst, case.dtype)
    placed, outs, rows, _ = run_op(case, "cpu", "none")
    js = _judge(case, placed, outs, rows, torch.device("cpu"), tol, "auto")
    assert all(j.bad_count == 0 for j in js)  # clean
    w = max((k for k, r in enumerate(rows) if r is None), key=lambda k: outs[k].numel())  # W, not the bias
    outs[w].view(-1)[5] += 10.0  # plant one bad element in the weight's gradient
    js = _judge(case, placed, outs, rows, torch.device("cpu"), tol, "auto")
    bad = [j for j in js if j.bad_count]
    assert [j.name for j in bad] == [f"grad{w}"] and bad[0].metric == "freivalds"
    assert bad[0].first_bad_index == 5


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("has_m", [False, True])
def test_every_projection_kernel_computes_the_same_sums(dtype, has_m):
    """``acc2d`` (accumulate tiles, reduce once), ``rowsum`` (reduce every tile) and
    ``rowsum-cspec`` (the same body, C's strides specialised) agree to rounding, with a
    bias and without, over transposed and offset descriptors."""
    pytest.importorskip("triton")
    import torch

    from kernelaudit import gen
    from kernelaudit.kernels.freivalds import Desc, freivalds
    from kernelaudit.ops.spec import DTYPES

    dt = DTYPES[dtype]
    nb, H, M, K, N = 3, 2, 40, 24, 36
    dA = Desc(gen.stream_key(2, "a"), 5, (H * M * K, M * K, 1, M))
    dB = Desc(gen.stream_key(2, "b"), 2**32 - 7, (H * K * N, K * N, N, 1))
    dM = Desc(gen.stream_key(2, "m"), 0, (0, M * N, N, 1)) if has_m else None
    C = torch.randn(nb, H, M, N).to(dt)
    x, y = torch.rand(N, dtype=torch.float64) - 0.5, torch.rand(M, dtype=torch.float64) - 0.5
    a = freivalds(C, x, y, dA, dB, dM, K, 2.0, 0.5, dt, kernel="rowsum", blocks=(16, 16))
    b = freivalds(C, x, y, dA, dB, dM, K, 2.0, 0.5, dt, kernel="acc2d", blocks=(16, 16))
    c = freivalds(C, x, y, dA, dB, dM, K, 2.0, 0.5, dt, kernel="rowsum-cspec", blocks=(16, 16))
    rel = 1e-12 if dtype == "float32" else 1e-5  # float64 sums / float32 sums
    assert torch.allclose(a, b, rtol=rel, atol=rel * float(a.abs().max()))
    assert torch.equal(a, c)  # one body, one summation order


def test_an_unknown_projection_kernel_is_refused_by_name(monkeypatch):
    import torch

    from kernelaudit.errors import InvalidArgument
    from kernelaudit.kernels.freivalds import Desc, freivalds

    monkeypatch.setenv("KERNELAUDIT_FREIVALDS_KERNEL", "fast")
    d = Desc(1, 0, (0, 0, 1, 1))
    with pytest.raises(InvalidArgument, match="KERNELAUDIT_FREIVALDS_KERNEL='fast': allowed values are rowsum, rowsum-cspec, acc2d"):
        freivalds(torch.zeros(1, 1, 2, 2), torch.zeros(2), torch.zeros(2), d, d, None, 2, 1.0, 0.0, torch.float32)


@pytest.mark.parametrize("op,layout", [("bmm", "contig"), ("bmm", "aT"), ("bmm", "slice"), ("mm", "bT"),
                                       ("matmul4d", "contig"), ("baddbmm", "slice")])
def test_inputs_generated_with_their_projections_are_the_plain_inputs_bit_for_bit(op, layout, monkeypatch):
    """Generating A and B with ``y A`` / ``B x`` in the same pass writes exactly the
    storage the plain generation writes, and the projections are those of the
    generated values (float64 torch sums of the same operands)."""
    pytest.importorskip("triton")
    import torch

    from kernelaudit.oracle import (RefContext, _matmul_operands, _projection_vector, device_inputs,
                                    inputs_with_projections, placed_operands)

    monkeypatch.setenv("KERNELAUDIT_FUSED_FREIVALDS", "1")
    case = grid(GridSpec(ops=(op,), dtypes=("bfloat16",), layouts=(layout,), thresholds=("2^32",),
                         positions=("above",), directions=("fwd",), scale=12))[0]
    placed = placed_operands(case)
    plain, _ = device_inputs(placed, "cpu", grad=False)
    bases, _, proj = inputs_with_projections(case, placed, "cpu")
    want_roles = {"mm": {"A"}, "baddbmm": {"A", "B", "M"}}.get(op, {"A", "B"})  # mm's B is a shared weight
    assert set(proj) == want_roles
    for got, want in zip(bases, plain):
        assert torch.equal(got, want)
    ctx = RefContext(case, placed, "cpu")
    A, Bm, M, _, _ = _matmul_operands(case, ctx, 0, case.batch, case.batch, meta=False)
    y = _projection_vector(case.seed, "y", A.shape[-2], torch.device("cpu"))
    x = _projection_vector(case.seed, "x", Bm.shape[-1], torch.device("cpu"))
    want_a = torch.stack([(A * y[:, None]).sum(-2), (A.abs() * y.abs()[:, None]).sum(-2)], -1)
    assert torch.allclose(proj["A"], want_a.expand_as(proj["A"]), rtol=1e-12, atol=1e-12)
    if "B" in proj:
        want_b = torch.stack([(Bm * x).sum(-1), (Bm.abs() * x.abs()).sum(-1)], -1)
        assert torch.allclose(proj["B"], want_b.expand_as(proj["B"]), rtol=1e-12, atol=1e-12)
    if "M" in proj:  # y M x of a full-size bias, one number per matrix
        want_m = torch.stack([((M * x).sum(-1) * y).sum(-1), ((M.abs() * x.abs()).sum(-1) * y.abs()).sum(-1)], -1)
        assert torch.allclose(proj["M"][..., 0, :], want_m, rtol=1e-12, atol=1e-12)
