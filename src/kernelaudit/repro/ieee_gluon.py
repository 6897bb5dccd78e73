"""The ``ieee`` prefill lane sums written in Gluon: the thread tile, the shared-memory
layout and the K loop are explicit, which plain Triton leaves to the compiler.

:func:`lane_sums_kernel` is a drop-in first pass of ``split_lanes``
(:func:`.gemm._launch_split_lanes`, same arguments and grid as
``gemm._ieee_lane_sums_kernel``, same scratch): program (tile, lane) computes lane
``lane``'s fp32 chain ``acc = fma(a[m, k], b[k, n], acc)`` over that lane's k in
increasing order from +0.0 (the lane's blocks ``j * LB .. j * LB + LB - 1`` with
``j mod LANES == lane``; LANES 1 is the sequential order) and stores it to the scratch;
the tree and the epilogue are gemm's own. So the bits are the order's, whichever kernel
ran the first pass. How the FMAs are fed:

* the accumulator is a blocked layout of ``Tiles.thread_tile`` sub-tiles a thread (4 x 4
  unless set; 4 x 8 threads a warp, ``num_warps / 2`` x 2 warps, repeated over ``bm x
  bn``): 64 fp32 accumulators a thread at 128 x 128 x 8 warps;
* each K step loads a ``[bm, bk]`` tile of ``a`` and a ``[bn, bk]`` tile of ``b`` (16 bytes
  a thread where K is contiguous), upcasts them once and stores them to shared memory
  K-major, double-buffered with one barrier a step; the next step's tiles are loaded into
  registers during this step's FMAs;
* each k is one rank-1 update from shared memory: two 16-byte loads (``LDS.128``) of
  ``a``'s column and two of ``b``'s row a thread per 64 FMAs.

k past K loads ``a`` as +0.0 and ``b`` as -1.0: ``fma(+0, -1, acc) = acc + (-0) = acc``
for every acc, signed zeros and NaN included (the same padding as every ieee kernel).
Compiled for sm_90 with Triton 3.6 (bf16 operands, K-contiguous) at 128 x 128 x 16, 8
warps: 137 registers, no spills, 32 KB of shared memory, a K loop of 1,162 instructions of
which 1,024 FFMA and 64 LDS.128, its global loads 16 bytes wide.

With ``Tiles.loader_warps`` (sm_90 on), :func:`lane_sums_ws_kernel` computes the same
chains warp-specialized: a partition of producer warps loads and upcasts each K step into
a ring of ``num_stages`` shared buffers and hands it over by mbarrier (``ready``; the FMA
warps hand it back by ``empty``), so the FMA warps issue no global loads. At a register
budget of 80 (sm_90, Triton 3.6: 104 for the FMA warps, 32 for the producers, no spills in
the FMA loop at 128 x 128 x 16, 8 warps) two blocks share an SM; the table's tile,
256 x 128 x 16 uncapped, runs one block an SM of 8 FMA warps with 128 accumulators a
thread (43.2 TFLOP/s on the H200 at M = 4096 against 41.1 for the plain 4-warp tile).

Gluon kernels run compiled only: under the interpreter (and where this Triton has no
Gluon) :func:`usable` is False and ``split_lanes`` runs its Triton first pass.
"""

from __future__ import annotations

import torch

from .. import config
from .ieee_kernels import grouped_pid

try:  # Gluon: Triton 3.4 on (`thread_barrier` in 3.6, `barrier` from 3.7)
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import mbarrier

    _cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier
except (ImportError, AttributeError):  # pragma: no cover - an old Triton
    gluon = gl = None

#: Each K step's k must be whole blocks of a lane and 8-wide 16-byte loads.
_MIN_BK = 8


def usable(a3: torch.Tensor, tiles, lanes) -> bool:
    """Whether :func:`lane_sums_kernel` can run this launch: Gluon present, a compiled
    CUDA launch, and tiles it was written for (``bm`` a multiple of the thread tile's rows
    x 2 x warps, ``bn`` of its columns x 16, ``bk`` of 8 and of the lanes' block, at most
    256)."""
    if gl is None or config.interpreter_requested() or a3.device.type != "cuda":
        return False
    block = lanes.block if lanes.count > 1 else 1
    rows, cols = tiles.thread_tile
    return (tiles.num_warps in (4, 8) and tiles.bm % (2 * rows * tiles.num_warps) == 0 and tiles.bn % (16 * cols) == 0
            and _MIN_BK <= tiles.bk <= 256 and tiles.bk % block == 0)


def warp_specialized(tiles, capability: int) -> bool:
    """Whether a launch of ``tiles`` on ``sm_<capability>`` runs :func:`lane_sums_ws_kernel`
    (``loader_warps`` set, Hopper on) rather than :func:`lane_sums_kernel`."""
    return bool(tiles.loader_warps) and capability >= 90


def _kernel(tiles, capability: int):
    """The kernel of a launch, its constexprs beyond the common ones, and its options."""
    if warp_specialized(tiles, capability):
        return (lane_sums_ws_kernel, dict(STAGES=tiles.num_stages, LOADERS=tiles.loader_warps,
                                          LOADER_REGS=tiles.loader_registers,
                                          KT=1 if tiles.loader_whole_rows else tiles.bk // 8,
                                          GROUP=tiles.handback_steps), launch_options(tiles))
    # without the producer warps, a budget meant for num_warps + loader_warps would spill
    return lane_sums_kernel, {}, launch_options(tiles, registers=not tiles.loader_warps)


def launch(grid, args, tiles, lanes, device: torch.device) -> None:
    """Run the first pass of ``split_lanes`` (``args``: :func:`lane_sums_kernel`'s
    arguments up to ``s_pm``) with ``tiles`` in ``lanes``' order."""
    major, minor = torch.cuda.get_device_capability(device)
    kernel, extra, options = _kernel(tiles, 10 * major + minor)
    kernel[grid](*args, BM=tiles.bm, BN=tiles.bn, BK=tiles.bk, LANES=lanes.count, LB=lanes.block,
                 GROUP_M=tiles.group_m, TR=tiles.thread_tile[0], TC=tiles.thread_tile[1], **extra, **options)


def compile_for(tiles, lanes, capability: int = 90):
    """The first pass compiled for ``sm_<capability>`` as a prefill launch of ``tiles`` in
    ``lanes``' order takes it (bf16 operands, K contiguous, strides divisible by 16), on
    any machine: Triton's own ptxas, no GPU. Returns Triton's compiled kernel
    (``.asm["cubin"]`` for :func:`.sass.read_cubin`, ``.metadata.shared``)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    k, extra, options = _kernel(tiles, capability)
    const = dict(BM=tiles.bm, BN=tiles.bn, BK=tiles.bk, LANES=lanes.count, LB=lanes.block, GROUP_M=tiles.group_m,
                 TR=tiles.thread_tile[0], TC=tiles.thread_tile[1], s_ak=1, s_bk=1, **extra)
    sig = {n: "constexpr" if n in const else "*fp32" if n == "p_ptr" else "*bf16" if n.endswith("_ptr") else "i32"
           for n in k.arg_names}
    div16 = ("a_ptr", "b_ptr", "p_ptr", "N", "K", "s_am", "s_bn", "s_pl", "s_pm", "s_ab", "s_bb", "s_a0", "s_b0")
    attrs = {(k.arg_names.index(n),): [["tt.divisibility", 16]] for n in div16}
    return triton.compile(GluonASTSource(fn=k, signature=sig, constexprs=const, attrs=attrs),
                          target=GPUTarget("cuda", capability, 32), options=options)


def launch_options(tiles, registers: bool = True) -> dict:
    """The compile options of a launch of ``tiles``: its warps, its register cap where set
    (and ``registers``), and ptxas's register usage level where set."""
    out = dict(num_warps=tiles.num_warps)
    if registers and tiles.max_registers:
        out["maxnreg"] = tiles.max_registers
    if tiles.register_usage_level is not None:
        out["ptx_options"] = f"--register-usage-level {tiles.register_usage_level}"
    return out


if gl is not None:
    @gluon.jit
    def _k_steps(a_ptr, b_ptr, M, N, K, s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_a0, s_b0, pid_m, pid_n, lane, pid_b,
                 b0, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, LANES: gl.constexpr, LB: gl.constexpr,
                 WARPS: gl.constexpr, KT: gl.constexpr):
        """A program's rows of ``a`` ``[BM, 1]`` and ``b`` ``[BN, 1]`` and its first K step's
        k ``[1, BK]``, in the 16-byte load layout of ``WARPS`` warps with ``KT`` threads side
        by side along k (``BK // 8``: a row's K step in one 16-byte load a thread; 1: a thread
        loads its row's whole step, so one store instruction writes 32 rows of one k): step
        ``i`` reads k + i * BK * LANES (rows past M read row M - 1, columns past N column
        N - 1: never stored)."""
        ld_l: gl.constexpr = gl.BlockedLayout([1, 8], [32 // KT, KT], [WARPS, 1], [1, 0])
        ra = gl.minimum(pid_m.to(gl.int64) * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, ld_l)), M - 1)
        rb = gl.minimum(pid_n.to(gl.int64) * BN + gl.arange(0, BN, layout=gl.SliceLayout(1, ld_l)), N - 1)
        kk = gl.arange(0, BK, layout=gl.SliceLayout(0, ld_l))
        if LANES == 1:
            k = gl.expand_dims(kk, 0)
        else:
            k = gl.expand_dims((kk // LB) * (LANES * LB) + kk % LB + lane * LB, 0)   # [1, BK]
        a_rows = a_ptr + b0 * s_a0 + pid_b * s_ab + gl.expand_dims(ra * s_am, 1)
        b_rows = b_ptr + b0 * s_b0 + pid_b * s_bb + gl.expand_dims(rb * s_bn, 1)
        return a_rows, b_rows, k

    @gluon.jit
    def _store_lane_sums(acc, p_ptr, M, N, s_pl, s_p0, s_pb, s_pm, pid_m, pid_n, lane, pid_b, b0,
                         BM: gl.constexpr, BN: gl.constexpr, acc_l: gl.constexpr):
        rm = pid_m.to(gl.int64) * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, acc_l))
        rn = pid_n.to(gl.int64) * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, acc_l))
        p_t = (p_ptr + lane.to(gl.int64) * s_pl + b0 * s_p0 + pid_b * s_pb
               + gl.expand_dims(rm * s_pm, 1) + gl.expand_dims(rn, 0))
        gl.store(p_t, acc, mask=gl.expand_dims(rm < M, 1) & gl.expand_dims(rn < N, 0))

    @gluon.jit
    def _fma_step(acc, ca, cb, BK: gl.constexpr, acc_l: gl.constexpr):
        """One K step: BK rank-1 updates from shared memory, ``ca`` [BM, BK], ``cb`` [BK, BN]."""
        for j in gl.static_range(BK):
            acc = gl.fma(ca.slice(j, 1, dim=1).load(acc_l), cb.slice(j, 1, dim=0).load(acc_l), acc)
        return acc

    @gluon.jit
    def lane_sums_kernel(a_ptr, b_ptr, p_ptr, M, N, K, s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_a0, s_b0,
                         s_pl, s_p0, s_pb, s_pm, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
                         LANES: gl.constexpr, LB: gl.constexpr, GROUP_M: gl.constexpr, TR: gl.constexpr,
                         TC: gl.constexpr):
        """``p[lane, b0, b, m, n]`` = lane ``pid % LANES``'s fp32 chain of tile ``pid // LANES``
        (grouped order); a [B0, B, M, K] and b [B0, B, K, N] by strides; grid
        (tiles * LANES, B, B0)."""
        NW: gl.constexpr = gl.num_warps()
        acc_l: gl.constexpr = gl.BlockedLayout([TR, TC], [4, 8], [NW // 2, 2], [1, 0])
        sm_l: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
        STEP: gl.constexpr = BK * LANES   # k advanced a step: BK // LB blocks of every lane

        pid = gl.program_id(0)
        lane = pid % LANES
        pid_b = gl.program_id(1).to(gl.int64)
        b0 = gl.program_id(2).to(gl.int64)
        pid_m, pid_n = grouped_pid(pid // LANES, M, N, BM, BN, GROUP_M)
        a_rows, b_rows, k = _k_steps(a_ptr, b_ptr, M, N, K, s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_a0, s_b0, pid_m,
                                     pid_n, lane, pid_b, b0, BM, BN, BK, LANES, LB, NW, BK // 8)

        sa = gl.allocate_shared_memory(gl.float32, [2, BK, BM], sm_l)
        sb = gl.allocate_shared_memory(gl.float32, [2, BK, BN], sm_l)
        acc = gl.zeros([BM, BN], gl.float32, layout=acc_l)
        n_steps = gl.cdiv(gl.cdiv(gl.cdiv(K, LB), LANES), BK // LB)
        sa.index(0).permute((1, 0)).store(
            gl.load(a_rows + k.to(gl.int64) * s_ak, mask=k < K, other=0.0).to(gl.float32))
        sb.index(0).permute((1, 0)).store(
            gl.load(b_rows + k.to(gl.int64) * s_bk, mask=k < K, other=-1.0).to(gl.float32))
        _cta_barrier()
        ki = k + STEP
        at = gl.load(a_rows + ki.to(gl.int64) * s_ak, mask=ki < K, other=0.0)
        bt = gl.load(b_rows + ki.to(gl.int64) * s_bk, mask=ki < K, other=-1.0)
        for i in range(n_steps):
            s = i % 2
            acc = _fma_step(acc, sa.index(s).permute((1, 0)), sb.index(s), BK, acc_l)
            # the other buffer was last read a step ago, before the last barrier
            sa.index(1 - s).permute((1, 0)).store(at.to(gl.float32))
            sb.index(1 - s).permute((1, 0)).store(bt.to(gl.float32))
            _cta_barrier()
            ki = k + (i + 2) * STEP
            at = gl.load(a_rows + ki.to(gl.int64) * s_ak, mask=ki < K, other=0.0)
            bt = gl.load(b_rows + ki.to(gl.int64) * s_bk, mask=ki < K, other=-1.0)
        _store_lane_sums(acc, p_ptr, M, N, s_pl, s_p0, s_pb, s_pm, pid_m, pid_n, lane, pid_b, b0, BM, BN, acc_l)

    @gluon.jit
    def _ws_wait_group(ready, g, n_steps, GROUP: gl.constexpr, STAGES: gl.constexpr):
        """Wait until every stage of step group ``g`` (``GROUP`` steps) is filled."""
        for h in range(gl.minimum(n_steps - g * GROUP, GROUP)):
            i = g * GROUP + h
            mbarrier.wait(ready.index(i % STAGES), (i // STAGES) & 1)

    if hasattr(gl.shared_memory_descriptor, "reinterpret"):   # the name from 3.7 on (3.6: _reinterpret)
        @gluon.jit
        def _plain_rows(stage, BK: gl.constexpr, BC: gl.constexpr):
            """One fp32 stage ``[BK, BC]`` read as plain rows, whatever layout it was written in."""
            return stage.reinterpret(gl.float32, [BK, BC], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    else:
        @gluon.jit
        def _plain_rows(stage, BK: gl.constexpr, BC: gl.constexpr):
            """One fp32 stage ``[BK, BC]`` read as plain rows, whatever layout it was written in."""
            return stage._reinterpret(gl.float32, [BK, BC], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))

    @gluon.jit
    def _ws_step(acc, sa, sb, s, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, acc_l: gl.constexpr):
        """:func:`_fma_step` from stage ``s``, read as plain rows: the producers' stores wrote
        them so, and so does an unswizzled TMA copy (:mod:`.ieee_gluon_tma`), though the NVMMA
        layout it copies into is read otherwise by Triton 3.6 (in 16-byte column blocks)."""
        return _fma_step(acc, _plain_rows(sa.index(s), BK, BM).permute((1, 0)), _plain_rows(sb.index(s), BK, BN),
                         BK, acc_l)

    @gluon.jit
    def _ws_fma(sa, sb, ready, empty, n_steps, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
                STAGES: gl.constexpr, acc_l: gl.constexpr, GROUP: gl.constexpr):
        """The FMA warps: wait for stage ``i % STAGES``, run its step, hand the buffer back.
        ``GROUP`` > 1: run a group of that many steps, wait for the next group's stages,
        then hand the group's back through one ``empty`` barrier. Triton's barrier
        analysis counts every mbarrier operation as a shared-memory write, so each wait or
        arrive after a shared load costs a barrier of these warps (the GPU machine's Triton
        3.6 puts two in every step of the one-step loop): grouped, the waits and the
        arrive sit together between the groups' loads, three barriers a group."""
        acc = gl.zeros([BM, BN], gl.float32, layout=acc_l)
        if GROUP == 1:
            for i in range(n_steps):
                s = i % STAGES
                mbarrier.wait(ready.index(s), (i // STAGES) & 1)
                acc = _ws_step(acc, sa, sb, s, BM, BN, BK, acc_l)
                mbarrier.arrive(empty.index(s), count=1)   # after a barrier of these warps (Gluon's)
        else:
            n_groups = gl.cdiv(n_steps, GROUP)
            _ws_wait_group(ready, 0, n_steps, GROUP, STAGES)
            _cta_barrier()   # here, not inside the step loop below, where it would run every step
            for g in range(n_groups):
                for h in range(gl.minimum(n_steps - g * GROUP, GROUP)):
                    s = (g * GROUP + h) % STAGES
                    acc = _ws_step(acc, sa, sb, s, BM, BN, BK, acc_l)
                if g + 1 < n_groups:
                    _ws_wait_group(ready, g + 1, n_steps, GROUP, STAGES)
                mbarrier.arrive(empty.index(g % (STAGES // GROUP)), count=1)
                _cta_barrier()
        return (acc,)

    @gluon.jit
    def _ws_load(a_ptr, b_ptr, M, N, K, s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_a0, s_b0, pid_m, pid_n, lane, pid_b,
                 b0, sa, sb, ready, empty, n_steps, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
                 LANES: gl.constexpr, LB: gl.constexpr, STAGES: gl.constexpr, LOADERS: gl.constexpr,
                 KT: gl.constexpr, GROUP: gl.constexpr):
        """The producer warps: load step ``i``, wait for its buffer to be free, upcast it in."""
        a_rows, b_rows, k = _k_steps(a_ptr, b_ptr, M, N, K, s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_a0, s_b0, pid_m,
                                     pid_n, lane, pid_b, b0, BM, BN, BK, LANES, LB, LOADERS, KT)
        STEP: gl.constexpr = BK * LANES
        for i in range(n_steps):
            s = i % STAGES
            ki = k + i * STEP
            at = gl.load(a_rows + ki.to(gl.int64) * s_ak, mask=ki < K, other=0.0)
            bt = gl.load(b_rows + ki.to(gl.int64) * s_bk, mask=ki < K, other=-1.0)
            # a fresh mbarrier counts as the phase before 0 complete: the first STAGES pass;
            # GROUP > 1: a group's buffers come back together, awaited at its first step
            if GROUP == 1:
                mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)
            elif i % GROUP == 0:
                mbarrier.wait(empty.index((i // GROUP) % (STAGES // GROUP)), ((i // STAGES) & 1) ^ 1)
            sa.index(s).permute((1, 0)).store(at.to(gl.float32))
            sb.index(s).permute((1, 0)).store(bt.to(gl.float32))
            mbarrier.arrive(ready.index(s), count=1)

    @gluon.jit
    def lane_sums_ws_kernel(a_ptr, b_ptr, p_ptr, M, N, K, s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_a0, s_b0,
                            s_pl, s_p0, s_pb, s_pm, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
                            LANES: gl.constexpr, LB: gl.constexpr, GROUP_M: gl.constexpr, TR: gl.constexpr,
                            TC: gl.constexpr, STAGES: gl.constexpr, LOADERS: gl.constexpr,
                            LOADER_REGS: gl.constexpr, KT: gl.constexpr, GROUP: gl.constexpr):
        """:func:`lane_sums_kernel`'s sums (the same arguments and grid), warp-specialized:
        ``LOADERS`` producer warps fill a ring of ``STAGES`` fp32 K steps, the kernel's
        ``num_warps`` warps run the FMAs, as in :func:`lane_sums_kernel`."""
        NW: gl.constexpr = gl.num_warps()
        acc_l: gl.constexpr = gl.BlockedLayout([TR, TC], [4, 8], [NW // 2, 2], [1, 0])
        sm_l: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
        pid = gl.program_id(0)
        lane = pid % LANES
        pid_b = gl.program_id(1).to(gl.int64)
        b0 = gl.program_id(2).to(gl.int64)
        pid_m, pid_n = grouped_pid(pid // LANES, M, N, BM, BN, GROUP_M)
        sa = gl.allocate_shared_memory(gl.float32, [STAGES, BK, BM], sm_l)
        sb = gl.allocate_shared_memory(gl.float32, [STAGES, BK, BN], sm_l)
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for s in gl.static_range(STAGES):
            mbarrier.init(ready.index(s), count=1)
            mbarrier.init(empty.index(s), count=1)
        n_steps = gl.cdiv(gl.cdiv(gl.cdiv(K, LB), LANES), BK // LB)
        acc, = gl.warp_specialize([
            (_ws_fma, (sa, sb, ready, empty, n_steps, BM, BN, BK, STAGES, acc_l, GROUP)),
            (_ws_load, (a_ptr, b_ptr, M, N, K, s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_a0, s_b0, pid_m, pid_n, lane,
                        pid_b, b0, sa, sb, ready, empty, n_steps, BM, BN, BK, LANES, LB, STAGES, LOADERS, KT,
                        GROUP)),
        ], [LOADERS], [LOADER_REGS])
        _store_lane_sums(acc, p_ptr, M, N, s_pl, s_p0, s_pb, s_pm, pid_m, pid_n, lane, pid_b, b0, BM, BN, acc_l)
else:  # pragma: no cover
    lane_sums_kernel = lane_sums_ws_kernel = None
