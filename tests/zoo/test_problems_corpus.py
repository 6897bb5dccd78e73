"""The corpus: every verified Triton solution is correct under every oracle (CPU, small shapes)."""

from __future__ import annotations

import pytest

from kernelaudit.zoo.oracles import ORACLE_NAMES, Subject, make_oracle
from kernelaudit.zoo.problems import CORPUS_DIR, ProblemCase, load_candidate, load_problem, solution_path

# The interpreter evaluates with numpy, which warns on the overflow inside exp(large).
pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning"), pytest.mark.usefixtures("triton_interpreter")]

PROBLEMS = sorted(p.stem for p in CORPUS_DIR.glob("*.py"))


def test_every_problem_has_a_verified_solution():
    assert len(PROBLEMS) >= 40
    missing = [p for p in PROBLEMS if not solution_path(p).exists()]
    assert missing == []


@pytest.mark.parametrize("name", PROBLEMS)
def test_solution_passes_every_oracle_at_small_shapes(name):
    problem = load_problem(CORPUS_DIR / f"{name}.py")
    subject = Subject(load_candidate(solution_path(name)))
    for oracle in ORACLE_NAMES:
        case = ProblemCase.make(problem, small=True)
        verdict = make_oracle(oracle).judge(case, subject)
        assert verdict.ok, f"{oracle}: {verdict.explain()}"


@pytest.mark.parametrize("name", ["matmul_square", "softmax", "layernorm", "cumsum", "attention"])
def test_solution_passes_every_comparator_inside_every_driver(name):
    """The strictest composition: shapes and values judged by assert-close, ulp and bound at once."""
    problem = load_problem(CORPUS_DIR / f"{name}.py")
    subject = Subject(load_candidate(solution_path(name)))
    verdict = make_oracle("ulp,bound,shapes,values,tamper").judge(ProblemCase.make(problem, small=True), subject)
    assert verdict.ok, verdict.explain()
