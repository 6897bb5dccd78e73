"""A campaign slice: killed, survived, equivalent and stillborn mutants; the store resumes."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
import torch

from kernelaudit.errors import InvalidArgument
from kernelaudit.zoo.mutate.campaign import parse_columns, run_campaign
from kernelaudit.zoo.mutate.generate import enumerate_mutants
from kernelaudit.zoo.mutate.scores import score
from kernelaudit.zoo.mutate.store import RECORDS, CampaignStore
from kernelaudit.zoo.mutate.subjects import Subject, model_as_candidate
from kernelaudit.zoo.mutate.worker import Job

PROBLEM = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    ONES = torch.full((8,), fill_value=1.0)

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * self.ONES + 0.5


B = 4
D = 8


def get_inputs():
    return [torch.randn(B, D)]


def get_init_inputs():
    return []
'''

#: mutant -> what it must be with the kernelbench oracle
EXPECTED = {
    "kwarg-dropped:0": "stillborn",      # torch.full((8,), ) raises while the class body loads
    "add-term-dropped:0": "killed",      # + 0.5 dropped
    "inplace-call:0": "survived",        # x.relu_(): the output is right, the caller's input is clobbered
    "mul-to-div:0": "equivalent",        # / ONES == * ONES, bit for bit
}


@pytest.fixture
def subject(tmp_path):
    path = tmp_path / "scaled_relu.py"
    path.write_text(PROBLEM)
    return Subject("kb/test/scaled_relu", "torch", path, model_as_candidate(PROBLEM), ("ModelNew",))


def test_job_classifies_each_mutant(subject, tmp_path):
    ids = [f"{subject.id}:{k}" for k in EXPECTED]
    assert set(ids) <= {m.id for m in enumerate_mutants([subject])}
    events = []
    job = {"subject": {"id": subject.id, "kind": "torch", "problem_path": str(subject.problem_path),
                       "source": subject.source, "scope": ["ModelNew"]},
           "mutants": ids, "columns": ["kernelbench"], "device": "cpu", "small": True, "timeout_s": 60,
           "check_clean": True, "scratch": str(tmp_path / "scratch")}
    Job(job, events.append).run()
    subj = [e for e in events if e["type"] == "subject"]
    assert subj and subj[0]["clean"] == {"kernelbench": "survived"} and subj[0]["forced"] == {"kernelbench": "killed"}
    got = {e["id"].split(":", 1)[1]: e for e in events if e["type"] == "mutant"}
    assert {k: r["outcome"] for k, r in got.items()} == EXPECTED
    assert got["add-term-dropped:0"]["oracles"] == {"kernelbench": "killed"}
    assert "0.5" in got["add-term-dropped:0"]["before"] and got["add-term-dropped:0"]["lines"] == [12]
    s = score(subj + list(got.values()), ["kernelbench"])
    assert (s.kill["kernelbench"].killed, s.kill["kernelbench"].survived) == (1, 1)
    assert s.outcomes["equivalent"] == 1 and s.outcomes["stillborn"] == 1 and not s.false_rejections


def test_campaign_resumes_an_interrupted_store(subject, tmp_path):
    out = tmp_path / "campaign"
    ops = [m for m in enumerate_mutants([subject]) if m.operator in ("add-term-dropped", "mul-to-div")]
    from kernelaudit.zoo.mutate.operators import get_operators

    operators = get_operators("add-term-dropped,mul-to-div")
    manifest = {"columns": ["kernelbench"], "device": "cpu", "small": True, "subjects": {subject.id: subject.digest}}
    store = CampaignStore.create(out, manifest, resume=False)
    # an earlier run recorded the subject and one mutant, then died mid-write
    store.append({"type": "subject", "subject": subject.id, "clean": {"kernelbench": "survived"},
                  "forced": {"kernelbench": "killed"}})
    store.append({"type": "mutant", "id": ops[0].id, "subject": subject.id, "operator": ops[0].operator,
                  "family": "arith", "site": 0, "outcome": "killed", "oracles": {"kernelbench": "killed"}})
    with open(out / RECORDS, "a") as f:
        f.write('{"type": "mutant", "id": "torn')
    with pytest.raises(InvalidArgument, match="--resume"):
        run_campaign([subject], out, columns=["kernelbench"], operators=operators)
    p = run_campaign([subject], out, columns=["kernelbench"], operators=operators, resume=True, timeout_s=60)
    assert p.done == len(ops) - 1  # only what was not recorded
    recs = CampaignStore.open(out).records()
    ids = [r["id"] for r in recs if r["type"] == "mutant"]
    assert sorted(ids) == sorted(m.id for m in ops) and len(ids) == len(set(ids))
    assert sum(r["type"] == "subject" for r in recs) == 1  # the clean check is not repeated
    assert (out / "records.torn.jsonl").exists()
    assert json.loads((out / "manifest.json").read_text())["resumed"]


def test_columns_name_the_allowed_values():
    assert parse_columns("kernelbench@1e-4,bound") == ["kernelbench@1e-4", "bound"]
    with pytest.raises(InvalidArgument, match="--oracle.*allowed values"):
        parse_columns("nope")


def test_default_jobs_is_one_more_than_the_cores_on_the_cpu(monkeypatch):
    import os

    from kernelaudit.zoo.mutate.campaign import CPU_JOBS_MAX, default_jobs

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert default_jobs("cpu") == 3
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(256)), raising=False)
    assert default_jobs("cpu") == CPU_JOBS_MAX
    assert default_jobs("cuda") == 1 and default_jobs("cuda:0") == 1
    assert default_jobs("cpu", "ray") == 0


def test_an_interrupt_cancels_queued_batches_kills_running_workers_and_drops_their_death_records(monkeypatch):
    """SIGINT during a campaign: queued batches never start, the running batches' workers
    are killed (their deaths not recorded, so a resumed run judges those mutants again),
    a second SIGINT during the clean-up (GNU timeout signals the process, then its group)
    does not cut it short, and the interrupt reaches the caller."""
    import signal
    import threading
    import time

    from kernelaudit.zoo.mutate import campaign

    # generous: only a failing run waits this long, and on a loaded 2-core CI machine (xdist
    # beside the heavy fixtures) a 10 s wait once ran out before the signal was handled
    WAIT_S = 60
    started, interrupted, records = [], [], []
    running = threading.Barrier(3)  # the two pool threads and the signaller

    class FakeWorker:
        def __init__(self, cfg, slot=0):
            self.killed = threading.Event()

        def interrupt(self):
            interrupted.append(self)
            self.killed.set()

        def close(self):
            pass

    def fake_drive(unit, cfg, record, worker, stop=None):
        started.append(unit.mutants[0])
        running.wait(timeout=WAIT_S)
        assert worker.killed.wait(timeout=WAIT_S), "the worker was never killed"
        record({"type": "mutant", "id": unit.mutants[0], "outcome": "crash"})  # what a killed worker reads as

    def signaller():
        running.wait(timeout=WAIT_S)
        main = threading.main_thread().ident  # a process signal reaches the main thread
        signal.pthread_kill(main, signal.SIGINT)
        signal.pthread_kill(main, signal.SIGINT)
        # and again until the workers are killed (every later one lands in the clean-up,
        # which must ignore it): on a loaded CI machine one pair once went unanswered
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            time.sleep(0.5)
            if interrupted:  # the clean-up has begun; it holds its handler until it ends
                break
            signal.pthread_kill(main, signal.SIGINT)

    monkeypatch.setattr(campaign, "Worker", FakeWorker)
    monkeypatch.setattr(campaign, "drive_unit", fake_drive)
    units = [campaign.Unit(subject=None, mutants=[f"m{i}"], check_clean=False) for i in range(6)]
    # Python's own handler (an earlier test in this process, e.g. a local Ray, may have
    # installed another)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # nor blocked, by a library
    try:
        sender = threading.Thread(target=signaller, daemon=True)
        sender.start()
        with pytest.raises(KeyboardInterrupt):
            campaign.run_pool(units, 2, {}, records.append)
        sender.join(timeout=WAIT_S)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGINT, before)
    assert len(started) == 2 and len(interrupted) == 2
    assert records == []


def test_workers_are_spread_over_the_hosts_gpus_round_robin(monkeypatch, tmp_path):
    """Several GPUs on one host: pool worker k starts its processes with CUDA_VISIBLE_DEVICES
    set to GPU k mod N (as its cuda:0); with one GPU the environment is left as it is."""
    import subprocess
    import threading

    from kernelaudit.zoo.mutate import campaign

    seen = []

    class Proc:
        pid, returncode = 0, 0
        stdin = None

        def poll(self):
            return None

    def fake_popen(argv, **kw):
        seen.append(kw["env"].get("CUDA_VISIBLE_DEVICES"))
        return Proc()

    monkeypatch.setattr(subprocess, "Popen", fake_popen)
    cfg = {"log": str(tmp_path / "w.log"), "gpus": ["0", "1", "2"]}
    for slot in range(5):
        campaign.Worker(cfg, slot=slot)._start()
    assert seen == ["0", "1", "2", "0", "1"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    campaign.Worker({"log": cfg["log"], "gpus": []}, slot=1)._start()
    assert seen[-1] is None

    slots, lock = [], threading.Lock()

    class FakeWorker:
        def __init__(self, cfg, slot=0):
            with lock:
                slots.append(slot)

        def close(self):
            pass

    barrier = threading.Barrier(3)
    monkeypatch.setattr(campaign, "Worker", FakeWorker)
    monkeypatch.setattr(campaign, "drive_unit", lambda unit, cfg, record, worker, stop=None: barrier.wait(10))
    units = [campaign.Unit(subject=None, mutants=[f"m{i}"], check_clean=False) for i in range(3)]
    campaign.run_pool(units, 3, cfg, lambda rec: None)
    assert sorted(slots) == [0, 1, 2]  # one worker per pool thread, each its own slot


def test_local_gpus_reads_cuda_visible_devices(monkeypatch):
    from kernelaudit.zoo.mutate.campaign import local_gpus

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 5")
    assert local_gpus() == ["2", "5"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert local_gpus() == []  # one GPU: nothing to spread


def test_the_forced_failure_is_wrong_where_an_output_is_clamped_at_minus_one():
    # 2 * t + 1 has a fixed point at -1: a subject whose outputs clamp there (KernelBench
    # level 2 58, ...Subtract_Clamp) kept its "forced failure" right, so the official
    # checker was wrongly declared unable to judge it.
    from kernelaudit.zoo.mutate.worker import _forced_failure
    from kernelaudit.zoo.problems.loader import Candidate

    class Clamped(torch.nn.Module):
        def forward(self, x):
            return x.clamp(min=-1.0, max=-1.0), x.to(torch.int32)

    clean = Candidate(name="clamped", path=Path("clamped.py"), module=types.SimpleNamespace(ModelNew=Clamped))
    x = torch.tensor([-3.0, 0.0, 2.5])
    right, ints = Clamped()(x)
    forced, forced_ints = _forced_failure(clean).module.ModelNew()(x)
    assert ((forced - right).abs() >= 1).all() and ((forced_ints - ints) == 1).all()
