"""A sweep's findings become guard rules, and the guard loaded with them fixes a program
that hits them (CPU, under the ``wrap32`` fault model at a small scale): the matmul
engine's rules (``bmm``) and a screened factory's (``arange``, fixed in pieces of
offset starts). One sweep serves every test; ``kernelaudit run --rules`` is run in
this process (its environment, then the child's install)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch

from kernelaudit.guard.intercept import guarding
from kernelaudit.guard.proof import bitwise_equal, max_rel_error, tolerance
from kernelaudit.guard.rules import load_rules
from kernelaudit.sweep.cases import Case, GridSpec
from kernelaudit.sweep.schedule import run_sweep
from kernelaudit.sweep.store import RunStore

ROOT = Path(__file__).resolve().parents[2]
SCALE = 12
#: The sweep of record (its run store compressed: verdicts.jsonl.gz, manifest.json.gz).
RECORD = ROOT / "benchmarks/results/2026-12-04-h200-full-grid-all-axes"


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    spec = GridSpec(ops=("bmm", "arange"), dtypes=("float32", "int64"), layouts=("aT", "contig"),
                    directions=("fwd",), thresholds=("2^32",), positions=("below", "above"), scale=SCALE)
    run_sweep(spec, out, device="cpu", fault_model="wrap32")
    return RunStore.open(out)


def _latest(store):
    return [(Case.from_json(x["case"]), x) for x in store.latest().values()]


def test_the_sweep_writes_one_rule_per_failing_group_with_versions_and_action(swept):
    rules = load_rules(swept.path / "rules.json")
    by = {r.name: r for r in rules}
    bmm = {f"sweep-cpu-bmm-float32-{lay}-fwd-{series}" for lay in ("aT", "contig") for series in ("in", "out")}
    assert set(by) == bmm | {"sweep-cpu-arange-float32-contig-fwd-out", "sweep-cpu-arange-int64-contig-fwd-out"}
    gate = "==" + ".".join(torch.__version__.split("+")[0].split(".")[:2]) + ".*"
    latest = _latest(swept)
    for r in rules:
        assert (r.device, r.effect, r.action, r.split_dim) == ("cpu", "wrong", "fix", 0), r.name
        assert r.versions["torch"] == gate
        assert r.provenance["fault_model"] == "wrap32" and r.provenance["cases"]
        # the size predicate: one past the largest correct size below the first failure
        op, dtype, series = r.op, r.dtypes[0], r.name.rsplit("-", 1)[1]
        ok = max(x["case"]["crossing_numel"] for c, x in latest
                 if (c.op, c.dtype, c.series) == (op, dtype, series) and x["verdict"]["status"] == "ok")
        assert r.when["at_least"] == ok + 1, r.name
    # the engine's op is split by the engine; the factory is screened at its aten entry
    assert by["sweep-cpu-bmm-float32-aT-fwd-in"].layouts == ("aT",) and not by["sweep-cpu-bmm-float32-aT-fwd-in"].aten
    ar = by["sweep-cpu-arange-int64-contig-fwd-out"]
    assert (ar.op, ar.aten, ar.when["tensor"], ar.dtypes) == ("arange", ("arange.start_out",), "output", ("int64",))


def _outputs(case: Case, crossing: int, rules=None, fault: bool = True) -> tuple:
    """The case's outputs, its inputs generated outside any fault model (under wrap32
    the generator's own ops would wrap too); the op itself under wrap32 (``fault``),
    with the guard above it when ``rules`` are given."""
    from kernelaudit.sweep.judge.operands import _as_tuple, device_inputs, placed_operands
    from kernelaudit.faults import make_fault_model
    from kernelaudit.sweep.ops.spec import DTYPES

    if case.spec.family == "factory":
        def call():
            return (case.spec.extra["factory"](crossing, DTYPES[case.dtype], "cpu"),)
    else:
        _, views = device_inputs(placed_operands(case), "cpu", grad=False)

        def call():
            return _as_tuple(case.spec.call(*views))
    if rules is not None:
        with guarding("fix", rules=rules, fault_model="wrap32", scale=SCALE) as engine:
            outs = call()
        st = engine.stats()
        assert st.fixed >= 1 and st.refused == 0, (case.id, st.summary())
        return outs
    with make_fault_model("wrap32", case.thresholds) if fault else contextlib.nullcontext():
        return call()


def test_the_rules_fix_every_failing_case_and_without_them_it_stays_wrong(swept):
    rules = load_rules(swept.path / "rules.json")
    failing = [(c, x["case"]["crossing_numel"]) for c, x in _latest(swept) if x["verdict"]["status"] != "ok"]
    assert {c.op for c, _ in failing} == {"bmm", "arange"} and len(failing) == 6
    for case, crossing in failing:
        honest = _outputs(case, crossing, fault=False)
        assert not bitwise_equal(_outputs(case, crossing), honest), case.id
        got = _outputs(case, crossing, rules)
        if case.op == "arange":  # computed exactly in pieces: bitwise the honest kernel's
            assert bitwise_equal(got, honest), case.id
        else:
            assert max_rel_error(got, honest) <= tolerance(case), case.id


# Checked with numpy: under wrap32 torch's own sub/max on more than 2^12 elements wrap too.
PROGRAM = """
import numpy as np, torch
a = torch.randn({B}, 64, 32).transpose(1, 2)      # (B, 32, 64) transposed view
b = torch.randn({B}, 64, 32)
ref = a.double().numpy() @ b.double().numpy()
result = [float(np.abs(torch.bmm(a, b).numpy() - ref).max())]
for dtype in (torch.int64, torch.float32):
    got = torch.arange(3, 3 + 2 * {N}, 2, dtype=dtype).numpy()
    result.append(int((got != np.arange(3, 3 + 2 * {N}, 2).astype(got.dtype)).sum()))
"""


def test_kernelaudit_run_with_the_sweep_rules_gives_correct_answers(swept, tmp_path, monkeypatch):
    """What ``kernelaudit run --fault-model wrap32 --scale 12 --rules RUN/rules.json --
    python prog.py`` does, in this process: the environment its CLI gives the child
    (:func:`child_env`), then what the child's boot calls (``install_from_env``), then
    the program. (The spawn and the boot are ``tests/guard/test_guard_cli.py``'s.)"""
    from kernelaudit.guard import intercept
    from kernelaudit.guard.cli import child_env

    env = child_env("fix", "wrap32", SCALE, tmp_path, rules=(swept.path / "rules.json",), base={})
    for k, v in env.items():
        if k != "PYTHONPATH":
            monkeypatch.setenv(k, v)
    B = 2 ** SCALE // (32 * 32) + 1  # output (B, 32, 32) just past 2^32 (scaled)
    N = 2 ** SCALE + 100              # arange just past 2^32 (scaled)
    scope: dict = {}
    try:
        engine = intercept.install_from_env()
        exec(PROGRAM.format(B=B, N=N), scope)
    finally:
        intercept.uninstall()
    err, bad_int, bad_float = scope["result"]
    assert err < 1e-4 and (bad_int, bad_float) == (0, 0), scope["result"]
    st = engine.stats()
    assert (st.fixed, st.refused) == (3, 0), st.summary()  # one bmm, two aranges


def _unpacked(tmp_path: Path, record: Path, name: str) -> Path:
    """A committed run store (``verdicts.jsonl.gz``, ``manifest.json.gz``) unpacked under
    the name it ran with (rules record it in their provenance)."""
    import gzip
    import shutil

    store = tmp_path / name
    store.mkdir()
    for part in ("verdicts.jsonl", "manifest.json"):
        with gzip.open(record / f"{part}.gz", "rb") as f, open(store / part, "wb") as g:
            shutil.copyfileobj(f, g)
    return store


@pytest.mark.skipif(not RECORD.is_dir(), reason="the H200 sweep of record is not in this checkout")
def test_the_shipped_sweep_rules_are_what_the_sweep_of_record_gives(tmp_path):
    from kernelaudit.sweep.rules_out import rules_from_store

    store = _unpacked(tmp_path, RECORD, "h200")  # the store's name, as the sweep ran it (runs/h200)
    shipped = [r for r in load_rules(ROOT / "src/kernelaudit/guard/known_faults/sweeps_of_record.json")]
    rules, notes = rules_from_store(RunStore.open(store))
    assert rules == shipped and notes == []
    # every finding is fixed: arange in pieces of offset starts, SDPA split by batch
    assert {(r.op, r.effect, r.action, r.split_dim) for r in rules} == {("arange", "wrong", "fix", 0),
                                                                         ("sdpa", "error", "fix", 0)}
    # the flash-attention grid limit is a batch predicate, not an element count
    assert {r.when["at_least"] for r in rules if r.name.endswith("-attn_batch")} == {65536}


def test_a_finding_on_the_attention_batch_axis_becomes_a_batch_dim_rule(tmp_path):
    """Past a grid limit the predicate is the batch (dim 0), not the element count: the
    rule flags batch >= the first failing batch and splits along it."""
    spec = GridSpec(ops=("sdpa",), dtypes=("float32",), layouts=("contig",), directions=("fwd",),
                    axes=("attn_batch",), positions=("below", "at", "above"), scale=SCALE)
    run_sweep(spec, tmp_path, device="cpu", fault_model="grid16")
    store = RunStore.open(tmp_path)
    rules = load_rules(tmp_path / "rules.json")
    assert [r.name for r in rules] == ["sweep-cpu-sdpa-float32-contig-fwd-scores-attn_batch"]
    rule = rules[0]
    rows = [x for _, x in _latest(store)]
    first_bad = min(x["case"]["measure"] for x in rows if x["verdict"]["status"] == "wrong")
    ok_below = max(x["case"]["measure"] for x in rows if x["verdict"]["status"] == "ok" and
                   x["case"]["measure"] < first_bad)
    assert rule.when == {"kind": "dim", "dim": 0, "at_least": ok_below + 1}
    assert (rule.action, rule.split_dim) == ("fix", 0) and "attn_batch axis" in rule.explain
    assert "_scaled_dot_product_flash_attention" in rule.aten


def test_a_finding_of_attention_with_the_batch_on_the_heads_becomes_a_heads_dim_rule(tmp_path):
    """``sdpa.heads`` sweeps the heads (its kernel sees the batch on dim 1): its finding
    flags heads >= the first failing count at SDPA's entry points and splits along them."""
    spec = GridSpec(ops=("sdpa.heads",), dtypes=("float32",), layouts=("contig",), directions=("fwd",),
                    axes=("attn_batch",), positions=("below", "at", "above"), scale=SCALE)
    run_sweep(spec, tmp_path, device="cpu", fault_model="grid16")
    rules = load_rules(tmp_path / "rules.json")
    assert [r.name for r in rules] == ["sweep-cpu-sdpa.heads-float32-contig-fwd-scores-attn_batch"]
    rule = rules[0]
    rows = [x for _, x in _latest(RunStore.open(tmp_path))]
    first_bad = min(x["case"]["measure"] for x in rows if x["verdict"]["status"] == "wrong")
    ok_below = max(x["case"]["measure"] for x in rows if x["verdict"]["status"] == "ok" and
                   x["case"]["measure"] < first_bad)
    assert rule.when == {"kind": "dim", "dim": 1, "at_least": ok_below + 1}
    assert (rule.op, rule.action, rule.split_dim) == ("sdpa.heads", "fix", 1)
    assert "_scaled_dot_product_flash_attention" in rule.aten


HEADS = ROOT / "benchmarks/results/2026-12-04-h200-sdpa-heads-attn-batch"


@pytest.mark.skipif(not HEADS.is_dir(), reason="the H200 attention-batch sweep is not in this checkout")
def test_the_shipped_heads_rules_are_what_the_attention_batch_sweep_gives(tmp_path):
    """On the H200 SDPA raises from 65536 on, whether the count sits on the batch or the
    heads: the heads findings ship as dim-1 rules that split along the heads."""
    from kernelaudit.sweep.rules_out import rules_from_store

    store = _unpacked(tmp_path, HEADS, "heads-h200")
    rules, notes = rules_from_store(RunStore.open(store))
    shipped = load_rules(ROOT / "src/kernelaudit/guard/known_faults/sdpa_heads.json")
    assert [r for r in rules if r.op == "sdpa.heads"] == shipped and notes == []
    assert len(shipped) == 8  # float16, bfloat16 x contig, slice x fwd, bwd
    assert {(r.effect, r.action, r.split_dim, r.when["dim"], r.when["at_least"]) for r in shipped} == {
        ("error", "fix", 1, 1, 65536)}
    # the batch-dim twin of each finding (sdpa.flash) is what the sweep of record already ships
    record = load_rules(ROOT / "src/kernelaudit/guard/known_faults/sweeps_of_record.json")
    assert {(r.dtypes, r.layouts, r.when["dim"], r.when["at_least"]) for r in rules if r.op == "sdpa.flash"} <= {
        (r.dtypes, r.layouts, r.when.get("dim"), r.when["at_least"]) for r in record if r.op == "sdpa"}


QUICK = ROOT / "benchmarks/results/2026-12-04-h200-quick-sweep-146s-interpolate-past-2p31"


@pytest.mark.skipif(not QUICK.is_dir(), reason="the H200 quick sweep is not in this checkout")
def test_the_shipped_opinfo_rules_are_what_the_quick_sweep_gives_for_ops_the_full_grid_lacks(tmp_path):
    from kernelaudit.sweep.rules_out import rules_from_store

    store = _unpacked(tmp_path, QUICK, "quick-h200")
    full_ops = {r.op for r in load_rules(ROOT / "src/kernelaudit/guard/known_faults/sweeps_of_record.json")}
    heads = {r.op for r in load_rules(ROOT / "src/kernelaudit/guard/known_faults/sdpa_heads.json")}
    shipped = load_rules(ROOT / "src/kernelaudit/guard/known_faults/quick_sweep_opinfo.json")
    rules, notes = rules_from_store(RunStore.open(store))
    assert [r for r in rules if r.op not in full_ops | heads] == shipped
    assert notes == []  # every case judged: no timeouts at the 10 s quick case bound
    # interpolate(nearest) is silently wrong from just past 2^31 input elements (the
    # widened recipe keeps its output below 2^31), so its rules start there
    assert all(2**31 - 2**18 < r.when["at_least"] <= 2**31 for r in shipped if "interpolate" in r.op)
    # derived ops split along the dim their recipe scales (dim 0 here); interpolate's
    # size check is screened at the entry points its trace finds: the forward and the
    # backward split along dim 0 (the backward's input_size argument cut with it)
    direction = {r.name: r.name.split("-")[-2] for r in shipped}  # sweep-cuda-OP-DTYPE-LAYOUT-DIRECTION-SERIES
    interp = "nn.functional.interpolate.nearest"
    assert {(r.op, r.action, r.split_dim) for r in shipped if r.op != interp} == {
        ("cdist", "fix", 0), ("nn.functional.adaptive_avg_pool1d", "fix", 0)}
    assert {(r.dtypes, direction[r.name], r.aten, r.action, r.split_dim) for r in shipped if r.op == interp} == {
        ((dt,), d, (entry,), action, split) for dt in ("float32", "float16")
        for d, entry, action, split in (("fwd", "upsample_nearest1d", "fix", 0),
                                        ("bwd", "upsample_nearest1d_backward", "fix", 0))}


BRACKETED = ROOT / "benchmarks/results/2026-12-04-h200-quick-sweep-bracketed-and-case-profile"


@pytest.mark.skipif(not BRACKETED.is_dir(), reason="the H200 bracketed quick sweep is not in this checkout")
def test_the_shipped_float32_heads_rules_are_what_the_bracketed_quick_sweep_gives(tmp_path):
    """float32 SDPA with 65537 heads raised in its forward on the H200 (the same count on
    the batch dim ran): the finding ships as a scores rule split along the heads."""
    from kernelaudit.sweep.rules_out import rules_from_store

    store = _unpacked(tmp_path, BRACKETED, "quick-h200")
    rules, _ = rules_from_store(RunStore.open(store))
    shipped = load_rules(ROOT / "src/kernelaudit/guard/known_faults/sdpa_heads_float32.json")
    assert [r for r in rules if r.op == "sdpa.heads" and r.dtypes == ("float32",)] == shipped
    assert {(r.effect, r.action, r.split_dim, r.when["kind"], r.name.split("-")[-2]) for r in shipped} == {
        ("error", "fix", 1, "attention-scores", "fwd")}
    # the batch-dim SDPA in float32 ran at the same scores: no rule for it from this store
    assert not [r for r in rules if r.op == "sdpa" and r.dtypes == ("float32",)]


#: The full grid's store after segment 8 (its 2^31 elements and 2^32 bytes cases in).
FULL_GRID = ROOT / "benchmarks/results/2026-12-05-h100-full-grid-segments-6-8-and-decode"
#: Ops of the full grid's findings confirmed with plain torch (repro_cuda_findings.py).
CONFIRMED = {"linspace", "logspace", "nn.functional.adaptive_avg_pool2d", "nn.functional.adaptive_avg_pool3d",
             "nn.functional.adaptive_max_pool1d", "nn.functional.adaptive_max_pool2d",
             "nn.functional.adaptive_max_pool3d", "nn.functional.avg_pool1d"}


def _shipped_as_derived(tmp_path: Path, record: Path, name: str, ops: set) -> list:
    """The rules shipped in ``known_faults/NAME``, checked to be exactly those the committed
    store of ``record`` gives for ``ops``, in order."""
    from kernelaudit.sweep.rules_out import rules_from_store

    store = _unpacked(tmp_path, record / "store", "h200")
    rules, _ = rules_from_store(RunStore.open(store))
    shipped = load_rules(ROOT / "src/kernelaudit/guard/known_faults" / name)
    assert [r for r in rules if r.op in ops] == shipped
    assert {r.op for r in shipped} == ops
    return shipped


@pytest.mark.skipif(not FULL_GRID.is_dir(), reason="the full grid's store is not in this checkout")
def test_the_shipped_pool_and_factory_rules_are_what_the_full_grids_store_gives(tmp_path):
    shipped = _shipped_as_derived(tmp_path, FULL_GRID, "full_grid_pools_factories.json", CONFIRMED)
    # pooling splits along the batch; linspace is computed in pieces, logspace refused
    assert {(r.action, r.split_dim) for r in shipped if "pool" in r.op} == {("fix", 0)}
    assert {(r.op, r.action) for r in shipped if "space" in r.op} == {("linspace", "fix"), ("logspace", "fix")}
    assert all(r.versions == {"torch": "==2.11.*", "cuda": "==13.0.*", "driver": "==580.*"} for r in shipped)
    # the grid's 2^31 cases brought the pooling rules down from just below 2^32 to just past 2^31
    assert all(2**31 - 2**12 < r.when["at_least"] < 2**31 + 2**12 for r in shipped
               if "pool" in r.op and r.when["kind"] == "numel")


#: Ops of the full grid's 2^31 findings shipped in full_grid_2_31.json (its ``about`` says why these).
AT_2_31 = {"nn.functional.interpolate.area", "nn.functional.interpolate.nearest-exact",
           "nn.functional.upsample_nearest", "nn.functional.interpolate.bilinear", "nn.functional.upsample_bilinear",
           "nn.functional.avg_pool2d", "nn.functional.multilabel_margin_loss", "nn.functional.pad.reflect",
           "nn.functional.pad.replicate_negative", "matrix_exp", "masked.log_softmax", "addmm",
           "unique_consecutive"}


@pytest.mark.skipif(not FULL_GRID.is_dir(), reason="the full grid's store is not in this checkout")
def test_the_shipped_2_31_rules_are_what_the_full_grids_store_gives(tmp_path):
    shipped = _shipped_as_derived(tmp_path, FULL_GRID, "full_grid_2_31.json", AT_2_31)
    # every finding is fixed: split (the same pieces lift an op's own refusal), or the
    # entry's own fix (unique_consecutive merged, softmax backward, matrix_exp's backward)
    assert {r.action for r in shipped} == {"fix"}


FULL_GRID_45 = ROOT / "benchmarks/results/2026-12-05-h100-full-grid-segments-4-5-and-softmin-backward"
FULL_GRID_10 = ROOT / "benchmarks/results/2026-12-06-h100-prefill-k-unroll-ncu-segment-10"


@pytest.mark.skipif(not FULL_GRID_10.is_dir(), reason="the full grid's segment 10 store is not in this checkout")
def test_the_shipped_determinant_rules_are_what_segment_10s_store_gives(tmp_path):
    shipped = _shipped_as_derived(tmp_path, FULL_GRID_10, "full_grid_batched_lu_chunk_cat.json",
                                  {"linalg.det", "linalg.slogdet"})
    assert {(r.action, r.split_dim) for r in shipped} == {("fix", 0)}
    # the store's _chunk_cat rules (sizes in elements and bytes) are replaced by a
    # hand-written grid rule: every size the grid tried failed, so its derived pieces did
    # too (H100, 2026-12-06; test_chunk_cat_rule.py)
    assert not [r for r in load_rules(ROOT / "src/kernelaudit/guard/known_faults/full_grid_batched_lu_chunk_cat.json")
                if r.op == "_chunk_cat"]


@pytest.mark.skipif(not FULL_GRID_45.is_dir(), reason="the full grid's later store is not in this checkout")
def test_the_shipped_softmin_backward_rule_is_what_the_full_grids_later_store_gives(tmp_path):
    shipped = _shipped_as_derived(tmp_path, FULL_GRID_45, "full_grid_softmax_backward.json", {"nn.functional.softmin"})
    # softmin's call also negates the crossing tensor: no split dim, but the entry's own fix
    (rule,) = shipped
    assert (rule.action, rule.split_dim, rule.aten, rule.dtypes, rule.effect) == (
        "fix", None, ("_softmax_backward_data",), ("float16",), "wrong")
    assert rule.when["inner_of"] == "dim"  # the spatial kernel only
    assert 2**32 - 2**10 < rule.when["at_least"] <= 2**32
    # the guard holding it (scaled to 64 elements, on the CPU) runs the backward over the
    # last dim there, with the bare call's values up to the order of a row's sum
    import dataclasses

    import torch.nn.functional as F

    from kernelaudit.guard import intercept

    small = dataclasses.replace(rule, device="cpu", versions={}, when={**rule.when, "at_least": 64})
    y = torch.randn(16, 5, dtype=torch.float16)
    g = torch.randn(16, 5, dtype=torch.float16)

    def grad(dim: int) -> torch.Tensor:
        ys = y.clone().requires_grad_()
        F.softmin(ys, dim).backward(g)
        return ys.grad

    bare = [grad(0), grad(1)]
    try:
        engine = intercept.install("fix", rules=[small], native=False)
        x = torch.randn(8, 4, dtype=torch.float16, requires_grad=True)  # 32 elements: runs
        F.softmin(x, 0).backward(torch.ones(8, 4, dtype=torch.float16))
        got = [grad(0), grad(1)]   # over the last dim another kernel runs, right: the rule lets it through
        st = engine.stats()
    finally:
        intercept.uninstall()
    assert (st.fixed, st.refused) == (1, 0), st.summary()
    torch.testing.assert_close(got[0], bare[0], rtol=2e-3, atol=1e-3)
    assert torch.equal(got[1], bare[1])


GRID_OF_RECORD = ROOT / "benchmarks/results/2026-12-08-h100-small-prefill-row-grown-qr-ldl-2p32-ok"


@pytest.mark.skipif(not GRID_OF_RECORD.is_dir(), reason="the full grid's store of record is not in this checkout")
def test_the_shipped_reflect_pad_row_rules_are_the_dim_axis_rules_the_store_of_record_gives(tmp_path):
    # reflection_pad1d_backward's grid holds 65,535 rows: the element rules' pieces (2^31
    # elements) would still hold more, so the dim axis' rules ship beside them
    from kernelaudit.sweep.rules_out import rules_from_store

    rules, _ = rules_from_store(RunStore.open(_unpacked(tmp_path, GRID_OF_RECORD / "store", "h200")))
    derived = [r for r in rules if r.op == "nn.functional.pad.reflect" and r.when["kind"] == "dim"]
    shipped = load_rules(ROOT / "src/kernelaudit/guard/known_faults/full_grid_reflect_pad_rows.json")
    assert shipped == derived and len(shipped) == 2
    assert {(r.aten, r.split_dim, r.when["dim"], r.when["at_least"]) for r in shipped} == {
        (("reflection_pad1d_backward",), 0, 0, 65533)}


def test_a_rule_explains_the_action_it_takes():
    # an entry with its own fix but no split dim is fixed, not refused: the explanation the
    # rule writer gives (and the shipped database keeps) must not say "raise" for it
    from kernelaudit.guard.rules import known_faults

    said = [(r.name, r.action) for r in known_faults() if "(raise: " in r.explain and r.action != "raise"]
    assert said == []
    assert any("own fix, no split dim" in r.explain for r in known_faults() if r.action == "fix")
