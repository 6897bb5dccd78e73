"""The sweep finds exactly what the fault models plant, and nothing on a clean run."""

from __future__ import annotations

import json

import pytest
import torch

from kernelaudit import GridSpec, Thresholds, run_sweep
from kernelaudit.sweep.cases import Case, batch_for
from kernelaudit.sweep.predict import EITHER, predict
from kernelaudit.sweep.judge.execution import execute
from kernelaudit.sweep.store import RunStore
from kernelaudit.verdict import Verdict


def _records(store):
    return [(Case.from_json(r["case"]), Verdict.from_json(r["verdict"])) for r in store.latest().values()]


def test_mps_fault_model_run_is_classified_exactly_as_the_rules_predict(mps_run):
    recs = _records(mps_run.store)
    assert len(recs) == mps_run.store.manifest()["plan"]["cases"]
    mismatches = []
    either = 0
    for case, v in recs:
        expected, why = predict(case, "mps")
        assert expected != "unknown", case.id
        if expected == EITHER:  # only a 16-bit weight gradient is touched (see predict)
            either += 1
            assert case.direction == "bwd" and case.dtype in ("float16", "bfloat16"), case.id
            assert v.status.value in ("ok", "wrong"), case.id
            continue
        if v.status.value != expected:
            mismatches.append(f"{case.id} B={case.batch}: got {v.explain()} but rules say {expected} ({why})")
    assert either < len(recs) // 50
    assert not mismatches, "\n".join(mismatches[:20])
    statuses = {v.status.value for _, v in recs}
    assert {"ok", "wrong", "error"} <= statuses  # the grid exercises every rule


def test_mps_rule_a_transposed_operand_over_2p32_output_is_wrong_in_every_batch(mps_run):
    th = Thresholds(14)
    by_id = {c.id: (c, v) for c, v in _records(mps_run.store)}
    for layout in ("aT", "bT", "abT"):
        case, v = by_id[f"bmm/float32/{layout}/out/2^32+/fwd"]
        assert v.status.value == "wrong"
        assert (v.bad_batches.first, v.bad_batches.last, v.bad_batches.count) == (0, case.batch - 1, case.batch)
    for layout in ("contig", "slice"):  # the tiled path is right without a transposed view
        assert by_id[f"bmm/float32/{layout}/out/2^32+/fwd"][1].status.value == "ok"
    assert th.t32 == 2**14


def test_mps_rule_b_big_view_with_small_output_raises_int_max(mps_run):
    by_id = {c.id: v for c, v in _records(mps_run.store)}
    for size in ("2^31", "2^31+", "2^32", "2^32+"):
        for layout in ("aT", "slice"):
            v = by_id[f"bmm/float32/{layout}/in/{size}/fwd"]
            assert v.status.value == "error" and "INT_MAX" in v.message
    assert by_id["bmm/float32/aT/in/2^31-/fwd"].status.value == "ok"


def test_mps_rule_c_wraps_exactly_the_batches_past_2p32(mps_run):
    th = Thresholds(14)
    by_id = {c.id: (c, v) for c, v in _records(mps_run.store)}
    case, v = by_id["bmm/float32/contig/in/2^32+/fwd"]
    per = case.spec.series["in"].per_batch(th)
    first = -(-th.t32 // per)
    assert v.status.value == "wrong"
    assert v.bad_batches.first == first and v.bad_batches.last == case.batch - 1
    out_per_batch = case.spec.operands("in", case.batch, th)[0].shape[1] * case.spec.operands("in", case.batch, th)[1].shape[2]
    assert v.first_bad_index == first * out_per_batch
    assert by_id["bmm/float32/contig/in/2^32/fwd"][1].status.value == "ok"  # exactly 2^32 is fine


def test_mps_backward_of_contiguous_bmm_is_wrong_in_exactly_the_wrapped_batch(mps_run):
    """BACKGROUND: (256x64)@(64x256), B = 65537: forward right, grads wrong in batch 65536."""
    th = Thresholds(14)
    by_id = {c.id: (c, v) for c, v in _records(mps_run.store)}
    case, fwd = by_id["bmm/float32/contig/out/2^32+/fwd"]
    _, bwd = by_id["bmm/float32/contig/out/2^32+/bwd"]
    assert fwd.status.value == "ok"
    assert bwd.status.value == "wrong"
    assert case.batch == th.t32 // case.spec.series["out"].per_batch(th) + 1
    assert (bwd.bad_batches.first, bwd.bad_batches.count) == (case.batch - 1, 1)


def test_wrap32_fault_model_run_is_classified_as_predicted(tmp_path):
    spec = GridSpec(ops=("bmm", "add", "cat", "cumsum", "softmax", "sort", "gather", "arange", "argmax_all",
                         "sum_all", "embedding", "attention"),
                    dtypes=("float32",), thresholds=("2^32",), positions=("below", "above"), scale=12)
    res = run_sweep(spec, tmp_path, device="cpu", fault_model="wrap32")
    recs = _records(res.store)
    wrong = 0
    for case, v in recs:
        expected, why = predict(case, "wrap32")
        if expected == EITHER:
            assert v.status.value in ("ok", "wrong"), case.id
        else:
            assert v.status.value == expected, f"{case.id}: {v.explain()} vs rules {expected} ({why})"
        wrong += v.status.value == "wrong"
        if case.position == "below" and case.series == "out":  # nothing crosses 2^32 yet
            assert v.status.value == "ok", case.id
    assert wrong >= 10


def test_clean_run_has_no_wrong_or_error_case(tmp_path):
    spec = GridSpec(dtypes=("float32", "float16", "bfloat16"), thresholds=("2^32",), positions=("above",),
                    scale=14)
    res = run_sweep(spec, tmp_path, device="cpu", fault_model="none")
    bad = [(c.id, v.explain()) for c, v in _records(res.store) if v.status.value != "ok"]
    assert not bad, bad
    assert res.counts["ok"] == res.store.manifest()["plan"]["cases"] > 300


def test_process_abort_becomes_error_verdict_and_the_sweep_goes_on(tmp_path):
    spec = GridSpec(ops=("bmm",), dtypes=("float32",), layouts=("aT", "contig"), directions=("fwd",),
                    thresholds=("2^32",), positions=("below", "above"), scale=12)
    res = run_sweep(spec, tmp_path, device="cpu", fault_model="mps-abort")
    recs = {c.id: v for c, v in _records(res.store)}
    assert len(recs) == res.store.manifest()["plan"]["cases"] == 8
    died = recs["bmm/float32/aT/in/2^32+/fwd"]
    assert died.status.value == "error" and "SIGABRT" in died.message
    assert recs["bmm/float32/contig/in/2^32-/fwd"].status.value == "ok"
    assert recs["bmm/float32/aT/out/2^32+/fwd"].status.value == "wrong"


def test_interrupted_sweep_resumes_without_recomputing_or_losing_cases(tmp_path):
    spec = GridSpec(ops=("bmm", "add"), dtypes=("float32",), thresholds=("2^32",), positions=("above",), scale=12)
    seen = []

    def stop_after_five(**kw):
        if kw.get("status"):
            seen.append(kw["description"])
            if len(seen) == 5:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, tmp_path, device="cpu", fault_model="mps", progress=stop_after_five)
    store = RunStore.open(tmp_path)
    assert len(store.latest()) == 5
    first = {k: r["recorded"] for k, r in store.latest().items()}
    res = run_sweep(spec, tmp_path, device="cpu", fault_model="mps", resume=True)
    lines = (tmp_path / "verdicts.jsonl").read_text().splitlines()
    assert res.resumed == 5 and res.ran == len(lines) - 5
    assert len({json.loads(l)["case"]["id"] for l in lines}) == len(lines)  # nothing twice
    latest = store.latest()
    assert all(latest[k]["recorded"] == t for k, t in first.items())
    # each invocation is one segment of the run: the cut-short one, then the rest
    cut, rest = store.manifest()["segments"]
    assert (cut["completed"], rest["completed"]) == (False, True)
    assert cut["cases_run"] == 5 and rest["cases_run"] == res.ran and rest["calibrated"] == 0
    assert cut["wall_s"] > 0 and rest["wall_s"] > 0 and cut["git"] == rest["git"]


def test_a_store_torn_mid_write_is_set_aside_on_resume_recomputed_and_reported(tmp_path):
    """A crash mid-write cuts the last verdict line short. Resuming sets the torn line
    aside (verdicts.torn.jsonl), recomputes its case, and appends on a line of its own;
    the store, the report and the sweep's own summary then read it without error."""
    from click.testing import CliRunner

    from kernelaudit.sweep.cli import report
    from kernelaudit.sweep.report import load_run

    spec = GridSpec(ops=("add",), dtypes=("float32",), layouts=("contig", "slice"), directions=("fwd",),
                    thresholds=("2^32",), positions=("above",), scale=12)
    run_sweep(spec, tmp_path, device="cpu", fault_model="mps")
    path = tmp_path / "verdicts.jsonl"
    lines = path.read_text().splitlines()
    torn_id = json.loads(lines[-1])["case"]["id"]
    path.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2])  # no newline: cut short
    assert "incomplete" in " ".join(load_run(tmp_path).notes)  # readable before the resume too
    res = run_sweep(spec, tmp_path, device="cpu", fault_model="mps", resume=True)
    assert (res.ran, res.resumed) == (1, len(lines) - 1)
    after = path.read_text().splitlines()
    assert [json.loads(l)["case"]["id"] for l in after][-1] == torn_id and len(after) == len(lines)
    aside = (tmp_path / "verdicts.torn.jsonl").read_text().splitlines()
    assert len(aside) == 1 and json.loads(aside[0])["line"] == len(lines)
    run = load_run(tmp_path)
    assert len(run.records) == len(lines)
    assert any("1 torn line(s) set aside" in n for n in run.notes)
    out = CliRunner().invoke(report, [str(tmp_path), "--no-files"])
    assert out.exception is None or isinstance(out.exception, SystemExit), out.output
    assert out.exit_code == 0 and "torn line" in out.output


def test_case_that_cannot_fit_is_skipped_with_the_bytes_it_needs(tmp_path):
    spec = GridSpec(ops=("bmm",), dtypes=("float32",), layouts=("contig",), directions=("fwd",),
                    thresholds=("2^32",), positions=("above",), scale=16)
    res = run_sweep(spec, tmp_path, device="cpu", memory_limit=2**20)
    for _, v in _records(res.store):
        assert v.status.value == "skipped"
        assert v.details["needed_bytes"] > 2**20 and "GiB" in v.message


def test_memory_plan_counts_the_int64_indices_sort_holds_until_its_gather(monkeypatch):
    """On the H200 float32 sort at 2*2^32 elements ran out of memory with 128 GiB
    allocated asking for 16 more; the plan, counting only inputs and outputs, had
    said 97.5 GiB. Counting the indices, it needs more than that peak."""
    from kernelaudit.sweep.ops.catalog import SORT_INDEX_BYTES
    from kernelaudit.sweep.memory import estimate_bytes

    case = Case("sort", "float32", "contig", "out", "2*2^32", "at", 524288, "fwd", 0, 32)
    n = 524288 * 16384
    with_indices = estimate_bytes(case)
    assert with_indices > (128 + 16) * 2**30
    monkeypatch.setitem(case.spec.extra, "scratch_bytes", 0)
    assert with_indices - estimate_bytes(case) == SORT_INDEX_BYTES * n


def _oom_for(monkeypatch, failures: int) -> list[str]:
    """Make the op run out of memory ``failures`` times; returns a log of what happened."""
    from kernelaudit.sweep.judge import execution as oracle

    log, real = [], oracle.run_op

    def run_op(*a, **k):
        if log.count("op") < failures:
            log.append("op")
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 32.00 GiB.")
        log.append("op")
        return real(*a, **k)

    monkeypatch.setattr(oracle, "run_op", run_op)
    monkeypatch.setattr(oracle, "release_cached_memory", lambda device: log.append("release"))
    return log


def _small_case():
    return Case("bmm", "float32", "contig", "out", "2^32", "above", 8, "fwd", 0, 12)


def test_case_out_of_memory_once_runs_again_after_the_cache_is_released(monkeypatch):
    log = _oom_for(monkeypatch, failures=1)
    out = execute(_small_case(), tolerances=None)
    assert log == ["op", "release", "op"]
    assert out.verdict.message == "calibration" and out.worst
    assert "out of memory" in out.verdict.details["oom_retry"]


def test_case_still_out_of_memory_after_the_retry_is_skipped_and_says_why(monkeypatch):
    log = _oom_for(monkeypatch, failures=5)
    out = execute(_small_case(), tolerances=None)
    assert log == ["op", "release", "op"]
    v = out.verdict
    assert v.status.value == "skipped" and v.message.startswith("out of memory despite the memory plan")
    assert v.details["out_of_memory"] and "oom_retry" in v.details


def test_case_that_fits_runs_once_without_releasing_the_cache(monkeypatch):
    log = _oom_for(monkeypatch, failures=0)
    out = execute(_small_case(), tolerances=None)
    assert log == ["op"] and "oom_retry" not in out.verdict.details


class _PlantOne(torch.utils._python_dispatch.TorchDispatchMode):
    """A fault model that nudges chosen flat elements of every bmm output."""

    name = "plant"

    def __init__(self, th, where, by):
        super().__init__()
        self.th, self.where, self.by = th, where, by
        from kernelaudit.faults.base import FaultStats
        self.stats = FaultStats()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket is torch.ops.aten.bmm:
            flat = out.view(-1)
            for i in self.where(out):
                flat[i] += self.by * flat.abs().max()
        return out


def _judge_with_plant(monkeypatch, where, by):
    from kernelaudit import faults
    from kernelaudit.sweep.tolerance import calibrated

    th = Thresholds(12)
    n = 2 ** (th.bits // 4)
    case = Case("bmm", "float32", "contig", "out", "2^32", "above", batch_for(th.t32, n * n, "above"), "fwd", 0, 12)
    tol = calibrated(execute(case.with_batch(8), tolerances=None).worst, "float32")
    monkeypatch.setitem(faults.FAULT_MODELS, "plant", lambda th: _PlantOne(th, where, by))
    return case, execute(case, fault_model="plant", tolerances=tol)


def test_spot_checks_catch_one_small_error_at_the_2p31_flat_index(monkeypatch):
    th = Thresholds(12)
    case, out = _judge_with_plant(monkeypatch, lambda o: [th.t31], 1e-3)
    assert out.verdict.status.value == "wrong"
    v = next(Verdict.from_json(d) for d in out.verdict.details["outputs"] if d["metric"] == "out0:spot")
    assert v.status.value == "wrong", v.explain()
    assert v.first_bad_index == th.t31 and isinstance(v.first_bad_index, int)
    n2 = (2 ** (th.bits // 4)) ** 2
    assert (v.bad_batches.first, v.bad_batches.count) == (th.t31 // n2, 1)


def test_freivalds_catches_a_batch_wrong_away_from_the_spot_checks(monkeypatch):
    th = Thresholds(12)
    n2 = (2 ** (th.bits // 4)) ** 2
    # element (3, 5) of batch 7: neither first, last, nor near a multiple of 2^31
    case, out = _judge_with_plant(monkeypatch, lambda o: [7 * n2 + 3 * o.shape[-1] + 5], 0.5)
    v = out.verdict
    assert v.status.value == "wrong" and v.metric == "out0:freivalds", v.explain()
    assert (v.bad_batches.first, v.bad_batches.count) == (7, 1)
    assert v.first_bad_index == 7 * n2 + 3 * 2 ** (th.bits // 4) + 5


def test_clean_matmul_passes_freivalds_and_spot_checks(monkeypatch):
    case, out = _judge_with_plant(monkeypatch, lambda o: [], 0.0)
    assert out.verdict.ok, out.verdict.explain()


def test_weight_gradient_summed_over_many_batches_is_not_a_false_alarm():
    """On the H200, mm's weight gradient (a sum over 2^24 rows) exceeded a tolerance
    calibrated over 2^14 rows; the cond metric (error / sum|a||g|) scales with it."""
    from kernelaudit.sweep.cases import calibration_batch
    from kernelaudit.sweep.tolerance import calibrated

    th = Thresholds(24)
    n = 2 ** (th.bits // 4)
    case = Case("mm", "float32", "contig", "out", "2^32", "above", batch_for(th.t32, n * n, "above"), "bwd", 0, 24)
    tol = calibrated(execute(case.with_batch(calibration_batch(case)), tolerances=None).worst, "float32")
    out = execute(case, tolerances=tol)
    assert out.verdict.ok, out.verdict.explain()
    metrics = {d["metric"] for d in out.verdict.details["outputs"]}
    assert metrics == {"grad0:rel", "grad1:cond"}


def test_mps_fault_model_corrupts_composite_ops_under_inference_mode_too():
    from kernelaudit.faults import make_fault_model

    th = Thresholds(12)
    a = torch.randn(17, 4, 16).transpose(1, 2)  # (17, 16, 4), a transposed view; output 17*256 > 2^12
    b = torch.randn(17, 4, 16)
    honest = torch.matmul(a, b)
    for mode in (torch.no_grad, torch.inference_mode):
        with mode(), make_fault_model("mps", th) as fm:
            got = torch.matmul(a, b)
        assert fm.stats.changed == {"A": 1}, mode.__name__
        assert not torch.allclose(got, honest)


def test_a_metric_without_calibrated_tolerance_is_an_error_not_a_pass():
    th = Thresholds(12)
    n = 2 ** (th.bits // 4)
    case = Case("bmm", "float32", "aT", "out", "2^32", "above", batch_for(th.t32, n * n, "above"), "fwd", 0, 12)
    out = execute(case, fault_model="mps", tolerances={"out0:spot": 1e-5})  # freivalds missing
    assert out.verdict.status.value == "error"
    assert "out0:freivalds" in out.verdict.message and out.verdict.details["checker_bug"]


def test_a_wrapped_batch_diluted_in_a_bf16_weight_gradient_is_still_caught(tmp_path):
    """mm/addmm/linear backward, in-crossing, rule C: one bad batch out of 257 in the
    weight gradient's sum; a 2-eps floor on the cond metric used to hide it in bf16."""
    spec = GridSpec(ops=("mm", "addmm", "linear"), dtypes=("bfloat16",), layouts=("contig", "bT"),
                    directions=("bwd",), thresholds=("2^32",), positions=("above",), scale=16)
    res = run_sweep(spec, tmp_path, device="cpu", fault_model="mps")
    recs = _records(res.store)
    assert recs
    for case, v in recs:
        expected, why = predict(case, "mps")
        assert expected in (EITHER, v.status.value), f"{case.id}: {v.explain()} vs rules {expected} ({why})"
    by_id = {c.id: v for c, v in recs}
    for case_id in ("mm/bfloat16/bT/in/2^32+/bwd", "addmm/bfloat16/bT/in/2^32+/bwd", "linear/bfloat16/contig/in/2^32+/bwd"):
        assert by_id[case_id].status.value == "wrong", by_id[case_id].explain()  # caught at scale 16


def test_calibrating_side_by_side_gives_the_same_tolerances_and_verdicts(tmp_path):
    spec = GridSpec(ops=("bmm", "add", "sum"), dtypes=("float32", "float16"), thresholds=("2^32",),
                    positions=("above",), scale=12)
    one = run_sweep(spec, tmp_path / "one", device="cpu", fault_model="mps", calibration_workers=1)
    two = run_sweep(spec, tmp_path / "two", device="cpu", fault_model="mps", calibration_workers=3)
    _assert_same_tolerances_and_verdicts(one, two)


def _assert_same_tolerances_and_verdicts(one, two) -> None:
    m1, m2 = one.store.manifest(), two.store.manifest()
    assert m1["tolerances"] and m1["tolerances"] == m2["tolerances"]
    assert m2["segments"][0]["calibrated"] == len(m2["tolerances"])
    verdicts = lambda res: {k: (r["verdict"]["status"], r["verdict"]["metric"], r["verdict"]["value"])  # noqa: E731
                            for k, r in res.store.latest().items()}
    assert verdicts(one) == verdicts(two)
    assert "wrong" in {s for s, _, _ in verdicts(two).values()}  # the mps faults are still found


def test_cases_overlapping_calibration_give_the_same_tolerances_and_verdicts(tmp_path, monkeypatch):
    from kernelaudit.config import OVERLAP_CALIBRATION

    spec = GridSpec(ops=("bmm", "add", "sum"), dtypes=("float32", "float16"), thresholds=("2^32",),
                    positions=("below", "above"), scale=12, bracket=True)
    one = run_sweep(spec, tmp_path / "one", device="cpu", fault_model="mps", calibration_workers=1)
    monkeypatch.setenv(OVERLAP_CALIBRATION.name, "1")
    two = run_sweep(spec, tmp_path / "two", device="cpu", fault_model="mps", calibration_workers=3)
    _assert_same_tolerances_and_verdicts(one, two)  # the bracket's controls included


def test_a_key_failing_side_by_side_is_calibrated_again_alone_before_its_cases(tmp_path, monkeypatch):
    # overlapped: the key's cases wait for its calibration alone, after the other keys
    from kernelaudit.config import OVERLAP_CALIBRATION
    from kernelaudit.sweep import schedule

    real = schedule._calibrate_side_by_side
    flaky = {}

    def side(pool_args, jobs, workers):
        for key, res in real(pool_args, jobs, workers):
            if key.startswith("add/float16") and not flaky:
                flaky[key] = True
                res = {**res, "verdict": {**res["verdict"], "status": "error", "message": "met another worker"}}
            yield key, res

    monkeypatch.setattr(schedule, "_calibrate_side_by_side", side)
    monkeypatch.setenv(OVERLAP_CALIBRATION.name, "1")
    spec = GridSpec(ops=("add", "sum"), dtypes=("float32", "float16"), thresholds=("2^32",),
                    positions=("above",), scale=12)
    res = run_sweep(spec, tmp_path, device="cpu", fault_model="none", calibration_workers=2)
    (key,) = flaky
    m = res.store.manifest()
    assert m["tolerances"][key]  # calibrated alone after all
    recs = _records(res.store)
    assert recs and all(v.status.value == "ok" for _, v in recs)
    order = [c.tolerance_key for c, _ in recs]
    assert all(k == key for k in order[order.index(key):])  # its cases ran last


def test_calibration_workers_must_be_positive(tmp_path):
    from kernelaudit.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="calibration_workers=0"):
        run_sweep(GridSpec(ops=("add",), scale=12), tmp_path, device="cpu", calibration_workers=0)


def test_a_bracketed_sweep_runs_each_control_below_only_where_the_case_above_failed(tmp_path):
    """``--quick`` brackets: the cases above the limits first, then the case below only
    for those that were not ok. Every finding keeps its control, and the rules are the
    ones the whole grid gives."""
    from kernelaudit.guard.rules import load_rules

    spec = dict(ops=("bmm",), dtypes=("float32",), layouts=("contig", "aT"), directions=("fwd",),
                thresholds=("2^32",), positions=("below", "above"), scale=12)
    full = run_sweep(GridSpec(**spec), tmp_path / "full", device="cpu", fault_model="mps")
    screened = run_sweep(GridSpec(**spec, bracket=True), tmp_path / "bracket", device="cpu", fault_model="mps")
    whole = {c.id: v.status.value for c, v in _records(full.store)}
    got = {c.id: v.status.value for c, v in _records(screened.store)}
    above_bad = {i for i, s in whole.items() if "+/" in i and s != "ok"}
    assert above_bad, "the mps fault model must make some case above 2^32 wrong"
    controls = {i for i in got if "-/" in i}
    assert controls == {i.replace("+/", "-/") for i in above_bad}  # a control for each finding, no other
    assert all(got[i] == whole[i] for i in got)  # the same verdicts where both ran
    assert len(got) < len(whole)
    plan = screened.store.manifest()["plan"]
    assert plan["cases"] == len(got) and plan["controls_needed"] == len(controls)
    def what(d):  # a rule but its provenance (store name, time)
        return [(r.name, r.effect, r.when, r.dtypes, r.layouts, r.action, r.split_dim)
                for r in load_rules(tmp_path / d / "rules.json")]

    assert what("bracket") == what("full") and what("full")


def test_bracket_needs_a_position_below_and_one_above():
    with pytest.raises(Exception, match="bracket=True"):
        GridSpec(positions=("above",), bracket=True).validate()


def test_a_case_records_the_allocators_peak_bytes_on_cuda_and_nothing_elsewhere(monkeypatch):
    from kernelaudit.sweep.judge import execution

    assert "peak_bytes" not in execute(_small_case(), tolerances=None).verdict.details   # the CPU
    seen = []
    monkeypatch.setattr(execution, "_reset_peak", lambda device: seen.append("reset"))
    monkeypatch.setattr(execution, "_peak_bytes", lambda device: seen.append("read") or 123_456)
    out = execute(_small_case(), tolerances=None)
    assert seen == ["reset", "read"] and out.verdict.details["peak_bytes"] == 123_456
