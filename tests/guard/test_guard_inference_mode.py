"""Under inference_mode the what-if fault model still corrupts, and the guard still fixes."""

from __future__ import annotations

import pytest
import torch

from kernelaudit import guard


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_guard_fixes_what_the_fault_model_corrupts_under_no_grad_and_inference_mode(mode):
    a = torch.randn(17, 4, 16).transpose(1, 2)  # a transposed view; output 17*256 > 2^12: rule A
    b = torch.randn(17, 4, 16)
    honest = torch.matmul(a, b)
    with guard.guarding("off", fault_model="mps", scale=12):
        with mode():
            corrupted = torch.matmul(a, b)
    assert not torch.allclose(corrupted, honest)
    with guard.guarding("fix", fault_model="mps", scale=12) as g:
        with mode():
            fixed = torch.matmul(a, b)
        assert g.stats().fixed == 1 and g.stats().by_rule == {"A": 1}
    assert torch.equal(fixed, honest)
