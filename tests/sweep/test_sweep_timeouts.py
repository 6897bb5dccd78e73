"""A case that times out costs its timeout once: larger cases of its op are not run, and
a bracketed sweep runs no control below it."""

from __future__ import annotations

import pytest
import torch

from kernelaudit.sweep.cases import GridSpec, grid
from kernelaudit.sweep.schedule import _controls_needed
from kernelaudit.sweep.timeouts import TimedOut, slow_cases
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


def test_after_a_timeout_the_ops_cases_from_half_its_size_wait_and_smaller_ones_and_other_ops_run(tmp_path):
    store = _store(tmp_path)
    cases = _cases("add") + _cases("add", "bwd")
    slow = next(c for c in cases if c.threshold == "2^31" and c.position == "above" and c.dtype == "float32")
    store.append(slow, Verdict.error("timed out after 20 s (worker killed)", timed_out=True), 20.0)
    timed_out = TimedOut(store)  # seeded from the store: a resumed sweep remembers it
    others = [c for c in cases if c is not slow]
    for c in others:  # just below, larger, the backward, float16: each at least half its size
        v = timed_out.verdict(c)
        assert v.status is Status.SKIPPED and slow.id in v.message and v.details["after_timeout"] == slow.id
        assert "--ops add --case-timeout" in v.message
    axes = grid(GridSpec(ops=("add",), dtypes=("float32",), layouts=("contig",), directions=("fwd",),
                         thresholds=("2^31",), positions=("below",), axes=("bytes", "dim"), scale=SCALE))
    assert axes and all(2 * c.crossing_numel < slow.crossing_numel for c in axes)
    assert all(timed_out.verdict(c) is None for c in axes)   # a quarter of its elements or fewer: run
    assert all(timed_out.verdict(c) is None for c in _cases("gelu"))
    # a smaller case of the op timing out too lowers the bar to half its own size
    small = axes[0]
    timed_out.note(small)
    v = timed_out.verdict(next(c for c in axes if c.crossing_numel * 2 >= small.crossing_numel))
    assert v is not None and v.details["after_timeout"] == small.id


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
    return seen["case_timeout_s"], seen["slow_timeout_s"]


def test_presets_bound_a_case_on_cuda_and_an_explicit_timeout_wins(monkeypatch):
    assert _timeout_of(monkeypatch, ["--quick"], "cuda") == (10.0, 0.0)
    assert _timeout_of(monkeypatch, ["--full", "--ops", "add"], "cuda") == (20.0, 120.0)   # a slow pass
    assert _timeout_of(monkeypatch, ["--full", "--ops", "add"], "cpu") == (600.0, 0.0)
    assert _timeout_of(monkeypatch, ["--quick"], "cpu") == (600.0, 0.0)
    assert _timeout_of(monkeypatch, ["--quick", "--case-timeout", "33", "--slow-timeout", "99"], "cuda") == (33.0, 99.0)


def test_a_slow_pass_no_longer_than_a_case_or_negative_is_refused_naming_the_option(tmp_path):
    from click.testing import CliRunner

    from kernelaudit.errors import InvalidArgument
    from kernelaudit.sweep import cli
    from kernelaudit.sweep.schedule import run_sweep

    with pytest.raises(InvalidArgument, match="slow_timeout_s=20 .*--slow-timeout.*case_timeout_s=20"):
        run_sweep(GridSpec(ops=("add",), scale=SCALE), tmp_path / "x", device="cpu", case_timeout_s=20,
                  slow_timeout_s=20)
    out = CliRunner().invoke(cli.sweep, ["--device", "cpu", "--ops", "add", "--slow-timeout", "-1",
                                         "--out", str(tmp_path / "y")])
    assert out.exit_code == 2 and "--slow-timeout=-1" in out.output


def test_the_slow_pass_takes_timed_out_and_held_back_cases_smallest_first_ops_in_turns(tmp_path):
    
    store = _store(tmp_path)
    add = [c for c in _cases("add") if c.dtype == "float32"]        # 2^31-, 2^31+, 2^32-, 2^32+
    gelu = [c for c in _cases("gelu") if c.dtype == "float32"]
    big, small = add[3], add[2]
    store.append(big, Verdict.error("timed out after 20 s (worker killed)", timed_out=True, timeout_s=20.0), 20.0)
    store.append(small, TimedOut(store).verdict(small), 0.0)
    store.append(add[1], Verdict(Status.OK, "rel", 0.0, 1e-5), 0.1)   # judged before the timeout: stays
    store.append(gelu[2], Verdict.error("timed out after 120 s (worker killed)", timed_out=True,
                                        timeout_s=120.0), 120.0)
    store.append(gelu[3], TimedOut(store).verdict(gelu[3]), 0.0)
    planned = gelu + add
    got = slow_cases(store.latest(), planned, 120.0)
    assert got == [small, big]          # gelu timed out at 120 s already: a cliff, not run again
    assert slow_cases(store.latest(), planned, 600.0) == [gelu[2], small, gelu[3], big]   # ops in turns
    assert got[0].crossing_numel < got[1].crossing_numel
    assert slow_cases(store.latest(), planned, 20.0) == []


def test_a_slow_pass_judges_the_cases_a_short_timeout_lost_in_the_same_run(tmp_path):
    # the hang fault model: each case sleeps 2.5 s, past a 2 s timeout, its calibration not
    from kernelaudit.sweep.schedule import run_sweep

    spec = GridSpec(ops=("add",), dtypes=("float32",), thresholds=("2^32",), positions=("below", "above"),
                    layouts=("contig",), directions=("fwd",), scale=12)
    res = run_sweep(spec, tmp_path, device="cpu", case_timeout_s=2.0, slow_timeout_s=600.0, fault_model="hang")
    assert res.counts == {"ok": 2}
    records = list(res.store.records())
    assert [r["verdict"]["status"] for r in records] == ["error", "skipped", "ok", "ok"]
    assert records[0]["verdict"]["details"]["timeout_s"] == 2.0
    (segment,) = res.store.manifest()["segments"]
    assert segment["slow_pass"] | {"wall_s": 0} == {"timeout_s": 600.0, "cases": 2, "recorded": 2, "timed_out": 0,
                                                  "held_back": 0, "judged": 2, "wall_s": 0}
    again = run_sweep(spec, tmp_path, device="cpu", case_timeout_s=2.0, slow_timeout_s=600.0, resume=True,
                      fault_model="hang")
    assert again.ran == 0 and again.counts == {"ok": 2}


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


def test_the_slow_pass_hands_its_timeout_to_each_job_on_an_executor():
    from kernelaudit.executors import Done
    from kernelaudit.sweep.schedule import _cases_on

    class Recorder:   # an executor's map: each job run on "cpu:0", an ok verdict back
        jobs: dict = {}

        def map(self, jobs, group=None):
            self.jobs.update(jobs)
            for key in jobs:
                yield Done(key, "cpu:0", value={"verdict": Verdict(Status.OK, "rel", 0.0, 1.0).to_json(),
                                                "elapsed_s": 0.1})

    cases = [c for c in _cases("add") if c.dtype == "float32"]
    got = []
    ex = Recorder()
    left = _cases_on(ex, cases, tolerance=lambda c: {"out0:rel": 1.0}, segment={"workers_replaced": 0},
                     record=lambda c, v, s, **kw: got.append((c.key, kw["device"])), timeout_s=120.0)
    assert left == [] and len(got) == len(cases)
    assert {j["timeout_s"] for j in ex.jobs.values()} == {120.0}
    ex.jobs.clear()
    _cases_on(ex, cases, tolerance=lambda c: {"out0:rel": 1.0}, segment={"workers_replaced": 0},
              record=lambda *a, **k: None)
    assert all("timeout_s" not in j for j in ex.jobs.values())   # the main pass: the pool's own


def test_an_op_timed_out_under_two_timeouts_is_held_back_by_the_longer(tmp_path):
    """A resumed sweep judges an op's timed-out cases again only under a timeout longer
    than the longest its cases ran out of, whichever was recorded last: add's large case
    ran out of 120 s, a smaller one of 20 s after it, and 60 s outlasts only the 20."""
    from kernelaudit.sweep.schedule import _done_on

    store = _store(tmp_path)
    add = [c for c in _cases("add") if c.dtype == "float32"]        # 2^31-, 2^31+, 2^32-, 2^32+
    big, small, held = add[3], add[1], add[2]
    store.append(big, Verdict.error("timed out after 120 s (worker killed)", timed_out=True, timeout_s=120.0), 120.0)
    store.append(small, Verdict.error("timed out after 20 s (worker killed)", timed_out=True, timeout_s=20.0), 20.0)
    store.append(held, TimedOut(store).verdict(held), 0.0)
    keys = {big.key, small.key, held.key}
    assert _done_on(store, capacity=0, case_timeout_s=60.0) == keys
    assert _done_on(store, capacity=0, case_timeout_s=600.0) == set()
    # the other two readers of a timed-out op agree: held back at 60 s, in the name of the 120 s case
    v = TimedOut(store, 60.0).verdict(add[2])
    assert v.status is Status.SKIPPED and v.details["after_timeout"] == big.id
    assert TimedOut(store, 600.0).verdict(add[2]) is None
    assert slow_cases(store.latest(), add, 60.0) == []
    assert slow_cases(store.latest(), add, 600.0) == [small, held, big]


def test_cases_held_back_by_a_timeout_run_once_the_case_that_timed_out_is_judged(tmp_path):
    """The full grid's ``linalg.lstsq`` case that timed out at 20 s was judged ok by a slow
    pass at 120 s; the nine cases it had held back must then run (in the main pass and the
    slow pass alike), not stay "not run" for want of a timeout to outlast."""
    from kernelaudit.sweep.schedule import _done_on

    store = _store(tmp_path)
    add = [c for c in _cases("add") if c.dtype == "float32"]
    slow, held, other = add[1], add[3], add[2]
    store.append(slow, Verdict.error("timed out after 20 s (worker killed)", timed_out=True, timeout_s=20.0), 20.0)
    store.append(held, TimedOut(store).verdict(held), 0.0)
    store.append(other, TimedOut(store).verdict(other), 0.0)
    assert _done_on(store, capacity=0, case_timeout_s=20.0) == {slow.key, held.key, other.key}
    assert slow_cases(store.latest(), add, 120.0) == [slow, other, held]
    store.append(slow, Verdict(Status.OK, "rel", 0.0, 1e-5), 30.5)     # the slow pass judged it
    assert _done_on(store, capacity=0, case_timeout_s=20.0) == {slow.key}
    assert slow_cases(store.latest(), add, 120.0) == [other, held]
    assert TimedOut(store, 20.0).verdict(held) is None                 # nothing holds the op back now


def test_an_allocation_that_failed_under_other_allocator_settings_is_tried_again(tmp_path):
    """A CUDA allocation that failed despite the plan (fragmented cache) is tried again by a
    run whose workers' allocator runs with other settings (expandable segments), once: the
    segment that tries it records those settings. A skip by the estimate, and anything on a
    run that records no allocator (CPU), stay done."""
    import json

    from kernelaudit.sweep.schedule import _done_on

    store = _store(tmp_path)
    add = [c for c in _cases("add") if c.dtype == "float32"]
    oom, estimated = add[3], add[2]
    store.append(oom, Verdict.skipped("out of memory despite the memory plan: CUDA out of memory",
                                      out_of_memory=True), 1.0)
    store.append(estimated, Verdict.skipped("needs at least 96.0 GiB", needed_bytes=96 << 30), 0.0)
    m = json.loads((store.path / "manifest.json").read_text())
    m["segments"] = [{"started": "2000-01-01T00:00:00+00:00", "ended": "2100-01-01T00:00:00+00:00",
                      "memory_bytes": 80 << 30}]                   # an older segment: no settings recorded
    (store.path / "manifest.json").write_text(json.dumps(m))
    both = {oom.key, estimated.key}
    assert _done_on(store, capacity=80 << 30) == both
    assert _done_on(store, capacity=80 << 30, allocator="expandable_segments:True") == {estimated.key}
    m["segments"][0]["cuda_alloc"] = "expandable_segments:True"     # tried under these already
    (store.path / "manifest.json").write_text(json.dumps(m))
    assert _done_on(store, capacity=80 << 30, allocator="expandable_segments:True") == both
    assert _done_on(store, capacity=80 << 30, allocator="") == {estimated.key}   # torch's defaults now


def test_an_allocation_that_asked_for_more_than_a_device_holds_is_not_tried_there_again(tmp_path):
    """``linalg.eigvalsh`` of 21,474,804 5 x 5 matrices asked for 5,556 GiB on an H100: a
    larger GPU, or other allocator settings, would fail it again; a case that asked for
    less than the larger device holds is tried there. A message without the sizes keeps
    the rules as they were."""
    import json

    from kernelaudit.sweep.memory import asked_bytes
    from kernelaudit.sweep.schedule import _done_on

    def oom(asked: str, in_use: str) -> Verdict:
        return Verdict.skipped(f"out of memory despite the memory plan: CUDA out of memory. Tried to allocate "
                               f"{asked}. GPU 0 has a total capacity of 79.18 GiB of which 6.36 GiB is free. "
                               f"Including non-PyTorch memory, this process has {in_use} memory in use.",
                               out_of_memory=True)

    store = _store(tmp_path)
    add = [c for c in _cases("add") if c.dtype == "float32"]
    huge, large, bare = add[3], add[2], add[1]
    store.append(huge, oom("5555.99 GiB", "5.29 GiB"), 1.0)
    store.append(large, oom("16.00 GiB", "72.81 GiB"), 1.0)
    store.append(bare, Verdict.skipped("out of memory despite the memory plan: CUDA out of memory",
                                       out_of_memory=True), 1.0)
    assert asked_bytes(store.latest()[huge.key]["verdict"]["message"]) == int(5555.99 * 2**30) + int(5.29 * 2**30)
    m = json.loads((store.path / "manifest.json").read_text())
    m["segments"] = [{"started": "2000-01-01T00:00:00+00:00", "ended": "2100-01-01T00:00:00+00:00",
                      "memory_bytes": 80 << 30}]
    (store.path / "manifest.json").write_text(json.dumps(m))
    h200 = 141 << 30
    assert _done_on(store, capacity=h200) == {huge.key}                  # 88.8 GiB fits 141, 5.4 TiB none
    assert _done_on(store, capacity=80 << 30, allocator="expandable_segments:True") == {huge.key, large.key}


def test_the_hang_fault_model_is_late_past_2p31_elements_and_never_wrong(monkeypatch):
    from kernelaudit import Thresholds
    from kernelaudit.faults import hang, make_fault_model

    slept = []
    monkeypatch.setattr(hang.time, "sleep", slept.append)
    th = Thresholds(12)
    x = torch.arange(th.t31, dtype=torch.float32)
    with make_fault_model("hang", th) as model:
        small = x[: th.t31 - 1] * 2          # below 2^31: on time
        assert slept == []
        big = x * 2                          # 2^31 elements: late, and right
    assert slept == [hang.HANG_S] and model.stats.changed == {"late": 1} and model.stats.calls == 2
    assert torch.equal(big, torch.arange(th.t31, dtype=torch.float32) * 2) and torch.equal(small, big[:-1])


def test_a_timeout_leaves_its_ops_far_smaller_cases_to_run_in_the_same_pass(tmp_path):
    # the hang fault model: add's 2^32+ elements case sleeps past 2 s; the dim and bytes
    # axes' cases (a quarter of its elements or fewer, below 2^31: on time) run after it
    from kernelaudit.sweep.schedule import run_sweep

    spec = GridSpec(ops=("add",), dtypes=("float32",), thresholds=("2^32",), positions=("above",),
                    layouts=("contig",), directions=("fwd",), axes=("elements", "dim", "bytes"), scale=12)
    res = run_sweep(spec, tmp_path, device="cpu", case_timeout_s=2.0, fault_model="hang")
    statuses = {r["case"]["axis"]: r["verdict"]["status"] for r in res.store.records()}
    assert res.counts == {"error": 1, "ok": 4} and statuses == {"elements": "error", "dim": "ok", "bytes": "ok"}


def test_a_resume_runs_the_cases_an_older_rule_held_back_behind_a_case_over_twice_their_size(tmp_path):
    """Stores written when one timeout held back every case of its op (the full grid's
    of 2026-12-06: 177 of its 348 held cases are under half the size of what held them)."""
    from kernelaudit.sweep.schedule import _done_on

    store = _store(tmp_path)
    spec = GridSpec(ops=("add",), dtypes=("float32",), thresholds=("2^32",), positions=("below", "above"),
                    layouts=("contig",), directions=("fwd",), axes=("elements", "dim"), scale=SCALE)
    cases = list(grid(spec))
    slow = next(c for c in cases if c.axis == "elements" and c.position == "below")
    store.append(slow, Verdict.error("timed out after 20 s (worker killed)", timed_out=True, timeout_s=20.0), 20.0)
    for c in cases:
        if c is not slow:
            store.append(c, Verdict.skipped(f"not run: {slow.id} timed out", after_timeout=slow.id), 0.0)
    big = next(c for c in cases if c.axis == "elements" and c.position == "above")
    small = {c.key for c in cases if c.axis == "dim"}
    assert small and all(2 * c.crossing_numel < slow.crossing_numel for c in cases if c.key in small)
    assert _done_on(store, capacity=0, case_timeout_s=20.0) == {slow.key, big.key}


def test_a_case_its_ops_judged_case_projects_past_the_slow_timeout_is_left_out_and_listed(tmp_path):
    """The full grid's batched ``qr`` took 3.3 s in its op for 65,532 matrices: its cases
    from 2^31 bytes, held back after a timeout, need 1,500 s and more each; a slow pass
    at 600 s would see each time out again. The op's largest judged case projects it
    (its whole time per crossing element), and smaller waiting cases still run."""
    from kernelaudit.sweep.timeouts import case_rates, projected_beyond, projection, rate_key

    store = _store(tmp_path)
    add = [c for c in _cases("add") if c.dtype == "float32"]        # 2^31-, 2^31+, 2^32-, 2^32+
    judged, slow, held = add[0], add[1], add[3]
    timing = {"inputs_s": 4.0, "op_s": 24.0, "judge_s": 12.0}        # 40 s for judged's elements
    store.append(judged, Verdict(Status.OK, "rel", 0.0, 1e-5, details={"timing": timing}), 40.0)
    store.append(slow, Verdict.error("timed out after 20 s (worker killed)", timed_out=True, timeout_s=20.0), 20.0)
    store.append(held, TimedOut(store).verdict(held), 0.0)
    latest = store.latest()
    rate, source = case_rates(latest)[rate_key(judged.to_json())]
    assert source == judged.id and rate == pytest.approx(40.0 / judged.crossing_numel)
    seconds, _ = projection(held.to_json(), case_rates(latest))
    assert seconds == pytest.approx(40.0 * held.crossing_numel / judged.crossing_numel)   # about 80 s
    between = (40.0 * slow.crossing_numel / judged.crossing_numel + seconds) / 2          # slow fits, held not
    assert [c for c, _, _ in projected_beyond(latest, add, between)] == [held]
    assert slow_cases(latest, add, between) == [slow]
    assert slow_cases(latest, add, 2 * seconds) == [slow, held]
    assert projected_beyond(latest, add, 2 * seconds) == []
    # no judged case of the direction: no projection, nothing left out for it
    assert projection(next(c for c in _cases("add", "bwd")).to_json(), case_rates(latest)) is None
