"""Fixtures the sweep tests share."""

from __future__ import annotations

import pytest

from kernelaudit.sweep.ops import opinfo


@pytest.fixture(scope="module")
def catalogue():
    """The OpInfo catalogue for this torch (cached or shipped); skip where there is none."""
    if opinfo._read(opinfo.cache_path()) is None and opinfo._read(opinfo.snapshot_path()) is None:
        pytest.skip(f"no OpInfo catalogue for torch {opinfo.torch_key()} (deriving it takes minutes: "
                    "python -m kernelaudit.sweep.ops.opinfo)")
    return opinfo.catalogue()
