"""Fused Freivalds check of a batched matmul output, inputs generated on the fly.

For every (batch, head) the kernel computes, in float64,

* ``lhs   = y . C x``                       reading the device's output C once;
* ``rhs   = alpha (y A)(B x) + beta y M x``  with A, B, M regenerated in registers from
  their storage indexes (the same hash as :mod:`kernelaudit.sweep.gen`), never read from the
  device under test;
* ``bound = |alpha| (|y||A|)(|B||x|) + |beta| |y||M||x|``.

So one pass over C and no memory traffic for the inputs at all. Operands are given as
strided descriptors of their generated storage (:class:`Desc`), which covers every
layout: transposed views, storage offsets, stride-0 (expanded or shared) batches.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .gen import hash_u32, hash_u32_at, hash_u32_run, unit_float

_DT = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


@dataclass(frozen=True)
class Desc:
    """A (batch, head, rows, cols) strided view of a generated storage."""

    key: int
    offset: int
    strides: tuple[int, int, int, int]


@triton.jit
def _gen(idx, key, DT: tl.constexpr, ACC: tl.constexpr = tl.float64):
    # the generated value at int64 storage ``idx`` (kernels.gen's hash), in ACC; this
    # kernel is bound by it
    return unit_float(hash_u32(idx, key), DT).to(ACC)


@triton.jit
def _gen_tile(key, base, rows, cols, s_row, s_col, rmask, cmask, DT: tl.constexpr, ACC: tl.constexpr):
    """The generated (rows, cols) tile of a strided view whose matrix starts at storage
    ``base``, in ``ACC``, 0 outside the masks (operand tiles of the projection kernels)."""
    idx = base + rows[:, None] * s_row + cols[None, :] * s_col
    return tl.where(rmask[:, None] & cmask[None, :], _gen(idx, key, DT, ACC), 0.0)


#: Integer arguments Triton must not specialise on (divisible by 16, equal to 1): the
#: generated operands' descriptors and the sizes. Every distinct pattern of these was
#: one more compile, and a sweep meets hundreds of layouts (on the H200 a fresh sweep
#: spent 7 minutes compiling).
_DESC_INTS = [f"{p}{x}" for p in "abm" for x in ("_key", "_off")] + [f"s{p}{d}" for p in "abm" for d in range(4)]
_SIZES = ["H", "Mdim", "Ndim", "Kdim"]


def _freivalds_body(c_ptr, sc0, sc1, sc2, sc3, x_ptr, y_ptr, out_ptr,
                      a_key, a_off, sa0, sa1, sa2, sa3,
                      b_key, b_off, sb0, sb1, sb2, sb3,
                      m_key, m_off, sm0, sm1, sm2, sm3,
                      H, Mdim, Ndim, Kdim, alpha, beta,
                      pa_ptr, pa_sb, pa_sh, pb_ptr, pb_sb, pb_sh, pm_ptr, pm_sb, pm_sh,
                      HAS_M: tl.constexpr, DT: tl.constexpr, ACC: tl.constexpr,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                      PRE_A: tl.constexpr, PRE_B: tl.constexpr, PRE_M: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    b = pid // H
    h = pid % H
    ks = tl.arange(0, BK).to(tl.int64)
    kmask = ks < Kdim
    # u = B x and |B||x|, over column blocks of B (K x N): precomputed while B was
    # generated (PRE_B), or regenerated here
    u = tl.zeros([BK], dtype=ACC)
    ua = tl.zeros([BK], dtype=ACC)
    if PRE_B:
        pb = pb_ptr + b * pb_sb + h * pb_sh
        u = tl.load(pb + ks * 2, mask=kmask, other=0.0).to(ACC)
        ua = tl.load(pb + ks * 2 + 1, mask=kmask, other=0.0).to(ACC)
    else:
        for n0 in range(0, Ndim, BN):
            ns = n0 + tl.arange(0, BN).to(tl.int64)
            nmask = ns < Ndim
            xv = tl.load(x_ptr + ns, mask=nmask, other=0.0)
            bv = _gen_tile(b_key, b_off + b * sb0 + h * sb1, ks, ns, sb2, sb3, kmask, nmask, DT, ACC)
            u += tl.sum(bv * xv[None, :], axis=1)
            ua += tl.sum(tl.abs(bv) * tl.abs(xv)[None, :], axis=1)
    lhs = tl.zeros([BM], dtype=ACC)
    rhs_m = tl.zeros([BM], dtype=ACC)
    bound_m = tl.zeros([BM], dtype=ACC)
    v = tl.zeros([BK], dtype=ACC)
    va = tl.zeros([BK], dtype=ACC)
    for m0 in range(0, Mdim, BM):
        ms = m0 + tl.arange(0, BM).to(tl.int64)
        mmask = ms < Mdim
        yv = tl.load(y_ptr + ms, mask=mmask, other=0.0)
        if not PRE_A:
            av = _gen_tile(a_key, a_off + b * sa0 + h * sa1, ms, ks, sa2, sa3, mmask, kmask, DT, ACC)
            v += tl.sum(av * yv[:, None], axis=0)
            va += tl.sum(tl.abs(av) * tl.abs(yv)[:, None], axis=0)
        for n0 in range(0, Ndim, BN):
            ns = n0 + tl.arange(0, BN).to(tl.int64)
            nmask = ns < Ndim
            xv = tl.load(x_ptr + ns, mask=nmask, other=0.0)
            cm = mmask[:, None] & nmask[None, :]
            cv = tl.load(c_ptr + b * sc0 + h * sc1 + ms[:, None] * sc2 + ns[None, :] * sc3, mask=cm, other=0.0)
            lhs += yv * tl.sum(cv.to(ACC) * xv[None, :], axis=1)
            if HAS_M and not PRE_M:
                mv = _gen_tile(m_key, m_off + b * sm0 + h * sm1, ms, ns, sm2, sm3, mmask, nmask, DT, ACC)
                rhs_m += yv * tl.sum(mv * xv[None, :], axis=1)
                bound_m += tl.abs(yv) * tl.sum(tl.abs(mv) * tl.abs(xv)[None, :], axis=1)
    if PRE_A:  # y A, precomputed while A was generated
        pa = pa_ptr + b * pa_sb + h * pa_sh
        v = tl.load(pa + ks * 2, mask=kmask, other=0.0).to(ACC)
        va = tl.load(pa + ks * 2 + 1, mask=kmask, other=0.0).to(ACC)
    rhs = alpha * tl.sum(v * u, axis=0) + beta * tl.sum(rhs_m, axis=0)
    bound = tl.abs(alpha) * tl.sum(va * ua, axis=0) + tl.abs(beta) * tl.sum(bound_m, axis=0)
    if PRE_M:  # y M x, precomputed while M was generated
        pm = pm_ptr + b * pm_sb + h * pm_sh
        rhs += beta * tl.load(pm).to(ACC)
        bound += tl.abs(beta) * tl.load(pm + 1).to(ACC)
    tl.store(out_ptr + pid * 3 + 0, tl.sum(lhs, axis=0).to(tl.float64))
    tl.store(out_ptr + pid * 3 + 1, rhs.to(tl.float64))
    tl.store(out_ptr + pid * 3 + 2, bound.to(tl.float64))


# C's strides specialised (rows known aligned): on the H200 (2^32-element bmm) 8.5
# against 9.2-9.7 ms for bf16 and 10.6 against 14.2 ms for fp32 with only the last
# stride specialised (benchmarks/results/2026-12-02-h200-projection-kernels).
_freivalds_kernel = triton.jit(do_not_specialize=_DESC_INTS + _SIZES)(_freivalds_body)


@triton.jit
def _gen_run(base, r0, key, DT: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr):
    """(offsets, values): rows [r0, r0 + ROWS) of a generated matrix at storage ``base``
    whose rows of COLS elements are contiguous, as one 1-D run (int32 offsets from
    ``base``, float32 values rounded to DT), the access pattern of :mod:`.gen`'s kernel."""
    offs = r0 * COLS + tl.arange(0, ROWS * COLS)
    return offs, unit_float(hash_u32_run(base + r0 * COLS, key, ROWS * COLS), DT)


@triton.jit
def _gen_rows(base, r0, key, DT: tl.constexpr, ACC: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr):
    """:func:`_gen_run`'s values seen as the (ROWS, COLS) tile, in ACC."""
    _, v = _gen_run(base, r0, key, DT, ROWS, COLS)
    return tl.reshape(v, [ROWS, COLS]).to(ACC)


# ``flat``: one program per matrix that streams C and regenerates A and B itself, tiles
# of whole contiguous rows hashed as 1-D runs of storage (as :mod:`.gen`'s kernel does),
# nothing stored. ``y A`` is summed from A, then ``y A B x`` from B against ``y A``
# (through a per-program scratch row) with ``x`` applied once at the end, so B needs no
# per-row reduction; ``y C x`` likewise applies ``x`` once at the end. Hashing is bound
# by the integer (ALU) pipe and streaming C by memory. By default (INTERLEAVE off) a
# program streams its C first and then hashes, and programs in either phase share each
# SM. INTERLEAVE has every A or B tile step also load a chunk of C rows, issued
# before the hashing and added after it, C rows the steps do not reach streamed after
# them; on the H200 that was slower (``interleave``). Only
# for operands with contiguous rows, whole tiles and no bias (:func:`flat_eligible`);
# anything else falls back to the row-sum kernel.
@triton.jit
def _c_rows(cbase, sc2, sc3, y_ptr, i, Mdim, cols, CR: tl.constexpr, MASKC: tl.constexpr):
    """(C rows [i CR, (i+1) CR), their y weights): a chunk of one matrix of C, 0 (and
    weight 0) past its Mdim rows under MASKC."""
    rows = i * CR + tl.arange(0, CR)
    ptrs = cbase + (rows.to(tl.int64) * sc2)[:, None] + (cols.to(tl.int64) * sc3)[None, :]
    if MASKC:
        rmask = rows < Mdim
        return tl.load(ptrs, mask=rmask[:, None], other=0.0), tl.load(y_ptr + rows, mask=rmask, other=0.0)
    return tl.load(ptrs), tl.load(y_ptr + rows)


@triton.jit(do_not_specialize=["a_key", "b_key", "H"])
def _flat_kernel(c_ptr, sc0, sc1, sc2, sc3, x_ptr, y_ptr, v_ptr, out_ptr,
                 a_key, a_off, sa0, sa1, b_key, b_off, sb0, sb1, H, Mdim, alpha,
                 DT: tl.constexpr, ACC: tl.constexpr, BK: tl.constexpr, BN: tl.constexpr,
                 BRA: tl.constexpr, BRB: tl.constexpr, CR: tl.constexpr, MASKC: tl.constexpr,
                 INTERLEAVE: tl.constexpr, STAGES: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    b = pid // H
    h = pid % H
    cols = tl.arange(0, BN)
    xv = tl.load(x_ptr + cols)
    cbase = c_ptr + b * sc0 + h * sc1
    accc = tl.zeros([CR, BN], dtype=ACC)  # sum over chunks of y_r C[r, :]; x applied at the end
    # v = y A, va = |y| |A| (A: Mdim x BK, rows contiguous), with the first C chunks
    abase = a_off + b * sa0 + h * sa1
    acc = tl.zeros([BRA, BK], dtype=ACC)
    acca = tl.zeros([BRA, BK], dtype=ACC)
    na = Mdim // BRA
    for i in tl.range(0, na, num_stages=STAGES):
        if INTERLEAVE:
            cv, cy = _c_rows(cbase, sc2, sc3, y_ptr, i, Mdim, cols, CR, MASKC)
        a = _gen_rows(abase, i * BRA, a_key, DT, ACC, BRA, BK)
        w = tl.load(y_ptr + i * BRA + tl.arange(0, BRA))
        acc += a * w[:, None]
        acca += tl.abs(a) * tl.abs(w)[:, None]
        if INTERLEAVE:
            accc += cv.to(ACC) * cy[:, None]
    ks = tl.arange(0, BK)
    scratch = v_ptr + pid * (2 * BK)
    tl.store(scratch + ks, tl.sum(acc, axis=0))
    tl.store(scratch + BK + ks, tl.sum(acca, axis=0))
    tl.debug_barrier()  # the row is read back below by other threads of this program
    # rhs = sum_n x_n sum_k v_k B[k, n] (B: BK x BN, rows contiguous), with the next C chunks
    bbase = b_off + b * sb0 + h * sb1
    accb = tl.zeros([BRB, BN], dtype=ACC)
    accba = tl.zeros([BRB, BN], dtype=ACC)
    for j in tl.range(0, BK // BRB, num_stages=STAGES):
        if INTERLEAVE:
            cv, cy = _c_rows(cbase, sc2, sc3, y_ptr, na + j, Mdim, cols, CR, MASKC)
        bv = _gen_rows(bbase, j * BRB, b_key, DT, ACC, BRB, BN)
        kk = j * BRB + tl.arange(0, BRB)
        accb += bv * tl.load(scratch + kk)[:, None]
        accba += tl.abs(bv) * tl.load(scratch + BK + kk)[:, None]
        if INTERLEAVE:
            accc += cv.to(ACC) * cy[:, None]
    # the C rows the A and B steps did not reach (all of them without INTERLEAVE)
    first = na + BK // BRB if INTERLEAVE else 0
    for i in tl.range(first, tl.cdiv(Mdim, CR), num_stages=STAGES):
        cv, cy = _c_rows(cbase, sc2, sc3, y_ptr, i, Mdim, cols, CR, MASKC)
        accc += cv.to(ACC) * cy[:, None]
    lhs = tl.sum(tl.sum(accc, axis=0) * xv, axis=0)
    rhs = alpha * tl.sum(tl.sum(accb, axis=0) * xv, axis=0)
    bound = tl.abs(alpha) * tl.sum(tl.sum(accba, axis=0) * tl.abs(xv), axis=0)
    tl.store(out_ptr + pid * 3 + 0, lhs.to(tl.float64))
    tl.store(out_ptr + pid * 3 + 1, rhs.to(tl.float64))
    tl.store(out_ptr + pid * 3 + 2, bound.to(tl.float64))


#: (rows of C a step, pipeline stages, num_warps, elements of one A or B tile) of
#: ``_flat_kernel``, per accumulation dtype. On the H200 (2^32-element bf16 bmm, whole
#: check over the bmm's time, median of 7 interleaved rounds, C streamed before the
#: hashing; ``benchmarks/flat_ab.py``, 2026-12-03, ``2026-12-03-h200-flat-check-int64-fix``) 16-bit outputs (float32
#: sums) were fastest at (2, 1, 4, 1024): 0.954x (3.28 ms, the kernel alone 2.70 ms),
#: against 0.995x at (4, 1, 4, 1024), 1.03x at (8, 1, 4, 1024), 1.08x with C in step with
#: the hashing and 1.19x one chunk ahead; fp32 (float64 sums) at (8, 3, 4, 1024): 4.87
#: ms against 5.07 at (8, 1, 4, 1024) (single medians).
FLAT_TILE = {torch.float32: (2, 1, 4, 1024), torch.float64: (8, 3, 4, 1024)}
def _flat_tiles(Mdim: int, K: int, Ndim: int, tile: tuple[int, int, int, int],
                interleave: bool = False) -> tuple[int, int, int, bool]:
    """(CR, BRA, BRB, MASKC) of ``_flat_kernel``: rows of C a step (a power of two: C's
    rows spread over the A and B steps, at most the tile's ROWS), rows of A a tile
    (powers of two dividing M, at most the tile's elements), rows of B a tile; whether
    C's chunks need a row mask (the steps reach past M, or M is not a multiple)."""
    rows, _, _, elements = tile
    low = Mdim & -Mdim  # the largest power of two dividing M
    bra, brb = max(1, min(elements // K, low)), max(1, min(K, elements // Ndim))
    steps = Mdim // bra + K // brb
    cr = min(rows, triton.next_power_of_2(-(-Mdim // steps))) if interleave else rows
    maskc = Mdim % cr != 0 or (interleave and steps * cr > Mdim)
    return cr, bra, brb, maskc


def flat_eligible(Mdim: int, Ndim: int, A: Desc, B: Desc, M: Desc | None, K: int) -> bool:
    """Whether :func:`freivalds_flat` applies to C = A B (M x N): no bias; A (M x K) and
    B (K x N) with contiguous rows (column stride 1, row stride the row length); K and N
    powers of two up to every tile's elements (whole rows in a tile); each matrix below
    2^31 elements."""
    elements = min(t[3] for t in FLAT_TILE.values())  # the smallest tile of any accumulator
    pow2 = lambda n: n > 0 and n & (n - 1) == 0  # noqa: E731
    return (M is None and Mdim > 0 and A.strides[2:] == (K, 1) and B.strides[2:] == (Ndim, 1) and pow2(K)
            and pow2(Ndim) and K <= elements and Ndim <= min(elements, 4096) and Mdim * max(K, Ndim) < 2**31)


def freivalds_flat(C: torch.Tensor, x: torch.Tensor, y: torch.Tensor, A: Desc, B: Desc, K: int, alpha: float,
                   dtype: torch.dtype, *, tile: tuple[int, int, int, int] | None = None,
                   interleave: bool = False) -> torch.Tensor:
    """:func:`freivalds`'s (nb, H, 3) lhs, rhs, bound by ``_flat_kernel`` (callers check
    :func:`flat_eligible` first): one program per matrix, C streamed and A, B regenerated
    in the same program. ``tile``: default :data:`FLAT_TILE` of the accumulation dtype.
    ``interleave``: stream C in step with the hashing of A and B, a chunk with each A or
    B tile, instead of before it; measured 8% slower for bf16 on the H200 (for fp32
    within noise), so off by default."""
    nb, H, Mdim, Ndim = C.shape
    acc = ACCUMULATE[dtype]
    tile = tile or FLAT_TILE[acc]
    _, stages, warps, _ = tile
    cr, bra, brb, maskc = _flat_tiles(Mdim, K, Ndim, tile, interleave)
    out = torch.empty((nb, H, 3), dtype=torch.float64, device=C.device)
    scratch = torch.empty((nb * H, 2 * K), dtype=acc, device=C.device)
    if nb * H:
        _flat_kernel[(nb * H,)](C, *C.stride(), x.to(acc), y.to(acc), scratch, out,
                                A.key, A.offset, A.strides[0], A.strides[1], B.key, B.offset, B.strides[0],
                                B.strides[1], H, Mdim, float(alpha), DT=_DT[dtype], ACC=_TL[acc], BK=K, BN=Ndim,
                                BRA=bra, BRB=brb, CR=cr, MASKC=maskc, INTERLEAVE=interleave,
                                STAGES=stages, num_warps=warps)
    return out


#: Accumulation precision per output dtype. A 16-bit output is judged against a
#: tolerance of at least 2 of its own rounding steps (>= 2^-10), so float32 sums, whose
#: error over these lengths stays near 1e-6 of the bound, cannot move a verdict; and
#: they run at several times float64's rate. float32 outputs keep float64 sums.
ACCUMULATE = {torch.float32: torch.float64, torch.float16: torch.float32, torch.bfloat16: torch.float32}
_TL = {torch.float64: tl.float64, torch.float32: tl.float32}


def _pre_args(pre: torch.Tensor | None, dummy: torch.Tensor) -> tuple:
    """(pointer, batch stride, head stride) of a projection tensor; size-1 dims broadcast."""
    if pre is None:
        return dummy, 0, 0
    nb, H = pre.shape[:2]
    return pre, pre.stride(0) if nb > 1 else 0, pre.stride(1) if H > 1 else 0


def freivalds(C: torch.Tensor, x: torch.Tensor, y: torch.Tensor, A: Desc, B: Desc, M: Desc | None,
              K: int, alpha: float, beta: float, dtype: torch.dtype, *, blocks: tuple[int, int] | None = None,
              num_warps: int = 4, pre_a: torch.Tensor | None = None, pre_b: torch.Tensor | None = None,
              pre_m: torch.Tensor | None = None, lhs: torch.Tensor | None = None,
              flat_tile: tuple[int, int, int, int] | None = None, flat_interleave: bool = False) -> torch.Tensor:
    """(nb, H, 3) float64: lhs, rhs, bound per (batch, head) of C (nb, H, M, N).

    ``dtype`` is the operands' dtype (what the generated values are rounded to); sums run
    in :data:`ACCUMULATE` of it. Which kernel runs:

    * every operand's projection made at generation (``pre_a`` / ``pre_b`` / ``pre_m``
      from :func:`generate_and_project`, shape (nb or 1, H or 1, K, 2)): only C is
      streamed (:func:`freivalds_projected`; ``lhs``: its C stream already launched by
      :func:`lhs_partials`);
    * else, for the layouts :func:`flat_eligible` accepts, :func:`freivalds_flat`
      (measured fastest: 3.9 ms for a 2^32-element bf16 bmm on the H200, against 8.6 ms
      for the row-sum kernel; ``flat_tile`` and ``flat_interleave`` are its ``tile`` and
      ``interleave``);
    * else the row-sum kernel, reading whichever projections were made at generation
      and regenerating the other operands; ``blocks`` = (BM, BN) overrides its tile."""
    if pre_a is not None and pre_b is not None and (M is None or pre_m is not None):
        return freivalds_projected(C, x, y, pre_a, pre_b, pre_m if M is not None else None, alpha, beta, dtype,
                                   lhs=lhs)
    if flat_eligible(C.shape[-2], C.shape[-1], A, B, M, K) and blocks is None:
        return freivalds_flat(C, x, y, A, B, K, alpha, dtype, tile=flat_tile, interleave=flat_interleave)
    return freivalds_rowsum(C, x, y, A, B, M, K, alpha, beta, dtype, blocks=blocks, num_warps=num_warps,
                            pre_a=pre_a, pre_b=pre_b, pre_m=pre_m)


def rowsum_blocks(K: int, Ndim: int, blocks: tuple[int, int] | None = None) -> tuple[int, int, int]:
    """(BM, BN, BK) of the row-sum kernel: the whole K in one block, 32 x 32 tiles of C
    (measured fastest on the H200 for 256 x 256 outputs, ``verify_cost --explore``)
    unless ``blocks`` = (BM, BN) says otherwise."""
    BK = max(16, triton.next_power_of_2(K))
    BN = max(16, min(32, triton.next_power_of_2(Ndim)))
    BM = max(16, min(32, 8192 // max(BN, BK)))
    if blocks is not None:
        BM, BN = blocks
    return BM, BN, BK


def freivalds_rowsum(C: torch.Tensor, x: torch.Tensor, y: torch.Tensor, A: Desc, B: Desc, M: Desc | None,
                     K: int, alpha: float, beta: float, dtype: torch.dtype, *,
                     blocks: tuple[int, int] | None = None, num_warps: int = 4, pre_a: torch.Tensor | None = None,
                     pre_b: torch.Tensor | None = None, pre_m: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`freivalds`'s (nb, H, 3) lhs, rhs, bound by the row-sum kernel, which takes
    any layout: one program per matrix, (BM x BN) tiles of C (``blocks``), the operands
    without a projection made at generation regenerated."""
    nb, H, Mdim, Ndim = C.shape
    acc = ACCUMULATE[dtype]
    out = torch.empty((nb, H, 3), dtype=torch.float64, device=C.device)
    m = M or Desc(0, 0, (0, 0, 0, 0))
    BM, BN, BK = rowsum_blocks(K, Ndim, blocks)
    pa, pb, pm = _pre_args(pre_a, out), _pre_args(pre_b, out), _pre_args(pre_m, out)
    _freivalds_kernel[(nb * H,)](C, *C.stride(), x.to(acc), y.to(acc), out, A.key, A.offset, *A.strides,
                                 B.key, B.offset, *B.strides, m.key, m.offset, *m.strides, H, Mdim, Ndim, K,
                                 float(alpha), float(beta), *pa, *pb, *pm, HAS_M=M is not None, DT=_DT[dtype],
                                 ACC=_TL[acc], BM=BM, BN=BN, BK=BK, num_warps=num_warps, PRE_A=pre_a is not None,
                                 PRE_B=pre_b is not None, PRE_M=pre_m is not None and M is not None)
    return out


# -- the check when every operand's projection was made at generation ---------------
# C's strides and row length specialise (divisible by 16, or 1): with them Triton can
# prove rows aligned and row masks uniform, and load C 16 bytes at a time. Without,
# every element is a separate load (bfloat16 streamed at 2.2 TB/s on the H200; the
# specialised version is not yet measured there).
@triton.jit(do_not_specialize=["H", "Mdim", "SPLIT"])
def _lhs_kernel(c_ptr, sc0, sc1, sc2, sc3, x_ptr, y_ptr, part_ptr, H, Mdim, Ndim, SPLIT,
                ACC: tl.constexpr, ROWS: tl.constexpr, BN: tl.constexpr, ITERS: tl.constexpr,
                STAGES: tl.constexpr):
    """Program (matrix, s) sums ``y[r] C[r, c] x[c]`` over rows [s R, (s+1) R) of one
    (batch, head) matrix of C, R = ROWS ITERS, a (ROWS x BN) tile at a time: a pure
    stream over C, nothing generated. ``STAGES`` > 1 lets Triton keep that many tiles'
    loads in flight (software pipelining); ITERS > 1 amortises a program's start and
    its final reduction over more of C."""
    pid = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    b = pid // H
    h = pid % H
    base = c_ptr + b * sc0 + h * sc1
    nblk = tl.cdiv(Ndim, BN)
    acc = tl.zeros([ROWS, BN], dtype=ACC)
    for t in tl.range(0, ITERS * nblk, num_stages=STAGES):
        rows = (s * ITERS + t // nblk) * ROWS + tl.arange(0, ROWS)
        cols = (t % nblk) * BN + tl.arange(0, BN)
        rmask = rows < Mdim
        cmask = cols < Ndim
        yv = tl.load(y_ptr + rows, mask=rmask, other=0.0)
        xv = tl.load(x_ptr + cols, mask=cmask, other=0.0)
        cv = tl.load(base + (rows.to(tl.int64) * sc2)[:, None] + (cols.to(tl.int64) * sc3)[None, :],
                     mask=rmask[:, None] & cmask[None, :], other=0.0)
        acc += cv.to(ACC) * xv[None, :] * yv[:, None]
    tl.store(part_ptr + pid * SPLIT + s, tl.sum(tl.sum(acc, axis=1), axis=0).to(tl.float64))


#: (ROWS, num_warps, ITERS, STAGES) of ``_lhs_kernel``: 8-row tiles, 32 of them a
#: program (a whole 256-row matrix), 3 in flight. On the H200 (2^32-element bmm output,
#: ``verify_cost.py --explore``, 2026-12-03) bf16 C streamed in 2.22 ms against 3.31 ms
#: for one 4-row tile a program, and a read of C by torch's sum took 2.08 ms; fp32 in
#: 4.16 against 5.41 ms (sum: 4.03 ms).
LHS_TILE = (8, 4, 32, 3)


def lhs_partials(C: torch.Tensor, x: torch.Tensor, y: torch.Tensor, dtype: torch.dtype, *,
                 tile: tuple[int, ...] | None = None) -> torch.Tensor:
    """Launch ``_lhs_kernel`` over C (nb, H, M, N): (nb H, splits) float64 partial sums
    of ``y C x`` per matrix (:func:`freivalds_projected` adds them). ``tile`` is
    (ROWS, num_warps[, ITERS[, STAGES]]), default :data:`LHS_TILE`."""
    nb, H, Mdim, Ndim = C.shape
    acc = ACCUMULATE[dtype]
    rows, warps, iters, stages = (tuple(tile) + (1, 1))[:4] if tile else LHS_TILE
    # at most 65535 row blocks (CUDA's limit on the grid's second dimension)
    rows = max(1, min(rows, triton.next_power_of_2(Mdim)), triton.next_power_of_2(triton.cdiv(Mdim, 65535)))
    iters = max(1, min(iters, triton.cdiv(Mdim, rows)))
    BN = max(16, min(256, triton.next_power_of_2(Ndim)))
    split = triton.cdiv(Mdim, rows * iters)
    part = torch.empty((nb * H, split), dtype=torch.float64, device=C.device)
    _lhs_kernel[(nb * H, split)](C, *C.stride(), x.to(acc), y.to(acc), part, H, Mdim, Ndim, split,
                                 ACC=_TL[acc], ROWS=rows, BN=BN, ITERS=iters, STAGES=stages, num_warps=warps)
    return part


def freivalds_projected(C: torch.Tensor, x: torch.Tensor, y: torch.Tensor, pre_a: torch.Tensor,
                        pre_b: torch.Tensor, pre_m: torch.Tensor | None, alpha: float, beta: float,
                        dtype: torch.dtype, *, tile: tuple[int, ...] | None = None,
                        lhs: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`freivalds`'s (nb, H, 3) lhs, rhs, bound when every operand's projection was
    made while it was generated (:func:`generate_and_project`): ``rhs = alpha (y A).(B x)
    + beta y M x`` is a small sum of the projections, and C is read once by
    ``_lhs_kernel`` with nothing regenerated (or ``lhs``, its partial sums from an
    earlier :func:`lhs_partials`). ``pre_m`` is ``y M x`` (nb or 1, H or 1, 1, 2), or
    None without a bias."""
    nb, H = C.shape[:2]
    part = lhs if lhs is not None else lhs_partials(C, x, y, dtype, tile=tile)
    out = torch.empty((nb, H, 3), dtype=torch.float64, device=C.device)
    out[..., 0] = part.sum(1).view(nb, H)
    v, va, u, ua = pre_a[..., 0], pre_a[..., 1], pre_b[..., 0], pre_b[..., 1]
    rhs = float(alpha) * (v * u).sum(-1)
    bound = abs(float(alpha)) * (va * ua).sum(-1)
    if pre_m is not None:
        rhs = rhs + float(beta) * pre_m[..., 0, 0]
        bound = bound + abs(float(beta)) * pre_m[..., 0, 1]
    out[..., 1] = rhs.expand(nb, H)
    out[..., 2] = bound.expand(nb, H)
    return out


@triton.jit(do_not_specialize=_DESC_INTS + ["sc0", "sc1", "sc2", "sc3", "n", "Kdim"])
def _spot_kernel(c_ptr, sc0, sc1, sc2, sc3, bb_ptr, hh_ptr, ii_ptr, jj_ptr, out_ptr, n,
                 a_key, a_off, sa0, sa1, sa2, sa3,
                 b_key, b_off, sb0, sb1, sb2, sb3,
                 m_key, m_off, sm0, sm1, sm2, sm3,
                 Kdim, alpha, beta,
                 HAS_M: tl.constexpr, DT: tl.constexpr, BS: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    s = pid * BS + tl.arange(0, BS).to(tl.int64)
    smask = s < n
    bb = tl.load(bb_ptr + s, mask=smask, other=0)
    hh = tl.load(hh_ptr + s, mask=smask, other=0)
    ii = tl.load(ii_ptr + s, mask=smask, other=0)
    jj = tl.load(jj_ptr + s, mask=smask, other=0)
    arow = a_off + bb * sa0 + hh * sa1 + ii * sa2
    bcol = b_off + bb * sb0 + hh * sb1 + jj * sb3
    ref = tl.zeros([BS], dtype=tl.float64)
    scale = tl.zeros([BS], dtype=tl.float64)
    for k0 in range(0, Kdim, BK):
        ks = k0 + tl.arange(0, BK).to(tl.int64)
        m = smask[:, None] & (ks < Kdim)[None, :]
        av = tl.where(m, _gen(arow[:, None] + ks[None, :] * sa3, a_key, DT), 0.0)
        bv = tl.where(m, _gen(bcol[:, None] + ks[None, :] * sb2, b_key, DT), 0.0)
        ref += tl.sum(av * bv, axis=1)
        scale += tl.sum(tl.abs(av * bv), axis=1)
    ref = alpha * ref
    scale = tl.abs(alpha) * scale
    if HAS_M:
        mv = _gen(m_off + bb * sm0 + hh * sm1 + ii * sm2 + jj * sm3, m_key, DT)
        ref += beta * mv
        scale += tl.abs(beta) * tl.abs(mv)
    got = tl.load(c_ptr + bb * sc0 + hh * sc1 + ii * sc2 + jj * sc3, mask=smask, other=0.0).to(tl.float64)
    tl.store(out_ptr + s * 3 + 0, got, mask=smask)
    tl.store(out_ptr + s * 3 + 1, ref, mask=smask)
    tl.store(out_ptr + s * 3 + 2, scale, mask=smask)


def spots(C: torch.Tensor, A: Desc, B: Desc, M: Desc | None, K: int, alpha: float, beta: float,
          dtype: torch.dtype, bb: torch.Tensor, hh: torch.Tensor, ii: torch.Tensor,
          jj: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Exact float64 spot checks: for each (bb, hh, ii, jj) of C (nb, H, M, N), the value
    the device wrote, the dot product ``alpha A[i,:] . B[:,j] + beta M[i,j]`` of generated
    values, and its scale ``sum |alpha a_k b_k| + |beta m|``; each (n,) float64."""
    n = bb.numel()
    out = torch.empty((n, 3), dtype=torch.float64, device=C.device)
    if n == 0:
        return out[:, 0], out[:, 1], out[:, 2]
    m = M or Desc(0, 0, (0, 0, 0, 0))
    BK = max(16, min(128, triton.next_power_of_2(K)))
    BS = 32
    idx = [t.contiguous().to(torch.int64) for t in (bb, hh, ii, jj)]
    _spot_kernel[(triton.cdiv(n, BS),)](C, *C.stride(), *idx, out, n,
                                        A.key, A.offset, *A.strides, B.key, B.offset, *B.strides,
                                        m.key, m.offset, *m.strides, K, float(alpha), float(beta),
                                        HAS_M=M is not None, DT=_DT[dtype], BS=BS, BK=BK)
    return out[:, 0], out[:, 1], out[:, 2]


# -- projections computed while the inputs are generated ----------------------------------
@triton.jit
def _gen_store_tile(st_ptr, base, r0, rs, cs, rmask, cmask, s2, s3, key, DT: tl.constexpr, ACC: tl.constexpr,
                    OFF32: tl.constexpr, EVEN: tl.constexpr, FLAT: tl.constexpr, BR: tl.constexpr,
                    BC: tl.constexpr):
    """Generate the (rows, cols) tile of a strided view whose matrix starts at storage
    ``base``, write it into the storage, and return it in ``ACC`` (0 outside the masks).
    ``rs`` (rows from ``r0``) and ``cs`` are int32. OFF32: offsets within the matrix fit
    int32 (hashed by :func:`~kernelaudit.sweep.kernels.gen.hash_u32_at`); EVEN: the tile is
    whole, no masks; FLAT (EVEN, whole contiguous rows, s2 == BC): the tile is one run
    of storage, generated and stored as a 1-D block (:func:`_gen_run`), then seen as
    2-D. On the H200 storing inside this per-matrix loop cost a 2^30-element bf16
    operand 0.8 ms that the 1-D generation kernel does not pay, with or without FLAT
    (``benchmarks/experimental/genproj_parts.py``, ``2026-12-03-h200-generate-and-project``); the cause is not known."""
    if FLAT:
        offs, v = _gen_run(base, r0, key, DT, BR, BC)
        tl.store(st_ptr + base + offs, v.to(st_ptr.dtype.element_ty))
        return tl.reshape(v, [BR, BC]).to(ACC)
    if OFF32:
        off = rs[:, None] * s2 + cs[None, :] * s3
        v = unit_float(hash_u32_at(base, off, key), DT)
        ptr = st_ptr + base + off
    else:
        idx = base + rs.to(tl.int64)[:, None] * s2 + cs.to(tl.int64)[None, :] * s3
        v = unit_float(hash_u32(idx, key), DT)
        ptr = st_ptr + idx
    if EVEN:
        tl.store(ptr, v.to(st_ptr.dtype.element_ty))
        return v.to(ACC)
    else:
        m = rmask[:, None] & cmask[None, :]
        tl.store(ptr, v.to(st_ptr.dtype.element_ty), mask=m)
        return tl.where(m, v.to(ACC), 0.0)


@triton.jit
def _load_weights(w_ptr, idx, mask, EVEN: tl.constexpr):
    """``w[idx]``, 0 outside ``mask``; unmasked in whole tiles (EVEN)."""
    if EVEN:
        return tl.load(w_ptr + idx)
    return tl.load(w_ptr + idx, mask=mask, other=0.0)


# The view's offset, strides and sizes specialise (as C's in ``_lhs_kernel``): stores
# then go 16 bytes at a time wherever the layout allows.
@triton.jit(do_not_specialize=["key", "H"])
def _gen_project_kernel(st_ptr, w_ptr, proj_ptr, key, off, s0, s1, s2, s3, H, R, Cn,
                        DT: tl.constexpr, ACC: tl.constexpr, KEEP_ROWS: tl.constexpr,
                        BR: tl.constexpr, BC: tl.constexpr, OFF32: tl.constexpr, EVEN: tl.constexpr,
                        FLAT: tl.constexpr):
    """Program (b, h) generates the (R x Cn) matrix [b, h] of a strided view of a
    generated storage, writes it into the storage, and projects it in the same pass:
    ``KEEP_ROWS=0`` (operand A, rows weighted by y): ``proj[c] = sum_r w[r] a[r, c]``;
    ``KEEP_ROWS=1`` (operand B, columns weighted by x): ``proj[r] = sum_c b[r, c] w[c]``
    over column strips, ``KEEP_ROWS=2`` the same over blocks of whole rows; with the
    sums of absolute values beside them. Sums run in ``ACC`` (:data:`ACCUMULATE`, as in
    the check), accumulated elementwise in the tile and reduced across threads once at
    the end (modes 0 and 1): the first version reduced every tile in float64 and made
    generation 5x slower on the H200."""
    pid = tl.program_id(0).to(tl.int64)
    b = pid // H
    h = pid % H
    base = off + b * s0 + h * s1
    acc = tl.zeros([BR, BC], dtype=ACC)
    acca = tl.zeros([BR, BC], dtype=ACC)
    if KEEP_ROWS == 0:
        cs = tl.arange(0, BC)
        cmask = cs < Cn
        for r0 in range(0, R, BR):
            rs = r0 + tl.arange(0, BR)
            rmask = rs < R
            v = _gen_store_tile(st_ptr, base, r0, rs, cs, rmask, cmask, s2, s3, key, DT, ACC, OFF32, EVEN, FLAT,
                                BR, BC)
            w = _load_weights(w_ptr, rs, rmask, EVEN)
            acc += v * w[:, None]
            acca += tl.abs(v) * tl.abs(w)[:, None]
        tl.store(proj_ptr + pid * Cn * 2 + cs * 2, tl.sum(acc, axis=0).to(tl.float64), mask=cmask)
        tl.store(proj_ptr + pid * Cn * 2 + cs * 2 + 1, tl.sum(acca, axis=0).to(tl.float64), mask=cmask)
    elif KEEP_ROWS == 2:  # rows kept, whole rows in one tile: each row block reduced at once
        cs = tl.arange(0, BC)
        cmask = cs < Cn
        w = tl.load(w_ptr + cs, mask=cmask, other=0.0)
        for r0 in range(0, R, BR):
            rs = r0 + tl.arange(0, BR)
            rmask = rs < R
            v = _gen_store_tile(st_ptr, base, r0, rs, cs, rmask, cmask, s2, s3, key, DT, ACC, OFF32, EVEN, FLAT,
                                BR, BC)
            tl.store(proj_ptr + pid * R * 2 + rs * 2, tl.sum(v * w[None, :], axis=1).to(tl.float64), mask=rmask)
            tl.store(proj_ptr + pid * R * 2 + rs * 2 + 1, tl.sum(tl.abs(v) * tl.abs(w)[None, :], axis=1).to(tl.float64),
                     mask=rmask)
    else:
        rs = tl.arange(0, BR)
        rmask = rs < R
        for c0 in range(0, Cn, BC):
            cs = c0 + tl.arange(0, BC)
            cmask = cs < Cn
            v = _gen_store_tile(st_ptr, base, 0, rs, cs, rmask, cmask, s2, s3, key, DT, ACC, OFF32, EVEN, False,
                                BR, BC)
            w = _load_weights(w_ptr, cs, cmask, EVEN)
            acc += v * w[None, :]
            acca += tl.abs(v) * tl.abs(w)[None, :]
        tl.store(proj_ptr + pid * R * 2 + rs * 2, tl.sum(acc, axis=1).to(tl.float64), mask=rmask)
        tl.store(proj_ptr + pid * R * 2 + rs * 2 + 1, tl.sum(acca, axis=1).to(tl.float64), mask=rmask)


#: Elements of one generate-and-project tile per accumulator dtype. Smaller tiles
#: measured faster on the H200 (A and B of a 2^32-element bmm, bf16: 18 ms at 512,
#: 24 at 1024, 33 at 4096; fp32 alike), the hash's registers leaving room for more
#: programs at once.
_GEN_TILE = {torch.float32: 512, torch.float64: 512}
#: Elements of one tile when its rows are contiguous in storage (generated as one 1-D
#: run): 8 per thread of 4 warps, as in :mod:`.gen`'s kernel.
_GEN_TILE_FLAT = 1024
#: Rows kept (operand B weighted by x along its columns): True generates whole rows (up
#: to ``_ROWWISE_MAX`` columns) and reduces each block of rows at once, False narrow
#: column strips accumulated across the whole matrix; None (default) whole rows when
#: they are contiguous in storage (then generated as 1-D runs). ``rowwise=`` overrides.
GEN_ROWWISE: bool | None = None
_ROWWISE_MAX = 4096
#: Offsets within one matrix below this are int32 (tests lower it to cover the int64 path).
_OFF32_LIMIT = 2**31


def generate_and_project(storage: torch.Tensor, d: Desc, shape: tuple[int, int, int, int], w: torch.Tensor,
                         keep_rows: bool, w2: torch.Tensor | None = None, *, tile: int | None = None,
                         num_warps: int = 4, rowwise: bool | None = None) -> torch.Tensor:
    """Write the generated values of the canonical view ``d`` (shape (nb, H, R, C)) into
    1-D ``storage`` and return its projections, (nb, H, K, 2) float64 (value, |value|):
    columns kept (``keep_rows=False``: ``w`` weights the R rows, K = C) or rows kept
    (``keep_rows=True``: ``w`` weights the C columns, K = R). Storage elements outside
    the view are not written. With ``w2`` (a full-size bias M: ``w`` weights its rows,
    ``w2`` its columns) the projection is one number per matrix, (nb, H, 1, 2): the
    rows kept with ``w2``, then weighted by ``w`` (a small sum over R per matrix).
    ``tile`` (elements of one generated tile, default :data:`_GEN_TILE_FLAT` for
    contiguous rows, else :data:`_GEN_TILE`),
    ``num_warps`` and ``rowwise`` (default :data:`GEN_ROWWISE`) tune the kernel
    (``benchmarks/verify_cost.py --explore``)."""
    nb, H, R, Cn = shape
    if w2 is not None:
        rows = generate_and_project(storage, d, shape, w2, True, tile=tile, num_warps=num_warps, rowwise=rowwise)
        w = w.to(torch.float64)
        return torch.stack([(rows[..., 0] * w).sum(-1), (rows[..., 1] * w.abs()).sum(-1)], -1).unsqueeze(2)
    K = R if keep_rows else Cn
    acc = ACCUMULATE[storage.dtype]
    proj = torch.empty((nb, H, K, 2), dtype=torch.float64, device=storage.device)
    s2, s3 = d.strides[2:]
    contiguous_rows = s3 == 1 and s2 == Cn  # each tile of whole rows is one run of storage
    elements = tile or (_GEN_TILE_FLAT if contiguous_rows else _GEN_TILE[acc])
    mode = int(keep_rows)
    if rowwise is None:
        rowwise = GEN_ROWWISE if GEN_ROWWISE is not None else contiguous_rows
    if keep_rows and rowwise and Cn <= _ROWWISE_MAX:
        # whole rows of B along its contiguous columns, each row block reduced at once
        mode, BC = 2, max(16, triton.next_power_of_2(Cn))
        BR = max(1, min(64, elements // BC, triton.next_power_of_2(R)))
    else:
        BK = max(16, triton.next_power_of_2(K))
        other = max(8, min(64, elements // BK))
        # a strip no longer than the walked axis (so that small matrices are whole tiles)
        BR, BC = (BK, min(other, max(8, triton.next_power_of_2(Cn)))) if keep_rows else \
            (min(other, max(8, triton.next_power_of_2(R))), BK)
    # offsets within one matrix in int32 (the hash's 64-bit index as halves and a carry)
    off32 = min(s2, s3) >= 0 and (R - 1) * s2 + (Cn - 1) * s3 < _OFF32_LIMIT
    # whole tiles: no masks (mode 1 walks column strips, modes 0 and 2 blocks of rows)
    even = (R == BR and Cn % BC == 0) if mode == 1 else (Cn == BC and R % BR == 0)
    flat = even and off32 and contiguous_rows and mode in (0, 2)
    _gen_project_kernel[(nb * H,)](storage, w.to(acc), proj, d.key, d.offset, *d.strides, H, R, Cn,
                                   DT=_DT[storage.dtype], ACC=_TL[acc], KEEP_ROWS=mode, BR=BR, BC=BC,
                                   OFF32=off32, EVEN=even, FLAT=flat,
                                   num_warps=num_warps)
    return proj
