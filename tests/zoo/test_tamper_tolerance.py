"""tamper's history calls: a floor from the magnitude of the computation, so a correct kernel
whose outputs are near zero (a GroupNorm followed by a mean: about 1e-16, rounding about
1e-8; KernelBench level 2 problems 23 and 27) is not rejected, while stale answers still are."""

from __future__ import annotations

import textwrap

import pytest

import torch

from kernelaudit.verdict import Status
from kernelaudit.zoo.check import run_check
from kernelaudit.zoo.oracles import derived, tamper
from kernelaudit.zoo.problems import ProblemCase, load_problem

GROUPNORM_MEAN = """
import torch
import torch.nn as nn

batch_size, channels, length, groups = 4, 8, 64, 2


class Model(nn.Module):
    def __init__(self, channels, groups):
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, 3)
        self.group_norm = nn.GroupNorm(groups, channels)

    def forward(self, x):
        x = self.group_norm(self.conv(x))
        return x.mean(dim=[1, 2])  # about 0: the mean of normalised values


def get_inputs():
    return [torch.rand(batch_size, channels, length)]


def get_init_inputs():
    return [channels, groups]
"""

#: The same module, its arithmetic in another order: the reference's own rounding, in fp32.
REORDERED = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, channels, groups):
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, 3)
        self.group_norm = nn.GroupNorm(groups, channels)

    def forward(self, x):
        x = self.group_norm(self.conv(x))
        return x.sum(dim=2).sum(dim=1) / (x.shape[1] * x.shape[2])
"""

#: Right on its first call, then the first answer forever (a cache that ignores its inputs).
STALE = REORDERED.replace("    def forward(self, x):\n", "    def forward(self, x):\n"
                          "        if getattr(self, 'first', None) is not None:\n"
                          "            return self.first.clone()\n") \
    .replace("        return x.sum(dim=2).sum(dim=1) / (x.shape[1] * x.shape[2])",
             "        self.first = x.sum(dim=2).sum(dim=1) / (x.shape[1] * x.shape[2])\n"
             "        return self.first.clone()")


def _files(tmp_path, problem, candidate):
    p, c = tmp_path / "problem.py", tmp_path / "cand.py"
    p.write_text(textwrap.dedent(problem))
    c.write_text(textwrap.dedent(candidate))
    return p, c


def test_near_zero_outputs_of_a_correct_kernel_pass_the_history_calls(tmp_path):
    problem, cand = _files(tmp_path, GROUPNORM_MEAN, REORDERED)
    case = ProblemCase.make(load_problem(problem))
    ref = case.reference()[0]
    assert float(ref.abs().max()) < 1e-12  # the outputs are about 0 ...
    with torch.no_grad():
        got = case.model()(*case.inputs)  # the module itself, in fp32
    assert float((got.double() - ref).abs().max()) > 2 * tamper.HISTORY_TOL * float(ref.abs().max())
    v = run_check(problem, cand, "tamper", device="cpu").verdict  # ... and the plain tolerance alone rejected it
    assert v.status is Status.OK, v.message


def test_the_floor_is_the_derived_models_largest_allowed_error(tmp_path):
    problem, _ = _files(tmp_path, GROUPNORM_MEAN, REORDERED)
    case = ProblemCase.make(load_problem(problem))
    expected = float(derived.derive(ProblemCase.make(case.problem)).allowed[0].max())
    floor = tamper.history_floor(case, list(case.inputs))
    assert floor == [expected] and 0 < expected < 1e-4
    assert case._cache["derived-floor"] == floor  # kept for the next history call


def test_stale_answers_are_still_caught_where_outputs_are_not_near_zero(tmp_path):
    # the same stale cache on the problem without the mean (outputs of order 1, new ones
    # for new inputs): the floor, its derived rounding, is far below the change between calls
    problem_text = GROUPNORM_MEAN.replace("return x.mean(dim=[1, 2])  # about 0: the mean of normalised values",
                                          "return x")
    stale = STALE.replace("x.sum(dim=2).sum(dim=1) / (x.shape[1] * x.shape[2])", "x")
    problem, cand = _files(tmp_path, problem_text, stale)
    v = run_check(problem, cand, "tamper", device="cpu").verdict
    assert v.status is Status.WRONG and "wrong on a later call of the same instance" in v.message, v.message


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_the_float32_history_precheck_agrees_with_the_float64_comparison(dtype):
    """tamper's float32 pre-check of a history call against the reference at the dtype
    (:func:`tamper._within_loosely`) decides as the float64 comparison does: within, off by
    a stale answer's size, off in one element; and leaves NaN and inf to it (None)."""
    from kernelaudit.zoo.oracles.compare import chunked_compare, max_abs_finite

    g = torch.Generator().manual_seed(3)
    ref = (torch.randn(64, 33, generator=g) * 5).to(dtype)
    scale = max_abs_finite(ref)

    def full(got):
        return not chunked_compare(got, ref, lambda r, lo, hi: tamper.HISTORY_TOL * (scale + r.abs())).mismatched

    near = (ref.float() * (1 + 1e-3)).to(dtype)
    stale = torch.roll(ref, 1, 0)
    one = ref.clone()
    one[40, 7] += 0.2 * scale
    for got, want in ((ref.clone(), True), (near, True), (stale, False), (one, False)):
        assert tamper._within_loosely(got, ref, scale) is want
        assert full(got) is want
    nan = ref.clone()
    nan[0, 0] = float("nan")
    assert tamper._within_loosely(nan, ref, scale) is None and not full(nan)
    inf = ref.clone()
    inf[1, 1] = float("inf")
    assert tamper._within_loosely(inf, ref, scale) is None and not full(inf)
    assert tamper._within_loosely(ref.double(), ref.double(), scale) is None   # float64: the full comparison
