"""The persistent TMA-fed ``mma`` kernel takes exactly the plain 2-d GEMMs TMA can
describe, gives them the plain ``mma`` kernel's bits, and leaves every other launch
to it (Triton interpreter; the GPU test compares the compiled kernels)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kernelaudit.errors import InvalidArgument
from kernelaudit.repro import gemm, mma_tma
from kernelaudit.repro.tiles import Tiles

TMA = Tiles(16, 16, 16, num_warps=4, num_stages=2, group_m=2, tma=True)
PLAIN = dataclasses.replace(TMA, tma=False)


@pytest.fixture
def tma_launches(monkeypatch):
    seen = []
    real = mma_tma.launch
    monkeypatch.setattr(mma_tma, "launch", lambda *a, **k: (seen.append(1), real(*a, **k))[1])
    return seen


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m, n, k", [(50, 24, 40), (16, 32, 16), (33, 8, 72)])  # partial tiles, K tails
def test_eligible_linears_take_the_tma_kernel_with_the_plain_kernels_bits(tma_launches, dtype, m, n, k, bits_equal):
    g = torch.Generator().manual_seed(m + n + k)
    x = torch.randn(m, k, generator=g).to(dtype)
    w = torch.randn(n, k, generator=g).to(dtype)
    b = torch.randn(n, generator=g).to(dtype)
    for bias in (None, b):
        got = gemm.linear(x, w, bias, order="mma", tiles=TMA)
        assert tma_launches and tma_launches.pop() == 1
        assert bits_equal(got, gemm.linear(x, w, bias, order="mma", tiles=PLAIN))
        want = x.double() @ w.double().T + (0 if bias is None else bias.double())
        torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2)
    got = gemm.addmm(b, x, w.t(), beta=0.5, alpha=2.0, order="mma", tiles=TMA)
    assert tma_launches.pop() == 1
    assert bits_equal(got, gemm.addmm(b, x, w.t(), beta=0.5, alpha=2.0, order="mma", tiles=PLAIN))


def test_a_row_has_the_same_bits_alone_and_in_a_batch(tma_launches, bits_equal):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(40, 32, generator=g).bfloat16()
    w = torch.randn(24, 32, generator=g).bfloat16()
    full = gemm.linear(x, w, order="mma", tiles=TMA)
    for r in (0, 5, 39):
        assert bits_equal(gemm.linear(x[r:r + 1], w, order="mma", tiles=TMA)[0], full[r])
    assert len(tma_launches) == 4


def test_a_one_row_linear_with_a_bias_takes_the_tma_kernel(tma_launches, bits_equal):
    # a bias expanded to one row keeps a row stride (torch does not zero it for a size-1
    # dim); the kernel reads the bias per column, so that row is fine
    g = torch.Generator().manual_seed(4)
    x = torch.randn(1, 32, generator=g).bfloat16()
    w = torch.randn(24, 32, generator=g).bfloat16()
    b = torch.randn(24, generator=g).bfloat16()
    assert mma_tma.eligible(x[None, None], w.t()[None, None], b.expand(1, 24)[None, None],
                            torch.empty(1, 24, dtype=torch.bfloat16)[None, None])
    got = gemm.linear(x, w, b, order="mma", tiles=TMA)
    assert tma_launches == [1]
    assert bits_equal(got, gemm.linear(x, w, b, order="mma", tiles=PLAIN))


def test_launches_tma_cannot_describe_run_the_plain_kernel(tma_launches):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(20, 32, generator=g).bfloat16()
    w = torch.randn(24, 32, generator=g).bfloat16()
    cases = {
        "fp32 activations": lambda t: gemm.linear(x.float(), w.float(), order="mma", tiles=t),
        "a transposed": lambda t: gemm.mm(x.t().contiguous().t(), w.t(), order="mma", tiles=t),
        "rows 2-byte aligned": lambda t: gemm.linear(torch.randn(20, 33, generator=g).bfloat16()[:, :32],
                                                     torch.randn(24, 32, generator=g).bfloat16(), order="mma",
                                                     tiles=t),
        "batched": lambda t: gemm.bmm(x.unsqueeze(0).expand(2, -1, -1), w.t().unsqueeze(0).expand(2, -1, -1),
                                      order="mma", tiles=t),
        "bias per row": lambda t: gemm.addmm(torch.randn(20, 1, generator=g).bfloat16(), x, w.t(), order="mma",
                                             tiles=t),
    }
    for name, run in cases.items():
        g.manual_seed(3)
        got = run(TMA)
        assert not tma_launches, name
        g.manual_seed(3)
        assert torch.equal(got, run(PLAIN)), name


def test_an_mma_tma_tile_runs_ieee_without_tma_and_tile8_or_dot_tma_tiles_are_refused():
    # tma in the ieee order is the K-lanes tiled kernel's (test_gemm_ieee_lanes); an mma
    # tile with tma=True is not tiled, so an ieee launch runs its order without TMA
    x = torch.randn(4, 16).bfloat16()
    assert torch.equal(gemm.linear(x, x, order="ieee", tiles=TMA), gemm.linear(x, x, order="ieee"))
    with pytest.raises(InvalidArgument, match="tma=True"):
        Tiles(16, 16, 16, dot=True, tma=True)
