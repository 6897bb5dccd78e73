"""Projection kernels the product does not use, kept for benchmarks and comparison.

The product (:mod:`kernelaudit.sweep.kernels.freivalds`) runs ``flat`` where the layout
allows and the row-sum kernel with C's strides specialised elsewhere. These variants
were measured against them on the H200 and lost
(``benchmarks/results/2026-12-02-h200-projection-kernels``,
``benchmarks/results/2026-12-03-h200-generate-and-project``):

* ``rowsum``: the row-sum body with only C's last stride specialised (fewer compiles);
* ``acc2d``: the same sums accumulated elementwise in 2-D tiles, reduced once;
* ``split``: many programs per matrix, each streaming some rows of C and regenerating
  a k-slice of A and B.

:func:`freivalds_variant` runs any of them with
:func:`~kernelaudit.sweep.kernels.freivalds.freivalds_rowsum`'s arguments and result. Parity tests: ``pytest benchmarks/experimental``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelaudit.sweep.kernels.freivalds import (_DESC_INTS, _DT, _SIZES, _TL, ACCUMULATE, Desc, _freivalds_body,
                                                 _gen_tile, _pre_args, freivalds_rowsum,
                                                 rowsum_blocks)

@triton.jit(do_not_specialize=_DESC_INTS + ["H", "Mdim", "Ndim", "Kdim"])
def _freivalds_acc2d_kernel(c_ptr, sc0, sc1, sc2, sc3, x_ptr, y_ptr, out_ptr,
                            a_key, a_off, sa0, sa1, sa2, sa3,
                            b_key, b_off, sb0, sb1, sb2, sb3,
                            m_key, m_off, sm0, sm1, sm2, sm3,
                            H, Mdim, Ndim, Kdim, alpha, beta,
                            HAS_M: tl.constexpr, DT: tl.constexpr, ACC: tl.constexpr,
                            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """The same sums as ``_freivalds_kernel``, accumulated elementwise in 2-D tiles and
    reduced across threads once at the end instead of once per tile (an alternative
    measured by ``benchmarks/verify_cost.py --explore``)."""
    pid = tl.program_id(0).to(tl.int64)
    b = pid // H
    h = pid % H
    ks = tl.arange(0, BK).to(tl.int64)
    kmask = ks < Kdim
    acc_u = tl.zeros([BK, BN], dtype=ACC)
    acc_ua = tl.zeros([BK, BN], dtype=ACC)
    for n0 in range(0, Ndim, BN):
        ns = n0 + tl.arange(0, BN).to(tl.int64)
        nmask = ns < Ndim
        xv = tl.load(x_ptr + ns, mask=nmask, other=0.0)
        bv = _gen_tile(b_key, b_off + b * sb0 + h * sb1, ks, ns, sb2, sb3, kmask, nmask, DT, ACC)
        acc_u += bv * xv[None, :]
        acc_ua += tl.abs(bv) * tl.abs(xv)[None, :]
    acc_v = tl.zeros([BM, BK], dtype=ACC)
    acc_va = tl.zeros([BM, BK], dtype=ACC)
    acc_l = tl.zeros([BM, BN], dtype=ACC)
    acc_m = tl.zeros([BM, BN], dtype=ACC)
    acc_ma = tl.zeros([BM, BN], dtype=ACC)
    for m0 in range(0, Mdim, BM):
        ms = m0 + tl.arange(0, BM).to(tl.int64)
        mmask = ms < Mdim
        yv = tl.load(y_ptr + ms, mask=mmask, other=0.0)
        av = _gen_tile(a_key, a_off + b * sa0 + h * sa1, ms, ks, sa2, sa3, mmask, kmask, DT, ACC)
        acc_v += av * yv[:, None]
        acc_va += tl.abs(av) * tl.abs(yv)[:, None]
        for n0 in range(0, Ndim, BN):
            ns = n0 + tl.arange(0, BN).to(tl.int64)
            nmask = ns < Ndim
            xv = tl.load(x_ptr + ns, mask=nmask, other=0.0)
            cm = mmask[:, None] & nmask[None, :]
            w = yv[:, None] * xv[None, :]
            cv = tl.load(c_ptr + b * sc0 + h * sc1 + ms[:, None] * sc2 + ns[None, :] * sc3, mask=cm, other=0.0)
            acc_l += cv.to(ACC) * w
            if HAS_M:
                mv = _gen_tile(m_key, m_off + b * sm0 + h * sm1, ms, ns, sm2, sm3, mmask, nmask, DT, ACC)
                acc_m += mv * w
                acc_ma += tl.abs(mv) * tl.abs(w)
    u = tl.sum(acc_u, axis=1)
    ua = tl.sum(acc_ua, axis=1)
    v = tl.sum(acc_v, axis=0)
    va = tl.sum(acc_va, axis=0)
    lhs = tl.sum(tl.sum(acc_l, axis=1), axis=0)
    rhs = alpha * tl.sum(v * u, axis=0) + beta * tl.sum(tl.sum(acc_m, axis=1), axis=0)
    bound = tl.abs(alpha) * tl.sum(va * ua, axis=0) + tl.abs(beta) * tl.sum(tl.sum(acc_ma, axis=1), axis=0)
    tl.store(out_ptr + pid * 3 + 0, lhs.to(tl.float64))
    tl.store(out_ptr + pid * 3 + 1, rhs.to(tl.float64))
    tl.store(out_ptr + pid * 3 + 2, bound.to(tl.float64))




@triton.jit
def _row_block(y_ptr, H, Mdim, ROWS: tl.constexpr):
    """For program (matrix, s) of a grid of row blocks: the flat (batch, head) index,
    b, h, s, the rows [s ROWS, (s+1) ROWS) of the matrix, their mask and y at them."""
    pid = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    b = pid // H
    h = pid % H
    rows = s * ROWS + tl.arange(0, ROWS)
    rmask = rows < Mdim
    yv = tl.load(y_ptr + rows, mask=rmask, other=0.0)
    return pid, b, h, s, rows, rmask, yv


@triton.jit
def _project_k(key, base, w_ptr, n, ks, kmask, s_l, s_k, DT: tl.constexpr, ACC: tl.constexpr,
               BL: tl.constexpr, BKS: tl.constexpr):
    """``sum_l w[l] G[l, k]`` and ``sum_l |w[l]| |G[l, k]|`` for the columns ``ks`` of a
    generated (n x K) matrix G at storage ``base`` with strides (s_l, s_k): ``y A``'s
    k-slice, or ``B x``'s with B seen as B^T."""
    v = tl.zeros([BKS], dtype=ACC)
    va = tl.zeros([BKS], dtype=ACC)
    for l0 in range(0, n, BL):
        ls = l0 + tl.arange(0, BL)
        lmask = ls < n
        wl = tl.load(w_ptr + ls, mask=lmask, other=0.0)
        g = _gen_tile(key, base, ls.to(tl.int64), ks, s_l, s_k, lmask, kmask, DT, ACC)
        v += tl.sum(g * wl[:, None], axis=0)
        va += tl.sum(tl.abs(g) * tl.abs(wl)[:, None], axis=0)
    return v, va


# ``split``: many small programs per matrix, each with two independent jobs, so that
# the C stream of some overlaps the hashing of others. Program (matrix, s) reads rows
# [s ROWS, (s+1) ROWS) of C (and regenerates those rows of M), and regenerates the
# k-slice [s KS, (s+1) KS) of A's columns and B's rows: (y A)_k (B x)_k summed over its
# slice is its share of y A B x. So every element of A, B and M is hashed exactly once
# (rowsum does the same per matrix, but one program streams a whole matrix).
@triton.jit(do_not_specialize=_DESC_INTS + ["H", "Mdim", "Kdim", "SPLIT", "KS"])
def _split_kernel(c_ptr, sc0, sc1, sc2, sc3, x_ptr, y_ptr, part_ptr,
                  a_key, a_off, sa0, sa1, sa2, sa3,
                  b_key, b_off, sb0, sb1, sb2, sb3,
                  m_key, m_off, sm0, sm1, sm2, sm3,
                  H, Mdim, Ndim, Kdim, SPLIT, KS, alpha, beta,
                  HAS_M: tl.constexpr, DT: tl.constexpr, ACC: tl.constexpr,
                  ROWS: tl.constexpr, BN: tl.constexpr, BKS: tl.constexpr, BMA: tl.constexpr):
    # lhs = y C x (and y M x) over this program's rows
    pid, b, h, s, rows, rmask, yv = _row_block(y_ptr, H, Mdim, ROWS)
    rows64 = rows.to(tl.int64)
    base = c_ptr + b * sc0 + h * sc1
    acc = tl.zeros([ROWS, BN], dtype=ACC)
    acc_m = tl.zeros([ROWS, BN], dtype=ACC)
    acc_ma = tl.zeros([ROWS, BN], dtype=ACC)
    for n0 in range(0, Ndim, BN):
        cols = n0 + tl.arange(0, BN)
        cmask = cols < Ndim
        xv = tl.load(x_ptr + cols, mask=cmask, other=0.0)
        w = yv[:, None] * xv[None, :]
        cv = tl.load(base + (rows64 * sc2)[:, None] + (cols.to(tl.int64) * sc3)[None, :],
                     mask=rmask[:, None] & cmask[None, :], other=0.0)
        acc += cv.to(ACC) * w
        if HAS_M:
            mv = _gen_tile(m_key, m_off + b * sm0 + h * sm1, rows64, cols.to(tl.int64), sm2, sm3,
                           rmask, cmask, DT, ACC)
            acc_m += mv * w
            acc_ma += tl.abs(mv) * tl.abs(w)
    lhs = tl.sum(tl.sum(acc, axis=1), axis=0)
    rhs = beta * tl.sum(tl.sum(acc_m, axis=1), axis=0)
    bound = tl.abs(beta) * tl.sum(tl.sum(acc_ma, axis=1), axis=0)
    # rhs share: (y A)_k (B x)_k over this program's k-slice
    k0 = s * KS
    if k0 < Kdim:
        kl = tl.arange(0, BKS)
        ks = (k0 + kl).to(tl.int64)
        kmask = (kl < KS) & (ks < Kdim)
        v, va = _project_k(a_key, a_off + b * sa0 + h * sa1, y_ptr, Mdim, ks, kmask, sa2, sa3, DT, ACC, BMA, BKS)
        # B's k-slice as the columns of B^T (strides swapped)
        u, ua = _project_k(b_key, b_off + b * sb0 + h * sb1, x_ptr, Ndim, ks, kmask, sb3, sb2, DT, ACC, BN, BKS)
        rhs += alpha * tl.sum(v * u, axis=0)
        bound += tl.abs(alpha) * tl.sum(va * ua, axis=0)
    out = part_ptr + (pid * SPLIT + s) * 3
    tl.store(out, lhs.to(tl.float64))
    tl.store(out + 1, rhs.to(tl.float64))
    tl.store(out + 2, bound.to(tl.float64))


#: (ROWS, num_warps) of ``_split_kernel``: rows of C per program.
SPLIT_TILE = (8, 2)


def freivalds_split(C: torch.Tensor, x: torch.Tensor, y: torch.Tensor, A: Desc, B: Desc, M: Desc | None,
                    K: int, alpha: float, beta: float, dtype: torch.dtype, *,
                    tile: tuple[int, int] | None = None) -> torch.Tensor:
    """:func:`freivalds`'s (nb, H, 3) lhs, rhs, bound by ``_split_kernel``: per matrix,
    ``cdiv(M, ROWS)`` programs, each streaming ROWS rows of C and regenerating a
    ``cdiv(K, programs)`` slice of A's columns and B's rows; their partial sums are
    added here (float64)."""
    nb, H, Mdim, Ndim = C.shape
    acc = ACCUMULATE[dtype]
    rows, warps = tile or SPLIT_TILE
    # at most 65535 programs per matrix (CUDA's limit on the grid's second dimension)
    rows = max(1, min(rows, triton.next_power_of_2(Mdim)), triton.next_power_of_2(triton.cdiv(Mdim, 65535)))
    split = triton.cdiv(Mdim, rows)
    ks = triton.cdiv(max(K, 1), split)
    BN = max(16, min(256, triton.next_power_of_2(Ndim)))
    BKS = max(2, triton.next_power_of_2(ks))
    BMA = max(16, min(256, 4096 // BKS, triton.next_power_of_2(Mdim)))
    m = M or Desc(0, 0, (0, 0, 0, 0))
    part = torch.empty((nb * H, split, 3), dtype=torch.float64, device=C.device)
    if nb * H:
        _split_kernel[(nb * H, split)](C, *C.stride(), x.to(acc), y.to(acc), part,
                                       A.key, A.offset, *A.strides, B.key, B.offset, *B.strides,
                                       m.key, m.offset, *m.strides, H, Mdim, Ndim, K, split, ks,
                                       float(alpha), float(beta), HAS_M=M is not None, DT=_DT[dtype],
                                       ACC=_TL[acc], ROWS=rows, BN=BN, BKS=BKS, BMA=BMA, num_warps=warps)
    return part.sum(1).view(nb, H, 3)


_rowsum_kernel = triton.jit(do_not_specialize=_DESC_INTS + _SIZES + ["sc0", "sc1", "sc2"])(_freivalds_body)
#: ``product``: the product's row-sum kernel (C's strides specialised), for parity.
VARIANTS = ("rowsum", "acc2d", "split", "product")


def freivalds_variant(kernel: str, C: torch.Tensor, x: torch.Tensor, y: torch.Tensor, A: Desc, B: Desc,
                      M: Desc | None, K: int, alpha: float, beta: float, dtype: torch.dtype, *,
                      blocks: tuple[int, int] | None = None, num_warps: int = 4,
                      tile: tuple[int, int] | None = None) -> torch.Tensor:
    """(nb, H, 3) lhs, rhs, bound by one of :data:`VARIANTS`. ``blocks`` = (BM, BN) for rowsum and acc2d; ``tile`` = (ROWS, warps) for split."""
    if kernel == "product":
        return freivalds_rowsum(C, x, y, A, B, M, K, alpha, beta, dtype, blocks=blocks, num_warps=num_warps)
    if kernel == "split":
        return freivalds_split(C, x, y, A, B, M, K, alpha, beta, dtype, tile=tile)
    if kernel not in VARIANTS:
        raise ValueError(f"Cannot have kernel={kernel!r}: allowed values are {', '.join(VARIANTS)}")
    nb, H, Mdim, Ndim = C.shape
    acc = ACCUMULATE[dtype]
    out = torch.empty((nb, H, 3), dtype=torch.float64, device=C.device)
    m = M or Desc(0, 0, (0, 0, 0, 0))
    BM, BN, BK = rowsum_blocks(K, Ndim, blocks)
    args = [C, *C.stride(), x.to(acc), y.to(acc), out, A.key, A.offset, *A.strides, B.key, B.offset, *B.strides,
            m.key, m.offset, *m.strides, H, Mdim, Ndim, K, float(alpha), float(beta)]
    extra = {}
    if kernel == "rowsum":
        args += [*_pre_args(None, out)] * 3
        extra = dict(PRE_A=False, PRE_B=False, PRE_M=False)
        fn = _rowsum_kernel
    else:
        fn = _freivalds_acc2d_kernel
    fn[(nb * H,)](*args, HAS_M=M is not None, DT=_DT[dtype], ACC=_TL[acc], BM=BM, BN=BN, BK=BK,
                  num_warps=num_warps, **extra)
    return out
