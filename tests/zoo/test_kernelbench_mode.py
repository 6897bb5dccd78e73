"""The kernelbench oracle runs models as KernelBench's checker does: in training mode."""

from __future__ import annotations

import math
import textwrap

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


def test_kernelbench_rejects_a_batchnorm_that_uses_running_statistics_like_the_official_checker(tmp_path):
    res = run_check(*_files(tmp_path, RUNNING_STATS), "kernelbench", device="cpu")
    assert res.verdict.status is Status.WRONG, res.verdict.explain()


def test_kernelbench_accepts_a_batchnorm_that_uses_batch_statistics(tmp_path):
    res = run_check(*_files(tmp_path, BATCH_STATS), "kernelbench", device="cpu")
    assert res.verdict.status is Status.OK, res.verdict.explain()


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
