"""Version-gated known-fault rules: the MPS gates against the study's records, rule
validation, and "no matching rule, nothing hooked"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from kernelaudit.errors import InvalidArgument
from kernelaudit.faults.predicates import TensorMeta
from kernelaudit.guard import intercept
from kernelaudit.guard.policy import Call
from kernelaudit.guard.rules import KnownFault, RuntimeEnv, active, known_faults, parse_rules, rules_policy

RECORDS = json.loads((Path(__file__).parent / "data" / "mps_study_records.json").read_text())
DTYPE = {"fp32": torch.float32, "fp16": torch.float16}


def _points():
    """(torch, series, dtype, layout, B, class) of every recorded outcome."""
    for t, s, d, lay, b0, classes in RECORDS["grid"]:
        for b, c in zip(range(b0 - 2, b0 + 3), classes.split()):
            yield t, s, d, lay, b, c
    yield from (tuple(p) for p in RECORDS["transitions"])


def _meta(shape, layout_role: str) -> TensorMeta:
    B, r, c = shape
    if layout_role == "T":  # a transposed view of a packed (B, c, r)
        return TensorMeta(shape, (r * c, 1, r), 0)
    offset = r * c if layout_role == "slice" else 0  # one batch past the storage start
    return TensorMeta(shape, (r * c, c, 1), offset)


def _call(series: str, dtype: str, layout: str, B: int) -> Call:
    M, K, N = (int(x) for x in series.split("-")[1].split("x"))
    ra = "T" if layout == "aT" else "slice" if layout == "slice" else ""
    rb = "T" if layout == "bT" else "slice" if layout == "slice" else ""
    return Call("bmm", (_meta((B, M, K), ra), _meta((K and B, K, N), rb)), (B, M, N), DTYPE[dtype], "mps")


def _flagged_by_version():
    out = {}
    for t, s, d, lay, b, c in _points():
        env = RuntimeEnv(t, None, ("cpu", "mps"))
        policy = rules_policy(active(known_faults(), env))
        out[(t, s, d, lay, b)] = (c, [h.rule.name for h in policy.check(_call(s, d, lay, b))])
    return out


def test_mps_rules_gated_by_torch_version_flag_every_recorded_failure():
    got = _flagged_by_version()
    assert len(got) > 250
    misses = [(k, c) for k, (c, hits) in got.items() if c != "ok" and not hits]
    assert misses == []
    # the only correct outcomes flagged: slice in-256x256x64 at B = 65536 exactly (2^32
    # elements), on torch 2.6 and 2.8, between a recorded error (65535) and wrong
    # batches (65537): rule mps-B-extent refuses the whole run of sizes
    false_alarms = sorted(k for k, (c, hits) in got.items() if c == "ok" and hits)
    assert false_alarms == [(t, "in-256x256x64", d, "slice", 65536) for t in ("2.6.0", "2.8.0") for d in ("fp16", "fp32")]
    ok = sum(c == "ok" for c, _ in got.values())
    assert ok > 150


def test_the_version_gate_matters_one_version_s_rules_miss_another_s_faults():
    """The rules of torch 2.14 applied to 2.4.1's records miss silent failures: the gate
    is not decoration."""
    new = rules_policy(active(known_faults(), RuntimeEnv("2.14.0", None, ("mps",))))
    missed = [(s, d, lay, b) for t, s, d, lay, b, c in _points()
              if t == "2.4.1" and c != "ok" and not new.check(_call(s, d, lay, b))]
    assert ("out-256x64x256", "fp32", "contig", 65537) in missed
    # the truncated views are flagged by rule B (for another reason); the contiguous and
    # sliced fp32 outputs past 2^32, wrong on 2.4 only, are not
    assert sorted(missed) == [("out-256x64x256", "fp32", lay, b) for lay in ("contig", "slice") for b in (65537, 65538)]


def test_no_matching_rule_means_nothing_hooked_and_the_dispatch_path_untouched():
    before = {op: torch._C._dispatch_dump(f"aten::{op}") for op in ("mm", "bmm", "addmm", "linear", "arange")}
    try:
        engine = intercept.install("fix", native=False)  # this CPU: no MPS, no CUDA: no rule matches
        assert intercept.hooked() == [] and engine.policy.rules == ()
        assert {op: torch._C._dispatch_dump(f"aten::{op}") for op in before} == before
        a = torch.randn(3, 4, 5)
        torch.bmm(a, a.transpose(1, 2))
        assert engine.stats().inspected == 0
    finally:
        intercept.uninstall()
    # a rule for this process's backend and version is hooked, and leaves on uninstall
    here = KnownFault("cpu-mm", "mm", "cpu", "wrong", {"kind": "numel", "at_least": 10**9},
                      versions={"torch": f">={torch.__version__.split('+')[0]}"})
    try:
        intercept.install("fix", rules=[here], native=False)
        assert {(op, dt) for op, _, dt in intercept.hooked()} == {("mm", "cpu")}
        assert torch._C._dispatch_dump("aten::mm") != before["mm"]
    finally:
        intercept.uninstall()
    assert torch._C._dispatch_dump("aten::mm") == before["mm"]
    older = KnownFault("old-mm", "mm", "cpu", "wrong", {"kind": "numel", "at_least": 10**9},
                       versions={"torch": "<2.0"})
    try:
        intercept.install("fix", rules=[older], native=False)
        assert intercept.hooked() == []
    finally:
        intercept.uninstall()


@pytest.mark.parametrize("change, message", [
    ({"device": "tpu"}, "device='tpu': allowed values are mps, cuda"),
    ({"action": "split"}, "action='split': allowed values are fix, raise"),
    ({"versions": {"torch": "2.x"}}, "versions.torch='2.x': allowed values are PEP 440"),
    ({"versions": {"rocm": ">=6"}}, "versions key='rocm': allowed values are torch, cuda, driver"),
    ({"dtypes": ["fp32"]}, "dtypes='fp32': allowed values are float32"),
    ({"when": {"kind": "numel", "at_least": "2^33"}}, "at_least='2^33'"),
    ({"op": "arange"}, "op='arange' without aten entry points"),
    ({"colour": "red"}, "field(s) ['colour']: allowed fields are name"),
    ({"when": {"kind": "numel", "at_least": 8, "inner_of": 2}}, "when.inner_of=2: the name of the call's dim"),
])
def test_invalid_rules_name_the_field_and_the_allowed_values(change, message):
    rule = {"name": "r", "op": "bmm", "device": "mps", "effect": "wrong", "when": {"kind": "numel", "at_least": 8}}
    with pytest.raises(InvalidArgument, match=None) as e:
        parse_rules({"schema": 1, "rules": [{**rule, **change}]}, "f.json")
    assert message in str(e.value) and ("rule 'r'" in str(e.value) or "f.json rules[0]" in str(e.value))


def test_shipped_database_round_trips_and_holds_the_sweeps_of_record():
    db = known_faults()
    assert parse_rules({"schema": 1, "rules": [r.to_json() for r in db]}) == db
    names = {r.name for r in db}
    assert {"mps-A", "mps-B", "mps-C", "mps-B-extent", "mps-A-2.4", "mps-trunc-2.4"} <= names
    cuda = [r for r in db if r.device == "cuda"]
    assert cuda and all(r.versions.get("torch") == "==2.11.*" and r.provenance.get("ran_on") for r in cuda)
    h200 = RuntimeEnv("2.11.0+cu130", "13.0", ("cpu", "cuda"), driver="580.159.04")
    assert {r.op for r in active(db, h200)} == {
        "arange", "sdpa", "sdpa.heads", "cdist", "nn.functional.adaptive_avg_pool1d", "nn.functional.interpolate.nearest",
        "linspace", "logspace", "nn.functional.adaptive_avg_pool2d", "nn.functional.adaptive_avg_pool3d",
        "nn.functional.adaptive_max_pool1d", "nn.functional.adaptive_max_pool2d", "nn.functional.adaptive_max_pool3d",
        "nn.functional.avg_pool1d", "nn.functional.softmin", "nn.functional.interpolate.area",
        "nn.functional.interpolate.nearest-exact", "nn.functional.upsample_nearest",
        "nn.functional.interpolate.bilinear",
        "nn.functional.upsample_bilinear", "nn.functional.avg_pool2d", "nn.functional.multilabel_margin_loss",
        "nn.functional.pad.reflect", "nn.functional.pad.replicate_negative", "matrix_exp",
        "masked.log_softmax", "nn.functional.layer_norm", "nn.functional.rms_norm", "_chunk_cat",
        "nn.functional.rrelu", "bernoulli", "multinomial", "addmm", "mm", "bmm", "baddbmm", "unique_consecutive", "linalg.pinv", "pinverse", "mode",
        "linalg.det", "linalg.slogdet", "linalg.lu_solve", "linalg.eigvalsh", "linalg.matrix_rank.hermitian",
        "native_layer_norm", "cummax", "cummin"}
    assert active(db, RuntimeEnv("2.12.0+cu130", "13.0", ("cpu", "cuda"), driver="580.159.04")) == []


def test_every_rule_file_shipped_is_in_the_database():
    # a file under known_faults/ that the database does not list is never loaded
    from importlib import resources

    from kernelaudit.guard.rules import DATABASE_FILES

    folder = resources.files("kernelaudit.guard") / "known_faults"
    assert sorted(p.name for p in folder.iterdir() if p.name.endswith(".json")) == sorted(DATABASE_FILES)
