"""`kernelaudit check` exit codes: 0 ok, 1 wrong or error, 2 bad arguments, 3 could not judge.

Problems written like KernelBench's (no ``ERROR_MODEL``): ``bound`` derives an error model;
where none can be derived it says it cannot judge and why, and ``shapes`` and ``values``
judge with an allclose fallback instead.
"""

from __future__ import annotations

import textwrap

from click.testing import CliRunner

from kernelaudit.errors import EXIT_FOUND, EXIT_OK, EXIT_UNJUDGED
from kernelaudit.verdict import Status, Verdict
from kernelaudit.zoo.check import check_command, exit_code, run_check

#: A KernelBench-style problem: no ERROR_MODEL, no SMALL_SHAPES, pure PyTorch.
KB_RELU = '''
import torch
import torch.nn as nn

BATCH = 4
DIM = 24


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand(BATCH, DIM)]


def get_init_inputs():
    return []
'''

RIGHT = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n" \
        "        return torch.clamp_min(x, 0.0)\n"
#: Right on torch.rand's [0, 1) inputs, wrong on any negative value.
NO_NEGATIVE_BRANCH = "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n" \
                     "        return x * 1.0\n"


#: The same problem with a reference that runs in float64 only: the error model cannot be
#: derived (its evaluations at the problem's float32 raise), so ``bound`` cannot judge.
KB_RELU_FLOAT64_ONLY = KB_RELU.replace(
    "        return torch.relu(x)\n",
    "        if x.dtype != torch.float64:\n            raise TypeError('this reference runs in float64 only')\n"
    "        return torch.relu(x)\n")


def _files(tmp_path, candidate: str, problem: str = KB_RELU):
    (tmp_path / "problem.py").write_text(textwrap.dedent(problem))
    (tmp_path / "cand.py").write_text(candidate)
    return tmp_path / "problem.py", tmp_path / "cand.py"


def test_exit_code_separates_caught_from_could_not_judge():
    assert exit_code(Verdict.passed("err", 0.0, 1.0)) == EXIT_OK
    assert exit_code(Verdict(Status.WRONG, message="x")) == EXIT_FOUND
    assert exit_code(Verdict.error("x")) == EXIT_FOUND
    assert exit_code(Verdict.skipped("x")) == EXIT_UNJUDGED


def test_strongest_without_error_model_judges_with_a_derived_one(tmp_path):
    problem, cand = _files(tmp_path, RIGHT)
    v = run_check(problem, cand, "strongest", device="cpu").verdict
    checks = v.details["checks"]
    assert {checks[k]["status"] for k in ("bound", "shapes", "values", "tamper")} == {"ok"}
    assert "derived error model" in checks["bound"]["details"]["error_model"]
    assert v.status is Status.OK


def test_wrong_candidate_without_error_model_is_caught_and_exits_1(tmp_path):
    problem, cand = _files(tmp_path, NO_NEGATIVE_BRANCH)
    r = CliRunner().invoke(check_command, [str(problem), str(cand), "--device", "cpu", "--no-isolate",
                                           "--oracle", "strongest"], catch_exceptions=False)
    assert r.exit_code == EXIT_FOUND, r.output
    assert "first wrong: [" in r.output and "derived error model" in r.output


def test_strongest_where_no_error_model_can_be_derived_names_bound_and_falls_back(tmp_path):
    problem, cand = _files(tmp_path, RIGHT, KB_RELU_FLOAT64_ONLY)
    v = run_check(problem, cand, "strongest", device="cpu").verdict
    checks = v.details["checks"]
    assert checks["bound"]["status"] == "skipped" and "could not derive an error model" in checks["bound"]["message"]
    assert {checks[k]["status"] for k in ("shapes", "values", "tamper")} == {"ok"}
    assert v.status is Status.SKIPPED and "[bound]" in v.message


def test_wrong_candidate_where_no_error_model_can_be_derived_is_caught_by_the_fallback(tmp_path):
    problem, cand = _files(tmp_path, NO_NEGATIVE_BRANCH, KB_RELU_FLOAT64_ONLY)
    r = CliRunner().invoke(check_command, [str(problem), str(cand), "--device", "cpu", "--no-isolate",
                                           "--oracle", "strongest"], catch_exceptions=False)
    assert r.exit_code == EXIT_FOUND, r.output
    assert "first wrong: [" in r.output and "allclose(atol=rtol=0.01)" in r.output
    assert "could not judge with [bound]" in r.output


def test_correct_candidate_judged_without_bound_exits_3_not_1(tmp_path):
    problem, cand = _files(tmp_path, RIGHT, KB_RELU_FLOAT64_ONLY)
    r = CliRunner().invoke(check_command, [str(problem), str(cand), "--device", "cpu", "--no-isolate",
                                           "--oracle", "bound,values"], catch_exceptions=False)
    assert r.exit_code == EXIT_UNJUDGED, r.output
    assert "SKIPPED" in r.output and "could not derive an error model" in r.output