"""Does the register-bank model predict the FFMA rate? Thread tiles side by side, in a
register-only outer product and in the ``ieee`` prefill first pass.

The ``ieee`` prefill pass issues 0.76 instructions a cycle a scheduler, 95% of them FFMA,
and ncu's largest stall is dispatch; a two-bank model of ptxas's register allocation
(:meth:`kernelaudit.repro.sass.Sass.ffma_bank_reads`) says 56% of its FFMA read two
sources from one bank. The thread tile (``Tiles.thread_tile``) moves that share without
changing the instructions, so timing tiles side by side tests the model:

1. ``outer``: a register-only outer product (no shared memory, no global loads in the
   loop): 256 x 128 accumulators of 8 warps in the pass's layout, two k's operands held
   in registers, ``ITERS`` rank-1 updates each; beside the FMA ceiling kernel
   (independent chains on immediates, ``repro_gemm.fma_peak_run``);
2. ``outer_lds``: the same updates by the pass's own K step (each k's operands loaded
   from shared memory, 96 LDS.128 a 16-k step), without producers, mbarriers or global
   loads; ``outer_lds_4x4_sync`` with a barrier of all warps after each step;
3. ``pass``: the table's prefill tile (warp-specialized, 256 x 128 x 16) at M = 4096,
   K = N = 8192, bf16, at each thread tile: ``gemm.linear`` end to end (the pass and the
   lane tree), every tile's bits equal to the 4 x 4 tile's.

Every variant's SASS is compiled for sm_90 on any machine (Triton's own ptxas): FFMA and
LDS.128 in the loop, registers, the model's two- and three-in-one-bank counts. On CUDA
each runs back to back for ``--seconds`` with nvidia-smi sampling the SM clock
(:func:`_common.sustained`): TFLOP/s, the clock, TFLOP/s a clock against the ceiling.

    PYTHONPATH=src python benchmarks/fma_issue_ab.py --out fma_issue_ab.json   # CPU: models only
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from _common import emit, nvidia_smi_index, per_clock_vs, sustained  # noqa: E402

#: the thread tiles compared: (rows, columns) of a thread's accumulator sub-tile
THREAD_TILES = ((4, 4), (8, 4), (4, 8), (2, 4))
#: the register-only outer product: a program's tile, warps, rank-1 updates a launch
OUTER = dict(BM=256, BN=128, BK=16, WARPS=8, ITERS=4096)
#: the ``pass`` shape: M, K = N
PASS_M, PASS_KN = 4096, 8192

from kernelaudit.repro import ieee_gluon  # noqa: E402

gluon, gl, _cta_barrier = ieee_gluon.gluon, ieee_gluon.gl, getattr(ieee_gluon, "_cta_barrier", None)

if gl is not None:
    @gluon.jit
    def _outer(a_ptr, b_ptr, out_ptr, ITERS: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, TR: gl.constexpr,
               TC: gl.constexpr):
        """``ITERS`` times two rank-1 updates of a ``BM x BN`` fp32 accumulator from
        operands held in registers, in the prefill pass's layout (``TR x TC`` a thread)."""
        NW: gl.constexpr = gl.num_warps()
        acc_l: gl.constexpr = gl.BlockedLayout([TR, TC], [4, 8], [NW // 2, 2], [1, 0])
        rm = gl.arange(0, BM, layout=gl.SliceLayout(1, acc_l))
        rn = gl.arange(0, BN, layout=gl.SliceLayout(0, acc_l))
        acc = gl.zeros([BM, BN], gl.float32, layout=acc_l)
        a0 = gl.expand_dims(gl.load(a_ptr + rm), 1)
        b0 = gl.expand_dims(gl.load(b_ptr + rn), 0)
        a1 = gl.expand_dims(gl.load(a_ptr + BM + rm), 1)
        b1 = gl.expand_dims(gl.load(b_ptr + BN + rn), 0)
        for _ in range(ITERS):
            acc = gl.fma(a0, b0, acc)
            acc = gl.fma(a1, b1, acc)
        out = out_ptr + gl.program_id(0) * BM * BN
        gl.store(out + gl.expand_dims(rm, 1) * BN + gl.expand_dims(rn, 0), acc)

    @gluon.jit
    def _outer_lds(a_ptr, b_ptr, out_ptr, ITERS: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
                   TR: gl.constexpr, TC: gl.constexpr, SYNC: gl.constexpr = False):
        """``ITERS`` K steps of the prefill pass's own :func:`ieee_gluon._fma_step` (``BK``
        rank-1 updates, each k's operands loaded from shared memory by the FMA warps) on
        operands stored once in two stages read in turn (a loop-invariant buffer would be
        loaded once, outside the loop): the pass's K loop without producers, mbarriers or
        global loads; ``SYNC``: a barrier of all the program's warps after each step (the
        pass's FMA warps meet at one before handing a stage back)."""
        NW: gl.constexpr = gl.num_warps()
        acc_l: gl.constexpr = gl.BlockedLayout([TR, TC], [4, 8], [NW // 2, 2], [1, 0])
        ld_l: gl.constexpr = gl.BlockedLayout([1, 8], [32 // (BK // 8), BK // 8], [NW, 1], [1, 0])
        sm_l: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
        ra = gl.arange(0, BM, layout=gl.SliceLayout(1, ld_l))
        rb = gl.arange(0, BN, layout=gl.SliceLayout(1, ld_l))
        kk = gl.expand_dims(gl.arange(0, BK, layout=gl.SliceLayout(0, ld_l)), 0)
        sa = gl.allocate_shared_memory(gl.float32, [2, BK, BM], sm_l)
        sb = gl.allocate_shared_memory(gl.float32, [2, BK, BN], sm_l)
        at = gl.load(a_ptr + gl.expand_dims(ra, 1) * BK + kk)
        bt = gl.load(b_ptr + gl.expand_dims(rb, 1) * BK + kk)
        for s in gl.static_range(2):
            sa.index(s).permute((1, 0)).store(at)
            sb.index(s).permute((1, 0)).store(bt)
        _cta_barrier()
        acc = gl.zeros([BM, BN], gl.float32, layout=acc_l)
        for i in range(ITERS):
            acc = ieee_gluon._fma_step(acc, sa.index(i % 2).permute((1, 0)), sb.index(i % 2), BK, acc_l)
            if SYNC:
                _cta_barrier()
        rm = gl.arange(0, BM, layout=gl.SliceLayout(1, acc_l))
        rn = gl.arange(0, BN, layout=gl.SliceLayout(0, acc_l))
        out = out_ptr + gl.program_id(0) * BM * BN
        gl.store(out + gl.expand_dims(rm, 1) * BN + gl.expand_dims(rn, 0), acc)


def _sass_row(sass) -> dict:
    loop = sass.loop_opcodes()
    two = sass.ffma_bank_reads(2)
    return {"registers": sass.registers, "stack_bytes": sass.stack_bytes, "loop_ffma": loop.count("FFMA"),
            "loop_lds128": loop.count("LDS.128"), "loop_instructions": len(loop),
            "two_in_one_bank": two["two_in_one_bank"], "three_in_one_bank": two["three_in_one_bank"],
            "two_in_one_bank_share": round(two["two_in_one_bank"] / max(1, two["ffma"]), 3)}


def _sm90_sass(fn, const: dict) -> dict:
    """:func:`_sass_row` of Gluon kernel ``fn`` (three fp32 pointers, then ``const``)
    compiled for sm_90 at ``OUTER``'s warps (no GPU)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from kernelaudit.repro.sass import read_cubin

    sig = {"a_ptr": "*fp32", "b_ptr": "*fp32", "out_ptr": "*fp32", **{k: "constexpr" for k in const}}
    k = triton.compile(GluonASTSource(fn=fn, signature=sig, constexprs=const, attrs={}),
                       target=GPUTarget("cuda", 90, 32), options=dict(num_warps=OUTER["WARPS"]))
    return _sass_row(read_cubin(k.asm["cubin"]))


def outer_sass(tt) -> dict:
    """The outer product at thread tile ``tt`` compiled for sm_90 (no GPU)."""
    return _sm90_sass(_outer, dict(ITERS=OUTER["ITERS"], BM=OUTER["BM"], BN=OUTER["BN"], TR=tt[0], TC=tt[1]))


def outer_lds_sass(tt) -> dict:
    """The shared-memory outer product at thread tile ``tt`` compiled for sm_90 (no GPU)."""
    return _sm90_sass(_outer_lds, dict(ITERS=OUTER["ITERS"] // OUTER["BK"], BM=OUTER["BM"], BN=OUTER["BN"],
                                       BK=OUTER["BK"], TR=tt[0], TC=tt[1], SYNC=False))


def pass_tiles(tt):
    from kernelaudit.repro.tiles import Tiles

    table = Tiles(256, 128, 16, 8, 3, split_lanes=True, gluon=True, group_m=8, loader_warps=4)
    return dataclasses.replace(table, thread_tile=tt)


def pass_sass(tt) -> dict:
    """The prefill pass at thread tile ``tt`` compiled for sm_90 (no GPU)."""
    from kernelaudit.repro.sass import read_cubin
    from kernelaudit.repro.tiles import Lanes

    return _sass_row(read_cubin(ieee_gluon.compile_for(pass_tiles(tt), Lanes(8, 8), 90).asm["cubin"]))


def timed(seconds: float) -> dict:
    """The GPU half: the ceiling, the outer product and the pass at every thread tile."""
    import repro_gemm

    from kernelaudit.repro import gemm

    index = nvidia_smi_index()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    runs = {"fma_ceiling": repro_gemm.fma_peak_run()}
    a = torch.rand(2 * OUTER["BM"], device="cuda")
    b = torch.rand(2 * OUTER["BN"], device="cuda")
    programs = sms * 8
    out = torch.empty(programs * OUTER["BM"] * OUTER["BN"], device="cuda")
    for tt in THREAD_TILES:
        runs[f"outer_{tt[0]}x{tt[1]}"] = (
            lambda tt=tt: _outer[(programs,)](a, b, out, ITERS=OUTER["ITERS"], BM=OUTER["BM"], BN=OUTER["BN"],
                                              TR=tt[0], TC=tt[1], num_warps=OUTER["WARPS"]),
            2 * 2 * OUTER["ITERS"] * OUTER["BM"] * OUTER["BN"] * programs)
    a_k = torch.rand(OUTER["BM"] * OUTER["BK"], device="cuda")
    b_k = torch.rand(OUTER["BN"] * OUTER["BK"], device="cuda")
    for tt in THREAD_TILES:   # the same FLOP as the register-only runs: ITERS / BK steps of BK k
        runs[f"outer_lds_{tt[0]}x{tt[1]}"] = (
            lambda tt=tt: _outer_lds[(programs,)](a_k, b_k, out, ITERS=OUTER["ITERS"] // OUTER["BK"] * 2,
                                                  BM=OUTER["BM"], BN=OUTER["BN"], BK=OUTER["BK"], TR=tt[0],
                                                  TC=tt[1], num_warps=OUTER["WARPS"]),
            2 * 2 * OUTER["ITERS"] * OUTER["BM"] * OUTER["BN"] * programs)
    runs["outer_lds_4x4_sync"] = (
        lambda: _outer_lds[(programs,)](a_k, b_k, out, ITERS=OUTER["ITERS"] // OUTER["BK"] * 2, BM=OUTER["BM"],
                                        BN=OUTER["BN"], BK=OUTER["BK"], TR=4, TC=4, SYNC=True,
                                        num_warps=OUTER["WARPS"]),
        2 * 2 * OUTER["ITERS"] * OUTER["BM"] * OUTER["BN"] * programs)
    x = torch.randn(PASS_M, PASS_KN, device="cuda").to(torch.bfloat16)
    w = torch.randn(PASS_KN, PASS_KN, device="cuda").to(torch.bfloat16)
    ref = gemm.linear(x, w, order="ieee", tiles=pass_tiles((4, 4)))
    bits = {}
    for tt in THREAD_TILES:
        t = pass_tiles(tt)
        got = gemm.linear(x, w, order="ieee", tiles=t)
        bits[f"{tt[0]}x{tt[1]}"] = bool(torch.equal(got.view(torch.int16), ref.view(torch.int16)))
        runs[f"pass_{tt[0]}x{tt[1]}"] = (lambda t=t: gemm.linear(x, w, order="ieee", tiles=t),
                                          2 * PASS_M * PASS_KN * PASS_KN)
    rows = {}
    for name, (fn, flop) in runs.items():
        rows[name] = sustained(fn, flop, seconds, index)
        print(name, rows[name], flush=True)
    per_clock_vs(rows, "fma_ceiling")
    return {"rows": rows, "pass_bits_equal_4x4": bits, "nvidia_smi_index": index,
            "device": torch.cuda.get_device_name()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--seconds", type=float, default=2.0, help="each variant's sustained run on CUDA (default 2)")
    a = p.parse_args(argv)
    if a.seconds <= 0:
        p.error(f"--seconds={a.seconds}: allowed values are > 0")
    if gl is None:
        p.error("this Triton has no Gluon (Triton 3.4 or later)")
    os.environ["TRITON_INTERPRET"] = "0"
    import triton

    res = {"triton": triton.__version__, "torch": torch.__version__, "outer": OUTER,
           "pass": {"m": PASS_M, "k": PASS_KN, "n": PASS_KN, "tiles": str(pass_tiles((4, 4)))},
           "sm90_models": {}}
    for tt in THREAD_TILES:
        name = f"{tt[0]}x{tt[1]}"
        res["sm90_models"][f"outer_{name}"] = outer_sass(tt)
        res["sm90_models"][f"outer_lds_{name}"] = outer_lds_sass(tt)
        res["sm90_models"][f"pass_{name}"] = pass_sass(tt)
        for kind in ("outer", "outer_lds", "pass"):
            print(f"{kind}_{name}", res["sm90_models"][f"{kind}_{name}"], flush=True)
    if torch.cuda.is_available():
        res.update(timed(a.seconds))
    emit(res, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
