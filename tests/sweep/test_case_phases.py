"""A case killed at its timeout (or dying) says where it was: the memory plan, its
inputs, the op or the judgement, how far the judgement got and how long the case would
take at that rate; the slow pass leaves a case it could not finish either, and the
summary counts a timed-out case's time in the phases it reached."""

from __future__ import annotations

import re

import pytest
import torch

from kernelaudit.sweep import phase
from kernelaudit.sweep.cases import GridSpec, grid
from kernelaudit.sweep.store import RunStore
from kernelaudit.verdict import Status, Verdict


def _marks(*marks):
    t = phase.Tracker()
    for m in marks:
        t.note(m)
    return t


def test_a_tracker_without_marks_says_nothing():
    assert phase.Tracker().where(5.0) == ("", {})


def test_a_tracker_names_the_phase_its_time_the_phases_before_and_the_judgements_projection():
    t = _marks({"phase": "plan", "at_s": 0.0}, {"phase": "inputs", "at_s": 1.0}, {"phase": "op", "at_s": 3.0},
               {"phase": "judge", "at_s": 4.0}, {"phase": "judge", "at_s": 5.0, "done": 100, "total": 1000})
    text, d = t.where(6.0)
    assert d == {"phase": "judge", "phase_s": 2.0, "phases_s": {"plan": 1.0, "inputs": 2.0, "op": 1.0},
                 "batches_done": 100, "batches": 1000, "projected_s": 14.0}   # 4 s + 1000 batches at 10 ms
    assert text == (" in the judgement (100 of 1,000 batches judged: about 14 s for the case at that rate), "
                    "2.0 s into it; before it plan 1.0 s, inputs 2.0 s, op 1.0 s")
    assert t.where(6.0, times=False) == (" in the judgement", d)


def test_a_tracker_in_the_op_projects_nothing_and_a_new_phase_forgets_the_last_ones_count():
    t = _marks({"phase": "judge", "at_s": 1.0}, {"phase": "judge", "at_s": 2.0, "done": 5, "total": 10},
               {"phase": "recheck", "at_s": 3.0})
    text, d = t.where(4.0)
    assert d == {"phase": "recheck", "phase_s": 1.0, "phases_s": {"judge": 2.0}}
    assert text.startswith(" in rechecking a wrong output alone, 1.0 s into it")
    assert _marks({"phase": "op", "at_s": 0.5}).where(10.0)[1] == {"phase": "op", "phase_s": 9.5, "phases_s": {}}


def test_marks_reach_the_listener_only_while_it_listens_and_counts_are_thinned():
    got = []
    phase.enter("op")                 # nobody listens: nothing told, nothing raised
    with phase.listening(got.append):
        phase.enter("judge")
        phase.advance(0, 10)          # within ADVANCE_INTERVAL_S of the start: dropped
        phase._last_advance = -phase.ADVANCE_INTERVAL_S   # as if the interval had passed
        phase.advance(3, 10)
        phase.advance(4, 10)          # straight after: dropped
    phase.enter("op")
    assert [(m["phase"], m.get("done")) for m in got] == [("judge", None), ("judge", 3)]
    assert all(m["at_s"] >= 0 for m in got) and got[1]["total"] == 10


def test_a_listener_that_fails_stops_listening_and_the_case_goes_on():
    calls = []

    def broken(mark):
        calls.append(mark)
        raise BrokenPipeError("the pool went away")

    with phase.listening(broken):
        phase.enter("inputs")
        phase.enter("op")
    assert len(calls) == 1


def test_an_unknown_phase_is_refused_with_the_names_allowed():
    with pytest.raises(ValueError, match=r"plan, inputs, op, judge, recheck; got 'compile'"):
        phase.enter("compile")


def test_a_case_killed_in_its_judgement_says_how_far_it_got_and_how_long_it_needs():
    # linalg.inv at scale 23 on the CPU: inputs about 0.6 s, the op 0.07 s, and a
    # judgement of about 10 s (27,963 batches, each a float64 inverse): a 4 s timeout
    # falls in it, past the judgement's first progress mark (0.5 s), on a machine (or under
    # a load) up to 5x slower or 2.5x faster than this one. (linalg.solve at scale 25, a
    # judgement only 5.5x its inputs, fell before that mark under three workers on 2 cores.)
    from kernelaudit.sweep.worker import WorkerConfig, WorkerPool

    (case,) = grid(GridSpec(ops=("linalg.inv",), dtypes=("float32",), layouts=("contig",), directions=("fwd",),
                            thresholds=("2^32",), positions=("above",), scale=23))
    with WorkerPool(WorkerConfig(device="cpu", ref_chunk=64), case_timeout_s=4.0) as pool:
        res = pool.run({"case": case.to_json(), "tolerances": None})
    v = res["verdict"]
    d = v["details"]
    assert v["status"] == "error" and d["timed_out"] and res["worker_replaced"]
    assert d["phase"] == "judge", v["message"]
    assert set(d["phases_s"]) == {"plan", "inputs", "op"} and d["phase_s"] > 0
    assert 0 < d["batches_done"] < d["batches"] == case.batch
    assert d["projected_s"] > 4.0    # the case needs more than it had
    assert re.match(rf"timed out after 4 s \(worker killed\) in the judgement \([\d,]+ of {case.batch:,} batches "
                    r"judged: about \d+ s for the case at that rate\), [\d.]+ s into it; before it plan", v["message"])


def _store(tmp_path) -> RunStore:
    manifest = {"device": {"type": "cpu", "name": "test cpu"}, "fault_model": "none",
                "torch": torch.__version__, "started": "2026-12-06T00:00:00+00:00"}
    return RunStore.create(tmp_path / "store", manifest, resume=False)


def test_the_slow_pass_leaves_a_case_its_judgement_projected_past_the_slow_timeout(tmp_path):
    from kernelaudit.sweep.timeouts import TimedOut, slow_cases

    spec = GridSpec(ops=("add",), dtypes=("float32",), layouts=("contig",), directions=("fwd",),
                    thresholds=("2^31", "2^32"), positions=("below", "above"), scale=16)
    add = grid(spec)                                   # 2^31-, 2^31+, 2^32-, 2^32+
    store = _store(tmp_path)
    timed = dict(timed_out=True, timeout_s=20.0, phase="judge", phase_s=19.0, batches_done=10, batches=100)
    store.append(add[3], Verdict.error("timed out after 20 s (worker killed) in the judgement", projected_s=190.0,
                                       **timed), 20.0)
    store.append(add[2], TimedOut(store).verdict(add[2]), 0.0)   # held back; the 2^31 cases ran
    for c in add[:2]:
        store.append(c, Verdict(Status.OK, "rel", 0.0, 1e-5), 0.1)
    assert slow_cases(store.latest(), add, 120.0) == add[2:3]     # 190 s projected: not in a 120 s pass
    assert slow_cases(store.latest(), add, 600.0) == add[2:]      # a pass long enough runs it
    store.append(add[3], Verdict.error("timed out after 20 s (worker killed) in the judgement", projected_s=90.0,
                                       **timed), 20.0)
    assert slow_cases(store.latest(), add, 120.0) == add[2:]


def test_the_summary_counts_a_timed_out_cases_time_in_the_phases_it_reached(tmp_path):
    from kernelaudit.sweep.report import load_run
    from kernelaudit.sweep.report.counts import time_per_op

    (case,) = grid(GridSpec(ops=("add",), dtypes=("float32",), layouts=("contig",), directions=("fwd",),
                            thresholds=("2^32",), positions=("above",), scale=16))
    store = _store(tmp_path)
    store.append(case, Verdict.error("timed out after 20 s (worker killed) in the judgement", timed_out=True,
                                     phase="judge", phase_s=15.5, phases_s={"plan": 0.5, "inputs": 1.0, "op": 3.0}),
                 20.0)
    (t,) = time_per_op(load_run(store.path))
    assert t.total_s == 20.0 and t.phases_s == {"inputs_s": 1.0, "op_s": 3.0, "judge_s": 15.5}
