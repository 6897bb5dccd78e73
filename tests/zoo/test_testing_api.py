"""kernelaudit.testing: the assertion and the pytest fixture kernel authors use."""

from __future__ import annotations

import pytest

from kernelaudit.testing import KernelIncorrect, KernelUnjudged, assert_kernel_correct

PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 2.0


def get_inputs():
    return [torch.randn(8, 64)]


def get_init_inputs():
    return []
'''

CANDIDATE = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.tanh(x) * 2.0
        {fault}
        return y
'''


def _files(tmp_path, fault: str = "pass"):
    p, c = tmp_path / "tanh2.py", tmp_path / "tanh2_candidate.py"
    p.write_text(PROBLEM)
    c.write_text(CANDIDATE.format(fault=fault))
    return p, c


def test_a_correct_candidate_passes_and_returns_its_result(tmp_path):
    res = assert_kernel_correct(*_files(tmp_path), oracle="kernelbench,assert-close", device="cpu")
    assert res.verdict.ok and res.oracle == "kernelbench,assert-close"


def test_a_wrong_candidate_fails_with_the_verdicts_explanation(tmp_path):
    with pytest.raises(KernelIncorrect, match=r"tanh2_candidate\.py on tanh2\.py .*wrong"):
        assert_kernel_correct(*_files(tmp_path, "y[3, 5] += 1.0"), oracle="kernelbench", device="cpu")


def test_a_check_that_cannot_judge_fails_unless_allowed(tmp_path):
    files = _files(tmp_path)
    # a reference that runs in float64 only: no error model can be derived, so bound cannot judge
    files[0].write_text(PROBLEM.replace(
        "        return torch.tanh(x) * 2.0\n",
        "        if x.dtype != torch.float64:\n            raise TypeError('float64 only')\n"
        "        return torch.tanh(x) * 2.0\n"))
    with pytest.raises(KernelUnjudged, match="could not be judged"):
        assert_kernel_correct(*files, oracle="bound", device="cpu")
    assert assert_kernel_correct(*files, oracle="bound", device="cpu", allow_unjudged=True).verdict.status.value \
        == "skipped"


def test_the_pytest_fixture_is_the_assertion(kernelaudit_check):
    assert kernelaudit_check is assert_kernel_correct
