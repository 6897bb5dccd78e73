"""Every oracle runs models in KernelBench's mode: training mode, as its checker leaves
them (a BatchNorm normalises with the batch's statistics); the checks other than
``kernelbench`` put dropout in eval mode, so the reference and a candidate compute one
function."""

from __future__ import annotations

import math
import textwrap

import pytest
import torch

from kernelaudit.verdict import Status
from kernelaudit.zoo.check import run_check

PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)
        with torch.no_grad():
            self.bn.running_mean.fill_(3.0)  # far from the batch's own mean
            self.bn.running_var.fill_(9.0)

    def forward(self, x):
        return self.bn(x)


def get_inputs():
    return [torch.rand(4, 3, 5, 5)]


def get_init_inputs():
    return [3]
'''

#: Normalises with the running statistics: what ``.eval()`` would do, not what KernelBench runs.
RUNNING_STATS = '''
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)
        self.bn.running_mean.fill_(3.0)
        self.bn.running_var.fill_(9.0)

    def forward(self, x):
        b = self.bn
        return F.batch_norm(x, b.running_mean, b.running_var, b.weight, b.bias, False, 0.0, b.eps)
'''

#: Normalises with the batch's statistics, as nn.BatchNorm2d does in training mode.
BATCH_STATS = '''
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x):
        b = self.bn
        return F.batch_norm(x, None, None, b.weight, b.bias, True, 0.0, b.eps)
'''


def _files(tmp_path, candidate: str):
    (tmp_path / "bn_problem.py").write_text(textwrap.dedent(PROBLEM))
    (tmp_path / "bn_candidate.py").write_text(textwrap.dedent(candidate))
    return tmp_path / "bn_problem.py", tmp_path / "bn_candidate.py"


@pytest.mark.parametrize("oracle", ["kernelbench", "strongest", "bound", "values"])
def test_every_oracle_rejects_a_batchnorm_that_uses_running_statistics_like_the_official_checker(tmp_path, oracle):
    # the inference shortcut: the official check runs training mode and rejects it
    res = run_check(*_files(tmp_path, RUNNING_STATS), oracle, device="cpu")
    assert res.verdict.status is Status.WRONG, res.verdict.explain()


@pytest.mark.parametrize("oracle", ["kernelbench", "strongest", "bound", "values"])
def test_every_oracle_accepts_a_batchnorm_that_uses_batch_statistics(tmp_path, oracle):
    # a correct KernelBench kernel (rejected by all but kernelbench while they ran eval mode)
    res = run_check(*_files(tmp_path, BATCH_STATS), oracle, device="cpu")
    assert res.verdict.status is Status.OK, res.verdict.explain()


DROPOUT_PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return torch.softmax(self.drop(self.fc(x)), dim=-1)


def get_inputs():
    return [torch.randn(6, 16)]


def get_init_inputs():
    return [16]
'''


def test_checks_judge_a_dropout_problem_without_drawing_masks(tmp_path):
    (tmp_path / "drop_problem.py").write_text(textwrap.dedent(DROPOUT_PROBLEM))
    (tmp_path / "drop_candidate.py").write_text(textwrap.dedent(DROPOUT_PROBLEM).replace("class Model(", "class ModelNew("))
    res = run_check(tmp_path / "drop_problem.py", tmp_path / "drop_candidate.py", "strongest", device="cpu")
    assert res.verdict.status is Status.OK, res.verdict.explain()


def test_check_mode_keeps_training_mode_and_turns_random_modules_off():
    from kernelaudit.zoo.problems.problem_case import check_mode

    m = check_mode(torch.nn.Sequential(torch.nn.BatchNorm1d(4), torch.nn.Dropout(0.5),
                                       torch.nn.LSTM(4, 4, num_layers=2, dropout=0.5)))
    assert m.training and m[0].training and not m[1].training and not m[2].training


def test_the_official_checks_diff_is_measured_a_chunk_at_a_time_without_changing_it(monkeypatch):
    from kernelaudit.zoo.oracles import kernelbench

    ref = torch.randn(1000, dtype=torch.float32)
    got = ref + torch.randn(1000) * 1e-3
    whole = (ref.double() - got.double()).abs()
    monkeypatch.setattr(kernelbench, "chunk_elements", lambda device: 7)
    worst, mean = kernelbench._diff_stats(ref, got, "cpu")
    assert worst == float(whole.max()) and abs(mean - float(whole.mean())) < 1e-15
    got[500] = float("nan")
    assert math.isnan(kernelbench._diff_stats(ref, got, "cpu")[0])
