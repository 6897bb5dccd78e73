"""Parity of the experimental projection kernels with the product's (run: ``pytest benchmarks/experimental``)."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

pytest.importorskip("triton")

from freivalds_variants import freivalds_split, freivalds_variant  # noqa: E402


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("has_m", [False, True])
def test_every_projection_kernel_computes_the_same_sums(dtype, has_m):
    """``acc2d`` (accumulate tiles, reduce once), ``rowsum`` (reduce every tile) and
    the product's row-sum kernel (the same body, C's strides specialised) agree to rounding, with a
    bias and without, over transposed and offset descriptors."""
    pytest.importorskip("triton")
    import torch

    from kernelaudit.sweep import gen
    from kernelaudit.sweep.kernels.freivalds import Desc
    from kernelaudit.sweep.ops.spec import DTYPES

    dt = DTYPES[dtype]
    nb, H, M, K, N = 3, 2, 40, 24, 36
    dA = Desc(gen.stream_key(2, "a"), 5, (H * M * K, M * K, 1, M))
    dB = Desc(gen.stream_key(2, "b"), 2**32 - 7, (H * K * N, K * N, N, 1))
    dM = Desc(gen.stream_key(2, "m"), 0, (0, M * N, N, 1)) if has_m else None
    C = torch.randn(nb, H, M, N).to(dt)
    x, y = torch.rand(N, dtype=torch.float64) - 0.5, torch.rand(M, dtype=torch.float64) - 0.5
    a = freivalds_variant("rowsum", C, x, y, dA, dB, dM, K, 2.0, 0.5, dt, blocks=(16, 16))
    b = freivalds_variant("acc2d", C, x, y, dA, dB, dM, K, 2.0, 0.5, dt, blocks=(16, 16))
    c = freivalds_variant("product", C, x, y, dA, dB, dM, K, 2.0, 0.5, dt, blocks=(16, 16))
    rel = 1e-12 if dtype == "float32" else 1e-5  # float64 sums / float32 sums
    assert torch.allclose(a, b, rtol=rel, atol=rel * float(a.abs().max()))
    assert torch.equal(a, c)  # one body, one summation order
    # split: rows of C and k-slices of A and B spread over programs, at tiles that leave
    # programs with no k-slice (K < programs), with several k each, and a ragged last one
    for tile in ((1, 1), (8, 2), (16, 2), (64, 4)):
        d = freivalds_split(C, x, y, dA, dB, dM, K, 2.0, 0.5, dt, tile=tile)
        assert torch.allclose(a, d, rtol=rel, atol=rel * float(a.abs().max())), tile


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_split_kernel_flags_exactly_the_corrupted_matrices(dtype):
    """One element of C off in two (batch, head) matrices: their lhs moves away from rhs
    by far more than the bound allows, and no other matrix's does."""
    pytest.importorskip("triton")
    import torch

    from kernelaudit.sweep import gen
    from kernelaudit.sweep.kernels.freivalds import Desc
    from kernelaudit.sweep.ops.spec import DTYPES

    dt = DTYPES[dtype]
    nb, H, M, K, N = 4, 1, 24, 8, 20
    kA, kB = gen.stream_key(3, "a"), gen.stream_key(3, "b")
    dA = Desc(kA, 0, (M * K, 0, K, 1))
    dB = Desc(kB, 0, (K * N, 0, N, 1))
    A = gen.fill_flat(nb * M * K, kA, dt, "cpu").double().view(nb, 1, M, K)
    Bm = gen.fill_flat(nb * K * N, kB, dt, "cpu").double().view(nb, 1, K, N)
    C = (A @ Bm).to(dt)
    clean = C.clone()
    C[1, 0, 5, 7] += 8.0
    C[3, 0, M - 1, N - 1] -= 8.0
    x, y = torch.rand(N, dtype=torch.float64) + 0.5, torch.rand(M, dtype=torch.float64) + 0.5

    def metric(t):
        res = freivalds_split(t, x, y, dA, dB, None, K, 1.0, 0.0, dt, tile=(4, 2))
        return ((res[..., 0] - res[..., 1]).abs() / res[..., 2]).flatten()

    tol = 10 * float(metric(clean).max())  # as the sweep calibrates: 10x the worst clean metric
    got = metric(C)
    assert (got > tol).nonzero().flatten().tolist() == [1, 3], (got.tolist(), tol)
