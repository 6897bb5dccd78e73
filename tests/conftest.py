"""Shared fixtures: sweeps are run once per session and shared by the tests that read them."""

from __future__ import annotations

import os

import pytest

import torch

if not torch.cuda.is_available():  # Triton kernels run on the CPU (in CI) through the interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def mps_run(tmp_path_factory):
    """The quick grid under the mps fault model at scale 14 (thresholds 2^13 / 2^14)."""
    from kernelaudit import GridSpec, run_sweep
    from kernelaudit.cli import PRESETS

    q = PRESETS["quick"]
    spec = GridSpec(ops=q["ops"], dtypes=("float32", "float16"), thresholds=("2^31", "2^32", "2*2^32"),
                    positions=("below", "at", "above"), scale=14)
    return run_sweep(spec, tmp_path_factory.mktemp("mps"), device="cpu", fault_model="mps")
