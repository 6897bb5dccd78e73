"""A case larger than its problem's small shape (a KernelBench problem at its own shape).

``shapes`` and ``values`` draw their extra inputs at the small shape, and the derived error
model takes the function's structure (multilinear or not, batch-separable or not) from the
small shape, computing only the magnitude and the term count at the case's own shape. What
``strongest`` catches does not change: every known candidate and every known exploit is
judged at twice its small shape here (the detection table judges them at the small shape).
"""

from __future__ import annotations

import types

import pytest
import torch

from kernelaudit.verdict import Status
from kernelaudit.zoo.oracles import Subject, derived, integrity, make_oracle
from kernelaudit.zoo.oracles.derived import derive
from kernelaudit.zoo.problems import (CORPUS_DIR, PACKAGE_DIR, ProblemCase, known_candidates, load_candidate,
                                      load_problem)
from kernelaudit.zoo.problems.loader import Candidate, torch_snapshot, torch_tampering
from kernelaudit.zoo.problems.small_shapes import shrinking_shapes

pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning"), pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.usefixtures("triton_interpreter")]


def _twice_small(problem) -> dict[str, int]:
    return {k: 2 * v for k, v in problem.small().items()}


def _recording(problem) -> tuple[Candidate, list]:
    """The problem's own ``Model`` as the candidate, noting the shape of every first input it gets."""
    seen: list = []

    class ModelNew(problem.Model):
        def forward(self, *args):
            seen.append(tuple(args[0].shape))
            return super().forward(*args)

    module = types.ModuleType("recording_candidate")
    module.ModelNew = ModelNew
    return Candidate(name=f"{problem.name} (recording)", path=problem.path, module=module), seen


def test_shrinking_shapes_only_ever_shrinks():
    relu = load_problem(CORPUS_DIR / "relu.py")  # own BATCH=64, DIM=16384; SMALL_SHAPES 4 x 200
    small = {"BATCH": 4, "DIM": 200}
    assert shrinking_shapes(relu, relu.shapes()) == small
    assert shrinking_shapes(relu, {"BATCH": 8, "DIM": 200}) == small
    assert shrinking_shapes(relu, small) is None  # the small shape itself
    assert shrinking_shapes(relu, {"BATCH": 2, "DIM": 400}) is None  # BATCH would grow


def test_a_search_from_sizes_a_caller_set_neither_reads_nor_writes_the_cache(tmp_path, monkeypatch):
    """The cache is keyed by the file's content: a search that starts from other sizes (a
    test that set the module's constants) must not answer for the file."""
    from kernelaudit.config import SMALL_SHAPES_CACHE
    from kernelaudit.zoo.problems.small_shapes import find_small_shapes

    monkeypatch.setenv(SMALL_SHAPES_CACHE.name, str(tmp_path / "cache"))
    path = tmp_path / "wide.py"
    path.write_text("import torch\nimport torch.nn as nn\nBATCH = 512\nDIM = 8192\n"
                    "class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
                    "def get_inputs():\n    return [torch.rand(BATCH, DIM)]\n"
                    "def get_init_inputs():\n    return []\n")
    capped = load_problem(path)
    capped.module.BATCH, capped.module.DIM = 4, 16
    assert find_small_shapes(capped).source == "unchanged"  # from 4 x 16: nothing to shrink
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())
    found = find_small_shapes(load_problem(path))  # from the file's 512 x 8192, not the above
    assert found.source == "searched" and found.shapes["BATCH"] < 512 and found.shapes["DIM"] < 8192


def test_a_larger_case_gets_its_value_kinds_and_boundaries_at_the_small_shape():
    problem = load_problem(CORPUS_DIR / "relu.py")
    candidate, seen = _recording(problem)
    case = ProblemCase.make(problem, shapes=_twice_small(problem))  # 8 x 400
    v = make_oracle("bound,shapes,values").judge(case, Subject(candidate))
    assert v.ok, v.message
    checks = v.details["checks"]
    assert checks["shapes"]["details"]["boundaries_around"] == {"BATCH": 4, "DIM": 200}
    assert "shape small" in checks["shapes"]["details"]["checks"]
    assert "shape prime below BATCH=3, DIM=199" in checks["shapes"]["details"]["checks"]
    assert seen.count((8, 400)) == 1  # the own shape once (bound); shapes does not judge it again
    assert seen.count((4, 200)) == 1 + 5  # the small shape, then the five value kinds there
    assert (3, 199) in seen and (5, 201) in seen  # prime below and one past the small shape


def test_the_small_shape_shows_the_structure_and_the_own_shape_computes_n(monkeypatch):
    problem = load_problem(CORPUS_DIR / "matmul_square.py")  # small N=64
    for attr in ("ERROR_MODEL", "error_scale"):
        if hasattr(problem.module, attr):
            delattr(problem.module, attr)
    case = ProblemCase.make(problem, shapes={"N": 160})
    runs: list[int] = []
    real_run = derived._run
    monkeypatch.setattr(derived, "_run", lambda model, inputs: runs.append(
        next(x.shape[0] for x in inputs if isinstance(x, torch.Tensor))) or real_run(model, inputs))
    dm = derive(case)
    assert dm.multilinear and abs(dm.length - 160) <= 0.05 * 160  # one Rademacher sample of 25600 outputs
    assert problem.__dict__["_small_shape_facts"]
    # at the own shape: the magnitude, |model|(1), model(0), one sample; the rest is the
    # evaluations at the problem's dtype (default, threads, oneDNN off) and the small shape's tests
    assert runs.count(160) <= 4 + 3 and runs.count(64) >= 5
    # the same bound as a derivation that tests everything at the own shape, up to n's sampling
    full_problem = load_problem(CORPUS_DIR / "matmul_square.py")
    for attr in ("ERROR_MODEL", "error_scale"):
        if hasattr(full_problem.module, attr):
            delattr(full_problem.module, attr)
    monkeypatch.setattr(derived, "_run", real_run)
    monkeypatch.setattr(derived, "_small_shape_facts", lambda case: None)
    full = derive(ProblemCase.make(full_problem, shapes={"N": 160}))
    assert full.multilinear and abs(full.length - dm.length) <= 0.1 * 160
    ratio = (dm.allowed[0] / full.allowed[0]).flatten()
    assert float(ratio.min()) > 0.9 and float(ratio.max()) < 1.1


def test_not_multilinear_at_the_small_shape_means_no_tests_at_the_own_shape(monkeypatch):
    problem = load_problem(CORPUS_DIR / "gelu.py")
    case = ProblemCase.make(problem, shapes=_twice_small(problem))
    dm = derive(case)
    assert not dm.multilinear
    facts = next(iter(problem.__dict__["_small_shape_facts"].values()))[1]
    assert facts == {"multilinear": False, "separable": True}
    # a second large case of the problem runs no float64 test at all: its evaluations only
    calls = []
    real_run = derived._run
    monkeypatch.setattr(derived, "_run", lambda model, inputs: calls.append(
        next(x.dtype for x in inputs if isinstance(x, torch.Tensor))) or real_run(model, inputs))
    assert derived.multilinear(ProblemCase.make(problem, shapes=_twice_small(problem), seed=3)) is None
    assert torch.float64 not in calls


def _judge_twice_small(path, cand):
    pname = cand.problem_name or path.stem.split("__")[0]
    problem = load_problem(CORPUS_DIR / f"{pname}.py")
    case = ProblemCase.make(problem, device="cpu", shapes=_twice_small(problem))
    return make_oracle("strongest").judge(case, Subject(cand))


#: The slowest in the Triton interpreter at twice the small shape (10 s); its fast twin
#: ``matmul_square__block64`` stays.
SLOW = {"matmul_square__block16"}


@pytest.mark.parametrize("path", [p for p in known_candidates() if p.stem not in SLOW], ids=lambda p: p.stem)
def test_strongest_at_twice_the_small_shape_catches_what_the_table_catches(path):
    cand = load_candidate(path)
    v = _judge_twice_small(path, cand)
    if cand.expect == "wrong":
        assert v.status in (Status.WRONG, Status.ERROR), v.message
    else:
        assert v.ok, v.message


EXPLOITS = sorted(p for p in (PACKAGE_DIR / "exploits").glob("*.py") if not p.name.startswith("_"))


@pytest.mark.parametrize("path", EXPLOITS, ids=lambda p: p.stem)
def test_strongest_at_twice_the_small_shape_catches_every_exploit(path):
    before, switches = torch_snapshot(), integrity.flags()
    try:
        v = _judge_twice_small(path, load_candidate(path))
    finally:  # exploits replace torch functions and switches (TF32): put everything back
        integrity.replaced()
        torch_tampering(before)
        integrity.flag_changes(switches)
    assert v.status in (Status.WRONG, Status.ERROR), v.message
