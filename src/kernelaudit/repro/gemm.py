"""Fixed-order fused-upcast GEMM kernels (Triton) and their launches: mm, addmm, linear, bmm.

Operands: 16-bit weights (bf16, fp16) or fp32; activations bf16, fp16 or fp32. Both are
upcast to fp32 in registers; nothing is cast in memory. No split-K, no atomics, no
autotuning: the tiles come from :func:`.tiles.pick` (N, K, dtype), never from M or the
device. Two orders:

* ``ieee``: ``acc = fma(a[m, k], b[k, n], acc)`` for k = 0, 1, ..., K-1 from acc = +0.0,
  each step one IEEE-754 fp32 fused multiply-add (``tl.fma``: defined, not left to the
  compiler's contraction), then ``out = fma(acc, alpha, fp32(beta * bias))`` (or
  ``acc * alpha`` without bias), rounded once to the output dtype; or, where the table
  fixes K lanes for the shape (:func:`.tiles.ieee_lanes`: N, K, weight dtype), L such
  chains over interleaved blocks of K, added by a fixed pairwise tree of fp32 adds
  before the same epilogue (:class:`.tiles.Lanes`). The bits are a function of the
  inputs and the shape alone: :mod:`.emulate` computes the same on a CPU.
  Four code paths give this order (``Tiles.tiled``, ``Tiles.tile8``, ``Tiles.dot``, else
  the explicit loop). ``tiled`` is :mod:`.ieee_kernels`' register-tiled kernel (the
  decode table's default: wide K-contiguous tile loads, columns taken apart in
  registers). ``dot`` (the prefill table's default) is one fp32
  ``tl.dot(input_precision="ieee")`` per K step, which Triton lowers to the same chain
  (compiled only: the interpreter's ``tl.dot`` is numpy, so it runs the explicit loop).
* ``mma``: one ``tl.dot`` (tensor cores, fp32 accumulation) per K step of the table's
  ``bk``, steps in order. Batch-invariant and run-to-run identical on one GPU
  architecture; not across architectures: a tensor core's internal accumulation inside
  one instruction is not IEEE-specified. fp32 activations (or mixed 16-bit dtypes) go
  through tf32 in this order.

K lanes (L > 1): ``tiled`` runs :func:`.ieee_kernels.ieee_lanes_kernel` (every lane of a
program's outputs in one [BM, BN, L] accumulator: decode); the explicit loop and ``dot``
run the lanes one after the other inside the program (:func:`_lane_tree_seq`), the
``tile8`` request included (it runs the explicit loop); with ``Tiles.split_lanes`` each
lane runs in a program of its own and writes its sum to an fp32 scratch, and a second
kernel adds the sums by the same tree (:func:`_launch_split_lanes`: prefill tiles as
large as the sequential order's, one accumulator live). ``lanes=`` (``ieee`` only, every
launch function) overrides the table's order for the shape: for tests and benchmarks
that compare orders; with the default (None) the bits are the shape's, and
:mod:`.emulate` takes the same argument.

Dependency rule: imports only :mod:`kernelaudit.config` and :mod:`kernelaudit.errors`.
"""

from __future__ import annotations

from .. import config

config.use_interpreter_without_cuda()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from ..errors import InvalidArgument, KernelAuditError, check_choice  # noqa: E402
from .epilogue import epilogue as _epilogue  # noqa: E402
from .epilogue import outer_batch  # noqa: E402
from . import ieee_gluon, ieee_gluon_decode, ieee_gluon_tma, mma_tma  # noqa: E402
from .ieee_kernels import grouped_tile, ieee_lanes_kernel, ieee_tiled_kernel  # noqa: E402
from .tiles import INTERPRETER_IEEE, ORDERS, SPLIT_LANES_SCRATCH_BYTES, Lanes, Tiles, ieee_lanes, pick  # noqa: E402



def _check_triton_mode() -> None:
    """Triton picks interpreter or compiler for its own language when it is first
    imported: if something imported it before TRITON_INTERPRET was set (torch's inductor
    does, on a first backward), the interpreter cannot run kernels here."""
    if config.interpreter_requested() and type(tl.zeros).__name__ == "JITFunction":
        raise KernelAuditError(
            "triton was imported before TRITON_INTERPRET=1 was set, so its kernels cannot run on this "
            "CPU: import kernelaudit.repro before anything that imports triton (torch._inductor), "
            "or set TRITON_INTERPRET=1 in the environment")


_check_triton_mode()

WEIGHT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
ACTIVATION_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@triton.jit
def _columns8(t):
    """The 8 columns of ``t`` [R, 8] as [R] vectors, k = 0..7, by reshapes and splits
    (data movement only: no arithmetic touches a value)."""
    R: tl.constexpr = t.shape[0]
    even, odd = tl.split(tl.reshape(t, (R, 4, 2)))            # k = 2i, 2i + 1
    e0, e1 = tl.split(tl.reshape(even, (R, 2, 2)))           # k = 4i', 4i' + 2
    o0, o1 = tl.split(tl.reshape(odd, (R, 2, 2)))            # k = 4i' + 1, 4i' + 3
    k0, k4 = tl.split(e0)
    k2, k6 = tl.split(e1)
    k1, k5 = tl.split(o0)
    k3, k7 = tl.split(o1)
    return k0, k1, k2, k3, k4, k5, k6, k7


@triton.jit
def _lane_chain(a_rows, b_cols, mask_m, mask_n, s_ak, s_bk, K, LANE,
                LANES: tl.constexpr, LB: tl.constexpr, DOT: tl.constexpr,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """Lane ``LANE``'s sum: ``acc = fma(a[m, k], b[k, n], acc)`` from +0.0 over its k in
    increasing order: blocks j = LANE, LANE + LANES, ... (k = j * LB .. j * LB + LB - 1,
    cut at K). ``LANE`` is a constant lane after lane, the program's lane with
    ``split_lanes``."""
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    if DOT:
        # compiled only: each step one fp32 ieee tl.dot over the next QB blocks of this
        # lane, gathered into one K tile in the lane's order (a dot is one FMA chain over
        # its K tile, in order); past K the tile is padded with fma(+0, -1, acc) = acc
        QB: tl.constexpr = BK // LB if BK > LB else 1     # blocks per step (DK = QB * LB >= BK)
        DK: tl.constexpr = QB * LB
        rq = tl.arange(0, QB)
        rb = tl.arange(0, LB)
        blocks = (tl.cdiv(K, LB) - LANE + LANES - 1) // LANES     # this lane's blocks (>= 0)
        for s in range(0, tl.cdiv(blocks, QB)):
            kq = (((s * QB + rq) * LANES + LANE) * LB).to(tl.int64)             # [QB] block starts
            kk = kq[:, None] + rb[None, :]                                        # [QB, LB]
            in_k = kk < K
            a = tl.load(a_rows[:, None, None] + kk[None, :, :] * s_ak,
                        mask=mask_m[:, None, None] & in_k[None, :, :], other=0.0).to(tl.float32)
            b = tl.load(b_cols[None, None, :] + kk[:, :, None] * s_bk,
                        mask=in_k[:, :, None] & mask_n[None, None, :], other=-1.0).to(tl.float32)
            acc = tl.dot(tl.reshape(a, (BM, DK)), tl.reshape(b, (DK, BN)), acc, input_precision="ieee")
    else:
        for kb in range(LANE * LB, K, LANES * LB):
            for k in range(kb, tl.minimum(kb + LB, K)):
                k64 = tl.cast(k, tl.int64)
                a = tl.load(a_rows + k64 * s_ak, mask=mask_m, other=0.0).to(tl.float32)
                b = tl.load(b_cols + k64 * s_bk, mask=mask_n, other=0.0).to(tl.float32)
                acc = tl.fma(a[:, None], b[None, :], acc)
    return acc


@triton.jit
def _lane_tree_seq(a_rows, b_cols, mask_m, mask_n, s_ak, s_bk, K, LO: tl.constexpr, NL: tl.constexpr,
                   LANES: tl.constexpr, LB: tl.constexpr, DOT: tl.constexpr,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """The pairwise tree over lanes LO .. LO + NL - 1, one lane after the other:
    tree(LO, NL) = tree(LO, NL / 2) + tree(LO + NL / 2, NL / 2), which for NL a power of
    two is the neighbours-first tree of :func:`.ieee_kernels.lane_tree`; at most
    log2(NL) + 1 accumulators live."""
    if NL == 1:
        acc = _lane_chain(a_rows, b_cols, mask_m, mask_n, s_ak, s_bk, K, LO, LANES, LB, DOT, BM, BN, BK)
    else:
        left = _lane_tree_seq(a_rows, b_cols, mask_m, mask_n, s_ak, s_bk, K, LO, NL // 2, LANES, LB, DOT,
                              BM, BN, BK)
        right = _lane_tree_seq(a_rows, b_cols, mask_m, mask_n, s_ak, s_bk, K, LO + NL // 2, NL // 2, LANES, LB,
                               DOT, BM, BN, BK)
        acc = left + right
    return acc


@triton.jit
def _ieee_lane_sums_kernel(a_ptr, b_ptr, p_ptr, M, N, K, s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_a0, s_b0,
                           s_pl, s_p0, s_pb, s_pm, DOT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                           BK: tl.constexpr, LANES: tl.constexpr, LB: tl.constexpr, GROUP_M: tl.constexpr):
    """``split_lanes``, first pass: program (tile, lane) writes that lane's fp32 sum
    (:func:`_lane_chain`) of its ``BM x BN`` tile to ``p[lane, b0, b, m, n]``. The lanes of
    one tile are neighbouring programs: they read disjoint K blocks of the same rows and
    columns, while the grouped tile order keeps ``b`` in L2."""
    pid = tl.program_id(0)
    lane = pid % LANES
    rm, rn = grouped_tile(pid // LANES, M, N, BM, BN, GROUP_M)
    pid_b = tl.program_id(1).to(tl.int64)
    b0 = tl.program_id(2).to(tl.int64)
    mask_m = rm < M
    mask_n = rn < N
    a_rows = a_ptr + b0 * s_a0 + pid_b * s_ab + rm * s_am
    b_cols = b_ptr + b0 * s_b0 + pid_b * s_bb + rn * s_bn
    acc = _lane_chain(a_rows, b_cols, mask_m, mask_n, s_ak, s_bk, K, lane, LANES, LB, DOT, BM, BN, BK)
    p = p_ptr + lane.to(tl.int64) * s_pl + b0 * s_p0 + pid_b * s_pb + rm[:, None] * s_pm + rn[None, :]
    tl.store(p, acc, mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _lane_sums_tree(p_tile, mask, s_pl, LO: tl.constexpr, NL: tl.constexpr):
    """The pairwise tree over the stored lane sums LO .. LO + NL - 1, the tree of
    :func:`_lane_tree_seq`: tree(LO, NL) = tree(LO, NL / 2) + tree(LO + NL / 2, NL / 2)."""
    if NL == 1:
        acc = tl.load(p_tile + LO * s_pl, mask=mask, other=0.0)
    else:
        acc = _lane_sums_tree(p_tile, mask, s_pl, LO, NL // 2) + _lane_sums_tree(p_tile, mask, s_pl, LO + NL // 2,
                                                                                  NL // 2)
    return acc


@triton.jit
def _lane_sums_epilogue_kernel(p_ptr, bias_ptr, c_ptr, M, N, s_pl, s_p0, s_pb, s_pm,
                               s_xb, s_xm, s_xn, s_cb, s_cm, s_cn, alpha, beta, s_x0, s_c0,
                               HAS_BIAS: tl.constexpr, OUT_BF16: tl.constexpr, LANES: tl.constexpr,
                               BM: tl.constexpr, BN: tl.constexpr):
    """``split_lanes``, second pass: a tile's L lane sums added by the order's tree, then
    the shared epilogue (the same as every other path's)."""
    grid_n = tl.cdiv(N, BN)
    pid = tl.program_id(0)
    rm = (pid // grid_n).to(tl.int64) * BM + tl.arange(0, BM)
    rn = (pid % grid_n).to(tl.int64) * BN + tl.arange(0, BN)
    pid_b = tl.program_id(1).to(tl.int64)
    b0 = tl.program_id(2).to(tl.int64)
    bias_ptr = bias_ptr + b0 * s_x0
    c_ptr = c_ptr + b0 * s_c0
    mask_m = rm < M
    mask_n = rn < N
    p_tile = p_ptr + b0 * s_p0 + pid_b * s_pb + rm[:, None] * s_pm + rn[None, :]
    acc = _lane_sums_tree(p_tile, mask_m[:, None] & mask_n[None, :], s_pl, 0, LANES)
    _epilogue(acc, bias_ptr, c_ptr, pid_b, rm, rn, mask_m, mask_n, s_xb, s_xm, s_xn, s_cb, s_cm, s_cn,
             alpha, beta, HAS_BIAS, OUT_BF16)


@triton.jit
def _ieee_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                 s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_xb, s_xm, s_xn, s_cb, s_cm, s_cn,
                 alpha, beta, s_a0, s_b0, s_x0, s_c0,
                 HAS_BIAS: tl.constexpr, OUT_BF16: tl.constexpr, TILE8: tl.constexpr, DOT: tl.constexpr,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                 LANES: tl.constexpr = 1, LB: tl.constexpr = 1, GROUP_M: tl.constexpr = 1):
    rm, rn = grouped_tile(tl.program_id(0), M, N, BM, BN, GROUP_M)
    pid_b = tl.program_id(1).to(tl.int64)
    a_ptr, b_ptr, bias_ptr, c_ptr = outer_batch(a_ptr, b_ptr, bias_ptr, c_ptr, s_a0, s_b0, s_x0, s_c0)
    mask_m = rm < M
    mask_n = rn < N
    a_rows = a_ptr + pid_b * s_ab + rm * s_am        # [BM] pointers to a[b, m, 0]
    b_cols = b_ptr + pid_b * s_bb + rn * s_bn        # [BN] pointers to b[b, 0, n]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    k_main = (K // BK) * BK
    if LANES > 1:
        # K lanes: every lane of these outputs in this program, lane after lane
        acc = _lane_tree_seq(a_rows, b_cols, mask_m, mask_n, s_ak, s_bk, K, 0, LANES, LANES, LB, DOT, BM, BN, BK)
        k_main = K
    elif DOT:
        # compiled only (never under the interpreter, whose tl.dot is a numpy matmul):
        # Triton lowers an fp32 dot with input_precision="ieee" to one FMA chain per
        # output element, k = 0..BK-1 in order, onto acc (FMADotUtility.cpp,
        # GenericFMAVectorMultiplier): the same order, with Triton's register blocking
        rk = tl.arange(0, BK)
        for k0 in range(0, K, BK):
            # a masked step adds fma(+0, -1, acc) = acc + (-0) == acc bit for bit (with
            # +0 * +0 an accumulator at -0.0 would turn into +0.0). The padding is -1, not
            # -0.0: compiled, a masked load's `other=-0.0` came back as +0.0 on the H200
            # (a zero fill drops the sign); the interpreter kept it
            mask_k = (k0 + rk) < K
            a = tl.load(a_rows[:, None] + (k0 + rk)[None, :] * s_ak, mask=mask_m[:, None] & mask_k[None, :],
                        other=0.0).to(tl.float32)
            b = tl.load(b_cols[None, :] + (k0 + rk)[:, None] * s_bk, mask=mask_k[:, None] & mask_n[None, :],
                        other=-1.0).to(tl.float32)
            acc = tl.dot(a, b, acc, input_precision="ieee")
        k_main = K
    elif TILE8:
        # K-contiguous operands (x [M, K], linear's weight [N, K]): one coalesced [rows, 8]
        # tile per operand and step, its columns taken apart in registers; same order
        r8 = tl.arange(0, 8)
        for k0 in range(0, k_main, 8):
            at = tl.load(a_rows[:, None] + (k0 + r8)[None, :] * s_ak, mask=mask_m[:, None], other=0.0)
            bt = tl.load(b_cols[:, None] + (k0 + r8)[None, :] * s_bk, mask=mask_n[:, None], other=0.0)
            a0, a1, a2, a3, a4, a5, a6, a7 = _columns8(at.to(tl.float32))
            b0, b1, b2, b3, b4, b5, b6, b7 = _columns8(bt.to(tl.float32))
            acc = tl.fma(a0[:, None], b0[None, :], acc)
            acc = tl.fma(a1[:, None], b1[None, :], acc)
            acc = tl.fma(a2[:, None], b2[None, :], acc)
            acc = tl.fma(a3[:, None], b3[None, :], acc)
            acc = tl.fma(a4[:, None], b4[None, :], acc)
            acc = tl.fma(a5[:, None], b5[None, :], acc)
            acc = tl.fma(a6[:, None], b6[None, :], acc)
            acc = tl.fma(a7[:, None], b7[None, :], acc)
    else:
        for k0 in range(0, k_main, BK):
            for kk in tl.static_range(BK):
                # one rank-1 update, one rounding per element, k = k0 + kk in order
                a = tl.load(a_rows + (k0 + kk) * s_ak, mask=mask_m, other=0.0).to(tl.float32)
                b = tl.load(b_cols + (k0 + kk) * s_bk, mask=mask_n, other=0.0).to(tl.float32)
                acc = tl.fma(a[:, None], b[None, :], acc)
    for k in range(k_main, K):  # the tail, same order
        a = tl.load(a_rows + k * s_ak, mask=mask_m, other=0.0).to(tl.float32)
        b = tl.load(b_cols + k * s_bk, mask=mask_n, other=0.0).to(tl.float32)
        acc = tl.fma(a[:, None], b[None, :], acc)
    _epilogue(acc, bias_ptr, c_ptr, pid_b, rm, rn, mask_m, mask_n, s_xb, s_xm, s_xn, s_cb, s_cm, s_cn,
              alpha, beta, HAS_BIAS, OUT_BF16)


@triton.jit
def _mma_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_xb, s_xm, s_xn, s_cb, s_cm, s_cn,
                alpha, beta, s_a0, s_b0, s_x0, s_c0,
                HAS_BIAS: tl.constexpr, OUT_BF16: tl.constexpr, SAME16: tl.constexpr, INTERPRETED: tl.constexpr,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    # tiles in grouped order (L2 reuse); which program computes a tile never changes its bits
    rm, rn = grouped_tile(tl.program_id(0), M, N, BM, BN, GROUP_M)
    pid_b = tl.program_id(1).to(tl.int64)
    a_ptr, b_ptr, bias_ptr, c_ptr = outer_batch(a_ptr, b_ptr, bias_ptr, c_ptr, s_a0, s_b0, s_x0, s_c0)
    rk = tl.arange(0, BK)
    mask_m = rm < M
    mask_n = rn < N
    a_t = a_ptr + pid_b * s_ab + rm[:, None] * s_am + rk[None, :] * s_ak   # [BM, BK]
    b_t = b_ptr + pid_b * s_bb + rk[:, None] * s_bk + rn[None, :] * s_bn   # [BK, BN]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        mask_k = (k0 + rk) < K
        a = tl.load(a_t + k0 * s_ak, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(b_t + k0 * s_bk, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        if SAME16 and not INTERPRETED:
            acc = tl.dot(a, b, acc)
        else:
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="tf32")
    _epilogue(acc, bias_ptr, c_ptr, pid_b, rm, rn, mask_m, mask_n, s_xb, s_xm, s_xn, s_cb, s_cm, s_cn,
              alpha, beta, HAS_BIAS, OUT_BF16)


# -- launches ------------------------------------------------------------------------------
def _check_operands(a: torch.Tensor, b: torch.Tensor, order: str, lanes: Lanes | None = None) -> None:
    check_choice("order", order, ORDERS)
    if lanes is not None and (order != "ieee" or not isinstance(lanes, Lanes)):
        raise InvalidArgument(f"Cannot have lanes={lanes!r} with order={order!r}: allowed values are a "
                              "tiles.Lanes with order='ieee', or None (the table's order for the shape)")
    if a.dtype not in ACTIVATION_DTYPES:
        raise InvalidArgument(f"Cannot have activation dtype={a.dtype}: allowed values are "
                              f"{', '.join(map(str, ACTIVATION_DTYPES))}")
    if b.dtype not in WEIGHT_DTYPES:
        raise InvalidArgument(f"Cannot have weight dtype={b.dtype}: allowed values are "
                              f"{', '.join(map(str, WEIGHT_DTYPES))}")
    if a.shape[-1] != b.shape[-2]:
        raise InvalidArgument(f"Cannot multiply a of shape {tuple(a.shape)} by b of shape {tuple(b.shape)}: "
                              f"K={a.shape[-1]} != {b.shape[-2]}")
    if a.device != b.device:
        raise InvalidArgument(f"Cannot have a on {a.device} and b on {b.device}")


def out_dtype_for(a: torch.Tensor, b: torch.Tensor) -> torch.dtype:
    """torch's promotion: equal dtypes keep theirs; fp32 activations with 16-bit weights
    give fp32."""
    return torch.promote_types(a.dtype, b.dtype)


def _weight_words(b3: torch.Tensor) -> bool:
    """Whether the K-lanes kernel may read ``b3`` ([B0, B, K, N] by strides) as 32-bit words of
    two bf16 weights (``ieee_lanes_kernel``'s ``WORDS``): bf16, K-contiguous, every other stride
    even and the data 4-byte aligned, so that every word holds k = 2j and 2j + 1 of one row
    (the launch also asks for an even lane block, so that no word spans two lanes)."""
    *outer, sk, sn = b3.stride()
    return (b3.dtype == torch.bfloat16 and sk == 1 and all(st % 2 == 0 for st in (*outer, sn))
            and b3.data_ptr() % 4 == 0)


def _launch(a3, b3, bias3, out3, order: str, tiles: Tiles | None, alpha: float, beta: float,
            lanes: Lanes | None = None):
    # a3: [B, M, K], b3: [B, K, N], bias3: broadcastable view [B, M, N] or None, out3: [B, M, N];
    # or all four with an outer batch dim first ([B0, B, ...]: grid dim 2, strided in place)
    if a3.dim() == 3:
        a3, b3, out3 = a3.unsqueeze(0), b3.unsqueeze(0), out3.unsqueeze(0)
        bias3 = bias3.unsqueeze(0) if bias3 is not None else None
    B0, B, M, K = a3.shape
    N = b3.shape[3]
    if out3.numel() == 0:
        return out3
    if K == 0:
        out3.copy_((bias3 * beta).expand_as(out3) if bias3 is not None else torch.zeros_like(out3))
        return out3
    if order == "ieee" and lanes is None:
        lanes = ieee_lanes(N, K, b3.dtype)      # the shape's order: never M, never the device
    if tiles is None:
        tiles = pick(order, N, K, b3.dtype, m=M, lanes=lanes)
        if order == "ieee" and config.interpreter_requested():
            tiles = INTERPRETER_IEEE
    # split_lanes: K-lanes orders; the sequential order too where Gluon runs its first pass
    gluon = order == "ieee" and tiles.gluon and ieee_gluon.usable(a3, tiles, lanes)
    if order == "ieee" and tiles.split_lanes and (not lanes.sequential or gluon):
        _launch_split_lanes(a3, b3, bias3, out3, tiles, lanes, alpha, beta, gluon)
        return out3
    if tiles.tma and order == "mma":   # ieee: the K-lanes kernel below, where it can
        if mma_tma.eligible(a3, b3, bias3, out3):
            mma_tma.launch(a3, b3, bias3, out3, tiles, alpha, beta)
            return out3
    xb = bias3 if bias3 is not None else out3
    grid = (triton.cdiv(M, tiles.bm), triton.cdiv(N, tiles.bn), B)
    k_lanes = order == "ieee" and tiles.tiled and not lanes.sequential
    words = k_lanes and lanes.block % 2 == 0 and _weight_words(b3)
    if words and tiles.gluon and ieee_gluon_decode.usable(a3, b3, tiles, lanes):
        ieee_gluon_decode.launch(a3, b3, bias3, out3, tiles, alpha, beta)
        return out3
    tma = words and tiles.tma and mma_tma.weights_eligible(b3)   # else the same order without
    if tma:
        mma_tma.ensure_allocator()
        if a3.dtype != torch.float32 and not tiles.act16:
            # the (decode-sized) activations upcast once, exactly, in memory (``act16``: in
            # registers, from half the shared-memory bytes)
            a3 = a3.float()
    args = (a3, b3, xb, out3, M, N, K, *a3.stride()[1:], *b3.stride()[1:], *xb.stride()[1:], *out3.stride()[1:],
            float(alpha), float(beta), a3.stride(0), b3.stride(0), xb.stride(0), out3.stride(0))
    if k_lanes:
        ieee_lanes_kernel[(grid[0] * grid[1], B, B0)](
            *args, HAS_BIAS=bias3 is not None, OUT_BF16=out3.dtype == torch.bfloat16,
            BM=tiles.bm, BN=tiles.bn, BK=max(tiles.bk, lanes.round), LANES=lanes.count, LB=lanes.block,
            GROUP_M=tiles.group_m, PREFETCH=tiles.prefetch and not tma,
            WORDS=tiles.prefetch and words, TMA=tma, STAGES=tiles.num_stages if tma else 1,
            num_warps=tiles.num_warps, num_stages=tiles.num_stages)
    elif order == "ieee" and tiles.tiled:
        ieee_tiled_kernel[(grid[0] * grid[1], B, B0)](
            *args, HAS_BIAS=bias3 is not None, OUT_BF16=out3.dtype == torch.bfloat16,
            BM=tiles.bm, BN=tiles.bn, BK=tiles.bk, GROUP_M=tiles.group_m, PREFETCH=tiles.prefetch,
            num_warps=tiles.num_warps, num_stages=tiles.num_stages)
    elif order == "ieee":
        _ieee_kernel[(grid[0] * grid[1], B, B0)](
                           *args, HAS_BIAS=bias3 is not None, OUT_BF16=out3.dtype == torch.bfloat16,
                           TILE8=tiles.tile8, DOT=tiles.dot and not config.interpreter_requested(),
                           BM=tiles.bm, BN=tiles.bn, BK=tiles.bk, LANES=lanes.count, LB=lanes.block,
                           GROUP_M=tiles.group_m,
                           # the dot path's k order is one fused multiply-add per product
                           # (llvm.fmuladd): say so, as Triton 3.10 turns fusion off by default
                           enable_fp_fusion=True,
                           num_warps=tiles.num_warps, num_stages=tiles.num_stages)
    else:
        same16 = a3.dtype == b3.dtype and a3.dtype != torch.float32
        # the interpreter's 16-bit tl.dot is not a product (triton 3.9): it gets fp32 operands
        _mma_kernel[(grid[0] * grid[1], B, B0)](
                          *args, HAS_BIAS=bias3 is not None, OUT_BF16=out3.dtype == torch.bfloat16, SAME16=same16,
                          INTERPRETED=config.interpreter_requested(),
                          BM=tiles.bm, BN=tiles.bn, BK=tiles.bk, GROUP_M=tiles.group_m,
                          num_warps=tiles.num_warps, num_stages=tiles.num_stages)
    return out3


#: The ``split_lanes`` second pass's tile: ``log2(L) + 1`` of them live, 16 floats a thread each.
_SUMS_BM, _SUMS_BN, _SUMS_WARPS = 32, 64, 4


def _launch_split_lanes(a3, b3, bias3, out3, tiles: Tiles, lanes: Lanes, alpha: float, beta: float,
                        gluon: bool) -> None:
    """``Tiles.split_lanes``: each lane's sums into an fp32 scratch (one program per tile and
    lane: :mod:`.ieee_gluon`'s kernel where ``gluon``, :mod:`.ieee_gluon_tma`'s where
    ``cast_once`` too on sm_90 on, else Triton's), then the tree and the
    epilogue; rows in blocks whose sums fit in :data:`.tiles.SPLIT_LANES_SCRATCH_BYTES` (all
    four tensors carry the outer batch dim)."""
    B0, B, M, K = a3.shape
    N = b3.shape[3]
    L = lanes.count
    per_row = L * B0 * B * N * 4
    rows = min(M, max(tiles.bm, SPLIT_LANES_SCRATCH_BYTES // per_row // tiles.bm * tiles.bm))
    sums = torch.empty((L, B0, B, rows, N), dtype=torch.float32, device=a3.device)
    s_pl, s_p0, s_pb, s_pm, _ = sums.stride()
    b_lm = None   # Tiles.cast_once: b cast once for every row block
    if gluon and ieee_gluon_tma.usable(a3, tiles):
        b_lm = ieee_gluon_tma.lane_major(b3[0, 0].t(), lanes, tiles.bk, -1.0)
    for m0 in range(0, M, rows):
        m1 = min(M, m0 + rows)
        a_v, out_v = a3[:, :, m0:m1], out3[:, :, m0:m1]
        bias_v = bias3[:, :, m0:m1] if bias3 is not None else None
        mc = m1 - m0
        tiles_mn = triton.cdiv(mc, tiles.bm) * triton.cdiv(N, tiles.bn)
        if b_lm is not None:
            ieee_gluon_tma.launch(a_v[0, 0], b_lm, N, sums, tiles, lanes)
        elif gluon:
            ieee_gluon.launch((tiles_mn * L, B, B0), (a_v, b3, sums, mc, N, K, *a_v.stride()[1:], *b3.stride()[1:],
                                                      a_v.stride(0), b3.stride(0), s_pl, s_p0, s_pb, s_pm),
                              tiles, lanes, a3.device)
        else:
            _ieee_lane_sums_kernel[(tiles_mn * L, B, B0)](
                a_v, b3, sums, mc, N, K, *a_v.stride()[1:], *b3.stride()[1:], a_v.stride(0), b3.stride(0),
                s_pl, s_p0, s_pb, s_pm, DOT=tiles.dot and not config.interpreter_requested(),
                BM=tiles.bm, BN=tiles.bn, BK=tiles.bk, LANES=L, LB=lanes.block, GROUP_M=tiles.group_m,
                enable_fp_fusion=True,    # the dot path's chain is one fused multiply-add per product
                num_warps=tiles.num_warps, num_stages=tiles.num_stages)
        xb = bias_v if bias_v is not None else out_v
        _lane_sums_epilogue_kernel[(triton.cdiv(mc, _SUMS_BM) * triton.cdiv(N, _SUMS_BN), B, B0)](
            sums, xb, out_v, mc, N, s_pl, s_p0, s_pb, s_pm, *xb.stride()[1:], *out_v.stride()[1:],
            float(alpha), float(beta), xb.stride(0), out_v.stride(0),
            HAS_BIAS=bias_v is not None, OUT_BF16=out_v.dtype == torch.bfloat16, LANES=L,
            BM=_SUMS_BM, BN=_SUMS_BN, num_warps=_SUMS_WARPS)


def _bias3(bias: torch.Tensor | None, B: int, M: int, N: int) -> torch.Tensor | None:
    """A [B, M, N] broadcast view (stride 0 where bias broadcasts): bias is never copied."""
    if bias is None:
        return None
    while bias.dim() < 3:
        bias = bias.unsqueeze(0)
    return bias.expand(B, M, N)


def mm(a: torch.Tensor, b: torch.Tensor, *, order: str = "ieee", tiles: Tiles | None = None,
       out_dtype: torch.dtype | None = None, lanes: Lanes | None = None) -> torch.Tensor:
    """``a @ b`` for a [M, K], b [K, N] in the fixed ``order``."""
    return addmm(None, a, b, order=order, tiles=tiles, out_dtype=out_dtype, lanes=lanes)


def addmm(bias: torch.Tensor | None, a: torch.Tensor, b: torch.Tensor, *, beta: float = 1.0,
          alpha: float = 1.0, order: str = "ieee", tiles: Tiles | None = None,
          out_dtype: torch.dtype | None = None, lanes: Lanes | None = None) -> torch.Tensor:
    """``beta * bias + alpha * (a @ b)`` for a [M, K], b [K, N], bias broadcastable to [M, N]."""
    if a.dim() != 2 or b.dim() != 2:
        raise InvalidArgument(f"Cannot have a.dim()={a.dim()}, b.dim()={b.dim()} in mm/addmm: allowed values are 2")
    _check_operands(a, b, order, lanes)
    M, N = a.shape[0], b.shape[1]
    out = torch.empty(M, N, dtype=out_dtype or out_dtype_for(a, b), device=a.device)
    _launch(a.unsqueeze(0), b.unsqueeze(0), _bias3(bias, 1, M, N), out.unsqueeze(0), order, tiles, alpha, beta,
            lanes)
    return out


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
           order: str = "ieee", tiles: Tiles | None = None, lanes: Lanes | None = None) -> torch.Tensor:
    """``x @ weight.T + bias`` for x [..., K], weight [N, K] (read in place, transposed by strides)."""
    if weight.dim() != 2:
        raise InvalidArgument(f"Cannot have weight.dim()={weight.dim()} in linear: allowed values are 2")
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    out = addmm(bias, x2, weight.t(), order=order, tiles=tiles, lanes=lanes)
    return out.reshape(*lead, weight.shape[0])


def matmul4d(a: torch.Tensor, b: torch.Tensor, *, order: str = "ieee", alpha: float = 1.0,
             out: torch.Tensor | None = None, out_dtype: torch.dtype | None = None,
             tiles: Tiles | None = None) -> torch.Tensor:
    """``alpha * (a @ b)`` for a [B0, B1, M, K], b [B0, B1, K, N] (attention's batch and
    heads), every (b0, b1) in the same fixed order, read in place by strides (no copy to
    merge the batch dims); written into ``out`` ([B0, B1, M, N], any strides) when given."""
    if a.dim() != 4 or b.dim() != 4 or a.shape[:2] != b.shape[:2]:
        raise InvalidArgument(f"Cannot have a {tuple(a.shape)}, b {tuple(b.shape)} in matmul4d: "
                              "allowed values are [B0, B1, M, K] and [B0, B1, K, N] with one B0, B1")
    _check_operands(a, b, order)
    shape = (*a.shape[:3], b.shape[3])
    if out is None:
        out = torch.empty(shape, dtype=out_dtype or out_dtype_for(a, b), device=a.device)
    elif tuple(out.shape) != shape:
        raise InvalidArgument(f"Cannot have out of shape {tuple(out.shape)} in matmul4d: allowed values are {shape}")
    _launch(a, b, None, out, order, tiles, alpha, 0.0)
    return out


def bmm(a: torch.Tensor, b: torch.Tensor, *, order: str = "ieee", tiles: Tiles | None = None,
        out_dtype: torch.dtype | None = None, lanes: Lanes | None = None) -> torch.Tensor:
    """``a @ b`` for a [B, M, K], b [B, K, N]; every batch in the same fixed order."""
    if a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0]:
        raise InvalidArgument(f"Cannot have a {tuple(a.shape)}, b {tuple(b.shape)} in bmm: "
                              "allowed values are [B, M, K] and [B, K, N] with one B")
    _check_operands(a, b, order, lanes)
    B, M, N = a.shape[0], a.shape[1], b.shape[2]
    out = torch.empty(B, M, N, dtype=out_dtype or out_dtype_for(a, b), device=a.device)
    _launch(a, b, None, out, order, tiles, 1.0, 0.0, lanes)
    return out
