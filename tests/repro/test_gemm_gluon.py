"""The Gluon first pass of ``split_lanes`` (:mod:`kernelaudit.repro.ieee_gluon`) without a
GPU: it compiles for sm_90 with this machine's Triton (its own ptxas) to what it was
written for, and a launch it cannot run (the interpreter, a CPU tensor) takes the Triton
first pass with the same bits. Its bits on the GPU: tests/gpu/test_repro_ieee_tiled_gpu.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from kernelaudit.config import interpreter_requested
from kernelaudit.repro import emulate, gemm, ieee_gluon
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
    assert "1 passed" in proc.stdout, proc.stdout[-2000:]


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


def test_gluon_flag_needs_split_lanes():
    from kernelaudit.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="gluon=True without split_lanes=True"):
        Tiles(128, 128, 16, 8, 1, gluon=True)
