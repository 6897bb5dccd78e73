"""The KernelBench loader: files load by path into fresh namespaces; malformed files explain themselves."""

from __future__ import annotations

import sys
import textwrap

import pytest

from kernelaudit.errors import InvalidArgument
from kernelaudit.zoo.problems import CORPUS_DIR, LoadError, ProblemCase, load_candidate, load_corpus, load_problem

GOOD_PROBLEM = """
import torch
import torch.nn as nn

batch_size = 4
dim = 10

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.rand(batch_size, dim)]

def get_init_inputs():
    return []
"""


def write(tmp_path, name: str, text: str):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_kernelbench_style_problem_loads_and_infers_its_shape_constants(tmp_path):
    p = load_problem(write(tmp_path, "prob.py", GOOD_PROBLEM))
    assert p.shape_params == ("batch_size", "dim")
    assert p.shapes() == {"batch_size": 4, "dim": 10}
    assert p.small() == {"batch_size": 4, "dim": 10}  # every size capped at 16


def test_two_files_with_the_same_names_never_share_a_namespace(tmp_path):
    a = load_problem(write(tmp_path, "a.py", GOOD_PROBLEM))
    b = load_problem(write(tmp_path, "b.py", GOOD_PROBLEM.replace("dim = 10", "dim = 99")))
    assert a.module is not b.module
    assert (a.module.dim, b.module.dim) == (10, 99)
    assert a.module.__name__ not in sys.modules and b.module.__name__ not in sys.modules


def test_at_shapes_moves_get_inputs_and_restores_the_constants(tmp_path):
    p = load_problem(write(tmp_path, "prob.py", GOOD_PROBLEM))
    (x,) = p.get_inputs({"dim": 17})
    assert x.shape == (4, 17)
    assert p.module.dim == 10


def test_unknown_shape_override_is_an_invalid_argument_naming_the_allowed_names(tmp_path):
    p = load_problem(write(tmp_path, "prob.py", GOOD_PROBLEM))
    with pytest.raises(InvalidArgument, match="allowed shape names are batch_size, dim"):
        p.get_inputs({"nope": 3})


@pytest.mark.parametrize(
    "text, message",
    [
        (GOOD_PROBLEM.replace("def get_init_inputs", "def other"), r"prob\.py: not a KernelBench problem file: missing get_init_inputs"),
        (GOOD_PROBLEM.replace("class Model", "class Other"), "missing Model"),
        (GOOD_PROBLEM.replace("def get_inputs():", "def get_inputs(n):"), r"wrong signature get_inputs\(n\)"),
        (GOOD_PROBLEM.replace("class Model(nn.Module)", "class Model"), "Model must be a class derived from torch.nn.Module"),
        ("import torch\n\n\nimport nonexistent_module_xyz\n", r"prob\.py:4: ModuleNotFoundError while loading"),
        ("x = 1\ndef f(:\n", r"prob\.py:2: SyntaxError"),
        ("import sys\nsys.exit(3)\n", r"prob\.py:2: SystemExit while loading"),
        ("raise RuntimeError('boom')\n", r"prob\.py:1: RuntimeError while loading: boom"),
    ],
)
def test_malformed_problem_names_file_line_and_what_is_wrong(tmp_path, text, message):
    with pytest.raises(LoadError, match=message):
        load_problem(write(tmp_path, "prob.py", text))


def test_candidate_without_modelnew_is_a_load_error(tmp_path):
    with pytest.raises(LoadError, match="missing ModelNew"):
        load_candidate(write(tmp_path, "cand.py", "import torch\n"))


def test_missing_file_is_a_load_error(tmp_path):
    with pytest.raises(LoadError, match="no such file"):
        load_problem(tmp_path / "absent.py")


def test_corpus_loads_as_a_directory_with_at_least_40_problems_over_every_category():
    corpus = load_corpus(CORPUS_DIR)
    assert len(corpus) >= 40
    cats = {p.category for p in corpus.values()}
    assert cats == {"matmul", "activation", "softmax", "norm", "reduction", "scan", "loss", "pooling", "attention"}
    for p in corpus.values():
        assert p.error_model is not None, p.name
        assert set(p.small_shapes) == set(p.shape_params), p.name


def test_problem_case_regenerates_the_same_inputs_from_the_seed():
    p = load_problem(CORPUS_DIR / "softmax.py")
    a = ProblemCase.make(p, small=True, seed=7)
    b = ProblemCase.make(p, small=True, seed=7)
    c = ProblemCase.make(p, small=True, seed=8)
    assert a.shapes == {"BATCH": 4, "DIM": 64}
    assert a.inputs[0].equal(b.inputs[0]) and not a.inputs[0].equal(c.inputs[0])
    assert "softmax [BATCH=4, DIM=64] float32 on cpu (fixed)" == a.describe()


def test_a_file_that_replaces_torch_allclose_is_refused_and_torch_restored(tmp_path):
    import torch

    original = torch.allclose
    with pytest.raises(LoadError, match=r"replaces torch.allclose while loading"):
        load_candidate(write(tmp_path, "cheat.py", "import torch\ntorch.allclose = lambda *a, **k: True\n"))
    assert torch.allclose is original
