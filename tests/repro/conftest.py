"""What the repro tests share: a strict bit comparison and seeded inputs (fixtures, since
``--import-mode=importlib`` keeps test modules from importing each other)."""

from __future__ import annotations

import pytest
import torch


def _bits_equal(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Same dtype, shape and bytes: every bit, NaN payloads included (stricter than
    :func:`kernelaudit.repro.emulate.same_bits`, which lets a NaN match any NaN)."""
    return x.dtype == y.dtype and x.shape == y.shape and torch.equal(
        x.contiguous().view(torch.uint8), y.contiguous().view(torch.uint8))


def _draw(shape, dtype, seed, scale=1.0) -> torch.Tensor:
    """Standard normal values times ``scale`` from ``seed``, rounded to ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


@pytest.fixture(scope="session")
def bits_equal():
    return _bits_equal


@pytest.fixture(scope="session")
def draw():
    return _draw
