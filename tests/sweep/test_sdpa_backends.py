"""The pinned SDPA backends run their cases' dtypes in the backend under test and every
reference dtype through the math backend (flash and cuDNN take no float32: pinned,
their 16-bit cases' float32 references raised "No available kernel" on CUDA)."""

from __future__ import annotations

import contextlib

import pytest
import torch

from kernelaudit.sweep.ops.catalog import op_spec


@pytest.mark.parametrize("backend,dtype,pinned", [
    ("flash", torch.float16, "FLASH_ATTENTION"), ("flash", torch.bfloat16, "FLASH_ATTENTION"),
    ("flash", torch.float32, "MATH"), ("flash", torch.float64, "MATH"),
    ("cudnn", torch.float16, "CUDNN_ATTENTION"), ("cudnn", torch.float32, "MATH"),
    ("efficient", torch.float32, "EFFICIENT_ATTENTION"), ("efficient", torch.float64, "MATH"),
    ("math", torch.float16, "MATH"),
])
def test_a_reference_dtype_goes_through_the_math_backend(monkeypatch, backend, dtype, pinned):
    import torch.nn.attention as attention

    chosen = []
    real = attention.sdpa_kernel

    @contextlib.contextmanager
    def record(backends):
        chosen.extend(b.name for b in backends)
        with real([attention.SDPBackend.MATH]):   # runs anywhere
            yield

    monkeypatch.setattr(attention, "sdpa_kernel", record)
    q = torch.randn(2, 1, 4, 8, dtype=dtype)
    out = op_spec(f"sdpa.{backend}").call(q, q, q)
    assert chosen == [pinned] and out.shape == q.shape
