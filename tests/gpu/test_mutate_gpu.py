"""The mutation campaign on CUDA: one fork server per pool thread judges every batch, each
batch in a forked child with its own CUDA context (the server never makes one).

Skipped without CUDA."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

PROBLEM = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) + 0.5 - x * 0.25


def get_inputs():
    return [torch.randn(64, 32)]


def get_init_inputs():
    return []
'''


def test_one_fork_server_judges_cuda_batches_of_two_subjects(tmp_path):
    from kernelaudit.zoo.mutate.campaign import Unit, Worker, drive_unit
    from kernelaudit.zoo.mutate.generate import enumerate_mutants
    from kernelaudit.zoo.mutate.operators import get_operators
    from kernelaudit.zoo.mutate.subjects import Subject, model_as_candidate

    cfg = {"columns": ["kernelbench", "strongest"], "device": "cuda", "small": True, "timeout_s": 120.0,
           "log": str(tmp_path / "worker.log"), "per_input": True}
    ops = get_operators("sub-to-add,add-term-dropped")
    worker = Worker(cfg)
    assert worker.serve
    recs: list[dict] = []
    pids = []
    try:
        for name in ("one", "two"):
            path = tmp_path / f"{name}.py"
            path.write_text(PROBLEM)
            s = Subject(f"kb/test/{name}", "torch", path, model_as_candidate(PROBLEM), ("ModelNew",))
            drive_unit(Unit(s, [m.id for m in enumerate_mutants([s], ops)], True), cfg, recs.append, worker)
            pids.append(worker.proc.pid)
    finally:
        worker.close()
    assert pids[0] == pids[1]
    subj = [r for r in recs if r["type"] == "subject"]
    assert [r["clean"]["strongest"] for r in subj] == ["survived", "survived"], (tmp_path / "worker.log").read_text()
    outcomes = [r["outcome"] for r in recs if r["type"] == "mutant"]
    assert outcomes and "killed" in outcomes and "unjudged" not in outcomes and "crash" not in outcomes, recs
