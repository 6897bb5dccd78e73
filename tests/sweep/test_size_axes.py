"""Size axes beyond element counts (dim, bytes, attn_batch), the OpInfo catalogue's
conditioning fixes, and the device filter of ``--ops all``.

Every axis is crossed at scale 12 with tiny tensors: a correct CPU is judged ok on both
sides of the limit, and the fault model of that limit (``grid16``, ``bytes32``) is
caught just past it and not before.
"""

from __future__ import annotations

import pytest

from kernelaudit.errors import InvalidArgument
from kernelaudit.sweep.axes import AXES, crossing_measure
from kernelaudit.sweep.cases import Case, GridSpec, calibration_batch, grid
from kernelaudit.sweep.judge.execution import execute
from kernelaudit.sweep.tolerance import calibrated
from kernelaudit.thresholds import Thresholds

SCALE = 12


def _judge(case, fault_model: str = "none"):
    """Calibrate below the limits on a correct CPU, then judge ``case`` under ``fault_model``."""
    cal = case.with_batch(calibration_batch(case), threshold="cal", position="below")
    tol = calibrated(execute(cal, "cpu").worst, case.dtype)
    return execute(case, "cpu", fault_model=fault_model, tolerances=tol).verdict


def _cases(axis, op, threshold, **kw):
    spec = GridSpec(ops=(op,), axes=(axis,), scale=SCALE, positions=("below", "above"),
                    **{"dtypes": ("float32",), "layouts": ("contig",), "directions": ("fwd",), **kw})
    return {c.position: c for c in grid(spec) if c.threshold == threshold}


def test_real_scale_limits():
    th = Thresholds()
    assert AXES["dim"].limits(th) == {"dim 2^16-1": 65535, "dim 2^16": 65536, "dim 2^31": 2**31}
    assert AXES["bytes"].limits(th) == {"2^31 B": 2**31, "2^32 B": 2**32}
    assert AXES["attn_batch"].limits(th) == {"BH 2^16-1": 65535, "BH 2^16": 65536}
    assert Thresholds(SCALE).dim_limit == 64


@pytest.mark.parametrize("axis", ["dim", "bytes", "attn_batch"])
def test_each_axis_crosses_its_limits(axis):
    ax = AXES[axis]
    ops = ("sdpa", "attention") if axis == "attn_batch" else ("add", "clone", "mm", "bmm", "sum", "sum_all")
    cases = grid(GridSpec(ops=ops, axes=(axis,), scale=SCALE, dtypes=("float32",)))
    assert cases and all(c.axis == axis for c in cases)
    limits = ax.limits(ax.thresholds(SCALE))
    seen = set()
    for c in cases:
        m = crossing_measure(ax, c.spec, c.series, c.thresholds, c.dtype, c.layout, c.batch)
        lim = limits[c.threshold]
        assert {"below": m < lim, "at": m >= lim, "above": m > lim}[c.position], (c.id, m, lim)
        seen.add(c.threshold)
    assert seen == set(limits)
    if axis == "attn_batch":
        assert all(c.spec.family == "attention" for c in cases)
    if axis == "dim":  # 2^31 rows: only where a row is a few elements (1-D tensors), within 2*2^32
        assert {c.op for c in cases if c.threshold == "dim 2^31"} == {"sum_all"}


def test_bytes_axis_adds_one_byte_dtypes_and_storage_offsets():
    cases = grid(GridSpec(ops=("clone",), axes=("bytes",), scale=SCALE, dtypes=("float32",)))
    assert {"int8", "uint8", "bool"} <= {c.dtype for c in cases}
    (sl,) = [c for c in cases if c.dtype == "int8" and c.layout == "slice" and c.size == "2^32 B+"]
    view_bytes = sl.to_json()["crossing_numel"]  # int8: elements are bytes
    # The view alone ends at the limit (last byte offset 2^12 - 1); its storage offset
    # carries the storage's end past it.
    assert view_bytes <= 2**SCALE < sl.to_json()["measure"]


def test_unknown_axis_is_a_usage_error():
    with pytest.raises(InvalidArgument, match="allowed values are elements, dim, bytes, attn_batch"):
        GridSpec(axes=("rows",)).validate()


@pytest.mark.parametrize("axis,op,threshold,fault,kw", [
    ("dim", "add", "dim 2^16", "grid16", {}),
    ("dim", "bmm", "dim 2^16-1", "grid16", {"directions": ("bwd",)}),
    ("attn_batch", "sdpa", "BH 2^16", "grid16", {}),
    ("attn_batch", "sdpa.heads", "BH 2^16", "grid16", {}),
    ("bytes", "clone", "2^32 B", "bytes32", {"dtypes": ("int8",)}),
    ("bytes", "clone", "2^32 B", "bytes32", {"dtypes": ("bool",), "layouts": ("slice",)}),
])
def test_correct_cpu_ok_and_planted_fault_caught_past_the_limit(axis, op, threshold, fault, kw):
    cases = _cases(axis, op, threshold, **kw)
    below, above = cases["below"], cases["above"]
    assert _judge(below).status.value == "ok"
    assert _judge(above).status.value == "ok"
    assert _judge(below, fault).status.value == "ok"
    v = _judge(above, fault)
    assert v.status.value == "wrong", v.message
    assert op in v.message


def _derived(name):
    from kernelaudit.sweep.ops.catalog import op_spec

    try:
        return op_spec(name)
    except InvalidArgument:
        pytest.skip("OpInfo catalogue unavailable (no snapshot for this torch, no expecttest)")


@pytest.mark.parametrize("op,direction", [("linalg.inv", "fwd"), ("acos", "bwd"), ("digamma", "bwd")])
def test_ill_conditioned_opinfo_ops_no_longer_false_rejected(op, direction):
    _derived(op)
    spec = GridSpec(ops=(op,), dtypes=("float32",), layouts=("contig",), directions=(direction,),
                    thresholds=("2^32",), positions=("below", "above"), scale=SCALE)
    cases = grid(spec)
    assert len(cases) == 2
    for c in cases:
        v = _judge(c)
        assert v.status.value == "ok", v.message


def test_discontinuous_directions_marked_not_covered():
    from kernelaudit.sweep.ops.coverage import rows

    spec = _derived("__rmod__")
    assert "bwd" not in spec.directions and "fwd" in spec.directions
    by = {r.name: r for r in rows()[0]}
    assert not by["round.decimals_3"].fwd and "discontinuous" in by["round.decimals_3"].reason
    assert by["__rmod__"].fwd and not by["__rmod__"].bwd


def test_ops_all_leaves_out_backends_the_device_lacks():
    from kernelaudit.sweep.ops.coverage import rows, select

    dropped: dict[str, str] = {}
    on_cpu = select(("all",), device="cpu", dropped=dropped)
    assert "sdpa.efficient" not in on_cpu and "sdpa.cudnn" not in on_cpu
    assert "sdpa.math" in on_cpu and "bmm" in on_cpu
    assert "cuda" in dropped["sdpa.efficient"] and "cpu" in dropped["sdpa.efficient"]
    assert "sdpa.efficient" in select(("all",), device="cuda")
    assert "sdpa.efficient" in select(("sdpa.efficient",), device="cpu")  # named: kept, runs, says why
    each = select(("family:each",), device="cpu")
    fam = {r.name: r.family for r in rows()[0]}
    assert len(each) == len({fam[n] for n in each}) >= 20  # one op per family
    assert not any(n in ("sdpa.efficient", "sdpa.cudnn") for n in each)


def test_reductions_get_a_last_dim_variant_judged_ok_and_faults_caught():
    from kernelaudit.sweep.ops.coverage import select

    _derived("sum")
    variants = [n for n in select(("family:reduction",)) if n.endswith(".dim_last")]
    assert "sum.dim_last" in variants and "amax.dim_last" in variants
    cases = {c.position: c for c in grid(GridSpec(
        ops=("sum.dim_last",), dtypes=("float32",), layouts=("contig",), directions=("fwd",),
        thresholds=("2^32",), positions=("below", "above"), scale=SCALE))}
    x = cases["above"].spec.operands(cases["above"].series, 1, cases["above"].thresholds)[0]
    assert x.rows_per_batch == x.shape[0] and x.shape[1] == 3  # batch rows first, reduced dim last
    assert _judge(cases["below"]).status.value == "ok"
    assert _judge(cases["above"]).status.value == "ok"
    assert _judge(cases["above"], "wrap32").status.value == "wrong"


def test_plain_op_names_are_selected_without_the_catalogue(monkeypatch):
    """A fresh machine sweeping hand-named ops must not derive the OpInfo catalogue."""
    from kernelaudit.sweep.ops import opinfo
    from kernelaudit.sweep.ops.coverage import select

    def refuse(**_):
        raise AssertionError("the catalogue was loaded for plain op names")

    monkeypatch.setattr(opinfo, "catalogue", refuse)
    assert select(("bmm", "sum", "bmm", "sdpa.efficient"), device="cpu") == ("bmm", "sum", "sdpa.efficient")


def test_a_resumed_run_records_a_bytes_case_with_the_verdict_of_its_elements_twin(tmp_path):
    """A ``bytes`` case at the very batch of a judged ``elements`` case runs the same op on the same
    tensors: resuming records that verdict (``twin_of``) instead of running it again."""
    from kernelaudit.sweep.schedule import _tensor_key, run_sweep
    from kernelaudit.sweep.store import RunStore

    common = dict(ops=("clone",), dtypes=("float16",), layouts=("contig",), directions=("fwd",), scale=SCALE)
    run_sweep(GridSpec(**common, axes=("elements",)), tmp_path / "r", device="cpu")
    both = grid(GridSpec(**common, axes=("elements", "bytes")))
    elements = {_tensor_key(c): c for c in both if c.axis == "elements"}
    twins = [c for c in both if c.axis == "bytes" and _tensor_key(c) in elements]
    assert twins  # float16 at 2^bits bytes is 2^(bits-1) elements: the elements axis' 2^31 cases
    result = run_sweep(GridSpec(**common, axes=("elements", "bytes")), tmp_path / "r", device="cpu", resume=True)
    latest = RunStore.open(tmp_path / "r").latest()
    for c in twins:
        rec = latest[c.key]
        twin = latest[elements[_tensor_key(c)].key]
        assert rec["twin_of"] == twin["case"]["id"] and rec["verdict"] == twin["verdict"]
    ran = [r for k, r in latest.items() if r["case"]["axis"] == "bytes" and "twin_of" not in r]
    assert len(ran) == sum(c.axis == "bytes" for c in both) - len(twins) > 0
    assert sum(result.counts.values()) == len(both)


def test_a_fresh_run_judges_each_set_of_tensors_once_and_records_its_twins(tmp_path, monkeypatch):
    """Within one run, a case with the tensors of an earlier one (the ``bytes`` axis
    placing an ``elements`` batch, or one limit's case above at the next one's batch
    below) is not run: it waits until that case's verdict is in and records it."""
    from kernelaudit.sweep import worker
    from kernelaudit.sweep.schedule import _split_twins, _tensor_key, run_sweep
    from kernelaudit.sweep.store import RunStore

    spec = GridSpec(ops=("clone", "sum"), dtypes=("float16", "float32"), layouts=("contig", "slice"),
                    directions=("fwd",), scale=SCALE, axes=("elements", "bytes"))
    cases = grid(spec)
    _, followers = _split_twins(cases)
    assert len(followers) >= 4
    ran = []
    real = worker.WorkerPool.run

    def counted(self, job):
        if job.get("tolerances") is not None:
            ran.append(job["case"]["id"] + job["case"]["axis"])
        return real(self, job)

    monkeypatch.setattr(worker.WorkerPool, "run", counted)
    result = run_sweep(spec, tmp_path / "r", device="cpu")
    latest = RunStore.open(tmp_path / "r").latest()
    assert sum(result.counts.values()) == len(cases) == len(latest)
    twins = {k: r for k, r in latest.items() if "twin_of" in r}
    assert len(twins) == len(followers) and len(ran) == len(cases) - len(followers)
    by_tensors = {_tensor_key(Case.from_json(r["case"])): r for r in latest.values() if "twin_of" not in r}
    for r in twins.values():
        judged = by_tensors[_tensor_key(Case.from_json(r["case"]))]
        assert r["twin_of"] == judged["case"]["id"] and r["verdict"] == judged["verdict"]
        assert r["elapsed_s"] == 0.0
    assert RunStore.open(tmp_path / "r").manifest()["segments"][-1]["twins"] == len(followers)


def test_full_preset_takes_every_op_at_fp32_and_fp16_below_and_above_both_limits():
    """``--full`` is the issue's default grid: every hand spec and every OpInfo-derived op,
    fp32 and one 16-bit dtype, just below and above 2^31 and 2^32, every size axis;
    ``--deep`` keeps the hand specs' exhaustive grid."""
    from kernelaudit.sweep.axes import AXIS_NAMES
    from kernelaudit.sweep.cli import PRESETS
    from kernelaudit.sweep.ops.catalog import ALL_OPS
    from kernelaudit.sweep.ops.coverage import select

    full, deep = PRESETS["full"], PRESETS["deep"]
    assert (full["dtypes"], full["thresholds"], full["positions"]) == (
        ("float32", "float16"), ("2^31", "2^32"), ("below", "above"))
    assert tuple(full["axes"]) == tuple(AXIS_NAMES) == tuple(deep["axes"])
    ops = select(full["ops"], device="cpu", dropped={})
    assert set(ALL_OPS) <= set(ops)
    if len(ops) == len(ALL_OPS):
        pytest.skip("OpInfo catalogue unavailable (no snapshot for this torch, no expecttest)")
    assert len(ops) >= 250
    assert set(deep["ops"]) == set(ALL_OPS) and "2*2^32" in deep["thresholds"]


def test_a_twin_is_judged_again_with_the_case_it_copied(tmp_path):
    """A case skipped for memory on a small device runs again on a larger one; its
    ``bytes`` twin, recorded later on a device as large as this one (a copy of that skip),
    goes with it: a twin never keeps a verdict its case is judged again for."""
    import json

    from kernelaudit.sweep.schedule import _done_on, _tensor_key
    from kernelaudit.sweep.store import RunStore
    from kernelaudit.verdict import Verdict

    both = grid(GridSpec(ops=("clone",), dtypes=("float16",), layouts=("contig",), directions=("fwd",),
                         scale=SCALE, axes=("elements", "bytes")))
    elements = {_tensor_key(c): c for c in both if c.axis == "elements"}
    twin = next(c for c in both if c.axis == "bytes" and _tensor_key(c) in elements)
    case = elements[_tensor_key(twin)]
    skip = Verdict.skipped("needs about 1.0 GiB, 0.0 GiB available", needed_bytes=2**30, available_bytes=1024)
    segments = [{"started": "2026-12-05T10:00:00+00:00", "ended": "2026-12-05T10:10:00+00:00", "memory_bytes": 1024},
                {"started": "2026-12-05T11:00:00+00:00", "ended": "2026-12-05T11:10:00+00:00", "memory_bytes": 2**31}]
    store = RunStore.create(tmp_path / "s", {"device": {"type": "cpu", "name": "x", "memory_bytes": 1024},
                                              "segments": segments}, resume=False)
    lines = [{"case": case.to_json(), "verdict": skip.to_json(), "elapsed_s": 0.0,
              "recorded": "2026-12-05T10:05:00+00:00"},
             {"case": twin.to_json(), "verdict": skip.to_json(), "elapsed_s": 0.0,
              "recorded": "2026-12-05T11:05:00+00:00", "twin_of": case.id}]
    (tmp_path / "s" / "verdicts.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    done = _done_on(store, capacity=2**31)
    assert case.key not in done and twin.key not in done
    assert _done_on(store, capacity=1024) == {case.key, twin.key}


def test_a_twin_in_a_run_copies_this_runs_verdict_never_an_earlier_one(tmp_path):
    """``--rerun`` of a wrong case whose first was held back (not run): the follower, its
    tensors' twin, must copy that held-back record of this run, not its own wrong verdict
    of an earlier run (an H100 run of 2026-12-06 recorded a bernoulli case as a twin of
    itself so)."""
    import json

    from kernelaudit.sweep.schedule import _record_twins, _tensor_key
    from kernelaudit.sweep.store import RunStore
    from kernelaudit.verdict import Verdict

    both = grid(GridSpec(ops=("clone",), dtypes=("float16",), layouts=("contig",), directions=("fwd",),
                         scale=SCALE, axes=("elements", "bytes")))
    elements = {_tensor_key(c): c for c in both if c.axis == "elements"}
    twin = next(c for c in both if c.axis == "bytes" and _tensor_key(c) in elements)
    first = elements[_tensor_key(twin)]
    wrong = Verdict.skipped("placeholder").to_json() | {"status": "wrong"}
    held = Verdict.skipped(f"not run: {first.id} held back", after_timeout=True).to_json()
    store = RunStore.create(tmp_path / "s", {"device": {"type": "cpu", "name": "x"}}, resume=False)
    lines = [{"case": twin.to_json(), "verdict": wrong, "elapsed_s": 1.0, "recorded": "2026-12-06T17:50:00+00:00"},
             {"case": first.to_json(), "verdict": held, "elapsed_s": 0.0, "recorded": "2026-12-06T20:19:02+00:00"}]
    (tmp_path / "s" / "verdicts.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert _record_twins(store, [twin], set(), since="2026-12-06T20:18:00+00:00") == {twin.key}
    rec = list(store.records())[-1]
    assert rec["twin_of"] == first.id and rec["verdict"]["status"] == "skipped"
    # without ``since`` the earlier wrong verdict of the twin itself is taken: the defect
    assert _record_twins(store, [twin], set()) == {twin.key}
    assert list(store.records())[-1]["twin_of"] == twin.id
