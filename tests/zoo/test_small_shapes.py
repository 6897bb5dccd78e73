"""``--small`` without SMALL_SHAPES: the sizes a KernelBench file sets are found and shrunk
together, the reference runs at the chosen shapes, and the checker's memory is its own."""

from __future__ import annotations

import textwrap

import pytest
import torch

from kernelaudit.zoo.problems import ProblemCase, load_problem
from kernelaudit.zoo.problems.small_shapes import SMALL_MAX_BYTES, SMALL_MAX_FLOPS, find_small_shapes, meta_cost


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    from kernelaudit.config import SMALL_SHAPES_CACHE

    monkeypatch.setenv(SMALL_SHAPES_CACHE.name, str(tmp_path / "cache"))


def write(tmp_path, text: str, name: str = "prob.py"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return load_problem(p)


CONV = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return torch.relu(self.conv(x)) + self.bias

batch_size = 64
in_channels = 32
out_channels = 64
kernel_size = 3
bias_shape = (out_channels, 1, 1)

def get_inputs():
    return [torch.rand(batch_size, in_channels, 96, 128)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, bias_shape]
"""


def test_sizes_get_init_inputs_reads_derived_sizes_and_literals_shrink_together(tmp_path):
    p = write(tmp_path, CONV)
    found = find_small_shapes(p)
    s = found.shapes
    assert found.source == "searched", found
    # constants read by get_init_inputs, and the literal sizes inside get_inputs, all move
    assert {"batch_size", "in_channels", "out_channels", "get_inputs[0]", "get_inputs[1]"} <= set(s)
    assert s["batch_size"] < 64 and s["out_channels"] < 64 and s["get_inputs[0]"] < 96
    assert "kernel_size" not in s  # a structural size (below SHRINK_MIN) stays
    assert s["get_inputs[0]"] * 4 == s["get_inputs[1]"] * 3  # one factor for all: the 96:128 ratio stays
    with p.at_shapes(s):  # the derived tuple follows the constant it is made of
        assert p.module.bias_shape == (s["out_channels"], 1, 1)
    assert p.module.bias_shape == (64, 1, 1)  # and is restored
    assert found.flops <= SMALL_MAX_FLOPS
    case = ProblemCase.make(p, small=True)  # wired into --small: the reference runs there
    (x,) = case.inputs
    assert tuple(x.shape) == (s["batch_size"], s["in_channels"], s["get_inputs[0]"], s["get_inputs[1]"])
    assert x.numel() * 4 <= SMALL_MAX_BYTES
    assert case.reference()[0].shape[1] == s["out_channels"]


LINEAR = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
    def forward(self, x):
        return torch.relu(self.fc(x))
batch_size = 1024
in_features = 4096
out_features = 2048
def get_inputs():
    return [torch.rand(batch_size, in_features)]
def get_init_inputs():
    return [in_features, out_features]
"""


def test_tuple_elements_shrink_and_the_fixed_shape_is_unchanged(tmp_path):
    p = write(tmp_path, """
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def forward(self, x):
                return torch.cumsum(x, dim=1)
        batch_size = 128
        input_shape = (32768,)
        def get_inputs():
            return [torch.rand(batch_size, *input_shape)]
        def get_init_inputs():
            return []
        """)
    assert p.get_inputs()[0].shape == (128, 32768)  # the rewrite changes nothing at the file's values
    s = find_small_shapes(p).shapes
    assert s["input_shape[0]"] < 32768 and s["batch_size"] < 128
    assert p.get_inputs(s)[0].shape == (s["batch_size"], s["input_shape[0]"])


def test_declared_small_shapes_win_over_the_search(tmp_path):
    p = write(tmp_path, CONV + "\nSMALL_SHAPES = {}\n".replace("{}", "{'batch_size': 3}") +
              "SHAPE_PARAMS = ('batch_size',)\n")
    assert p.small() == {"batch_size": 3}
    assert ProblemCase.make(p, small=True).shapes == {"batch_size": 3}


def test_tied_sizes_stay_consistent_heads_divide_embed_dim(tmp_path):
    p = write(tmp_path, """
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def __init__(self, embed_dim, num_heads):
                super().__init__()
                self.attn = nn.MultiheadAttention(embed_dim, num_heads)
            def forward(self, x):
                return self.attn(x, x, x)[0]
        embed_dim = 384
        num_heads = 12
        seq_len = 512
        batch_size = 32
        def get_inputs():
            return [torch.rand(seq_len, batch_size, embed_dim)]
        def get_init_inputs():
            return [embed_dim, num_heads]
        """)
    found = find_small_shapes(p)
    s = {**p.shapes(), "embed_dim": 384, "num_heads": 12, **found.shapes}
    assert s["embed_dim"] < 384 and s["embed_dim"] % s["num_heads"] == 0
    assert ProblemCase.make(p, small=True).reference()[0].shape[-1] == s["embed_dim"]


def test_sizes_the_model_fixes_are_kept_and_the_rest_shrinks(tmp_path):
    """A Linear sized for 64x64 images: shrinking the image breaks the reference, so the
    search backs off to keeping that group and shrinks the batch alone."""
    p = write(tmp_path, """
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(64 * 64, 10)
            def forward(self, x):
                return self.fc(x.flatten(1))
        batch_size = 4096
        def get_inputs():
            return [torch.rand(batch_size, 64, 64)]
        def get_init_inputs():
            return []
        """)
    assert not meta_cost(p, {"get_inputs[0]": 32, "get_inputs[1]": 32})["ok"]  # the reference rejects it
    found = find_small_shapes(p)
    assert found.shapes.get("batch_size", 4096) < 4096
    assert "get_inputs[0]" not in found.shapes and "get_inputs[1]" not in found.shapes
    assert ProblemCase.make(p, small=True).reference()[0].shape == (found.shapes["batch_size"], 10)


def test_a_second_search_of_the_same_file_is_read_from_the_cache(tmp_path):
    first = find_small_shapes(write(tmp_path, CONV))
    again = find_small_shapes(write(tmp_path, CONV, "copy.py"))  # same content, fresh module
    assert again.source == "cache" and again.shapes == first.shapes


def test_boundary_shapes_free_their_models_as_they_go(tmp_path):
    from kernelaudit.zoo.oracles import Subject, make_oracle
    from kernelaudit.zoo.problems.variants import reference_candidate

    p = write(tmp_path, LINEAR)
    case = ProblemCase.make(p, shapes={"batch_size": 4, "in_features": 8, "out_features": 6})
    subject = Subject(reference_candidate(p, tmp_path))
    verdict = make_oracle("assert-close,shapes").judge(case, subject)
    assert verdict.status.value == "ok", verdict.message
    fixed = tuple(sorted(case.shapes.items()))
    assert {k[2] for k in p.__dict__["_model_cache"]} <= {fixed}  # no model of a boundary shape is kept


def test_the_checkers_own_out_of_memory_is_could_not_judge_not_the_candidates_fault(tmp_path, monkeypatch):
    from kernelaudit.errors import EXIT_UNJUDGED
    from kernelaudit.zoo.check import exit_code, run_check
    from kernelaudit.zoo.oracles import base

    def out_of_memory(*args, **kwargs):
        raise MemoryError("cannot allocate 8 GiB")

    p = write(tmp_path, CONV)
    cand = tmp_path / "cand.py"
    cand.write_text(CONV.replace("Model", "ModelNew"))
    monkeypatch.setattr(base, "judge_or_unjudged", out_of_memory)
    result = run_check(p.path, cand, "bound", device="cpu", small=True)
    assert result.verdict.status.value == "skipped"
    assert "the checker ran out of memory" in result.verdict.message and "not the candidate's fault" in \
        result.verdict.message
    assert exit_code(result.verdict) == EXIT_UNJUDGED
    assert torch.get_default_dtype() == torch.float32
