"""Batched matrix ops whose CUDA kernels take one matrix at a time (QR, LDL) cross the
limits with larger matrices at real scales, and a store recorded with the sample's
matrices runs those cases again as now planned."""

from __future__ import annotations

import pytest
import torch

from kernelaudit.sweep.cases import GridSpec, grid
from kernelaudit.sweep.ops.catalog import op_spec
from kernelaudit.sweep.store import RunStore
from kernelaudit.thresholds import Thresholds
from kernelaudit.verdict import Status, Verdict


def test_looped_linalg_samples_are_grown_at_real_scale_and_not_at_small_ones_or_on_tiny_axes():
    spec = op_spec("qr")
    series = next(iter(spec.series))
    small, real, tiny = Thresholds(16), Thresholds(32), Thresholds(32, shape_bits=12)
    (x_small,), (x_real,), (x_tiny,) = (spec.operands(series, 2, th) for th in (small, real, tiny))
    assert x_small.shape[1:] == (5, 5) and x_tiny.shape[1:] == (5, 5) and x_real.shape[1:] == (2045, 2045)
    assert spec.series[series].per_batch(real) == 409**2 * spec.series[series].per_batch(small)
    assert (spec.shape_tag(small), spec.shape_tag(real)) == ("", "2045x2045")
    # an op whose CUDA kernel is batched keeps the sample's matrices
    other = op_spec("cholesky_solve")
    assert all(o.shape[1:] == (5, 5) for o in other.operands(next(iter(other.series)), 2, real))
    assert other.shape_tag is None


def test_grown_cases_calibrate_apart_and_the_dim_axis_keeps_the_samples_matrices():
    spec = GridSpec(ops=("linalg.qr",), dtypes=("float32",), layouts=("contig",), directions=("fwd",),
                    thresholds=("2^31",), positions=("above",), axes=("elements", "dim", "bytes"), scale=32)
    keys = {c.axis: c.tolerance_key for c in grid(spec)}
    assert keys["elements"] == keys["bytes"] == "linalg.qr/float32/contig/fwd/2045x2045"
    assert keys["dim"] == "linalg.qr/float32/contig/fwd/tiny"
    shapes = {c.axis: c.to_json()["shapes"][0] for c in grid(spec)}
    assert shapes["dim"][1:] == [5, 5] and shapes["elements"][1:] == [2045, 2045]
    assert shapes["elements"][0] * 2045 * 2045 > 2**31 > (shapes["elements"][0] - 12) * 2045 * 2045


def test_a_grown_matrix_is_made_diagonally_dominant_and_a_samples_is_not():
    spec = op_spec("linalg.ldl_factor")
    th = Thresholds(20)          # 2^19 elements: the sample's 5 x 5 grown 7x
    series = next(iter(spec.series))
    (x,) = spec.operands(series, 1, th)
    assert x.shape == (12, 35, 35)
    g = torch.rand(x.shape) * 2 - 1
    (out,) = spec.call(g)
    assert torch.equal(out, torch.linalg.ldl_factor(g + 35 * torch.eye(35))[0])
    s = torch.rand(12, 5, 5) * 2 - 1
    (out,) = spec.call(s)
    assert torch.equal(out, torch.linalg.ldl_factor(s)[0])


@pytest.mark.parametrize("op, fault_model, status", [("linalg.ldl_factor", "none", "ok"), ("qr", "none", "ok"),
                                                     ("qr", "unwritten-tail", "wrong")])
def test_a_sweep_of_grown_matrices_is_quiet_on_a_correct_op_and_finds_an_unwritten_tail(tmp_path, op, fault_model,
                                                                                         status):
    from kernelaudit.sweep.schedule import run_sweep

    spec = GridSpec(ops=(op,), dtypes=("float32",), layouts=("contig",), directions=("fwd",),
                    thresholds=("2^32",), positions=("above",), scale=20)
    res = run_sweep(spec, tmp_path, device="cpu", fault_model=fault_model)
    (rec,) = list(res.store.records())
    assert rec["case"]["shapes"][0][1:] == [35, 35] and rec["verdict"]["status"] == status


def _store(tmp_path) -> RunStore:
    manifest = {"device": {"type": "cpu", "name": "test cpu"}, "fault_model": "none",
                "torch": torch.__version__, "started": "2026-12-07T00:00:00+00:00"}
    return RunStore.create(tmp_path / "store", manifest, resume=False)


def test_a_waiting_case_recorded_with_the_samples_matrices_runs_again_as_now_planned(tmp_path, monkeypatch):
    """The full grid of 2026-12-07 recorded batched QR past 2^31 bytes with 5 x 5
    matrices: timed out, or held back and projected at 1,500 s and more from a judged 5 x 5
    case. Grown, those projections are of another case: the case runs again, and a slow
    pass neither leaves it out on them nor on the judge's own projection."""
    from kernelaudit.sweep.ops import recipe
    from kernelaudit.sweep.schedule import _done_on
    from kernelaudit.sweep.timeouts import case_rates, projected_beyond, projection, reshaped, slow_cases

    spec = GridSpec(ops=("qr",), dtypes=("float32",), layouts=("contig",), directions=("fwd",),
                    thresholds=("2^31",), positions=("below", "above"), axes=("dim", "bytes"), scale=32)
    cases = list(grid(spec))
    dim = next(c for c in cases if c.axis == "dim")
    grown = [c for c in cases if c.axis == "bytes"]
    assert grown and all(c.to_json()["shapes"][0][1:] == [2045, 2045] for c in grown)
    store = _store(tmp_path)
    timing = {"inputs_s": 0.5, "op_s": 3.0, "judge_s": 3.0}
    store.append(dim, Verdict(Status.OK, "rel", 0.0, 1e-5, details={"timing": timing}), 6.5)
    # recorded by a sweep that did not grow them: as many 5 x 5 matrices as fill the same bytes
    with monkeypatch.context() as m:
        m.setattr(recipe, "GROW_SIDE", 5)
        first, *rest = (c.with_batch(c.batch * 409**2) for c in grown)
        assert first.to_json()["shapes"][0][1:] == [5, 5]
        store.append(first, Verdict.error("timed out after 120 s (worker killed)", timed_out=True,
                                          timeout_s=120.0, projected_s=1800.0), 120.0)
        for c in rest:
            store.append(c, Verdict.skipped(f"not run: {first.id} timed out", after_timeout=first.id), 0.0)
    latest = store.latest()
    # as recorded, the judged 5 x 5 case projects them past any slow pass
    assert all(projection(latest[c.key]["case"], case_rates(latest))[0] > 1000 for c in grown)
    assert all(reshaped(latest[c.key]["case"], c) for c in grown) and not reshaped(latest[dim.key]["case"], dim)
    assert _done_on(store, capacity=0, case_timeout_s=60.0) == {c.key for c in (dim, *grown)}
    assert _done_on(store, capacity=0, case_timeout_s=60.0, planned={c.key: c for c in cases}) == {dim.key}
    # as planned now, nothing projects them (no grown case judged yet): a slow pass runs them
    assert projected_beyond(latest, cases, 600.0) == []
    assert slow_cases(latest, cases, 600.0) == grown
