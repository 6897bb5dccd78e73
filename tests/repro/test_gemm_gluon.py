"""The Gluon kernels of ``ieee`` without a GPU: the first pass of ``split_lanes``
(:mod:`kernelaudit.repro.ieee_gluon`) and the K-lanes decode kernel
(:mod:`kernelaudit.repro.ieee_gluon_decode`) compile for sm_90 with this machine's Triton
(its own ptxas) to what they were written for, and a launch they cannot run (the
interpreter, a CPU tensor) takes the Triton kernel with the same bits. Their bits on the
GPU: tests/gpu/test_repro_ieee_tiled_gpu.py."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest
import torch

from kernelaudit.config import interpreter_requested
from kernelaudit.repro import emulate, gemm, ieee_gluon, ieee_gluon_decode, ieee_gluon_tma
from kernelaudit.repro.sass import Sass, read_cubin
from kernelaudit.repro.tiles import Lanes, Tiles

pytestmark = pytest.mark.skipif(ieee_gluon.lane_sums_kernel is None, reason="this Triton has no Gluon")

#: A process that ran kernels in Triton's interpreter has Triton's language patched for
#: it, and a compile there fails (as tests/zoo/test_problems_kernels_compile.py found for
#: the Triton kernels): under the interpreter the compile test runs in a child process
#: with the interpreter off.
INTERPRETED = interpreter_requested()


@pytest.mark.skipif(not INTERPRETED, reason="this process compiles directly")
def test_gluon_compile_checks_pass_in_a_process_without_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "sm90", __file__],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "10 passed" in proc.stdout, proc.stdout[-2000:]


def _sm90_sass(bm, bn, bk, warps, lanes: Lanes) -> Sass:
    return read_cubin(ieee_gluon.compile_for(Tiles(bm, bn, bk, warps, 1, group_m=8, split_lanes=True, gluon=True),
                                             lanes).asm["cubin"])


@pytest.mark.skipif(INTERPRETED, reason="runs in a child process without the Triton interpreter")
def test_gluon_lane_sums_compile_for_sm90_without_spills_and_feed_ffma_by_128_bit_shared_loads():
    """128 x 128 x 16, 8 warps, the prefill order (8 lanes of 8): no stack (spills), and
    per 16 k a thread runs 1,024 FFMA from 64 LDS.128, its global loads 16 bytes wide."""
    pytest.importorskip("triton.backends.nvidia")
    sass = _sm90_sass(128, 128, 16, 8, Lanes(8, 8))
    assert sass.registers <= 168 and sass.stack_bytes == 0, (sass.registers, sass.stack_bytes)
    ops = sass.opcodes()
    assert ops.count("FFMA") == 1024, ops.count("FFMA")   # the 16-k step, unrolled once
    assert ops.count("LDS.128") == 64 and not any(o.startswith("LDS") and o != "LDS.128" for o in ops)
    assert any(o.startswith("LDG.E.128") for o in ops), sorted(set(ops))


@pytest.mark.skipif(INTERPRETED, reason="runs in a child process without the Triton interpreter")
def test_gluon_lane_sums_with_max_registers_compile_for_sm90_within_the_cap():
    """``max_registers`` 168 at 128 x 128 x 8, 4 warps (3 blocks an SM instead of 2): the
    cubin keeps to the cap, its K loop still 1,024 FFMA from 48 LDS.128 (some spilled
    values in local memory), where uncapped it takes more than 168 registers."""
    pytest.importorskip("triton.backends.nvidia")
    capped = Tiles(128, 128, 8, 4, 1, group_m=8, split_lanes=True, gluon=True, max_registers=168)
    sass = read_cubin(ieee_gluon.compile_for(capped, Lanes(8, 8)).asm["cubin"])
    assert sass.registers <= 168 < _sm90_sass(128, 128, 8, 4, Lanes(8, 8)).registers, sass.registers
    ops = sass.loop_opcodes()
    assert ops.count("FFMA") == 1024 and ops.count("LDS.128") == 48, sass.main_loop()


@pytest.mark.skipif(INTERPRETED, reason="runs in a child process without the Triton interpreter")
def test_warp_specialized_lane_sums_compile_for_sm90_to_fma_warps_fed_by_producer_warps():
    """``loader_warps`` 4 at 128 x 128 x 16, 8 warps, 3 stages, 80 registers (two blocks
    an SM): the FMA warps' 1,024 FFMA and 64 LDS.128 a step are all of the kernel's, the
    hand-over is by mbarrier (arrive, try-wait), the registers are reallocated between the
    partitions, and the cubin keeps to the cap; on sm_80 the same tiles compile the plain
    pass (no warp specialization before Hopper)."""
    pytest.importorskip("triton.backends.nvidia")
    ws = Tiles(128, 128, 16, 8, 3, group_m=8, split_lanes=True, gluon=True, max_registers=80, loader_warps=4)
    sass = read_cubin(ieee_gluon.compile_for(ws, Lanes(8, 8)).asm["cubin"])
    ops = sass.opcodes()
    assert sass.registers <= 80, sass.registers
    assert ops.count("FFMA") == 1024 and ops.count("LDS.128") == 64, (ops.count("FFMA"), ops.count("LDS.128"))
    assert any(o.startswith("SYNCS.ARRIVE") for o in ops) and any(o.startswith("SYNCS.PHASECHK") for o in ops)
    assert any(o.startswith("USETMAXREG") for o in ops), sorted(set(ops))
    assert ieee_gluon.warp_specialized(ws, 90) and not ieee_gluon.warp_specialized(ws, 80)
    plain = read_cubin(ieee_gluon.compile_for(ws, Lanes(8, 8), capability=80).asm["cubin"]).opcodes()
    assert not any(o.startswith(("SYNCS", "USETMAXREG")) for o in plain) and plain.count("FFMA") == 1024


@pytest.mark.skipif(INTERPRETED, reason="runs in a child process without the Triton interpreter")
def test_gluon_thread_tiles_compile_for_sm90_to_the_same_k_loop_on_other_registers():
    """The table's prefill tile (256 x 128 x 16, 8 FMA warps, 4 producer warps) with an
    8 x 4 thread tile: the same K loop (2,048 FFMA from 96 LDS.128 a step, no more
    registers) whose operands ptxas places otherwise: by the two-bank model fewer FFMA
    read two sources from one bank than at 4 x 4 (1,026 against 1,144 with Triton 3.9)."""
    pytest.importorskip("triton.backends.nvidia")
    import dataclasses

    base = Tiles(256, 128, 16, 8, 3, group_m=8, split_lanes=True, gluon=True, loader_warps=4)
    sass = {tt: read_cubin(ieee_gluon.compile_for(dataclasses.replace(base, thread_tile=tt), Lanes(8, 8)).asm["cubin"])
            for tt in ((4, 4), (8, 4))}
    for s in sass.values():
        loop = s.loop_opcodes()
        assert loop.count("FFMA") == 2048 and loop.count("LDS.128") == 96, s.main_loop()
    assert sass[(8, 4)].registers <= sass[(4, 4)].registers
    banks = {tt: s.ffma_bank_reads(2)["two_in_one_bank"] for tt, s in sass.items()}
    assert banks[(8, 4)] < banks[(4, 4)], banks


@pytest.mark.skipif(INTERPRETED, reason="runs in a child process without the Triton interpreter")
def test_whole_row_loaders_compile_for_sm90_to_fewer_shared_stores_and_the_same_k_loop():
    """``loader_whole_rows`` on the table's prefill tile: the FMA warps' loop is unchanged
    (2,048 FFMA from 96 LDS.128 a step), and the producers write a step in fewer store
    instructions (one k of 32 rows a store: Triton 3.9 packs them into STSM, 15 stores for
    51), from the same six 16-byte loads."""
    pytest.importorskip("triton.backends.nvidia")
    base = Tiles(256, 128, 16, 8, 3, group_m=8, split_lanes=True, gluon=True, loader_warps=4)
    ops = {}
    for rows in (False, True):
        sass = read_cubin(ieee_gluon.compile_for(dataclasses.replace(base, loader_whole_rows=rows),
                                                 Lanes(8, 8)).asm["cubin"])
        loop = sass.loop_opcodes()
        assert loop.count("FFMA") == 2048 and loop.count("LDS.128") == 96, sass.main_loop()
        ops[rows] = sass.opcodes()
    stores = {rows: sum(o.startswith("STS") for o in o_) for rows, o_ in ops.items()}
    assert stores[True] < stores[False], stores
    assert ops[True].count("LDG.E.128") == ops[False].count("LDG.E.128") == 6


@pytest.mark.skipif(INTERPRETED, reason="runs in a child process without the Triton interpreter")
def test_grouped_hand_backs_compile_for_sm90_to_a_step_loop_without_barriers():
    """``handback_steps`` 3 with 6 stages: the FMA warps' K-step loop holds no barrier of
    theirs (the waits and the arrive sit between groups), where the one-step hand-back's
    loop holds one or two (two with Triton 3.6); the same 2,048 FFMA a step, no spills in
    the loop."""
    pytest.importorskip("triton.backends.nvidia")
    base = Tiles(256, 128, 16, 8, 3, group_m=8, split_lanes=True, gluon=True, loader_warps=4, loader_registers=48)
    barriers = {}
    for steps, stages in ((1, 3), (3, 6)):
        sass = read_cubin(ieee_gluon.compile_for(dataclasses.replace(base, num_stages=stages, handback_steps=steps),
                                                 Lanes(8, 8)).asm["cubin"])
        loop = sass.loop_opcodes()
        assert loop.count("FFMA") == 2048 and not any(o.startswith(("LDL", "STL")) for o in loop), sass.main_loop()
        barriers[steps] = sum(o.startswith("BAR") for o in loop)   # the loop is the FMA warps' alone
    assert barriers[3] == 0 < barriers[1], barriers


@pytest.mark.skipif(INTERPRETED, reason="runs in a child process without the Triton interpreter")
def test_cast_once_lane_sums_compile_for_sm90_to_fma_warps_fed_by_tma_alone():
    """``cast_once`` on the table's prefill row: the operands reach shared memory by TMA
    alone (no global load in the kernel), the FMA warps' K loop is the same 2,048 FFMA from
    96 LDS.128 a step with no shared store, nothing spills, and its shared loads read the
    offsets the warp-specialized pass reads (whose bits the GPU tests prove): the stages
    are read as the plain rows TMA wrote. (Read through the unswizzled NVMMA layout,
    Triton 3.6 put other offsets there, and the pass gave other bits on an H100.)"""
    import re

    pytest.importorskip("triton.backends.nvidia")
    from kernelaudit.repro.tiles import IEEE_LANES_TABLE

    tiles = IEEE_LANES_TABLE[("prefill", "large")]
    assert tiles.cast_once and tiles.loader_warps   # the producer warps: the pass of other launches
    sass = read_cubin(ieee_gluon_tma.compile_for(tiles, Lanes(8, 8)).asm["cubin"])
    ops, loop = sass.opcodes(), sass.loop_opcodes()
    assert any(o.startswith("UTMALDG") for o in ops) and not any(o.startswith("LDG") for o in ops), sorted(set(ops))
    assert loop.count("FFMA") == 2048 and loop.count("LDS.128") == 96, sass.main_loop()
    assert not any(o.startswith(("STS", "LDL", "STL")) for o in loop), sass.main_loop()
    assert not any(o.startswith(("LDL", "STL")) for o in ops)

    def offsets(s: Sass) -> set[str]:   # a load's address, its registers unnamed: R+R+0x100
        return {re.sub(r"U?R\d+", "R", re.search(r"\[(.*?)\]", line).group(1))
                for _, op, line in s._loop() if op.startswith("LDS")}
    ws = read_cubin(ieee_gluon.compile_for(dataclasses.replace(tiles, cast_once=False),
                                           Lanes(8, 8)).asm["cubin"])
    assert offsets(sass) == offsets(ws) and len(offsets(sass)) > 8, (sorted(offsets(sass)), sorted(offsets(ws)))


@pytest.mark.parametrize("k, lanes, bk, rows", [(200, Lanes(8, 8), 16, 5), (8192, Lanes(8, 8), 16, 4),
                                                (37, Lanes(4, 2), 8, 3), (50, Lanes(1, 1), 16, 6)])
def test_lane_major_operands_hold_each_lanes_k_in_order_then_the_padding(k, lanes, bk, rows, monkeypatch):
    """``cast_once``'s layout: lane ``l``'s k (the order's, :func:`emulate.lane_ks`) in
    increasing order from row ``l * S * bk``, the padding value to whole K steps after
    them, every row of ``x`` a column (rounded up to 4 columns for TMA), in fp32; the
    Triton pass (CUDA tensors, here the interpreter) with int32 and int64 offsets and
    torch's copies (a CPU tensor without the interpreter) alike."""
    x = (torch.arange(k, dtype=torch.float32) + 1).repeat(rows, 1) + 1000 * torch.arange(rows)[:, None]
    got = ieee_gluon_tma.lane_major(x.to(torch.bfloat16).float(), lanes, bk, -7.0)
    s = ieee_gluon_tma.steps_per_lane(k, lanes, bk)
    assert got.dtype == torch.float32 and got.shape == (lanes.count * s * bk, -(-rows // 4) * 4)
    for lane, ks in enumerate(emulate.lane_ks(k, lanes)):
        part = got[lane * s * bk:(lane + 1) * s * bk, :rows]
        want = x.to(torch.bfloat16).float()[:, ks].t()
        assert torch.equal(part[:len(ks)], want), lane
        assert (part[len(ks):] == -7.0).all(), lane
    columns = x.to(torch.bfloat16).float().t().contiguous().t()   # k strided: a transposed operand
    assert torch.equal(ieee_gluon_tma.lane_major(columns, lanes, bk, -7.0)[:, :rows], got[:, :rows])
    if INTERPRETED:   # got came from the Triton pass: its int64 offsets and torch's copies give the same
        monkeypatch.setattr(ieee_gluon_tma, "_needs_int64", lambda x, out_numel: True)
        assert torch.equal(ieee_gluon_tma.lane_major(x.to(torch.bfloat16), lanes, bk, -7.0)[:, :rows], got[:, :rows])
        monkeypatch.setattr(ieee_gluon_tma.config, "interpreter_requested", lambda: False)
        other = ieee_gluon_tma.lane_major(x.to(torch.bfloat16), lanes, bk, -7.0)
        assert torch.equal(other[:, :rows], got[:, :rows])


def test_chains_over_lane_major_operands_have_the_orders_bits():
    """Each lane's fp32 FMA chain over its cast-once K steps, padding included (``a``
    +0, ``b`` -1: ``fma(+0, -1, acc) = acc``, a -0 accumulator kept -0), equals the CPU
    emulator's chain of that lane bit for bit: the kernel's sums are the order's."""
    g = torch.Generator().manual_seed(3)
    lanes, k, bk = Lanes(8, 8), 200, 16
    a = (torch.randn(6, k, generator=g) * 2.0 ** torch.randint(-20, 20, (6, k), generator=g)).to(torch.bfloat16)
    b = (torch.randn(k, 5, generator=g) * 2.0 ** torch.randint(-20, 20, (k, 5), generator=g)).to(torch.bfloat16)
    a[0] = -0.0
    b[:, 1] = 0.0
    a[1], b[:, 2] = 2.0 ** -100, -(2.0 ** -100)   # products rounding to -0: chains at -0, which padding keeps
    a_lm = ieee_gluon_tma.lane_major(a, lanes, bk, 0.0)
    b_lm = ieee_gluon_tma.lane_major(b.t(), lanes, bk, -1.0)
    s = ieee_gluon_tma.steps_per_lane(k, lanes, bk)
    for lane, ks in enumerate(emulate.lane_ks(k, lanes)):
        acc = torch.zeros(6, 5)
        for i in range(lane * s * bk, (lane + 1) * s * bk):
            acc = emulate.fma32(a_lm[i, :6, None], b_lm[i, None, :5], acc)
        want = emulate._chain(a.float()[None], b.float()[None], ks)[0]
        assert emulate.same_bits(acc, want), lane
        assert acc[1, 2] == 0 and acc[1, 2].signbit(), acc[1, 2]


def test_cast_once_needs_the_gluon_split_lanes_pass_with_stages():
    """``cast_once`` needs Gluon, ``split_lanes`` and two stages or more; producer warps may
    stand beside it (they feed the launches it cannot take), as in the table's prefill row."""
    from kernelaudit.errors import InvalidArgument
    from kernelaudit.repro.tiles import IEEE_LANES_TABLE

    ok = Tiles(256, 128, 16, 8, 4, split_lanes=True, gluon=True, cast_once=True)
    assert ok.cast_once and dataclasses.replace(ok, loader_warps=4).loader_warps == 4
    assert IEEE_LANES_TABLE[("prefill", "large")].cast_once
    for bad in (dict(gluon=False), dict(split_lanes=False, tiled=True), dict(num_stages=1)):
        with pytest.raises(InvalidArgument, match="cast_once"):
            dataclasses.replace(ok, **bad)


@pytest.mark.skipif(INTERPRETED, reason="runs in a child process without the Triton interpreter")
def test_more_loader_registers_compile_for_sm90_to_fewer_producer_spills():
    """``loader_registers`` 48 on the table's prefill tile: fewer local loads and stores
    (the producers' spills) than at 32, the FMA warps' loop unchanged."""
    pytest.importorskip("triton.backends.nvidia")
    base = Tiles(256, 128, 16, 8, 3, group_m=8, split_lanes=True, gluon=True, loader_warps=4)
    spills = {}
    for regs in (32, 48):
        sass = read_cubin(ieee_gluon.compile_for(dataclasses.replace(base, loader_registers=regs),
                                                 Lanes(8, 8)).asm["cubin"])
        assert sass.loop_opcodes().count("FFMA") == 2048, sass.main_loop()
        spills[regs] = sum(o.startswith(("LDL", "STL")) for o in sass.opcodes())
    assert spills[48] < spills[32], spills


@pytest.mark.skipif(INTERPRETED, reason="runs in a child process without the Triton interpreter")
def test_fma_issue_ab_kernels_compile_for_sm90_to_the_loops_they_compare(benchmark_script):
    """``benchmarks/fma_issue_ab.py``'s premise: its register-only outer product's loop is
    FFMA alone, and its shared-memory loop the pass's K step (2,048 FFMA from 96 LDS.128 at
    4 x 4, no spills: operands loaded in the loop, not hoisted out of it)."""
    pytest.importorskip("triton.backends.nvidia")
    ab = benchmark_script("fma_issue_ab")
    outer, lds = ab.outer_sass((4, 4)), ab.outer_lds_sass((4, 4))
    assert outer["loop_ffma"] == 256 and outer["loop_lds128"] == 0 and outer["stack_bytes"] == 0, outer
    assert lds["loop_ffma"] == 2048 and lds["loop_lds128"] == 96 and lds["stack_bytes"] == 0, lds


def test_thread_tiles_are_sides_of_1_to_8_on_the_gluon_prefill_pass_only():
    from kernelaudit.errors import InvalidArgument

    t = Tiles(256, 128, 16, 8, 3, split_lanes=True, gluon=True, thread_tile=[8, 4])   # as JSON gives it
    assert t.thread_tile == (8, 4) and hash(t)
    for bad in ((3, 4), (4,), (16, 4)):
        with pytest.raises(InvalidArgument, match=r"thread_tile=.*allowed values are \(rows, columns\), each 1, 2"):
            Tiles(256, 128, 16, 8, 3, split_lanes=True, gluon=True, thread_tile=bad)
    with pytest.raises(InvalidArgument, match=r"thread_tile=\(8, 4\) without gluon=True and split_lanes=True"):
        Tiles(128, 128, 16, 8, 1, dot=True, thread_tile=(8, 4))


def test_loader_warps_need_the_gluon_prefill_pass_and_stages():
    from kernelaudit.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="loader_warps=2: allowed values are 0 or 4"):
        Tiles(128, 128, 16, 8, 3, split_lanes=True, gluon=True, loader_warps=2)
    with pytest.raises(InvalidArgument, match=r"loader_warps=4 without .* num_stages >= 2 \(got num_stages=1\)"):
        Tiles(128, 128, 16, 8, 1, split_lanes=True, gluon=True, loader_warps=4)
    with pytest.raises(InvalidArgument, match="loader_warps=4 without gluon=True"):
        Tiles(128, 128, 16, 8, 3, split_lanes=True, loader_warps=4)


def test_producer_knobs_need_producer_warps_and_values_they_can_take():
    from kernelaudit.errors import InvalidArgument

    for kw in ({"loader_whole_rows": True}, {"loader_registers": 48}, {"handback_steps": 2, "num_stages": 4}):
        with pytest.raises(InvalidArgument, match="without loader_warps: allowed values are loader_whole_rows=False"):
            Tiles(128, 128, 16, 8, **{"num_stages": 3, **kw}, split_lanes=True, gluon=True)
    for steps, stages in ((0, 3), (2, 3), (3, 3), (4, 6)):   # a divisor of the stages, at most half of them
        with pytest.raises(InvalidArgument, match=f"handback_steps={steps} with num_stages={stages}: allowed values"):
            Tiles(256, 128, 16, 8, stages, split_lanes=True, gluon=True, loader_warps=4, handback_steps=steps)
    assert ieee_gluon._kernel(Tiles(256, 128, 16, 8, 6, split_lanes=True, gluon=True, loader_warps=4,
                                    handback_steps=3), 90)[1]["GROUP"] == 3
    for bad in (20, 44, 264):
        with pytest.raises(InvalidArgument, match=f"loader_registers={bad}: allowed values are multiples of 8"):
            Tiles(256, 128, 16, 8, 3, split_lanes=True, gluon=True, loader_warps=4, loader_registers=bad)
    assert ieee_gluon._kernel(Tiles(256, 128, 16, 8, 3, split_lanes=True, gluon=True, loader_warps=4,
                                    loader_registers=48), 90)[1]["LOADER_REGS"] == 48
    t = Tiles(256, 128, 16, 8, 3, split_lanes=True, gluon=True, loader_warps=4, loader_whole_rows=True)
    assert ieee_gluon._kernel(t, 90)[1]["KT"] == 1 and ieee_gluon._kernel(dataclasses.replace(
        t, loader_whole_rows=False), 90)[1]["KT"] == 2


def test_max_registers_needs_the_gluon_prefill_pass_and_a_register_count():
    from kernelaudit.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="max_registers=168 without gluon=True and split_lanes=True"):
        Tiles(4, 16, 256, 4, 1, tiled=True, gluon=True, max_registers=168)
    for bad in (8, 300):
        with pytest.raises(InvalidArgument, match=f"max_registers={bad}: allowed values are 0 or 24 to 255"):
            Tiles(128, 128, 16, 4, 1, split_lanes=True, gluon=True, max_registers=bad)
    assert ieee_gluon.launch_options(Tiles(128, 128, 16, 4, 1, split_lanes=True, gluon=True)) == {"num_warps": 4}


def test_register_usage_level_reaches_ptxas_only_on_the_gluon_prefill_pass():
    from kernelaudit.errors import InvalidArgument

    t = Tiles(256, 128, 16, 8, 3, split_lanes=True, gluon=True, loader_warps=4, register_usage_level=10)
    assert ieee_gluon.launch_options(t) == {"num_warps": 8, "ptx_options": "--register-usage-level 10"}
    with pytest.raises(InvalidArgument, match="register_usage_level=10 without gluon=True and split_lanes=True"):
        Tiles(4, 16, 256, 4, 1, tiled=True, register_usage_level=10)
    for bad in (-1, 11):
        with pytest.raises(InvalidArgument, match=f"register_usage_level={bad}: allowed values are None or 0 to 10"):
            Tiles(128, 128, 16, 4, 1, split_lanes=True, gluon=True, register_usage_level=bad)


@pytest.mark.parametrize("lanes", [Lanes(8, 8), Lanes(1, 1)])
def test_gluon_tiles_off_the_gpu_run_the_triton_pass_with_the_same_bits(lanes):
    """Under the interpreter the Gluon kernel cannot run: ``usable`` says so and the
    launch takes the Triton first pass (K lanes) or the plain kernel (sequential), whose
    bits equal the emulator's."""
    t = Tiles(64, 64, 16, 4, 1, split_lanes=True, gluon=True)
    x, w = torch.randn(5, 200).bfloat16(), torch.randn(24, 200).bfloat16()
    assert not ieee_gluon.usable(x[None, None], t, lanes)
    got = gemm.linear(x, w, tiles=t, lanes=lanes)
    assert emulate.bit_mismatches(got, emulate.linear_ieee(x, w, lanes=lanes)) == 0


def test_gluon_flag_needs_split_lanes_or_tiled():
    from kernelaudit.errors import InvalidArgument

    for bad in (dict(), dict(tiled=True, tma=True)):
        with pytest.raises(InvalidArgument, match="gluon=True without split_lanes=True or tiled=True"):
            Tiles(128, 128, 16, 8, 1, gluon=True, **bad)


@pytest.mark.skipif(INTERPRETED, reason="runs in a child process without the Triton interpreter")
def test_gluon_lanes_decode_compiles_for_sm90_to_a_k_loop_of_loads_unpacks_and_ffma():
    """4 rows, 1 column a thread, 4 rounds a step (the 8 x 8 order): no spills, the K
    loop's global loads 16 bytes wide (a round: one of weights, two for each row of activations),
    and the loop moves nothing through shared memory (the
    layouts are slices of one parent): FFMA at least half its instructions."""
    pytest.importorskip("triton.backends.nvidia")
    sass = read_cubin(ieee_gluon_decode.compile_for(Tiles(4, 16, 256, 4, 1, tiled=True, gluon=True)).asm["cubin"])
    assert sass.stack_bytes == 0 and sass.registers <= 128, (sass.registers, sass.stack_bytes)
    loop = sass.main_loop()
    top = dict(loop["top"])
    assert top.get("FFMA") == 4 * 8 * 4, loop      # 4 rows x 8 k x 4 rounds, one column
    assert loop["ffma_share"] >= 0.5, loop
    assert "LDS" not in top and "STS" not in top and "BAR" not in top, loop
    loads = [o for o in sass.loop_opcodes() if o.startswith("LDG")]
    assert len(loads) == 4 + 4 * 4 * 2 and all(o.endswith(".128") for o in loads), loads   # weights, activations
    # with 4 stages the weights arrive by cp.async (LDGSTS), 16 bytes a copy, read back by LDS.128
    staged = read_cubin(ieee_gluon_decode.compile_for(Tiles(4, 16, 256, 4, 4, tiled=True, gluon=True)).asm["cubin"])
    assert staged.stack_bytes == 0, staged.stack_bytes
    ops = staged.loop_opcodes()
    assert ops.count("LDGSTS.E.BYPASS.128") == 4 and ops.count("LDS.128") == 4 and ops.count("FFMA") == 128, \
        staged.main_loop()


@pytest.mark.parametrize("tiles", [Tiles(4, 16, 256, 4, 1, tiled=True, gluon=True),
                                   Tiles(2, 32, 128, 4, 1, tiled=True, gluon=True)])
def test_gluon_decode_tiles_off_the_gpu_run_the_triton_kernel_with_the_same_bits(tiles):
    """On a CPU tensor the Gluon decode kernel cannot run: ``usable`` says so and the
    launch runs the Triton K-lanes kernel, whose bits equal the emulator's."""
    lanes = Lanes(8, 8)
    x, w = torch.randn(3, 1100).bfloat16(), torch.randn(24, 1100).bfloat16()
    assert not ieee_gluon_decode.usable(x[None, None], w.t()[None, None], tiles, lanes)
    got = gemm.linear(x, w, tiles=tiles, lanes=lanes)
    assert emulate.bit_mismatches(got, emulate.linear_ieee(x, w, lanes=lanes)) == 0
