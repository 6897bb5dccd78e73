"""Cases side by side (``case_workers`` / ``--workers``): the same verdicts as one
worker, each case recorded once, big or failed cases run alone afterwards."""

from __future__ import annotations

import json

import pytest

from kernelaudit import GridSpec, run_sweep
from kernelaudit.sweep import schedule as sweep_mod
from kernelaudit.sweep.cases import grid
from kernelaudit.errors import InvalidArgument
from kernelaudit.sweep.judge.reference import default_ref_chunk

#: 15 small cases (bmm in every layout and series, add), forward only.
SPEC = GridSpec(ops=("bmm", "add"), dtypes=("float32",), directions=("fwd",), thresholds=("2^32",),
                positions=("above",), scale=12)


def _statuses(res) -> dict[str, str]:
    return {k: r["verdict"]["status"] for k, r in res.store.latest().items()}


def _lines(res) -> list[str]:
    return [json.loads(line)["case"]["id"] for line in (res.store.path / "verdicts.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def one_worker_clean(tmp_path_factory):
    return run_sweep(SPEC, tmp_path_factory.mktemp("w1"), device="cpu", case_workers=1)


def test_two_workers_record_the_same_cases_and_verdicts_as_one_under_the_mps_fault_model(tmp_path):
    one = run_sweep(SPEC, tmp_path / "one", device="cpu", fault_model="mps", case_workers=1)
    two = run_sweep(SPEC, tmp_path / "two", device="cpu", fault_model="mps", case_workers=2)
    assert _statuses(two) == _statuses(one)
    assert {"ok", "wrong", "error"} <= set(_statuses(two).values())
    lines = _lines(two)
    assert len(lines) == len(set(lines)) == two.store.manifest()["plan"]["cases"]  # each case recorded once
    seg = two.store.manifest()["segments"][-1]
    assert seg["case_workers"] == 2 and seg["cases_run"] == len(lines) and seg["completed"]
    # every case fits a share here: the ok and wrong ones were recorded side by side; the
    # errors (rule B raises) were run again alone, and only those verdicts recorded
    assert seg["side_by_side"] == sum(s != "error" for s in _statuses(two).values())
    assert seg["retried_alone"] == sum(s == "error" for s in _statuses(two).values())


@pytest.fixture(scope="module")
def forced_phases(tmp_path_factory):
    """A two-worker run where each worker's share is made too small for the add cases:
    add/slice is planned too big for a share (runs alone straight away); add/contig is
    planned as free by the parent (estimate patched) so it goes side by side, where the
    worker's own plan skips it; it must then run again alone."""
    from kernelaudit.sweep import memory as plan

    real = plan.estimate_bytes
    big = ("add/float32/contig/out/2^32+/fwd", "add/float32/slice/out/2^32+/fwd")
    ref_chunk = default_ref_chunk("cpu")
    small = max(real(c, "none", ref_chunk) for c in grid(SPEC) if c.id not in big)
    capacity = int(2 * small / plan.MEMORY_HEADROOM) + 4
    share_limit = int(capacity // 2 * plan.MEMORY_HEADROOM)  # what each side-by-side worker may plan
    assert small <= share_limit < min(real(c, "none", ref_chunk) for c in grid(SPEC) if c.id in big)
    phase1: list[str] = []
    real_side_by_side = sweep_mod._side_by_side

    def spy(pool_args, jobs, workers):
        phase1.extend(job["case"]["op"] + "/" + job["case"]["layout"] for job in jobs.values()
                      if job["tolerances"] is not None)  # cases, not calibration
        return real_side_by_side(pool_args, jobs, workers)

    def estimate(case, fault_model="none", ref_chunk=2**24):
        return 0 if case.id == "add/float32/contig/out/2^32+/fwd" else real(case, fault_model, ref_chunk)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sweep_mod, "_measure_capacity", lambda pool: (capacity, 4 * capacity))
        mp.setattr(sweep_mod, "_side_by_side", spy)
        mp.setattr(plan, "estimate_bytes", estimate)
        res = run_sweep(SPEC, tmp_path_factory.mktemp("forced"), device="cpu", case_workers=2)
    return res, phase1


def test_a_clean_two_worker_run_records_the_same_cases_and_verdicts_as_one(forced_phases, one_worker_clean):
    res, _ = forced_phases
    assert _statuses(res) == _statuses(one_worker_clean) and set(_statuses(res).values()) == {"ok"}
    lines = _lines(res)
    assert len(lines) == len(set(lines)) == res.store.manifest()["plan"]["cases"]
    seg = res.store.manifest()["segments"][-1]
    assert seg["case_workers"] == 2 and seg["side_by_side"] == len(lines) - 2 and seg["cases_run"] == len(lines)


def test_a_case_too_big_for_a_share_runs_alone_afterwards_and_is_recorded_once(forced_phases):
    res, phase1 = forced_phases
    assert "add/slice" not in phase1 and "bmm/contig" in phase1 and "add/expand" in phase1
    lines = _lines(res)
    assert lines.count("add/float32/slice/out/2^32+/fwd") == 1
    assert lines.index("add/float32/slice/out/2^32+/fwd") >= len(lines) - 2  # after phase 1
    rec = next(r for r in res.store.latest().values() if r["case"]["id"] == "add/float32/slice/out/2^32+/fwd")
    assert rec["verdict"]["status"] == "ok"  # alone, with no share limit


def test_a_case_skipped_side_by_side_runs_again_alone_and_only_that_verdict_is_kept(forced_phases):
    res, phase1 = forced_phases
    assert "add/contig" in phase1
    lines = _lines(res)
    assert lines.count("add/float32/contig/out/2^32+/fwd") == 1
    rec = next(r for r in res.store.latest().values() if r["case"]["id"] == "add/float32/contig/out/2^32+/fwd")
    assert rec["verdict"]["status"] == "ok"  # not the side-by-side skip
    seg = res.store.manifest()["segments"][-1]
    assert seg["retried_alone"] == 1 and seg["cases_run"] == len(lines)


def test_case_workers_must_be_positive(tmp_path):
    with pytest.raises(InvalidArgument, match="case_workers=0"):
        run_sweep(SPEC, tmp_path, device="cpu", case_workers=0)
    assert not (tmp_path / "verdicts.jsonl").exists()  # refused before anything ran


def test_a_segment_says_where_its_cases_wall_time_went_besides_the_cases(one_worker_clean):
    seg = one_worker_clean.store.manifest()["segments"][-1]
    over = seg["case_overhead_s"]
    assert set(over) == {"round_trip", "worker_start", "worker_kill", "in_worker", "transport", "recording"}
    assert all(v >= 0 for k, v in over.items() if k != "transport")
    # the parts add up to the round trip (each rounded to the microsecond per case)
    parts = over["worker_start"] + over["worker_kill"] + over["in_worker"] + over["transport"]
    assert abs(parts - over["round_trip"]) <= 1e-6 * 5 * seg["cases_run"] + 1e-9
    assert over["in_worker"] > 0  # the memory plan, at least, runs outside the judged case


def test_each_record_says_its_wall_time_through_the_pool_and_its_workers_time(one_worker_clean):
    recs = [r for r in one_worker_clean.store.records() if "wall_s" in r]
    assert recs, "no record of a case run by the pool carries its wall time"
    for r in recs:
        # the pool's wall time holds the worker's, which holds the judged case's
        assert r["wall_s"] >= r["worker_s"] - 1e-3 >= r["elapsed_s"] - 2e-3, r["case"]["id"]
