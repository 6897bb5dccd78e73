"""repro on CUDA: the compiled register-tiled ``ieee`` kernel (every decode bucket of the
table, decode and prefill configurations, K tails, signed zeros) equals the CPU emulator
bit for bit, and row 0 of ``x[:M] @ W`` keeps its bits across the M buckets; the same for
the K-lanes order (the K-lanes kernel, the lane-after-lane ``dot`` and explicit paths,
``split_lanes``, the table's lanes rows, signed zeros through lanes, tails and the tree)."""

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
    """The sequential register-tiled kernel, pinned to the sequential order (K = 4099
    is a K-lanes shape in the table)."""
    from kernelaudit.repro import emulate, gemm
    from kernelaudit.repro.tiles import SEQUENTIAL

    x, w, b = _draw((m, k), adt, 1, 100.0), _draw((n, k), wdt, 2), _draw((n,), wdt, 3)
    got = gemm.linear(x.cuda(), w.cuda(), b.cuda(), tiles=_tiles()[i], lanes=SEQUENTIAL).cpu()
    want = emulate.linear_ieee(x, w, b, lanes=SEQUENTIAL)
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


# -- K lanes -----------------------------------------------------------------------------------
def _lane_cases():
    """(tiles, lanes): the table's K-lanes rows (decode buckets, the Gluon prefill pass), other
    K-lanes kernel tiles, the explicit loop, the tile8 request, and other orders."""
    from kernelaudit.repro.tiles import IEEE_LANES_TABLE, Lanes, Tiles, ieee_lanes

    table = ieee_lanes(4096, 4096, torch.bfloat16)
    out = [(t, None) for (_, n), t in IEEE_LANES_TABLE.items() if n == "large"]
    out += [(Tiles(4, 32, 64, 4, 1, tiled=True), None), (Tiles(8, 8, 128, 2, 3, tiled=True), None),
            (Tiles(16, 16, 8, 2, 2, tile8=True), None), (Tiles(16, 16, 1, 4, 1), None),
            (Tiles(32, 64, 32, 4, 2, dot=True), None),
            (Tiles(2, 16, 256, 4, 1, tiled=True, prefetch=True), Lanes(16, 8)),
            (Tiles(4, 16, 64, 4, 1, tiled=True, prefetch=True), Lanes(4, 16)),
            (Tiles(64, 64, 16, 8, 2, dot=True), Lanes(4, 2)),
            (Tiles(64, 64, 16, 8, 2, dot=True), Lanes(2, 32)),
            (Tiles(128, 128, 32, 8, 2, dot=True, split_lanes=True, group_m=8), None),
            (Tiles(64, 64, 16, 4, 2, dot=True, split_lanes=True), Lanes(4, 2)),
            (Tiles(16, 16, 1, 4, 1, split_lanes=True), None)]
    assert not table.sequential
    return out


@pytest.mark.parametrize("i", range(18))
@pytest.mark.parametrize("m, k, n, adt, wdt", [
    (3, 4099, 96, torch.bfloat16, torch.bfloat16),       # the table's order (K >= 1024), K tail
    (16, 1500, 70, torch.float32, torch.bfloat16),
    (7, 2048, 40, torch.float16, torch.float16),
])
def test_compiled_lanes_linear_equals_cpu_emulator_bit_for_bit(i, m, k, n, adt, wdt):
    from kernelaudit.repro import emulate, gemm

    cases = _lane_cases()
    assert len(cases) == 18
    tiles, lanes = cases[i]
    x, w, b = _draw((m, k), adt, 1, 100.0), _draw((n, k), wdt, 2), _draw((n,), wdt, 3)
    got = gemm.linear(x.cuda(), w.cuda(), b.cuda(), tiles=tiles, lanes=lanes).cpu()
    want = emulate.linear_ieee(x, w, b, lanes=lanes)
    assert emulate.bit_mismatches(got, want) == 0, (tiles, lanes)


def test_lanes_shape_keeps_row_0_bits_across_decode_and_prefill_and_negative_zero():
    """A K-lanes shape through the table at M = 1..40 (K-lanes kernel in the decode
    buckets, the lane-after-lane dot above 16) equals the emulator's row 0; every lane
    at -0.0 with a K tail stays -0.0 through the tree."""
    from kernelaudit.repro import emulate, gemm
    from kernelaudit.repro.tiles import Lanes, Tiles, ieee_lanes

    w = _draw((96, 4099), torch.bfloat16, 6)
    x = _draw((40, 4099), torch.bfloat16, 7)
    want = emulate.linear_ieee(x[:1], w)
    wc, xc = w.cuda(), x.cuda()
    for m in range(1, 41):
        assert emulate.bit_mismatches(gemm.linear(xc[:m], wc)[:1].cpu(), want) == 0, m
    lanes = ieee_lanes(40, 1500, torch.float32)
    k = 1500
    xz, wz = torch.zeros(1, k), -torch.ones(40, k)
    for ks in emulate.lane_ks(k, lanes):
        xz[0, ks[0]], wz[:, ks[0]] = -1e-30, 1e-30
    wantz = emulate.linear_ieee(xz, wz)
    assert bool((wantz.view(torch.int32) == -2**31).all())
    for t in (None, Tiles(1, 16, 64, 4, 1, tiled=True, prefetch=True), Tiles(64, 64, 16, 8, 2, dot=True),
              Tiles(16, 16, 1, 4, 1), Tiles(128, 128, 32, 8, 2, dot=True, split_lanes=True)):
        got = gemm.linear(xz.cuda(), wz.cuda(), tiles=t).cpu()
        assert torch.equal(got.view(torch.int32), wantz.view(torch.int32)), t
    assert isinstance(lanes, Lanes) and not lanes.sequential


@pytest.mark.parametrize("act16", [False, True])
@pytest.mark.parametrize("tiles_args", [(1, 32, 512, 8, 3), (4, 16, 256, 4, 3), (4, 32, 128, 4, 4), (16, 16, 64, 4, 4)])
@pytest.mark.parametrize("m, k, n, adt", [(4, 4096, 256, torch.bfloat16), (3, 2056, 200, torch.float32),
                                          (16, 1032, 72, torch.float16)])
def test_tma_decode_tiles_equal_cpu_emulator_bit_for_bit(tiles_args, m, k, n, adt, act16):
    """The K-lanes kernel with its weights by tensor descriptor, pipelined in shared
    memory (``Tiles.tma``), and its activations upcast in memory first, or (``act16``) read
    16-bit and upcast in registers: bf16 weights, K a multiple of 8 (so TMA can take them)
    with a tail, the table's order."""
    from kernelaudit.repro import emulate, gemm, mma_tma
    from kernelaudit.repro.tiles import Tiles

    x, w, b = _draw((m, k), adt, 11, 10.0), _draw((n, k), torch.bfloat16, 12), _draw((n,), torch.bfloat16, 13)
    wc = w.cuda()
    assert mma_tma.weights_eligible(wc.t()[None, None]) and gemm._weight_words(wc.t()[None, None])
    got = gemm.linear(x.cuda(), wc, b.cuda(), tiles=Tiles(*tiles_args, tiled=True, tma=True, act16=act16)).cpu()
    assert emulate.bit_mismatches(got, emulate.linear_ieee(x, w, b)) == 0


@pytest.mark.parametrize("tiles_args", [(128, 128, 16, 8), (64, 128, 8, 4), (256, 128, 32, 8),
                                        # max_registers (spilled values)
                                        (128, 128, 8, 4, 168), (128, 128, 16, 8, 128),
                                        # warp-specialized: 4 producer warps, 3 stages
                                        (128, 128, 16, 8, 80, 4), (64, 128, 8, 4, 0, 4),
                                        # other thread tiles (their registers, their bank reads)
                                        (256, 128, 16, 8, 0, 4, (8, 4)), (128, 128, 16, 8, 0, 0, (4, 8)),
                                        # producers loading whole rows; producers keeping 48 registers
                                        (256, 128, 16, 8, 0, 4, (4, 4), True), (128, 128, 16, 8, 80, 4, (4, 4), True),
                                        (256, 128, 16, 8, 0, 4, (4, 4), False, 48),
                                        # stages handed back 2 and 3 at a time (4 and 6 stages)
                                        (256, 128, 16, 8, 0, 4, (4, 4), False, 48, 2),
                                        (256, 128, 16, 8, 0, 4, (4, 4), True, 48, 3)])
@pytest.mark.parametrize("m, k, n, adt, wdt, lanes", [
    (200, 4099, 200, torch.bfloat16, torch.bfloat16, None),        # the table's order, K and tile tails
    (130, 1500, 70, torch.float32, torch.bfloat16, None),
    (67, 2048, 130, torch.float16, torch.float16, "sequential"),
    (129, 1032, 64, torch.bfloat16, torch.bfloat16, (4, 16)),
])
def test_gluon_lane_sums_equal_cpu_emulator_bit_for_bit(tiles_args, m, k, n, adt, wdt, lanes):
    """``split_lanes`` with the Gluon first pass (:mod:`kernelaudit.repro.ieee_gluon`):
    row, column and K tails, fp32 and fp16 activations, the sequential order and other
    K-lanes orders, a bias, other thread tiles, producers loading whole rows or keeping more
    registers, stages handed back in groups (a last group cut short); and the launch really ran the Gluon kernel."""
    from kernelaudit.repro import emulate, gemm, ieee_gluon
    from kernelaudit.repro.tiles import SEQUENTIAL, Lanes, Tiles

    order = SEQUENTIAL if lanes == "sequential" else Lanes(*lanes) if lanes else None
    registers, loaders, thread_tile, whole_rows, loader_registers, handback = (
        tiles_args[4:] + (0, 0, (4, 4), False, 32, 1)[len(tiles_args) - 4:])
    t = Tiles(*tiles_args[:4], max(3, 2 * handback) if loaders else 1, split_lanes=True, gluon=True, group_m=8,
              max_registers=registers, loader_warps=loaders, thread_tile=thread_tile,
              loader_whole_rows=whole_rows, loader_registers=loader_registers, handback_steps=handback)
    x, w, b = _draw((m, k), adt, 21, 10.0), _draw((n, k), wdt, 22), _draw((n,), wdt, 23)
    got = gemm.linear(x.cuda(), w.cuda(), b.cuda(), tiles=t, lanes=order).cpu()
    assert emulate.bit_mismatches(got, emulate.linear_ieee(x, w, b, lanes=order)) == 0, (t, order)
    run_order = order or gemm.ieee_lanes(n, k, wdt)
    # a K step must hold whole blocks of a lane: 8-k steps cannot take 16-k blocks (Triton pass)
    assert ieee_gluon.usable(x.cuda()[None, None], t, run_order) == (t.bk % run_order.block == 0)
    if t.bk % run_order.block == 0:
        kernel = ieee_gluon.lane_sums_ws_kernel if loaders else ieee_gluon.lane_sums_kernel
        compiled = [c[0] for c in kernel.device_caches.values()]
        assert any(compiled), "the Gluon kernel never compiled: the Triton first pass ran"


@pytest.mark.parametrize("tiles_args", [(256, 128, 16, 8, 4), (128, 128, 16, 8, 3), (64, 128, 8, 4, 2)])
@pytest.mark.parametrize("m, k, n, adt, wdt, lanes", [
    (200, 4099, 200, torch.bfloat16, torch.bfloat16, None),        # the table's order, K and tile tails
    (130, 1500, 70, torch.float32, torch.bfloat16, None),          # 130 rows: a row stride rounded up to 4
    (67, 2048, 130, torch.float16, torch.float16, "sequential"),
    (129, 1032, 64, torch.bfloat16, torch.bfloat16, (4, 16)),
])
def test_cast_once_lane_sums_equal_cpu_emulator_bit_for_bit(tiles_args, m, k, n, adt, wdt, lanes):
    """``cast_once`` (:mod:`kernelaudit.repro.ieee_gluon_tma`: operands cast to fp32 once,
    lane-major, fed by TMA): row, column and K tails, fp32 and fp16 activations, the
    sequential order and other K-lanes orders, a bias; and the TMA kernel really ran."""
    from kernelaudit.repro import emulate, gemm, ieee_gluon, ieee_gluon_tma
    from kernelaudit.repro.tiles import SEQUENTIAL, Lanes, Tiles

    order = SEQUENTIAL if lanes == "sequential" else Lanes(*lanes) if lanes else None
    t = Tiles(*tiles_args, split_lanes=True, gluon=True, group_m=8, cast_once=True)
    x, w, b = _draw((m, k), adt, 24, 10.0), _draw((n, k), wdt, 25), _draw((n,), wdt, 26)
    got = gemm.linear(x.cuda(), w.cuda(), b.cuda(), tiles=t, lanes=order).cpu()
    assert emulate.bit_mismatches(got, emulate.linear_ieee(x, w, b, lanes=order)) == 0, (t, order)
    run_order = order or gemm.ieee_lanes(n, k, wdt)
    if ieee_gluon.usable(x.cuda()[None, None], t, run_order):
        compiled = [c[0] for c in ieee_gluon_tma.lane_sums_tma_kernel.device_caches.values()]
        assert any(compiled), "the TMA kernel never compiled: another first pass ran"


def test_table_prefill_row_runs_cast_once_in_2d_and_producer_warps_in_bmm():
    """The table's large-N prefill row (``cast_once`` beside ``loader_warps``): a plain
    ``linear`` at prefill sizes runs the TMA kernel, a ``bmm`` (several batches, which the
    cast-once pass does not take) the warp-specialized pass; both the emulator's bits."""
    from kernelaudit.repro import emulate, gemm, ieee_gluon, ieee_gluon_tma
    from kernelaudit.repro.tiles import pick

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA and warp specialization need sm_90 on")
    x, w = _draw((300, 2048), torch.bfloat16, 41, 10.0), _draw((1100, 2048), torch.bfloat16, 42)
    t = pick("ieee", 1100, 2048, torch.bfloat16, m=300)
    assert t.cast_once and t.loader_warps, t
    got = gemm.linear(x.cuda(), w.cuda()).cpu()
    assert emulate.bit_mismatches(got, emulate.linear_ieee(x, w)) == 0
    assert any(c[0] for c in ieee_gluon_tma.lane_sums_tma_kernel.device_caches.values())
    a, bb = _draw((3, 300, 1100), torch.bfloat16, 43), _draw((3, 1100, 1030), torch.bfloat16, 44)
    assert pick("ieee", 1030, 1100, torch.bfloat16, m=300).cast_once
    got = gemm.bmm(a.cuda(), bb.cuda()).cpu()
    assert emulate.bit_mismatches(got, emulate.bmm_ieee(a, bb)) == 0
    assert any(c[0] for c in ieee_gluon.lane_sums_ws_kernel.device_caches.values())


def test_gluon_lane_sums_bmm_and_signed_zeros():
    """Batched operands (bmm, per-batch strides) and an all -0.0 result through the Gluon
    first pass and the tree, bit for bit."""
    from kernelaudit.repro import emulate, gemm
    from kernelaudit.repro.tiles import Tiles

    t = Tiles(128, 128, 16, 8, 1, split_lanes=True, gluon=True, group_m=8)
    a, bb = _draw((3, 70, 1100), torch.bfloat16, 31), _draw((3, 1100, 90), torch.bfloat16, 32)
    got = gemm.bmm(a.cuda(), bb.cuda(), tiles=t).cpu()
    assert emulate.bit_mismatches(got, emulate.bmm_ieee(a, bb)) == 0
    k = 1500
    xz, wz = torch.full((1, k), -1e-30), torch.full((40, k), 1e-30)
    wantz = emulate.linear_ieee(xz, wz)
    assert bool((wantz.view(torch.int32) == -2**31).all())   # every element -0.0
    gotz = gemm.linear(xz.cuda(), wz.cuda(), tiles=t).cpu()
    assert torch.equal(gotz.view(torch.int32), wantz.view(torch.int32))


@pytest.mark.parametrize("tiles_args", [(4, 16, 256, 4, 1), (4, 64, 128, 4, 1), (2, 32, 256, 4, 1), (1, 16, 512, 4, 1),
                                        (16, 32, 64, 4, 1), (4, 16, 256, 4, 4), (2, 16, 128, 4, 6)])
@pytest.mark.parametrize("m, k, n, adt, with_bias, out_dtype", [
    (4, 8192, 256, torch.bfloat16, True, None),         # whole steps, a bias
    (3, 4100, 200, torch.bfloat16, False, None),        # row, column and K tails (K even, not whole steps)
    (2, 1030, 70, torch.float32, True, None),           # fp32 activations, K < a step for the wide tiles
    (1, 2048, 96, torch.float16, False, torch.float32), # fp16 activations, fp32 output
])
def test_gluon_lanes_decode_equals_cpu_emulator_bit_for_bit(tiles_args, m, k, n, adt, with_bias, out_dtype):
    """The Gluon decode kernel (:mod:`kernelaudit.repro.ieee_gluon_decode`) in the 8 x 8
    order, its weights in registers or several steps ahead by cp.async: row, column and K
    tails, every activation dtype, bias or none; and the launch
    really ran the Gluon kernel."""
    from kernelaudit.repro import emulate, gemm, ieee_gluon_decode
    from kernelaudit.repro.tiles import Lanes, Tiles

    t = Tiles(*tiles_args, tiled=True, gluon=True)    # the last: num_stages (cp.async stages)
    x, w, b = _draw((m, k), adt, 41, 10.0), _draw((n, k), torch.bfloat16, 42), _draw((n,), torch.bfloat16, 43)
    bias = b if with_bias else None
    xc, wc = x.cuda(), w.cuda()
    assert ieee_gluon_decode.usable(xc[None, None], wc.t()[None, None], t, Lanes(8, 8))
    got = gemm.addmm(bias.cuda() if with_bias else None, xc, wc.t(), tiles=t, lanes=Lanes(8, 8),
                     out_dtype=out_dtype).cpu()
    want = emulate.addmm_ieee(bias, x, w.t(), lanes=Lanes(8, 8), out_dtype=out_dtype)
    assert emulate.bit_mismatches(got, want) == 0, (t, m, k, n)
    compiled = [c[0] for c in ieee_gluon_decode.lanes_decode_kernel.device_caches.values()]
    assert any(compiled), "the Gluon kernel never compiled: the Triton kernel ran"


def test_gluon_lanes_decode_bmm_and_signed_zeros():
    """Batched operands (per-batch strides through grid dims 1 and 2) and an all -0.0 result
    through the lanes, the K tail's padding and the tree, bit for bit."""
    from kernelaudit.repro import emulate, gemm
    from kernelaudit.repro.tiles import Lanes, Tiles

    t = Tiles(4, 16, 256, 4, 1, tiled=True, gluon=True)
    a, bb = _draw((3, 4, 1100), torch.bfloat16, 51), _draw((3, 90, 1100), torch.bfloat16, 52).transpose(1, 2)
    got = gemm.bmm(a.cuda(), bb.cuda(), tiles=t, lanes=Lanes(8, 8)).cpu()
    assert emulate.bit_mismatches(got, emulate.bmm_ieee(a, bb, lanes=Lanes(8, 8))) == 0
    k = 1500
    xz, wz = torch.full((2, k), -1e-30), torch.full((40, k), 1e-30).bfloat16()
    wantz = emulate.linear_ieee(xz, wz, lanes=Lanes(8, 8))
    assert bool((wantz.view(torch.int32) == -2**31).all())   # every element -0.0
    gotz = gemm.linear(xz.cuda(), wz.cuda(), tiles=t, lanes=Lanes(8, 8)).cpu()
    assert torch.equal(gotz.view(torch.int32), wantz.view(torch.int32))
