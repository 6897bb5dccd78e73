"""The run store's manifest: deferred updates are batched, visible and never lost."""

from __future__ import annotations

import json

from kernelaudit import GridSpec, run_sweep
from kernelaudit.sweep import store as store_mod
from kernelaudit.sweep.store import RunStore


def _counting_writes(monkeypatch) -> list[str]:
    writes: list[str] = []
    real = store_mod.write_json_atomic

    def counted(path, obj, **kw):
        writes.append(str(path))
        real(path, obj, **kw)

    monkeypatch.setattr(store_mod, "write_json_atomic", counted)
    return writes


def test_deferred_updates_are_visible_at_once_and_written_by_the_next_write(tmp_path, monkeypatch):
    store = RunStore.create(tmp_path, {"tolerances": {"a": {"out0:rel": 1.0}}}, resume=False)
    writes = _counting_writes(monkeypatch)
    monkeypatch.setattr(store_mod, "MANIFEST_DEFER_S", 3600.0)
    for i in range(50):
        store.update_manifest(tolerances={f"k{i}": {"out0:rel": float(i)}}, defer=True)
    assert writes == []
    assert len(store.manifest()["tolerances"]) == 51          # pending ones merged in the view
    on_disk = json.loads((tmp_path / "manifest.json").read_text())
    assert list(on_disk["tolerances"]) == ["a"]
    store.update_manifest(plan={"cases": 3})                  # any write takes them along
    assert len(writes) == 1
    on_disk = json.loads((tmp_path / "manifest.json").read_text())
    assert len(on_disk["tolerances"]) == 51 and on_disk["tolerances"]["k49"] == {"out0:rel": 49.0}
    assert on_disk["plan"] == {"cases": 3}
    store.flush()                                             # nothing pending: no write
    assert len(writes) == 1


def test_a_deferred_update_is_written_once_the_interval_has_passed(tmp_path, monkeypatch):
    store = RunStore.create(tmp_path, {}, resume=False)
    writes = _counting_writes(monkeypatch)
    monkeypatch.setattr(store_mod, "MANIFEST_DEFER_S", 0.0)
    store.update_manifest(tolerances={"k": {"out0:rel": 2.0}}, defer=True)
    assert len(writes) == 1
    assert json.loads((tmp_path / "manifest.json").read_text())["tolerances"] == {"k": {"out0:rel": 2.0}}


def test_calibrating_many_keys_writes_the_manifest_a_few_times_and_keeps_every_tolerance(tmp_path, monkeypatch):
    spec = GridSpec(ops=("add", "gelu", "sum", "clone"), dtypes=("float32", "float16"), thresholds=("2^32",),
                    positions=("above",), scale=12)
    writes = _counting_writes(monkeypatch)
    monkeypatch.setattr(store_mod, "MANIFEST_DEFER_S", 3600.0)
    run_sweep(spec, tmp_path, device="cpu", fault_model="none")
    tolerances = RunStore.open(tmp_path).manifest()["tolerances"]
    assert len(tolerances) >= 16                              # op x dtype x layout x direction keys
    assert all(t is not None for t in tolerances.values())
    # create, the run's segment, the counts (and the plan): not one write per key
    assert len(writes) <= 5 < len(tolerances)
    # the segment accounts for calibration: keys, the workers' seconds, by phase
    cal = RunStore.open(tmp_path).manifest()["segments"][-1]["calibration"]
    assert cal["keys"] == len(tolerances) and cal["wall_s"] >= 0
    assert 0 < sum(cal["timing_s"].values()) <= cal["worker_s"] + 1e-3
    slowest = [s for _, s in cal["slowest"]]
    assert 0 < len(slowest) <= 10 and slowest == sorted(slowest, reverse=True)
    assert {k for k, _ in cal["slowest"]} <= set(tolerances)
    # nothing is calibrated again on resume: every key reached the file
    res = run_sweep(spec, tmp_path, device="cpu", fault_model="none", resume=True)
    assert res.ran == 0
    assert RunStore.open(tmp_path).manifest()["segments"][-1]["calibrated"] == 0


def test_a_resumed_invocation_over_a_subset_keeps_the_runs_larger_plan(tmp_path):
    # `--resume --rerun wrong --ops X` on the full grid's store planned 48 cases and the
    # report read "27758 of 48 planned cases recorded" (2026-12-06)
    out = tmp_path / "run"
    RunStore.create(out, {"thresholds": {}, "plan": {"cases": 1000}}, resume=False)
    RunStore.create(out, {"thresholds": {}, "plan": {"cases": 48}}, resume=True)
    assert RunStore.open(out).manifest()["plan"] == {"cases": 1000}
    RunStore.create(out, {"thresholds": {}, "plan": {"cases": 1200}}, resume=True)   # a grid grown since
    assert RunStore.open(out).manifest()["plan"] == {"cases": 1200}
