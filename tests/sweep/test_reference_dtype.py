"""16-bit cases are judged against a float32 reference: what they measure is what a
float64 reference measures, to far below their tolerances."""

from __future__ import annotations

import pytest
import torch

from kernelaudit.sweep.cases import GridSpec, grid
from kernelaudit.sweep.judge import reference
from kernelaudit.sweep.judge.execution import execute


def test_the_reference_is_float32_for_16_bit_floats_and_float64_for_float32():
    assert reference.reference_dtype(torch.float16) is torch.float32
    assert reference.reference_dtype(torch.bfloat16) is torch.float32
    assert reference.reference_dtype(torch.float32) is torch.float64
    assert reference.reference_dtype(torch.int32) is torch.int64


@pytest.mark.parametrize("op", ["gelu", "softmax", "sum"])
def test_a_float32_reference_measures_a_16_bit_case_as_float64_does(op, monkeypatch):
    case = grid(GridSpec(ops=(op,), dtypes=("bfloat16",), layouts=("contig",), directions=("fwd", "bwd"),
                         thresholds=("2^32",), positions=("above",), scale=14))
    for c in case:
        fast = execute(c, tolerances=None, mode="full").worst
        monkeypatch.setattr(reference, "REFERENCE_DTYPE", {})
        slow = execute(c, tolerances=None, mode="full").worst
        monkeypatch.undo()
        assert fast.keys() == slow.keys() and fast
        for k in fast:  # the metrics agree to 1% (bf16's own errors are 2^-8 relative)
            assert abs(fast[k] - slow[k]) <= 0.01 * max(slow[k], 2.0**-20), (c.id, k, fast[k], slow[k])

