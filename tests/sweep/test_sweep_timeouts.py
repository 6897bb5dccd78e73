"""A case that times out costs its timeout once: larger cases of its op are not run, and
a bracketed sweep runs no control below it."""

from __future__ import annotations

import torch

from kernelaudit.sweep.cases import GridSpec, grid
from kernelaudit.sweep.schedule import TimedOut, _controls_needed
from kernelaudit.sweep.store import RunStore
from kernelaudit.verdict import Status, Verdict

SCALE = 16


def _cases(op: str, direction: str = "fwd"):
    spec = GridSpec(ops=(op,), dtypes=("float32", "float16"), layouts=("contig",), directions=(direction,),
                    thresholds=("2^31", "2^32"), positions=("below", "above"), scale=SCALE)
    return grid(spec)


def _store(tmp_path) -> RunStore:
    manifest = {"device": {"type": "cpu", "name": "test cpu"}, "fault_model": "none",
                "torch": torch.__version__, "started": "2026-12-05T00:00:00+00:00"}
    return RunStore.create(tmp_path / "store", manifest, resume=False)


def test_after_a_timeout_the_ops_other_cases_are_not_run_and_other_ops_are(tmp_path):
    store = _store(tmp_path)
    cases = _cases("add") + _cases("add", "bwd")
    slow = next(c for c in cases if c.threshold == "2^31" and c.position == "above" and c.dtype == "float32")
    store.append(slow, Verdict.error("timed out after 20 s (worker killed)", timed_out=True), 20.0)
    timed_out = TimedOut(store)  # seeded from the store: a resumed sweep remembers it
    others = [c for c in cases if c is not slow]
    axes = grid(GridSpec(ops=("add",), dtypes=("float32",), layouts=("contig",), directions=("fwd",),
                         thresholds=("2^31",), positions=("below",), axes=("bytes", "dim"), scale=SCALE))
    for c in others + axes:  # smaller, larger, the backward, every axis: one timeout per op
        v = timed_out.verdict(c)
        assert v.status is Status.SKIPPED and slow.id in v.message and v.details["after_timeout"] == slow.id
        assert "--ops add --case-timeout" in v.message
    assert all(timed_out.verdict(c) is None for c in _cases("gelu"))


def test_a_bracket_runs_no_control_below_a_probe_that_timed_out(tmp_path):
    store = _store(tmp_path)
    cases = [c for c in _cases("add") if c.dtype == "float32"]
    above = {c.threshold: c for c in cases if c.position == "above"}
    controls = [c for c in cases if c.position == "below"]
    store.append(above["2^31"], Verdict.error("timed out after 20 s (worker killed)", timed_out=True), 20.0)
    store.append(above["2^32"], Verdict(Status.WRONG, "rel", 1.0, 1e-5, message="planted"), 0.1)
    needed = _controls_needed(store, controls)
    assert [c.threshold for c in needed] == ["2^32"]
    # a later rerun held back by a timeout judges nothing: the wrong verdict stands, and its control
    store.append(above["2^32"], TimedOut(store).verdict(above["2^32"]), 0.0)
    assert [c.threshold for c in _controls_needed(store, controls)] == ["2^32"]


def test_a_bracket_runs_no_control_below_a_probe_only_held_back_by_a_timeout(tmp_path):
    store = _store(tmp_path)
    cases = [c for c in _cases("add") if c.dtype == "float32"]
    above = {c.threshold: c for c in cases if c.position == "above"}
    store.append(above["2^31"], Verdict.error("timed out after 20 s (worker killed)", timed_out=True), 20.0)
    store.append(above["2^32"], TimedOut(store).verdict(above["2^32"]), 0.0)
    assert _controls_needed(store, [c for c in cases if c.position == "below"]) == []


def _timeout_of(monkeypatch, args, kind):
    """The case timeout ``kernelaudit sweep ARGS`` passes on, on a device of ``kind``."""
    from click.testing import CliRunner

    from kernelaudit.sweep import cli, schedule

    seen = {}

    class Stop(Exception):
        pass

    def fake_run_sweep(spec, out, **kw):
        seen.update(kw)
        raise Stop

    monkeypatch.setattr(schedule, "run_sweep", fake_run_sweep)
    monkeypatch.setattr(cli, "_device_kind", lambda device: kind)
    out = CliRunner().invoke(cli.sweep, ["--device", "cpu", *args])
    assert isinstance(out.exception, Stop), out.output
    return seen["case_timeout_s"]


def test_presets_bound_a_case_on_cuda_and_an_explicit_timeout_wins(monkeypatch):
    assert _timeout_of(monkeypatch, ["--quick"], "cuda") == 10.0
    assert _timeout_of(monkeypatch, ["--full", "--ops", "add"], "cuda") == 20.0
    assert _timeout_of(monkeypatch, ["--quick"], "cpu") == 600.0
    assert _timeout_of(monkeypatch, ["--quick", "--case-timeout", "33"], "cuda") == 33.0


def test_an_op_that_refuses_a_dtype_below_the_thresholds_too_is_skipped_not_an_error(tmp_path):
    # On the CPU, special.i1's backward has no Half kernel: the calibration raises
    # NotImplementedError at a small size, so the big cases say so, as no finding.
    from kernelaudit.sweep.schedule import run_sweep

    spec = GridSpec(ops=("special.i1",), dtypes=("float16",), layouts=("contig",), directions=("bwd",),
                    thresholds=("2^32",), positions=("above",), scale=10)
    res = run_sweep(spec, tmp_path / "s", device="cpu")
    latest = list(res.store.latest().values())
    assert latest and all(r["verdict"]["status"] == "skipped" for r in latest)
    assert "NotImplementedError" in latest[0]["verdict"]["message"] and not res.failed
