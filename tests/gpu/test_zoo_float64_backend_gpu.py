"""The float64 reference with cuDNN off (``KERNELAUDIT_FLOAT64_CUDNN=0``) on a GPU: the
same reference to float64 rounding, and the same verdicts of ``strongest`` on KernelBench
convolutions (the reference itself as candidate: ok; a bf16-rounded copy: wrong)."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import torch

from kernelaudit.config import FLOAT64_CUDNN, KERNELBENCH

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

PROBLEMS = ("61_conv_transposed_3D__square_input__square_kernel", "63_conv_standard_2D__square_input__square_kernel")


def _level1() -> Path:
    root = Path(KERNELBENCH.get()) / "level1"
    if not root.is_dir():
        pytest.skip(f"KernelBench not found at {root}")
    return root


def _candidate(problem, rounded: bool):  # noqa: ANN001, ANN202
    from kernelaudit.zoo.problems.loader import Candidate

    base = problem.Model

    class Rounded(base):  # the reference's answer rounded to bf16: a precision downgrade
        def forward(self, *args):
            return super().forward(*args).to(torch.bfloat16).to(torch.float32)

    module = types.ModuleType("candidate")
    module.ModelNew = Rounded if rounded else base
    return Candidate(name="candidate", path=problem.path, module=module)


@pytest.mark.parametrize("name", PROBLEMS)
def test_float64_without_cudnn_gives_the_same_reference_and_verdicts(name, monkeypatch):
    from kernelaudit.zoo.oracles import Subject, make_oracle
    from kernelaudit.zoo.problems import ProblemCase, load_problem

    path = _level1() / f"{name}.py"
    refs, verdicts = {}, {}
    for flag in ("1", "0"):
        monkeypatch.setenv(FLOAT64_CUDNN.name, flag)
        problem = load_problem(path)
        case = ProblemCase.make(problem, device="cuda", small=True)
        refs[flag] = case.reference()[0].cpu()
        for rounded in (False, True):
            case = ProblemCase.make(problem, device="cuda", small=True)
            v = make_oracle("bound,tamper").judge(case, Subject(_candidate(problem, rounded)))
            verdicts[(flag, rounded)] = v.status.value
    scale = float(refs["1"].abs().max())
    assert float((refs["1"] - refs["0"]).abs().max()) <= 1e-12 * scale
    assert verdicts[("1", False)] == verdicts[("0", False)] == "ok"
    assert verdicts[("1", True)] == verdicts[("0", True)] == "wrong"
