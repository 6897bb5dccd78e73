"""Mutant enumeration: stable ids, counts by family, subjects built from the corpus and KernelBench."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelaudit.zoo.mutate.generate import Mutant, count_by, enumerate_mutants, materialise
from kernelaudit.zoo.mutate.subjects import (
    DEFAULT_KERNELBENCH, Subject, corpus_subjects, kernelbench_subjects, model_as_candidate, reachable,
)

PROBLEM = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    """A Model that scales."""

    def __init__(self, scale):
        super(Model, self).__init__()
        self.scale = scale

    def forward(self, x):
        y = torch.relu(x) * self.scale
        return torch.sum(y, dim=1, keepdim=True) + 0.5


B = 4
D = 8


def get_inputs():
    return [torch.randn(B, D)]


def get_init_inputs():
    return [2.0]
'''


def test_model_becomes_modelnew_in_code_not_in_strings():
    src = model_as_candidate(PROBLEM)
    assert "class ModelNew(nn.Module)" in src and "super(ModelNew, self)" in src
    assert '"""A Model that scales."""' in src


def test_fixture_counts_and_stable_ids(tmp_path):
    path = tmp_path / "scale.py"
    path.write_text(PROBLEM)
    s = Subject("kb/test/scale", "torch", path, model_as_candidate(PROBLEM), ("ModelNew",))
    ms = list(enumerate_mutants([s]))
    assert ms == list(enumerate_mutants([s]))  # the same ids every time
    fam = count_by(ms, "family")
    # relu: precision x4 (result and operand, fp16 and bf16), call-dropped, inplace-call; sum: dim, keepdim, ...
    assert fam["precision"] >= 8 and fam["reduction"] >= 3 and fam["memory"] >= 2 and fam["arith"] >= 3
    assert len({m.id for m in ms}) == len(ms)
    m = next(x for x in ms if x.operator == "keepdim-flipped")
    assert Mutant.parse(m.id) == m
    mat = materialise(s, m)
    assert "keepdim=False" in mat.after and "keepdim=True" in mat.before
    assert mat.lines == (14,)


def test_corpus_subject_inlines_only_what_the_solution_reaches():
    s = corpus_subjects(["relu"])[0]
    assert s.id == "corpus/relu" and s.kind == "triton"
    assert set(s.scope) == {"ModelNew", "unary", "_unary_kernel", "_expm1"}
    assert "set_interpret" not in s.source and "from kernelaudit.zoo.problems.solution_kernels" not in s.source
    assert s.tree.code == s.source
    assert reachable(s.source) == s.scope


def test_corpus_mutant_count_is_large():
    subs = corpus_subjects(["matmul_square"])
    ms = list(enumerate_mutants(subs))
    assert len(ms) > 60
    assert {"boundary", "index", "accumulate", "precision", "memory"} <= set(count_by(ms, "family"))


@pytest.mark.skipif(not (DEFAULT_KERNELBENCH / "level1").is_dir(), reason="KernelBench checkout not present")
def test_kernelbench_levels_load_as_subjects():
    subs = kernelbench_subjects((1,))
    assert len(subs) == 100 and all("class ModelNew" in s.source for s in subs)
    assert subs[0].id == "kb/level1/1_Square_matrix_multiplication_"
