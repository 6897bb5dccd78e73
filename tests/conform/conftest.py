"""Fixtures for conform's CPU tests: one small suite and its blindness table, built once."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():  # before triton loads: kernels run in the interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def small_suite():
    from kernelaudit.conform.cases import suite

    return suite(((32, 48, 64),))


@pytest.fixture(scope="session")
def blindness_rows(small_suite):
    import warnings

    from kernelaudit.conform.conformance import blindness

    with warnings.catch_warnings():  # no_saturation's int32 -> int8 wrap warns in numpy
        warnings.simplefilter("ignore", RuntimeWarning)
        return blindness(small_suite)
