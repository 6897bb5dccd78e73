"""repro on CUDA: the compiled ``ieee`` kernel equals the CPU emulator bit for bit; the
fixed-order kernels are batch-invariant where cuBLAS is not; ``deterministic()`` makes
the small transformer's logits and greedy tokens independent of the batch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def _draw(shape, dtype, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


@pytest.mark.parametrize("m, k, n, adt, wdt, tile8", [
    (3, 4096, 96, torch.bfloat16, torch.bfloat16, False),
    (3, 4096, 96, torch.bfloat16, torch.bfloat16, True),
    (5, 1029, 70, torch.float32, torch.bfloat16, False),
    (17, 512, 33, torch.float16, torch.float16, True),
    (40, 777, 50, torch.bfloat16, torch.bfloat16, False),   # prefill table row: the fp32 tl.dot path
])
def test_compiled_ieee_linear_equals_cpu_emulator_bit_for_bit(m, k, n, adt, wdt, tile8):
    from kernelaudit.repro import emulate, gemm
    from kernelaudit.repro.tiles import Tiles

    x, w, b = _draw((m, k), adt, 1, 100.0), _draw((n, k), wdt, 2), _draw((n,), wdt, 3)
    tiles = Tiles(16, 32, 8, 2, 2, tile8=True) if tile8 else None
    got = gemm.linear(x.cuda(), w.cuda(), b.cuda(), tiles=tiles).cpu()
    want = emulate.linear_ieee(x, w, b)
    assert emulate.bit_mismatches(got, want) == 0


@pytest.mark.parametrize("order", ["ieee", "mma"])
def test_fixed_order_linear_is_batch_invariant_on_cuda(order):
    from kernelaudit.repro import gemm
    from kernelaudit.repro.invariance import check

    w = _draw((1024, 1024), torch.bfloat16, 4).cuda()
    x = _draw((256, 1024), torch.bfloat16, 5).cuda()
    r = check(lambda t: gemm.linear(t, w, order=order), x, batch_sizes=(1, 2, 16, 64, 65, 256), runs=3)
    assert r.invariant


def test_checker_sees_cublas_bf16_change_its_order_with_m():
    from kernelaudit.repro.invariance import check

    w = _draw((4096, 4096), torch.bfloat16, 6).cuda()
    x = _draw((1024, 4096), torch.bfloat16, 7).cuda()
    r = check(lambda t: F.linear(t, w), x, batch_sizes=(1, 2, 64, 128, 1024), runs=2)
    assert r.judged
    assert any(not p.equal for p in r.of("batch")), "cuBLAS bf16 kept one order for every M"


@pytest.mark.parametrize("order", ["ieee", "mma"])
def test_deterministic_tiny_lm_same_tokens_at_batch_1_and_64(order):
    from kernelaudit.repro import mode, tinylm

    cfg = tinylm.LMConfig(vocab=256, length=64, dim=256, heads=8, hidden=1024, layers=2)
    model = tinylm.build(cfg, dtype=torch.bfloat16, device="cuda")
    prompts = torch.randint(0, cfg.vocab, (64, 16), generator=torch.Generator().manual_seed(8)).cuda()
    with mode.deterministic(order):
        one = tinylm.generate(model, prompts[37:38], 8)
        many = tinylm.generate(model, prompts, 8)
        with torch.inference_mode():
            assert torch.equal(model(prompts[37:38])[0], model(prompts)[37])
    assert torch.equal(one[0], many[37])


@pytest.mark.parametrize("m, n, k", [(8192, 2048, 2048), (1000, 6144, 2048), (77, 520, 1000), (1, 8192, 8192)])
def test_the_tma_mma_kernel_has_the_plain_mma_kernels_bits_and_is_batch_invariant(m, n, k):
    """Compiled for the GPU the persistent TMA kernel and the plain ``mma`` kernel, at
    several tiles, give the same bits (the tensor cores' k16 chain), and a row's bits do
    not depend on the rows beside it."""
    import dataclasses

    from kernelaudit.repro import gemm, mma_tma
    from kernelaudit.repro.tiles import Tiles

    x, w, b = _draw((m, k), torch.bfloat16, 4).cuda(), _draw((n, k), torch.bfloat16, 5).cuda(), \
        _draw((n,), torch.bfloat16, 6).cuda()
    plain = gemm.linear(x, w, b, order="mma", tiles=Tiles(128, 128, 64, 8, 3))
    for t in (Tiles(128, 256, 64, 8, 3, group_m=8, tma=True), Tiles(128, 128, 64, 8, 4, group_m=8, tma=True),
              Tiles(64, 128, 32, 4, 4, tma=True)):
        assert mma_tma.eligible(x[None, None], w.t()[None, None], b.expand(m, n)[None, None],
                                plain[None, None])
        got = gemm.linear(x, w, b, order="mma", tiles=t)
        assert torch.equal(got.view(torch.int16), plain.view(torch.int16)), t
        plain_t = gemm.linear(x, w, b, order="mma", tiles=dataclasses.replace(t, tma=False))
        assert torch.equal(plain_t.view(torch.int16), plain.view(torch.int16)), t
        for r in {0, m // 2, m - 1}:
            alone = gemm.linear(x[r:r + 1], w, b, order="mma", tiles=t)
            assert torch.equal(alone[0].view(torch.int16), got[r].view(torch.int16)), (t, r)
