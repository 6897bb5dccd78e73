"""repro on CUDA: the compiled register-tiled ``ieee`` kernel (every decode bucket of the
table, decode and prefill configurations, K tails, signed zeros) equals the CPU emulator
bit for bit, and row 0 of ``x[:M] @ W`` keeps its bits across the M buckets."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def _draw(shape, dtype, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def _tiles():
    from kernelaudit.repro.tiles import Tiles

    return [Tiles(1, 32, 64, 1, 1, tiled=True, prefetch=True), Tiles(4, 32, 32, 1, 1, tiled=True, prefetch=True),
            Tiles(16, 32, 8, 4, 3, tiled=True), Tiles(8, 64, 16, 4, 1, tiled=True, prefetch=True),
            Tiles(64, 64, 4, 2, 2, tiled=True, group_m=8), Tiles(128, 128, 4, 4, 2, tiled=True, group_m=8)]


@pytest.mark.parametrize("i", range(6))
@pytest.mark.parametrize("m, k, n, adt, wdt", [
    (3, 4099, 96, torch.bfloat16, torch.bfloat16),
    (16, 1000, 70, torch.float32, torch.bfloat16),
    (130, 777, 50, torch.float16, torch.float16),
])
def test_compiled_tiled_linear_equals_cpu_emulator_bit_for_bit(i, m, k, n, adt, wdt):
    from kernelaudit.repro import emulate, gemm

    x, w, b = _draw((m, k), adt, 1, 100.0), _draw((n, k), wdt, 2), _draw((n,), wdt, 3)
    got = gemm.linear(x.cuda(), w.cuda(), b.cuda(), tiles=_tiles()[i]).cpu()
    want = emulate.linear_ieee(x, w, b)
    assert emulate.bit_mismatches(got, want) == 0


def test_table_decode_buckets_keep_row_0_bits_and_negative_zero():
    from kernelaudit.repro import emulate, gemm

    w = _draw((512, 2048), torch.bfloat16, 4).cuda()
    x = _draw((20, 2048), torch.bfloat16, 5).cuda()
    first = gemm.linear(x[:1], w)
    for m in range(2, 21):
        assert torch.equal(gemm.linear(x[:m], w)[:1], first), m
    xz = torch.tensor([[-1e-30] + [0.0] * 18])
    wz = torch.tensor([[1e-30] + [-1.0] * 18] * 40)
    got = gemm.linear(xz.cuda(), wz.cuda()).cpu()
    want = emulate.linear_ieee(xz, wz)
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))
    assert bool((want.view(torch.int32) == -2**31).all())
