"""A CI sample of KernelBench as published: the reference and its reordered variant pass
``strongest`` (the whole run is ``benchmarks/kernelbench_false_rejections.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelaudit.config import KERNELBENCH

#: Cheap problems of levels 1 and 2: an activation, a reduction, a matmul, a loss, a fusion.
SAMPLE = (
    "level1/19_ReLU.py",
    "level1/47_Sum_reduction_over_a_dimension.py",
    "level1/2_Standard_matrix_multiplication_.py",
    "level1/94_MSELoss.py",
    "level2/12_Gemm_Multiply_LeakyReLU.py",
)
#: Tighter than --small's own budget: CI time, not the benchmark's.
SAMPLE_FLOPS, SAMPLE_BYTES = 1 << 16, 1 << 13


def _root() -> Path:
    root = Path(KERNELBENCH.get())
    if not (root / "level1").is_dir():
        pytest.skip(f"KernelBench is not at {root} (set {KERNELBENCH.name})")
    return root


@pytest.mark.parametrize("rel", SAMPLE)
def test_reference_and_reordered_variant_pass_strongest(rel, tmp_path, monkeypatch):
    from kernelaudit.config import SMALL_SHAPES_CACHE
    from kernelaudit.zoo.oracles import Subject, make_oracle
    from kernelaudit.zoo.problems import ProblemCase, load_problem
    from kernelaudit.zoo.problems.small_shapes import find_small_shapes
    from kernelaudit.zoo.problems.variants import reference_candidate, reordered_candidate

    monkeypatch.setenv(SMALL_SHAPES_CACHE.name, "off")
    problem = load_problem(_root() / rel)
    found = find_small_shapes(problem, max_flops=SAMPLE_FLOPS, max_bytes=SAMPLE_BYTES)
    assert found.source == "searched" and found.shapes, found  # every sample problem is too big as published
    case = ProblemCase.make(problem, shapes=found.shapes)
    variant = reordered_candidate(case, tmp_path)
    oracle = make_oracle("strongest")
    for cand in (reference_candidate(problem, tmp_path), variant.candidate):
        verdict = oracle.judge(ProblemCase.make(problem, shapes=found.shapes), Subject(cand))
        assert verdict.status.value == "ok", f"{cand.name} ({variant.kind}): {verdict.message}"


def test_the_variant_is_reordered_not_a_copy(tmp_path):
    """Row chunks where the model is batch-separable, split reductions where there are any;
    not separable (a mean over the batch) means whole batches."""
    from kernelaudit.zoo.problems import ProblemCase, load_problem
    from kernelaudit.zoo.problems.variants import reordered_candidate, split_count

    root = _root()
    shapes = {"M": 8, "K": 6, "N": 4}
    matmul = ProblemCase.make(load_problem(root / SAMPLE[2]), shapes=shapes)
    v = reordered_candidate(matmul, tmp_path)
    assert v.kind == "row_chunks+split_reductions" and v.plans["eval"] == (0,)  # rows of A; B whole
    assert split_count(matmul) == 1
    loss = ProblemCase.make(load_problem(root / SAMPLE[3]), shapes={"batch_size": 4, "input_shape[0]": 8})
    assert reordered_candidate(loss, tmp_path).plans == {"eval": None, "train": None}
