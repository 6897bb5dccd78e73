"""The campaign's fast paths give the results of the slow ones: spliced mutants, coverage decided
before a mutant is produced, the lighter Triton interpreter, and ``strongest`` stopping at its
first rejecting part."""

from __future__ import annotations

import os

import pytest
import torch
import triton
import triton.language as tl

from kernelaudit.zoo.mutate import generate
from kernelaudit.zoo.mutate.generate import SiteTable, enumerate_mutants, materialise_slow
from kernelaudit.zoo.mutate.subjects import Subject, model_as_candidate, select_subjects
from kernelaudit.zoo.mutate.worker import Job, column_outcome, judge_columns, lighten_interpreter

PROBLEM = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        if x.shape[0] > 1000:  # never taken at these shapes
            return torch.sigmoid(x) * 3.0 - 1.0
        y = torch.relu(x) * 2.0 + 0.5
        return torch.sum(y, dim=1, keepdim=True) - x.mean()


B = 4
D = 8


def get_inputs():
    return [torch.randn(B, D)]


def get_init_inputs():
    return []
'''


@triton.jit
def _scaled(x, s):
    return x * s + 1.0


@triton.jit
def _kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, _scaled(tl.exp(x), 0.5), mask=mask)  # a nested @jit call


@pytest.fixture
def subject(tmp_path):
    path = tmp_path / "branchy.py"
    path.write_text(PROBLEM)
    return Subject("kb/test/branchy", "torch", path, model_as_candidate(PROBLEM), ("ModelNew",))


def test_spliced_mutants_equal_the_printed_ones(subject):
    table = SiteTable(subject)
    mutants = list(enumerate_mutants([subject]))
    spliced = 0
    for m in mutants:
        fast, slow = table.materialise(m), materialise_slow(subject, m)
        assert fast == slow, m.id
        touched = table.touched_lines(m)
        assert set(slow.lines) <= set(touched), m.id  # the coverage test may use the span: it holds the change
        spliced += table.edits[m.operator][m.site].new is not None
    assert len(mutants) >= 15 and spliced >= len(mutants) * 3 // 4  # most sites take the fast path


def test_unrun_branch_is_equivalent_without_being_produced(subject, tmp_path, monkeypatch):
    table = SiteTable(subject)
    mutants = list(enumerate_mutants([subject]))
    lines = PROBLEM.splitlines()
    dead = [m for m in mutants if all("sigmoid" in lines[n - 1] for n in table.touched_lines(m))]
    live = [m for m in mutants if m.operator == "add-term-dropped"]
    assert dead and live
    produced = []
    real = generate.materialise

    def spy(subject, mutant, table=None):  # noqa: ANN001, ANN202
        produced.append(mutant.id)
        return real(subject, mutant, table)

    monkeypatch.setattr(generate, "materialise", spy)
    events = []
    ids = [m.id for m in dead[:3] + live[:1]]
    job = {"subject": {"id": subject.id, "kind": "torch", "problem_path": str(subject.problem_path),
                       "source": subject.source, "scope": ["ModelNew"]},
           "mutants": ids, "columns": ["kernelbench"], "device": "cpu", "small": True, "timeout_s": 60,
           "check_clean": False, "scratch": str(tmp_path / "scratch"), "per_input": False}
    Job(job, events.append).run()
    got = {e["id"]: e for e in events if e["type"] == "mutant"}
    for m in dead[:3]:
        assert got[m.id]["outcome"] == "equivalent" and "never run" in got[m.id]["reason"]
        assert m.id not in produced  # decided from the coverage alone
    assert got[live[0].id]["outcome"] == "killed" and produced == [live[0].id]
    assert set(got[live[0].id]["timing"]["columns"]) == {"kernelbench"}  # per-column seconds recorded


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="the Triton CPU interpreter is not in use")
def test_lighter_interpreter_gives_the_same_bits(monkeypatch):
    import triton
    import triton.runtime.interpreter as ti

    def run() -> torch.Tensor:
        x = torch.linspace(-3, 3, 37)
        y = torch.empty_like(x)
        _kernel[(triton.cdiv(37, 16),)](x, y, 37, BLOCK=16)
        return y

    for name in ("_patch_lang", "_kernelaudit_light"):  # undone after the test
        monkeypatch.setattr(ti, name, getattr(ti, name, False), raising=False)
    monkeypatch.setattr(ti.GridExecutor, "__call__", ti.GridExecutor.__call__)
    calls = []
    original = ti._patch_lang
    monkeypatch.setattr(ti, "_patch_lang", lambda fn: calls.append(fn) or original(fn))
    plain = run()
    assert len(calls) == 4  # the launch, then the nested helper in each of its 3 programs
    calls.clear()
    assert lighten_interpreter()
    light = run()
    assert torch.equal(plain.view(torch.int32), light.view(torch.int32))
    assert torch.allclose(light, torch.exp(torch.linspace(-3, 3, 37)) * 0.5 + 1.0)
    assert len(calls) == 1  # the launch's patch only


def test_strongest_stops_at_the_first_rejecting_part_with_the_same_outcome(subject, tmp_path):
    from kernelaudit.zoo.problems import load_candidate, load_problem

    problem = load_problem(subject.problem_path)
    table = SiteTable(subject)
    m = next(m for m in enumerate_mutants([subject]) if m.operator == "add-term-dropped"
             and "0.5" in table.materialise(m).before)
    paths = {"clean": subject.source, "mutant": table.materialise(m).source}
    for name, source in paths.items():
        p = tmp_path / f"{name}.py"
        p.write_text(source)
        cand = load_candidate(p)
        short = judge_columns(problem, cand, ["strongest"], "cpu", True)["strongest"]
        parts = judge_columns(problem, cand, ["bound", "shapes", "values", "tamper", "static", "strongest"],
                              "cpu", True)
        assert column_outcome(short) == column_outcome(parts["strongest"]), name
        if name == "clean":
            assert column_outcome(short) == "survived" and "not run" not in short.message
        else:
            assert column_outcome(short) == "killed" and "not run" in short.message and "values" in short.message


#: A slice of the corpus campaign (issue 17: "a slice of it in CI"), through worker processes:
#: mutant -> outcome with the kernelbench column (leaky_relu's shared kernel branches on an op name).
CORPUS_SLICE = {
    "add-term-dropped:0": "equivalent",  # in a branch of another op: decided from coverage
    "float-constant-perturb:0": "equivalent",
    "add-term-dropped:5": "killed",  # offs = program_id * BLOCK: every program reads block 0
    "add-term-dropped:6": "stillborn",  # tl.load(x_ptr): a scalar load the interpreter rejects
}


def test_corpus_slice_through_the_campaign(tmp_path):
    from kernelaudit.zoo.mutate.campaign import run_campaign
    from kernelaudit.zoo.mutate.operators import get_operators
    from kernelaudit.zoo.mutate.store import CampaignStore

    s = select_subjects(["corpus/leaky_relu"])[0]
    ops = get_operators("add-term-dropped,float-constant-perturb")
    wanted = {f"{s.id}:{k}" for k in CORPUS_SLICE}
    all_ids = [m.id for m in enumerate_mutants([s], ops)]
    assert wanted <= set(all_ids)
    # the seeded sample of --limit is not what this test is about: plan every mutant of two operators,
    # then keep the four by resuming a store that already holds the rest
    out = tmp_path / "slice"
    manifest = {"columns": ["kernelbench"], "device": "cpu", "small": True, "operators": [o.name for o in ops],
                "subjects": {s.id: s.digest}}
    store = CampaignStore.create(out, manifest, resume=False)
    for mid in all_ids:
        if mid not in wanted:
            store.append({"type": "mutant", "id": mid, "subject": s.id, "operator": mid.split(":")[-2],
                          "family": "x", "site": 0, "outcome": "unjudged", "reason": "not in this slice"})
    p = run_campaign([s], out, columns=["kernelbench"], operators=ops, resume=True, timeout_s=60, per_input=False)
    assert p.done == len(wanted)
    recs = CampaignStore.open(out).records()
    subj = [r for r in recs if r["type"] == "subject"]
    assert len(subj) == 1 and subj[0]["clean"] == {"kernelbench": "survived"}
    assert subj[0]["forced"] == {"kernelbench": "killed"}
    got = {r["id"].split(":", 1)[1]: r for r in recs if r["type"] == "mutant" and r["id"] in wanted}
    assert {k: r["outcome"] for k, r in got.items()} == CORPUS_SLICE
    assert "timing" not in got["add-term-dropped:0"] and "never run" in got["add-term-dropped:0"]["reason"]
    assert got["add-term-dropped:5"]["oracles"] == {"kernelbench": "killed"}
    assert "program_id(0) * BLOCK" in got["add-term-dropped:5"]["after"]
    # the worker spliced these corpus mutants (kernels inlined, indented): the text the slow path prints
    table = SiteTable(s)
    for k in ("add-term-dropped:5", "float-constant-perturb:0"):
        m = generate.Mutant.parse(f"{s.id}:{k}")
        assert table.edits[m.operator][m.site].new is not None
        assert table.materialise(m) == materialise_slow(s, m), k


DEADLY = '''\
import os

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        if x.shape[0] - 1000 > 0:  # never at these shapes; a sign flipped, the process ends
            os._exit(3)
        return torch.relu(x) + 0.5


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''


def test_a_mutant_that_ends_its_process_costs_a_fork_and_the_rest_is_judged(tmp_path):
    from kernelaudit.zoo.mutate.campaign import run_campaign
    from kernelaudit.zoo.mutate.operators import get_operators
    from kernelaudit.zoo.mutate.store import CampaignStore

    path = tmp_path / "deadly.py"
    path.write_text(DEADLY)
    s = Subject("kb/test/deadly", "torch", path, model_as_candidate(DEADLY), ("ModelNew",))
    ops = get_operators("sub-to-add,add-term-dropped")
    ids = [m.id for m in enumerate_mutants([s], ops)]
    assert ids == [f"{s.id}:sub-to-add:0", f"{s.id}:add-term-dropped:0"]
    run_campaign([s], tmp_path / "c", columns=["kernelbench"], operators=ops, timeout_s=60, per_input=False)
    recs = CampaignStore.open(tmp_path / "c").records()
    got = {r["id"]: r for r in recs if r["type"] == "mutant"}
    assert got[ids[0]]["outcome"] == "crash" and "exit 3" in got[ids[0]]["reason"]
    assert got[ids[1]]["outcome"] == "killed"  # judged by the next child, forked after the one setup
    subj = [r for r in recs if r["type"] == "subject"]
    assert len(subj) == 1 and subj[0]["clean"] == {"kernelbench": "survived"}
    assert subj[0]["timing"]["setup"] > 0


_GUARD_SCRIPT = '''
import os, sys
os.environ["TRITON_INTERPRET"] = "1"
import torch, triton, triton.language as tl
from kernelaudit.zoo.mutate.worker import guard_interpreter_memory

@triton.jit
def copy(x, y, n, BLOCK: tl.constexpr, MASKED: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    if MASKED:
        tl.store(y + offs, tl.load(x + offs, mask=offs < n) * 2, mask=offs < n)
    else:
        tl.store(y + offs, tl.load(x + offs) * 2)

x = torch.arange(10, dtype=torch.float32)
y0 = torch.empty(10)
copy[(1,)](x, y0, 10, BLOCK=16, MASKED=True)
assert guard_interpreter_memory()
y1 = torch.empty(10)
copy[(1,)](x, y1, 10, BLOCK=16, MASKED=True)
assert torch.equal(y0, y1) and torch.equal(y1, x * 2)
try:
    copy[(1,)](x, torch.empty(10), 10, BLOCK=4096, MASKED=False)
except Exception as exc:
    print("RAISED", type(exc).__name__, str(exc)[:300])
else:
    print("NOT RAISED")
'''


def test_the_interpreter_guard_refuses_out_of_bounds_access_and_changes_nothing_in_bounds():
    """A mutant that drops a mask must raise in the kernel, not corrupt the worker's heap."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _GUARD_SCRIPT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "RAISED" in out.stdout and "out-of-bounds load" in out.stdout, out.stdout


def test_a_refused_out_of_bounds_access_is_a_crash_not_a_stillborn_mutant():
    from kernelaudit.zoo.mutate.worker import GUARD_MARK, _stillborn_error

    class InterpreterError(Exception):  # what Triton's interpreter wraps a kernel's exception in
        pass

    try:
        try:
            raise IndexError(f"out-of-bounds load at address 0x10: outside every tensor ({GUARD_MARK})")
        except IndexError as inner:
            raise InterpreterError(repr(inner)) from inner
    except InterpreterError as exc:
        assert not _stillborn_error(exc)
    assert _stillborn_error(InterpreterError("IncompatibleTypeErrorImpl: int32 and pointer"))


@pytest.mark.parametrize("zygote", [True, False], ids=["zygote", "in-process as on CUDA"])
def test_one_fork_server_judges_every_batch_of_a_thread_and_is_replaced_when_it_dies(tmp_path, zygote):
    from kernelaudit.zoo.mutate.campaign import Unit, Worker, drive_unit
    from kernelaudit.zoo.mutate.operators import get_operators

    subjects = []
    for name in ("one", "two"):
        path = tmp_path / f"{name}.py"
        path.write_text(DEADLY)
        subjects.append(Subject(f"kb/test/{name}", "torch", path, model_as_candidate(DEADLY), ("ModelNew",)))
    ops = get_operators("sub-to-add,add-term-dropped")
    cfg = {"columns": ["kernelbench"], "device": "cpu", "small": True, "timeout_s": 60.0,
           "log": str(tmp_path / "worker.log"), "per_input": False, "zygote": zygote}
    worker = Worker(cfg)
    assert worker.serve
    recs: list[dict] = []
    pids = []
    try:
        for s in subjects:
            ids = [m.id for m in enumerate_mutants([s], ops)]
            drive_unit(Unit(s, ids, True), cfg, recs.append, worker)
            pids.append(worker.proc.pid)
        assert pids[0] == pids[1]  # the second subject reused the first one's process: imports paid once
        worker.proc.kill()  # a server that died between batches is replaced by the next batch
        worker.proc.wait()
        s = subjects[0]
        drive_unit(Unit(s, [f"{s.id}:add-term-dropped:0"], False), cfg, recs.append, worker)
        assert worker.proc is not None and worker.proc.pid != pids[0]
    finally:
        worker.close()
    out = [(r["id"].split(":", 1)[1], r["outcome"]) for r in recs if r["type"] == "mutant"]
    assert out == [("sub-to-add:0", "crash"), ("add-term-dropped:0", "killed")] * 2 + [("add-term-dropped:0", "killed")]
    assert [r["subject"] for r in recs if r["type"] == "subject"] == ["kb/test/one", "kb/test/two"]
