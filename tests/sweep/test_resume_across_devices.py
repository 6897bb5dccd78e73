"""A run resumed on another device: each segment names its device and versions, cases
skipped for memory on a smaller device run again on a larger one, and a tolerance key
whose calibration failed is tried again with its reason kept."""

from __future__ import annotations

import dataclasses
import json

import pytest

from kernelaudit.errors import InvalidArgument
from kernelaudit import GridSpec, run_sweep
from kernelaudit.sweep.rules_out import rules_from_store, unjudged
from kernelaudit.sweep.schedule import _uncalibrated
from kernelaudit.sweep.store import RunStore

SPEC = GridSpec(ops=("add", "sum"), dtypes=("float32",), thresholds=("2^32",), positions=("above",),
                layouts=("contig",), directions=("fwd",), scale=12)


def test_each_segment_names_the_device_and_versions_it_ran_with(tmp_path):
    run_sweep(SPEC, tmp_path, device="cpu")
    seg = RunStore.open(tmp_path).manifest()["segments"][-1]
    assert seg["device"]["type"] == "cpu" and seg["device"]["memory_bytes"] > 0
    assert seg["torch"] and "source" in seg


def test_cases_skipped_for_memory_on_a_smaller_device_run_again_on_a_larger_one(tmp_path):
    first = run_sweep(SPEC, tmp_path, device="cpu", memory_limit=1024)   # a 1 KiB "device"
    assert first.counts == {"skipped": 2}
    assert RunStore.open(tmp_path).manifest()["segments"][-1]["memory_bytes"] == 1024
    # resumed with the same memory: nothing runs again
    assert run_sweep(SPEC, tmp_path, device="cpu", memory_limit=1024, resume=True).ran == 0
    again = run_sweep(SPEC, tmp_path, device="cpu", memory_limit=2**30, resume=True)
    assert again.ran == 2 and again.counts == {"ok": 2}
    # and what ran on the larger one stays done on a smaller one
    assert run_sweep(SPEC, tmp_path, device="cpu", memory_limit=1024, resume=True).ran == 0


def test_cases_tried_again_for_memory_run_the_ops_in_turns_from_their_smallest(tmp_path):
    spec = dataclasses.replace(SPEC, thresholds=("2^31", "2^32"))
    run_sweep(spec, tmp_path, device="cpu", memory_limit=1024)
    first = [r["case"]["id"] for r in RunStore.open(tmp_path).records()]
    assert [i.split("/")[0] for i in first] == ["add", "sum", "add", "sum"]   # 2^32 first, then 2^31
    run_sweep(spec, tmp_path, device="cpu", memory_limit=2**30, resume=True)
    again = [r["case"] for r in RunStore.open(tmp_path).records()][len(first):]
    assert [(c["op"], c["threshold"]) for c in again] == [("add", "2^31"), ("sum", "2^31"),
                                                          ("add", "2^32"), ("sum", "2^32")]


def _edit_manifest(path, edit) -> None:
    m = json.loads((path / "manifest.json").read_text())
    edit(m)
    (path / "manifest.json").write_text(json.dumps(m))


def test_a_failed_calibration_is_tried_again_where_code_or_device_changed_and_its_reason_kept(tmp_path):
    # no efficient-attention kernel on the CPU: calibration fails with torch's message
    spec = GridSpec(ops=("sdpa.efficient",), dtypes=("float32",), thresholds=("2^32",), positions=("above",),
                    layouts=("contig",), directions=("fwd",), scale=12)
    first = run_sweep(spec, tmp_path, device="cpu")
    assert first.counts == {"skipped": 1}   # the op refuses the call at any size: no finding
    m = RunStore.open(tmp_path).manifest()
    (key,) = m["calibration_failed"]
    failed = m["calibration_failed"][key]
    assert m["tolerances"][key] is None and "No viable backend" in failed["why"]
    assert failed["source"] == m["source"] and failed["device"] == m["device"]["name"]
    # an op that fails far below the limits too: no size finding, so no guard rule
    rules, _ = rules_from_store(RunStore.open(tmp_path))
    assert rules == []
    # resumed with the same code on the same device: it would fail the same way
    same = run_sweep(spec, tmp_path, device="cpu", resume=True)
    assert same.ran == 0 and RunStore.open(tmp_path).manifest()["segments"][-1]["calibrated"] == 0
    # the op's refusal under other code: kernelaudit's code cannot change it, so not again
    assert failed["torch"] == m["torch"]
    _edit_manifest(tmp_path, lambda m: m["calibration_failed"][key].update(source="older code"))
    assert run_sweep(spec, tmp_path, device="cpu", resume=True).ran == 0
    # under another torch (or a record from before torch was kept): calibrated and judged
    # again, the reason kept
    _edit_manifest(tmp_path, lambda m: m["calibration_failed"][key].update(torch="2.10.0"))
    again = run_sweep(spec, tmp_path, device="cpu", resume=True)
    assert again.ran == 1 and RunStore.open(tmp_path).manifest()["segments"][-1]["calibrated"] == 1
    assert again.counts == {"skipped": 1}
    assert "No viable backend" in list(RunStore.open(tmp_path).records())[-1]["verdict"]["message"]
    # kernelaudit's own failure (a checker bug, as sgn's ZeroTensor gradient) under other
    # code: tried again
    _edit_manifest(tmp_path, lambda m: m["calibration_failed"][key].update(
        source="older code", why="kernelaudit failed on this case: AcceleratorError: illegal memory access"))
    assert run_sweep(spec, tmp_path, device="cpu", resume=True).ran == 1
    # a store from before reasons were kept (no calibration_failed, a bare message) says why once resumed
    _edit_manifest(tmp_path, lambda m: m.pop("calibration_failed"))
    (tmp_path / "verdicts.jsonl").write_text(json.dumps({**json.loads(
        (tmp_path / "verdicts.jsonl").read_text().splitlines()[0]), "verdict": {
            "status": "error", "message": "calibration failed below the thresholds: no tolerance to judge with"}}) + "\n")
    assert run_sweep(spec, tmp_path, device="cpu", resume=True).ran == 1
    assert "No viable backend" in list(RunStore.open(tmp_path).records())[-1]["verdict"]["message"]


def test_a_calibration_that_succeeds_when_tried_again_clears_its_recorded_failure(tmp_path):
    # as sgn's backward on CUDA: failed under older code (a checker bug), fixed since
    spec = dataclasses.replace(SPEC, ops=("add",))
    run_sweep(spec, tmp_path, device="cpu")
    (key,) = RunStore.open(tmp_path).manifest()["tolerances"]

    def failed(m):
        m["tolerances"][key] = None
        m["calibration_failed"] = {key: {"why": "illegal memory access", "source": "older code", "device": "x"}}
    _edit_manifest(tmp_path, failed)
    assert run_sweep(spec, tmp_path, device="cpu", resume=True, rerun=("ok",)).counts == {"ok": 1}
    m = RunStore.open(tmp_path).manifest()
    assert m["tolerances"][key] is not None and not m["calibration_failed"].get(key)


def test_rerun_judges_again_the_recorded_cases_of_the_statuses_named(tmp_path):
    spec = GridSpec(ops=("add",), dtypes=("float32",), thresholds=("2^31", "2^32"), positions=("above",),
                    layouts=("contig",), directions=("fwd",), scale=12)
    run_sweep(spec, tmp_path, device="cpu", fault_model="wrap32")   # wrong above 2^32 only
    first = {r["case"]["id"]: r["verdict"]["status"] for r in RunStore.open(tmp_path).records()}
    assert sorted(first.values()) == ["ok", "wrong"]
    assert run_sweep(spec, tmp_path, device="cpu", fault_model="wrap32", resume=True).ran == 0
    again = run_sweep(spec, tmp_path, device="cpu", fault_model="wrap32", resume=True, rerun=("wrong",))
    assert again.ran == 1 and again.counts == {"ok": 1, "wrong": 1}
    assert len(list(RunStore.open(tmp_path).records())) == 3   # appended: the last verdict counts
    # ok cases of a narrower grid again (after another judge rule, say): only those run
    narrower = dataclasses.replace(spec, thresholds=("2^31",))
    assert run_sweep(narrower, tmp_path, device="cpu", fault_model="wrap32", resume=True, rerun=("ok",)).ran == 1


def test_rerun_names_allowed_statuses_and_needs_resume(tmp_path):
    with pytest.raises(InvalidArgument, match="rerun"):
        run_sweep(SPEC, tmp_path, device="cpu", resume=True, rerun=("fine",))
    from click.testing import CliRunner

    from kernelaudit.cli import main

    r = CliRunner().invoke(main, ["sweep", "--device", "cpu", "--ops", "add", "--scale", "12",
                                  "--out", str(tmp_path / "x"), "--rerun", "wrong"])
    assert r.exit_code == 2 and "--resume" in r.output, r.output


def test_a_longer_case_timeout_on_resume_judges_the_timed_out_cases_and_those_they_held_back(tmp_path):
    # the hang fault model: each case sleeps 2.5 s, past a 2 s timeout (and the pool's 0.2 s
    # poll), which its calibration (far below 2^31 elements) stays under
    spec = GridSpec(ops=("add",), dtypes=("float32",), thresholds=("2^32",), positions=("below", "above"),
                    layouts=("contig",), directions=("fwd",), scale=12)
    first = run_sweep(spec, tmp_path, device="cpu", case_timeout_s=2.0, fault_model="hang")
    assert first.counts == {"error": 1, "skipped": 1}
    (slow,) = [r for r in RunStore.open(tmp_path).records() if r["verdict"]["status"] == "error"]
    assert slow["verdict"]["details"]["timeout_s"] == 2.0
    # the same timeout again: nothing runs; a longer one judges both
    assert run_sweep(spec, tmp_path, device="cpu", case_timeout_s=2.0, resume=True, fault_model="hang").ran == 0
    again = run_sweep(spec, tmp_path, device="cpu", case_timeout_s=600, resume=True, fault_model="hang")
    assert again.ran == 2 and again.counts == {"ok": 2}


@pytest.mark.parametrize("why,status", [
    ("NotImplementedError: \"i1_backward\" not implemented for 'Half'", "skipped"),
    ("RuntimeError: No available kernel. Aborting execution.", "skipped"),
    ("RuntimeError: torch.linalg.lstsq: `driver` other than `gels` is not supported on CUDA", "skipped"),
    # kernelaudit's own failure stays an error, unjudged, even with the same words
    ("kernelaudit failed on this case: RuntimeError: No available kernel. Aborting execution.", "error"),
    ("AcceleratorError: CUDA error: an illegal memory access was encountered", "error"),
])
def test_an_op_that_refuses_a_call_at_any_size_is_skipped_and_anything_else_unjudged(why, status):
    v = _uncalibrated(why).to_json()
    assert v["status"] == status and why[:60] in v["message"]
    assert status == "skipped" or unjudged(v)


def test_a_rerun_that_a_smaller_device_cannot_hold_keeps_the_judged_verdict(tmp_path):
    from kernelaudit.sweep.report import load_run

    first = run_sweep(SPEC, tmp_path, device="cpu", fault_model="wrap32")
    assert first.counts.get("wrong", 0) >= 1
    again = run_sweep(SPEC, tmp_path, device="cpu", fault_model="wrap32", memory_limit=1024, resume=True,
                      rerun=("wrong",))
    assert again.ran == first.counts["wrong"] and again.counts == first.counts   # ran, skipped, kept
    latest = RunStore.open(tmp_path).latest()
    wrong = [r for r in latest.values() if r["verdict"]["status"] == "wrong"]
    assert len(wrong) == first.counts["wrong"]
    assert all("needs about" in r["not_rerun"]["message"] for r in wrong)
    run = load_run(tmp_path)
    assert sum(r.status.value == "wrong" for r in run.records) == first.counts["wrong"]
    assert any("the earlier judged verdict stands" in n for n in run.notes)


def test_a_timed_out_case_that_a_longer_timeout_finds_too_big_is_a_memory_skip_not_a_timeout():
    from kernelaudit.sweep.runfile import supersedes
    from kernelaudit.sweep.timeouts import slow_cases
    from kernelaudit.sweep.cases import grid

    case = grid(SPEC)[0]
    timed_out = {"case": case.to_json(), "verdict": {"status": "error", "message": "timed out after 20 s",
                                                     "details": {"timed_out": True, "timeout_s": 20.0}}}
    too_big = {"case": case.to_json(), "verdict": {"status": "skipped", "message": "needs about 92.0 GiB",
                                                   "details": {"needed_bytes": 92 << 30}}}
    wrong = {"case": case.to_json(), "verdict": {"status": "wrong", "details": {}}}
    assert supersedes(too_big, timed_out)          # the larger GPU's retry, not every slow pass
    assert not supersedes(too_big, wrong)          # a finding stays
    assert slow_cases({case.key: timed_out}, [case], 120.0) == [case]
    assert slow_cases({case.key: too_big}, [case], 120.0) == []


def test_the_try_memory_plan_runs_what_the_estimate_refuses_where_the_tensors_fit(tmp_path):
    from kernelaudit.sweep.cases import grid
    from kernelaudit.sweep.memory import estimate_bytes, floor_bytes

    cases = grid(SPEC)
    floor = max(floor_bytes(c) for c in cases)
    limit = floor + 64   # the call's own tensors fit; the pessimistic estimate does not
    assert all(estimate_bytes(c) > limit for c in cases)
    strict = run_sweep(SPEC, tmp_path, device="cpu", memory_limit=limit)
    assert strict.counts == {"skipped": 2}
    assert all("needs about" in r["verdict"]["message"] for r in RunStore.open(tmp_path).records())
    # resumed under try on the same memory: the strict plan's skips are run, and say how
    tried = run_sweep(SPEC, tmp_path, device="cpu", memory_limit=limit, resume=True, memory_plan="try")
    assert tried.ran == 2 and tried.counts == {"ok": 2}
    last = list(RunStore.open(tmp_path).records())[-2:]
    assert all(r["verdict"]["details"]["memory_plan"]["plan"] == "try" for r in last)
    assert run_sweep(SPEC, tmp_path, device="cpu", memory_limit=limit, resume=True, memory_plan="try").ran == 0


def test_under_the_try_plan_a_case_whose_tensors_do_not_fit_is_skipped_once_with_its_floor(tmp_path):
    first = run_sweep(SPEC, tmp_path, device="cpu", memory_limit=1024, memory_plan="try")
    assert first.counts == {"skipped": 2}
    recs = list(RunStore.open(tmp_path).records())
    assert all("needs at least" in r["verdict"]["message"] and r["verdict"]["details"]["memory_plan"] == {"plan": "try"}
               for r in recs)
    # resumed under try with the same memory: they would not fit again
    assert run_sweep(SPEC, tmp_path, device="cpu", memory_limit=1024, resume=True, memory_plan="try").ran == 0


def test_an_unknown_memory_plan_is_refused_by_name(tmp_path):
    with pytest.raises(InvalidArgument, match="memory_plan"):
        run_sweep(SPEC, tmp_path, device="cpu", memory_plan="optimistic")
