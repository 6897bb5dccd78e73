"""kernelaudit's pytest plugin (registered through the ``pytest11`` entry point): the
``kernelaudit_check`` fixture, :func:`kernelaudit.testing.assert_kernel_correct`.
Loading it imports nothing heavy; the check's code loads when the fixture is used."""

from __future__ import annotations

import pytest


@pytest.fixture
def kernelaudit_check():
    """``kernelaudit_check(problem, candidate, oracle="strongest", **options)``: fails the
    test with the verdict's explanation unless the candidate is judged correct."""
    from . import assert_kernel_correct

    return assert_kernel_correct
