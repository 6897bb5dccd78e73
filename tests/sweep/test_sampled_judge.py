"""``--mode sampled``: auto's judges on the chunks at the limits, the ends and a few drawn
at random. It must see every planted size fault auto sees, flag nothing on a clean run,
and judge fewer chunks."""

from __future__ import annotations

import pytest

from kernelaudit import GridSpec, run_sweep
from kernelaudit.sweep.cases import Case, grid
from kernelaudit.sweep.judge.execution import execute
from kernelaudit.sweep.judge.operands import placed_operands
from kernelaudit.sweep.judge.reference import forward_outputs
from kernelaudit.sweep.judge.sampling import SAMPLED_RANDOM_CHUNKS, sampled_chunks
from kernelaudit.sweep.schedule import check_against_rules
from kernelaudit.sweep.tolerance import calibrated
from kernelaudit.verdict import Verdict

#: Small chunks, so a case at scale 12 has many and sampling leaves some out.
CHUNK = 256


def _sampled(v: Verdict) -> str | None:
    return next((o["details"]["sampled_chunks"] for o in v.details.get("outputs", ())
                 if o.get("details", {}).get("sampled_chunks")), None)


@pytest.mark.parametrize("fault", ["none", "wrap32", "unwritten-tail", "unwritten-head", "grid16", "bytes32"])
def test_sampled_judge_gives_autos_verdict_for_every_planted_fault_on_fewer_chunks(fault):
    cases = grid(GridSpec(ops=("add", "softmax", "cat", "sort"), dtypes=("float32",), thresholds=("2^31", "2^32"),
                          positions=("above",), axes=("elements", "bytes", "dim"), scale=12))
    tolerances, statuses, kept_all, total_all = {}, [], 0, 0
    for case in cases:
        if case.tolerance_key not in tolerances:
            tolerances[case.tolerance_key] = calibrated(execute(case.with_batch(4), tolerances=None).worst,
                                                        case.dtype)
        tol = tolerances[case.tolerance_key]
        auto = execute(case, fault_model=fault, tolerances=tol, ref_chunk=CHUNK).verdict
        sampled = execute(case, fault_model=fault, tolerances=tol, ref_chunk=CHUNK, mode="sampled").verdict
        assert sampled.status == auto.status, f"{case.id}: auto {auto.explain()}, sampled {sampled.explain()}"
        assert sampled.first_bad_index == auto.first_bad_index, case.id
        statuses.append(auto.status.value)
        n = _sampled(sampled)
        if n:
            kept, total = map(int, n.split(" of "))
            kept_all, total_all = kept_all + kept, total_all + total
    assert kept_all < 0.8 * total_all, (kept_all, total_all)   # the saving is real
    if fault == "none":
        assert set(statuses) == {"ok"}   # no false rejection
    else:
        assert statuses.count("wrong") >= 4, statuses   # and the faults are planted


def _case():
    """softmax of 257 rows of 16 float32 elements: past 2^12 elements at scale 12."""
    return grid(GridSpec(ops=("softmax",), dtypes=("float32",), layouts=("contig",), thresholds=("2^32",),
                         positions=("above",), axes=("elements",), scale=12, directions=("fwd",)))[0]


def test_sampled_chunks_hold_the_ends_every_limit_and_a_draw_fixed_by_the_case():
    case = _case()
    placed = placed_operands(case)
    outs = forward_outputs(case, placed)
    rows = case.spec.out_rows(case.series, case.thresholds)
    step = 2
    starts = sampled_chunks(case, placed, outs, rows, step)
    assert starts == sampled_chunks(case, placed, outs, rows, step)       # resumable: the same draw
    assert starts == sorted(set(starts)) and all(s % step == 0 for s in starts)
    assert starts[0] == 0 and starts[-1] == (case.batch - 1) // step * step
    per = placed[0].numel // case.batch                                    # elements of one batch
    th = case.thresholds
    for lim in (th.t31, th.t32, th.t31 // 4, th.t32 // 4):                # elements, and float32 bytes
        if lim < placed[0].numel:
            assert (lim // per) // step * step in starts, lim            # the batch holding index lim
            assert ((lim - 1) // per) // step * step in starts, lim      # and the one before it
    total = -(-case.batch // step)
    assert len(starts) < total
    other = sampled_chunks(Case.from_json({**case.to_json(), "seed": case.seed + 1}), placed, outs, rows, step)
    assert len(other) == len(starts) and set(other) - set(starts)         # another seed draws others
    limits_only = len(starts) - SAMPLED_RANDOM_CHUNKS
    assert limits_only >= 2 + 4


def test_a_sampled_sweep_records_its_mode_and_classifies_the_wrap32_grid_as_the_rules_say(tmp_path):
    spec = GridSpec(ops=("add", "cumsum", "softmax"), dtypes=("float32",), thresholds=("2^32",),
                    positions=("below", "above"), scale=12)
    res = run_sweep(spec, tmp_path, device="cpu", fault_model="wrap32", mode="sampled")
    assert res.store.manifest()["mode"] == "sampled"
    checked, bad = check_against_rules(res.store, "wrap32")
    assert checked == res.store.manifest()["plan"]["cases"] and not bad, bad
    assert res.counts["wrong"] >= 4


def test_an_unknown_mode_is_refused_naming_the_allowed_ones(tmp_path):
    with pytest.raises(Exception, match="Cannot have mode='fast'.*auto, full, sampled"):
        run_sweep(GridSpec(ops=("add",), scale=12), tmp_path, device="cpu", mode="fast")


def test_a_corruption_confined_between_the_limits_is_caught_by_auto_and_missed_by_sampled(monkeypatch):
    # the trade sampled makes, as its docs say: a fault that spares every kept chunk
    from kernelaudit.sweep.judge import execution

    case = _case()
    tol = calibrated(execute(case.with_batch(4), tolerances=None).worst, case.dtype)
    placed = placed_operands(case)
    outs = forward_outputs(case, placed)
    step = 2                                             # 32-element chunks of 16-element batches
    kept = set(sampled_chunks(case, placed, outs, case.spec.out_rows(case.series, case.thresholds), step))
    bad = next(b for b in range(case.batch) if b // step * step not in kept)
    run_op = execution.run_op

    def corrupting(*args, **kwargs):
        placed_, outs_, rows, fm = run_op(*args, **kwargs)
        outs_[0][bad] += 1.0
        return placed_, outs_, rows, fm

    monkeypatch.setattr(execution, "run_op", corrupting)
    auto = execute(case, tolerances=tol, ref_chunk=32).verdict
    sampled = execute(case, tolerances=tol, ref_chunk=32, mode="sampled").verdict
    assert auto.status.value == "wrong" and auto.bad_batches.first == bad
    assert sampled.status.value == "ok" and _sampled(sampled).endswith(f"of {-(-case.batch // step)}")
