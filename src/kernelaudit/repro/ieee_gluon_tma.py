"""The ``ieee`` prefill lane sums fed by TMA from operands cast once (``Tiles.cast_once``).

The warp-specialized first pass (:func:`.ieee_gluon.lane_sums_ws_kernel`) keeps the FMA
pipe 67.4% busy where its K loop alone keeps it 78.8% (ncu, H100, 2026-12-07): its
producer warps load 16-bit K steps, upcast them and store them to shared memory, and the
FMA warps' lost cycles went to the producers' global loads and stores and to the
hand-back barriers.
Here the launch casts both operands to fp32 once, in memory (exact, as every upcast),
and lays each lane's k side by side (:func:`lane_major`): lane ``l``'s blocks ``j * LB ..
j * LB + LB - 1`` (``j mod LANES == l``) in increasing ``j``, then ``+0.0`` for ``a`` and
``-1.0`` for ``b`` up to whole K steps. A lane's K step is then one rectangle of each
operand, K-major (k rows, then the tile's rows or columns), which one TMA copy moves
into a shared stage: a single producer warp issues the copies and no thread of the
program loads, converts or stores an operand. The FMA warps run the same
:func:`.ieee_gluon._ws_fma` chains in the same k order from +0.0 (a padded step is
``fma(+0, -1, acc) = acc``), so the bits are the order's, as with every first pass.

On an H100 (2026-12-07) this pass kept the FMA pipe 76.7% busy and ran 10.81 ms at
M = 4096, K = N = 8192 (the warp-specialized pass 12.32 ms), the same bits.
The cast costs a pass over each operand per call (:func:`lane_major`, one tiled Triton
pass on CUDA): at those sizes, bf16, 0.19 GB read and 0.38 GB written, 0.21 ms on an
H100 at 78-80% of its DRAM bandwidth (ncu, 2026-12-07; a first version, reading a lane
block's 16 bytes at a time, took 0.88 ms). Prefill only (the table's rows from
M = 1024): decode reads the weights once, where a cast would double the bytes. Plain
2-d launches (one batch); compiled for sm_90 on (TMA, mbarriers).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import config
from .ieee_gluon import _store_lane_sums, _ws_fma, gl, gluon, launch_options, mbarrier
from .ieee_kernels import grouped_pid

try:  # TMA in Gluon (Triton 3.4 on)
    from triton.experimental.gluon.language.nvidia.hopper import tma
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    _tma_copy = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared   # the name from 3.7 on
except (ImportError, AttributeError):  # pragma: no cover - an old Triton
    tma = TensorDescriptor = None


def usable(a3: torch.Tensor, tiles) -> bool:
    """Whether a launch can take the cast-once feeding: ``cast_once`` set, Gluon and TMA
    present, one batch (a plain 2-d launch) on a CUDA device of sm_90 on."""
    return (bool(tiles.cast_once) and tma is not None and a3.shape[0] == 1 and a3.shape[1] == 1
            and a3.device.type == "cuda" and torch.cuda.get_device_capability(a3.device)[0] >= 9)


def steps_per_lane(K: int, lanes, bk: int) -> int:
    """K steps of ``bk`` k a lane: its blocks of ``lanes.block`` k, padded to whole steps."""
    block = lanes.block if lanes.count > 1 else 1
    blocks = -(-K // block)
    per_lane = -(-blocks // lanes.count) * block
    return -(-per_lane // bk)


def lane_major(x: torch.Tensor, lanes, bk: int, pad: float) -> torch.Tensor:
    """``x`` ([R, K], any strides, any float dtype) cast to fp32 and laid out K-major with
    each lane's k side by side: ``[LANES * S * bk, R4]`` (S = :func:`steps_per_lane`, R4 =
    R rounded up to 4 so a row is 16-byte aligned for TMA), row ``l * S * bk + i`` holding
    the ``i``-th k of lane ``l`` in increasing order, and ``pad`` past the lane's last k.
    Columns from R on are left unset: they feed only rows or columns past the output's,
    which are never stored."""
    R, K = x.shape
    L = lanes.count
    block = lanes.block if L > 1 else 1
    S = steps_per_lane(K, lanes, bk)
    J = -(-K // (block * L))                         # blocks a lane, the last ones padded
    r4 = -(-R // 4) * 4
    out = torch.empty((L, S * bk, r4), dtype=torch.float32, device=x.device)
    if J * block < S * bk:   # each lane's rows past its last block: the padding alone
        out[:, J * block:].fill_(pad)
    if x.is_cuda or config.interpreter_requested():  # one pass, read and written in tiles
        grid = (triton.cdiv(J * L * block, _LM_BK), triton.cdiv(R, _LM_BR))
        _lane_major_kernel[grid](x, out, R, K, x.stride(0), x.stride(1), S * bk, r4, float(pad),
                                 L=L, BLOCK=block, BK=_LM_BK, BR=_LM_BR, WIDE=_needs_int64(x, out.numel()))
        return out.view(L * S * bk, r4)
    if K == J * L * block:
        src = x
    else:
        src = x.new_full((R, J * L * block), pad)
        src[:, :K] = x
    # [R, J, L, block] -> [L, J, block, R]: lane, its blocks in order, the block's k, then row
    out[:, :J * block, :R].copy_(src.reshape(R, J, L, block).permute(2, 1, 3, 0).reshape(L, J * block, R))
    return out.view(L * S * bk, r4)


def _needs_int64(x: torch.Tensor, out_numel: int) -> bool:
    """Whether :func:`_lane_major_kernel` needs int64 offsets: an element of ``x`` or of
    the output past 2^31 - 1. Elsewhere int32 (fewer registers, more programs an SM)."""
    R, K = x.shape
    return max((R - 1) * abs(x.stride(0)) + (K - 1) * abs(x.stride(1)), out_numel) >= 2 ** 31


#: :func:`_lane_major_kernel`'s tile: k of ``x`` (contiguous runs of a lane's blocks) by its rows.
_LM_BK, _LM_BR = 64, 64


@triton.jit
def _lane_major_kernel(x_ptr, out_ptr, R, K, s_xr, s_xk, per_lane, r4, pad, L: tl.constexpr,
                       BLOCK: tl.constexpr, BK: tl.constexpr, BR: tl.constexpr, WIDE: tl.constexpr):
    """:func:`lane_major` in one pass over ``x``'s k up to whole blocks of every lane:
    ``x[:, k]`` (``pad`` from ``K`` on) goes to output row ``lane * per_lane + j * BLOCK +
    k % BLOCK``, where ``k // BLOCK = j * L + lane``. A ``[BR, BK]`` tile of ``x`` is read
    along k (so a row's 16-bit k come in whole sectors, not a lane block's 16 bytes at a
    time) and written as ``BK`` output rows of ``BR`` contiguous floats."""
    pk = tl.program_id(0)
    pr = tl.program_id(1)
    if WIDE:
        pk = pk.to(tl.int64)
        pr = pr.to(tl.int64)
    k = pk * BK + tl.arange(0, BK)
    r = pr * BR + tl.arange(0, BR)
    q = k // BLOCK
    o = (q % L) * per_lane + (q // L) * BLOCK + k % BLOCK
    v = tl.load(x_ptr + r[:, None] * s_xr + k[None, :] * s_xk, mask=(r[:, None] < R) & (k[None, :] < K), other=pad)
    v = tl.where(k[None, :] < K, v.to(tl.float32), pad)
    tl.store(out_ptr + o[None, :] * r4 + r[:, None], v, mask=r[:, None] < R)


def _layout():
    """The layout TMA copies into: unswizzled, one box per operand and step."""
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)


def descriptors(a_lm: torch.Tensor, b_lm: torch.Tensor, tiles):
    """TMA descriptors of the lane-major operands: ``[bk, bm]`` boxes of ``a``, ``[bk, bn]``
    of ``b`` (zeros past the rows and columns: never stored)."""
    lay = _layout()
    return (TensorDescriptor.from_tensor(a_lm, [tiles.bk, tiles.bm], lay),
            TensorDescriptor.from_tensor(b_lm, [tiles.bk, tiles.bn], lay))


def launch(a2: torch.Tensor, b_lm: torch.Tensor, N: int, sums: torch.Tensor, tiles, lanes) -> None:
    """Lane ``l``'s fp32 chain of ``a2 @ b`` (``a2`` [M, K], any strides; ``b`` [K, N] given
    as ``b_lm``, its :func:`lane_major` with padding -1, cast once for every row block)
    into ``sums[l, 0, 0]`` ([LANES, 1, 1, >= M, N]), every (tile, lane) a program."""
    M, K = a2.shape
    a_lm = lane_major(a2, lanes, tiles.bk, 0.0)
    a_desc, b_desc = descriptors(a_lm, b_lm, tiles)
    s_pl, s_p0, s_pb, s_pm, _ = sums.stride()
    grid = (-(-M // tiles.bm) * -(-N // tiles.bn) * lanes.count,)
    lane_sums_tma_kernel[grid](a_desc, b_desc, sums, M, N, steps_per_lane(K, lanes, tiles.bk), s_pl, s_pm,
                               BM=tiles.bm, BN=tiles.bn, BK=tiles.bk, LANES=lanes.count, GROUP_M=tiles.group_m,
                               TR=tiles.thread_tile[0], TC=tiles.thread_tile[1], STAGES=tiles.num_stages,
                               **launch_options(tiles))


def compile_for(tiles, lanes, capability: int = 90, m: int = 4096, n: int = 8192, k: int = 8192):
    """:func:`lane_sums_tma_kernel` compiled for ``sm_<capability>`` as a launch of
    ``tiles`` in ``lanes``' order takes it, on any machine (Triton's own ptxas, no GPU):
    the descriptors of CPU stand-ins of the lane-major operands give its signature."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    rows = lanes.count * steps_per_lane(k, lanes, tiles.bk)
    a_desc, b_desc = descriptors(torch.empty(rows, m), torch.empty(rows, n), tiles)
    const = dict(BM=tiles.bm, BN=tiles.bn, BK=tiles.bk, LANES=lanes.count, GROUP_M=tiles.group_m,
                 TR=tiles.thread_tile[0], TC=tiles.thread_tile[1], STAGES=tiles.num_stages)
    kern = lane_sums_tma_kernel
    # a descriptor's type as Triton's specialization names it (3.9's __mangle__; 3.6 has none)
    sig = {nm: f"tensordesc<fp32[{','.join(map(str, d.block_shape))}],{d.layout!r}>"
           for nm, d in (("a_desc", a_desc), ("b_desc", b_desc))}
    sig["p_ptr"] = "*fp32"
    sig.update({nm: "constexpr" if nm in const else "i32" for nm in kern.arg_names if nm not in sig})
    attrs = {(kern.arg_names.index(nm),): [["tt.divisibility", 16]] for nm in ("p_ptr", "N", "s_pl", "s_pm")}
    return triton.compile(GluonASTSource(fn=kern, signature=sig, constexprs=const, attrs=attrs),
                          target=GPUTarget("cuda", capability, 32), options=launch_options(tiles))


if gl is not None and tma is not None:
    @gluon.jit
    def _tma_load(a_desc, b_desc, sa, sb, ready, empty, n_steps, k0, m0, n0, BK: gl.constexpr,
                  STAGES: gl.constexpr):
        """The producer warp: wait for stage ``i % STAGES`` to be free, then one TMA copy of
        each operand's step into it, ``ready`` completing when their bytes have landed."""
        for i in range(n_steps):
            s = i % STAGES
            # a fresh mbarrier counts as the phase before 0 complete: the first STAGES pass
            mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(s), a_desc.block_type.nbytes + b_desc.block_type.nbytes)
            _tma_copy(a_desc, [k0 + i * BK, m0], ready.index(s), sa.index(s))
            _tma_copy(b_desc, [k0 + i * BK, n0], ready.index(s), sb.index(s))

    @gluon.jit
    def lane_sums_tma_kernel(a_desc, b_desc, p_ptr, M, N, n_steps, s_pl, s_pm, BM: gl.constexpr,
                             BN: gl.constexpr, BK: gl.constexpr, LANES: gl.constexpr, GROUP_M: gl.constexpr,
                             TR: gl.constexpr, TC: gl.constexpr, STAGES: gl.constexpr):
        """``p[lane, 0, 0, m, n]`` = lane ``pid % LANES``'s fp32 chain of tile ``pid // LANES``
        (grouped order), from the lane-major operands (:func:`lane_major`: lane ``l``'s
        ``n_steps`` steps from row ``l * n_steps * BK``); grid (tiles * LANES,)."""
        NW: gl.constexpr = gl.num_warps()
        acc_l: gl.constexpr = gl.BlockedLayout([TR, TC], [4, 8], [NW // 2, 2], [1, 0])
        pid = gl.program_id(0)
        lane = pid % LANES
        pid_m, pid_n = grouped_pid(pid // LANES, M, N, BM, BN, GROUP_M)
        sa = gl.allocate_shared_memory(gl.float32, [STAGES, BK, BM], a_desc.layout)
        sb = gl.allocate_shared_memory(gl.float32, [STAGES, BK, BN], b_desc.layout)
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for s in gl.static_range(STAGES):
            mbarrier.init(ready.index(s), count=1)
            mbarrier.init(empty.index(s), count=1)
        acc, = gl.warp_specialize([
            (_ws_fma, (sa, sb, ready, empty, n_steps, BM, BN, BK, STAGES, acc_l, 1)),   # reads plain rows
            (_tma_load, (a_desc, b_desc, sa, sb, ready, empty, n_steps, lane * n_steps * BK, pid_m * BM,
                         pid_n * BN, BK, STAGES)),
        ], [1], [24])   # one producer warp at setmaxnreg's least: addresses and a counter
        zero = pid * 0
        _store_lane_sums(acc, p_ptr, M, N, s_pl, 0, 0, s_pm, pid_m, pid_n, lane, zero, zero, BM, BN, acc_l)
else:  # pragma: no cover
    lane_sums_tma_kernel = None
