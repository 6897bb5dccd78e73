"""The Triton interpreter without its discarded overflow checks: same values, less work."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kernelaudit.config import interpreter_requested
from kernelaudit.interpreter import skip_dead_overflow_checks

pytestmark = pytest.mark.skipif(not interpreter_requested(), reason="needs the Triton interpreter")

triton = pytest.importorskip("triton")
tl = triton.language
interp = pytest.importorskip("triton.runtime.interpreter")


@triton.jit
def _wrap_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    tl.store(y_ptr + i, x * 3 + 2147483000, mask=i < n)   # int32: wraps past 2^31 - 1


@pytest.fixture
def options():
    before = interp.interpreter_builder.options
    yield before
    interp.interpreter_builder.options = before


def _run(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    _wrap_kernel[(1,)](x, y, x.numel(), BLOCK=8)
    return y


def test_importing_kernelaudit_kernels_turns_the_checks_off(options):
    import importlib

    import kernelaudit.sweep.kernels as kernels

    interp.interpreter_builder.options = dataclasses.replace(options, sanitize_overflow=True)
    importlib.reload(kernels)  # what its first import did
    assert interp.interpreter_builder.options.sanitize_overflow is False


def test_int32_arithmetic_wraps_to_the_same_values_with_and_without_the_checks(options):
    x = torch.tensor([0, 1, 200, 1000, -5, 2**30, -(2**31), 7], dtype=torch.int32)
    interp.interpreter_builder.options = dataclasses.replace(options, sanitize_overflow=True)
    checked = _run(x)
    assert skip_dead_overflow_checks() and interp.interpreter_builder.options.sanitize_overflow is False
    unchecked = _run(x)
    expected = ((x.to(torch.int64) * 3 + 2147483000 + 2**31) % 2**32 - 2**31).to(torch.int32)
    assert torch.equal(checked, expected) and torch.equal(unchecked, expected)
    assert (expected != x.to(torch.int64) * 3 + 2147483000).any()  # some did overflow


def test_a_debugging_session_keeps_its_overflow_checks(options):
    interp.interpreter_builder.options = dataclasses.replace(options, debug=True, sanitize_overflow=True)
    assert skip_dead_overflow_checks() is False
    assert interp.interpreter_builder.options.sanitize_overflow is True
