"""The corpus on a GPU at the problems' own shapes, and the known candidates there.

Skipped without CUDA. The Triton kernels must be compiled, not interpreted: the
shared conftest may set ``TRITON_INTERPRET=1`` for the CPU tests, so this module
switches the corpus kernels to compiled mode for its own tests, then back.

Set ``KERNELAUDIT_GPU_RESULTS=path.json`` to keep every verdict (for the docs), and
``KERNELAUDIT_GPU_PROBLEMS=relu,softmax`` to run only some problems.
"""

from __future__ import annotations

import json
import os

import pytest

from kernelaudit.config import GPU_PROBLEMS, GPU_RESULTS
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
]

#: assert-close's fp32 rtol (1.3e-6) is below the rounding error of a correct fp32 sum
#: of more terms than this, so there a rejection is the oracle's false alarm.
ASSERT_CLOSE_MAX_TERMS = 1024

RESULTS: dict[str, dict] = {}


@pytest.fixture(scope="module", autouse=True)
def compiled_triton():
    """Compile the Triton kernels for the GPU for this module only."""
    from kernelaudit.zoo.problems import solution_kernels as kernels

    saved = os.environ.get("TRITON_INTERPRET")
    before = kernels.set_interpret(False)
    yield
    kernels.set_interpret(before)
    if saved is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = saved
    path = (GPU_RESULTS.get() or None)
    if path:
        with open(path, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "results": RESULTS}, f, indent=1)


def _problems() -> list[str]:
    """The whole corpus, or the comma-separated names in ``KERNELAUDIT_GPU_PROBLEMS``."""
    from kernelaudit.zoo.problems import CORPUS_DIR

    chosen = [n for n in GPU_PROBLEMS.get().split(",") if n]
    return chosen or sorted(p.stem for p in CORPUS_DIR.glob("*.py"))


def _judge(name: str, oracle: str, candidate=None):
    from kernelaudit.zoo.oracles import Subject, make_oracle
    from kernelaudit.zoo.problems import CORPUS_DIR, ProblemCase, load_candidate, load_problem, solution_path

    problem = load_problem(CORPUS_DIR / f"{name}.py")
    case = ProblemCase.make(problem, device="cuda")
    subject = Subject(load_candidate(candidate or solution_path(name)))
    v = make_oracle(oracle).judge(case, subject)
    RESULTS.setdefault(name, {})[oracle] = v.to_json()
    return case, v


@pytest.mark.parametrize("name", _problems())
@pytest.mark.parametrize("oracle", ["kernelbench", "ulp", "bound", "shapes", "values", "tamper"])
def test_solution_passes_at_the_problems_own_shape(name, oracle):
    _, v = _judge(name, oracle)
    assert v.ok, v.explain()


@pytest.mark.parametrize("name", _problems())
def test_solution_passes_assert_close_unless_its_sums_are_too_long_for_the_fp32_rtol(name):
    from kernelaudit.zoo.oracles.bound import accumulation_length

    case, v = _judge(name, "assert-close")
    model = case.problem.error_model or {}
    terms = accumulation_length(case, model.get("length")) if model.get("kind") in ("multilinear", "scaled") else 1
    terms = max(terms, case.shapes.get("SEQ", 1))  # attention's error model folds its SEQ-long sums into S
    if not v.ok and terms > ASSERT_CLOSE_MAX_TERMS:
        pytest.xfail(f"assert-close false alarm on a {terms}-term fp32 sum: {v.explain()[:200]}")
    assert v.ok, v.explain()


@pytest.fixture(scope="module")
def cuda_table():
    from kernelaudit.zoo.check import detection_table

    table = detection_table(device="cuda", small=False)
    path = (GPU_RESULTS.get() or None)
    if path:
        with open(path.replace(".json", "") + ".table.md", "w") as f:
            f.write(table.to_markdown() + "\n")
    return table


def _row(table, name):
    return next(r for r in table.rows if r.candidate == name)


def test_strongest_catches_every_known_wrong_candidate_on_cuda(cuda_table):
    missed = [r.candidate for r in cuda_table.rows if r.expect == "wrong" and not r.flagged("strongest")]
    assert missed == []


def test_tamper_catches_the_side_stream_and_the_unwritten_buffer_on_cuda(cuda_table):
    assert _row(cuda_table, "matmul_square__side_stream").flagged("tamper")
    assert _row(cuda_table, "gelu__unwritten_output").flagged("tamper")


def test_kernelbench_reproduces_the_official_misses_on_cuda(cuda_table):
    assert not _row(cuda_table, "relu__drops_negative_branch").flagged("kernelbench")
    assert not _row(cuda_table, "matmul_square__bf16_compute").flagged("kernelbench")
    assert not _row(cuda_table, "matmul_square__side_stream").flagged("kernelbench")


def test_no_correct_variant_is_rejected_by_kernelbench_bound_shapes_values_or_tamper(cuda_table):
    cols = ("kernelbench", "bound", "shapes", "values", "tamper", "strongest")
    rejected = [(r.candidate, c) for r in cuda_table.rows if r.expect == "correct" for c in cols if r.flagged(c)]
    assert rejected == []


def test_model_and_its_twin_are_built_on_the_gpu_with_equal_weights():
    """new_model builds off-CPU models under the case's device (initialisation on the GPU):
    two classes with the same constructor, seeded alike, get the same weights there, and a
    model whose constructor reads a value back is built too."""
    from kernelaudit.zoo.problems.problem_case import new_model

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 64, 3)
            self.fc = torch.nn.Linear(64, 10)

    class Twin(Net):
        pass

    class ReadsBack(Net):
        def __init__(self):
            super().__init__()
            self.scale = self.fc.weight.abs().max().cpu().numpy()

    a, b, c = new_model(Net, [], "cuda"), new_model(Twin, [], "cuda"), new_model(ReadsBack, [], "cuda")
    for m in (a, b, c):
        assert all(p.is_cuda for p in m.parameters())
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
