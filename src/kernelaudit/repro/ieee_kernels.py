"""The register-tiled ``ieee`` kernels: decode (GEMV-like, small M) and prefill (large M).

:func:`ieee_tiled_kernel` computes the sequential order, like every sequential ``ieee``
path (:mod:`.gemm`, :mod:`.emulate`): each output element is
``acc = fma(a[m, k], b[k, n], acc)`` for k = 0, 1, ..., K-1 from acc = +0.0, one IEEE-754
fp32 FMA (``tl.fma``) per step, then the shared epilogue. :func:`ieee_lanes_kernel`
computes the K-lanes order (:class:`.tiles.Lanes`: L such chains over interleaved blocks
of K, then a fixed pairwise tree, :func:`lane_tree`), for the shapes whose table order
it is (see its docstring). What differs from the plain loop is how operands reach the
FMAs (the K-lanes kernel: the same ideas, one lane per 16-byte block):

* each K step loads one ``[BM, BK]`` tile of ``a`` and one ``[BN, BK]`` tile of ``b``
  (``b`` seen as [N, K]: linear's weight is K-contiguous, so the loads are wide and
  contiguous, 16 bytes and up per thread), converted to fp32 once;
* :func:`_fma_steps` takes the ``BK`` columns apart by halving in registers
  (reshape/permute/split: data movement only) and applies the ``BK`` rank-1 updates in
  increasing k; the order never depends on ``BM``, ``BN``, ``BK`` or the warps;
* the K tail (K mod BK) is one more masked tile whose padding multiplies ``+0.0`` by
  ``-1.0``: the product is ``-0.0`` and ``x + (-0.0) == x`` for every x, signed zeros
  and NaN included, so the padded steps leave every accumulator bit unchanged (not
  ``other=-0.0``: compiled for the H200, a masked load's ``-0.0`` fill came back as
  ``+0.0``, which turns an accumulator at ``-0.0`` into ``+0.0``);
* decode (``BM`` >= M, at most 16): one program per ``BN`` columns holds every row, the
  grid is N / BN programs wide (memory parallelism), ``PREFETCH`` loads the next tile
  before the FMAs of this one;
* prefill: programs in groups of ``GROUP_M`` row blocks (L2 reuse of ``b``), each a
  ``BM x BN`` register-tiled outer product.

No ``tl.dot``: tensor cores are not IEEE. Import through :mod:`.gemm`, which sets the
Triton interpreter up first on a CPU-only machine.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .epilogue import epilogue, outer_batch


@triton.jit
def grouped_pid(pid, M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    """(row block, column block) of program ``pid`` in grouped order: ``GROUP_M`` row
    blocks sweep the columns together, so ``b`` stays in L2."""
    grid_m = tl.cdiv(M, BM)
    grid_n = tl.cdiv(N, BN)
    width = GROUP_M * grid_n
    first_m = (pid // width) * GROUP_M
    rows_in_group = tl.minimum(grid_m - first_m, GROUP_M)
    return first_m + (pid % width) % rows_in_group, (pid % width) // rows_in_group


@triton.jit
def grouped_tile(pid, M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    """The rows and columns (int64) of program ``pid``'s ``BM x BN`` output tile in
    grouped order (:func:`grouped_pid`)."""
    pid_m, pid_n = grouped_pid(pid, M, N, BM, BN, GROUP_M)
    return pid_m.to(tl.int64) * BM + tl.arange(0, BM), pid_n.to(tl.int64) * BN + tl.arange(0, BN)


@triton.jit
def _halves(t):
    """The first and second half of ``t`` [R, H2] along dim 1 (k order kept inside each)."""
    R: tl.constexpr = t.shape[0]
    H: tl.constexpr = t.shape[1] // 2
    return tl.split(tl.permute(tl.reshape(t, (R, 2, H)), (0, 2, 1)))


@triton.jit
def _fma_steps(acc, at, bt, NK: tl.constexpr):
    """``acc = fma(at[:, k, None], bt[None, :, k], acc)`` for k = 0..NK-1 in order
    (at [BM, NK], bt [BN, NK], any float dtype, each column upcast to fp32 where it is
    used, so the tiles stay 16-bit in registers): the first half of the columns, then
    the second."""
    if NK == 1:
        BM: tl.constexpr = at.shape[0]
        BN: tl.constexpr = bt.shape[0]
        a = tl.reshape(at, (BM,)).to(tl.float32)
        b = tl.reshape(bt, (BN,)).to(tl.float32)
        acc = tl.fma(a[:, None], b[None, :], acc)
    else:
        a_lo, a_hi = _halves(at)
        b_lo, b_hi = _halves(bt)
        acc = _fma_steps(acc, a_lo, b_lo, NK // 2)
        acc = _fma_steps(acc, a_hi, b_hi, NK // 2)
    return acc


@triton.jit
def ieee_tiled_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                      s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_xb, s_xm, s_xn, s_cb, s_cm, s_cn,
                      alpha, beta, s_a0, s_b0, s_x0, s_c0,
                      HAS_BIAS: tl.constexpr, OUT_BF16: tl.constexpr,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                      GROUP_M: tl.constexpr, PREFETCH: tl.constexpr):
    """``c[b] = epilogue(a[b] @ b[b])`` in the ``ieee`` order; a [B, M, K], b [B, K, N]
    by strides; grid (cdiv(M, BM) * cdiv(N, BN), B)."""
    pid = tl.program_id(0)
    pid_b = tl.program_id(1).to(tl.int64)
    a_ptr, b_ptr, bias_ptr, c_ptr = outer_batch(a_ptr, b_ptr, bias_ptr, c_ptr, s_a0, s_b0, s_x0, s_c0)
    rm, rn = grouped_tile(pid, M, N, BM, BN, GROUP_M)
    rk = tl.arange(0, BK)
    mask_m = rm < M
    mask_n = rn < N
    a_t = a_ptr + pid_b * s_ab + rm[:, None] * s_am + rk[None, :] * s_ak    # [BM, BK]
    b_t = b_ptr + pid_b * s_bb + rn[:, None] * s_bn + rk[None, :] * s_bk    # [BN, BK]: b as [N, K]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    k_main = (K // BK) * BK
    k_main64 = tl.cast(k_main, tl.int64)
    if PREFETCH:
        # register double buffering: the next tile's loads are in flight during this
        # tile's FMAs (decode is bound by how many bytes are in flight). The weight tile
        # stays 16-bit until its column is used (registers); the small activation tile,
        # which every thread reads whole, is upcast once here rather than once per use
        # (the first tile is unused when K < BK; the last step reloads its own tile
        # instead of reading past K: no mask along K inside the loop)
        at = tl.load(a_t, mask=mask_m[:, None] & (rk[None, :] < K), other=0.0).to(tl.float32)
        bt = tl.load(b_t, mask=mask_n[:, None] & (rk[None, :] < K), other=0.0)
        for k0 in range(0, k_main, BK):
            k_next = tl.cast(tl.minimum(k0 + BK, k_main - BK), tl.int64)  # int64: k * stride
            at_next = tl.load(a_t + k_next * s_ak, mask=mask_m[:, None], other=0.0).to(tl.float32)
            bt_next = tl.load(b_t + k_next * s_bk, mask=mask_n[:, None], other=0.0)
            acc = _fma_steps(acc, at, bt, BK)
            at = at_next
            bt = bt_next
    else:
        for k0 in range(0, k_main, BK):
            # upcast once per element here (each thread of the load layout converts its
            # share), not once per use after the tiles are spread over the sub-tiles
            k64 = tl.cast(k0, tl.int64)  # k * stride may pass 2^31 (transposed operands)
            at = tl.load(a_t + k64 * s_ak, mask=mask_m[:, None], other=0.0).to(tl.float32)
            bt = tl.load(b_t + k64 * s_bk, mask=mask_n[:, None], other=0.0).to(tl.float32)
            acc = _fma_steps(acc, at, bt, BK)
    if k_main < K:
        # the tail: padded steps are fma(+0, -1, acc) = acc + (-0) = acc, bit for bit
        mask_k = (k_main + rk) < K
        a_tail = tl.load(a_t + k_main64 * s_ak, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b_tail = tl.load(b_t + k_main64 * s_bk, mask=mask_n[:, None] & mask_k[None, :], other=-1.0)
        acc = _fma_steps(acc, a_tail.to(tl.float32), b_tail.to(tl.float32), BK)
    epilogue(acc, bias_ptr, c_ptr, pid_b, rm, rn, mask_m, mask_n, s_xb, s_xm, s_xn, s_cb, s_cm, s_cn,
             alpha, beta, HAS_BIAS, OUT_BF16)


# -- K lanes ---------------------------------------------------------------------------------
@triton.jit
def _block_halves(t):
    """The first and second half of ``t`` [R, L, H2] along dim 2 (k order kept inside each)."""
    R: tl.constexpr = t.shape[0]
    L: tl.constexpr = t.shape[1]
    H: tl.constexpr = t.shape[2] // 2
    return tl.split(tl.permute(tl.reshape(t, (R, L, 2, H)), (0, 1, 3, 2)))


@triton.jit
def _lane_columns(acc, at, bt, NB: tl.constexpr):
    """``acc[m, n, l] = fma(at[m, l, j], bt[n, l, j], acc[m, n, l])`` for j = 0..NB-1 in
    order (at [BM, L, NB], bt [BN, L, NB], acc [BM, BN, L]): every lane takes the j-th k
    of its block at once; the first half of the block, then the second.

    ``bt`` may hold 16-bit weights as int32 words ([BN, L, NB / 2]: word i holds the bf16
    weights of j = 2i in its low half and 2i + 1 in its high half). A bf16 value is the top
    half of its fp32 value, so ``w << 16`` and ``w & 0xffff0000`` are the two weights as fp32
    bit patterns: one instruction a value and no repacking of 16-bit halves between
    registers; the FMAs and their order are the same."""
    BM: tl.constexpr = at.shape[0]
    BN: tl.constexpr = bt.shape[0]
    L: tl.constexpr = at.shape[1]
    if bt.dtype == tl.int32 and NB == 2:
        a_even, a_odd = tl.split(tl.reshape(at, (BM, L, 2)))
        w = tl.reshape(bt, (BN, L))
        acc = tl.fma(a_even[:, None, :], (w << 16).to(tl.float32, bitcast=True)[None, :, :], acc)
        acc = tl.fma(a_odd[:, None, :], (w & -65536).to(tl.float32, bitcast=True)[None, :, :], acc)
    elif NB == 1:
        a = tl.reshape(at, (BM, L)).to(tl.float32)
        b = tl.reshape(bt, (BN, L)).to(tl.float32)
        acc = tl.fma(a[:, None, :], b[None, :, :], acc)
    else:
        a_lo, a_hi = _block_halves(at)
        b_lo, b_hi = _block_halves(bt)
        acc = _lane_columns(acc, a_lo, b_lo, NB // 2)
        acc = _lane_columns(acc, a_hi, b_hi, NB // 2)
    return acc


@triton.jit
def _round_halves(t):
    """The first and second half of ``t`` [R2, X, Y] along dim 0 (rounds in order)."""
    R: tl.constexpr = t.shape[0] // 2
    X: tl.constexpr = t.shape[1]
    Y: tl.constexpr = t.shape[2]
    return tl.split(tl.permute(tl.reshape(t, (2, R, X, Y)), (1, 2, 3, 0)))


@triton.jit
def _lane_rounds(acc, at, bt, LANES: tl.constexpr, LB: tl.constexpr, NR: tl.constexpr):
    """The ``NR`` rounds of one K step in order (at [NR, BM, LANES * LB], bt [NR, BN,
    LANES * LB]: round r, k = k0 + r * LANES * LB + l * LB + j is step j of lane l).
    The rounds sit on the leading dim, so a thread holds the same lanes and columns in
    every round and taking rounds apart moves no data between threads."""
    if NR == 1:
        BM: tl.constexpr = at.shape[1]
        BN: tl.constexpr = bt.shape[1]
        WB: tl.constexpr = LB // 2 if bt.dtype == tl.int32 else LB   # 16-bit weights as words: half
        acc = _lane_columns(acc, tl.reshape(at, (BM, LANES, LB)), tl.reshape(bt, (BN, LANES, WB)), LB)
    else:
        a_lo, a_hi = _round_halves(at)
        b_lo, b_hi = _round_halves(bt)
        acc = _lane_rounds(acc, a_lo, b_lo, LANES, LB, NR // 2)
        acc = _lane_rounds(acc, a_hi, b_hi, LANES, LB, NR // 2)
    return acc


@triton.jit
def lane_tree(acc):
    """``acc`` [BM, BN, L] -> [BM, BN]: the lanes added pairwise, neighbours first, level
    by level (t[i] = t[2i] + t[2i + 1]: ((s0 + s1) + (s2 + s3)) + ... for L = 8), one fp32
    add each. Reshape and split only: the tree is written out, not left to ``tl.sum``."""
    BM: tl.constexpr = acc.shape[0]
    BN: tl.constexpr = acc.shape[1]
    L: tl.constexpr = acc.shape[2]
    if L == 1:
        out = tl.reshape(acc, (BM, BN))
    else:
        even, odd = tl.split(tl.reshape(acc, (BM, BN, L // 2, 2)))   # lanes 2i and 2i + 1
        out = lane_tree(even + odd)
    return out


@triton.jit
def ieee_lanes_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                      s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_xb, s_xm, s_xn, s_cb, s_cm, s_cn,
                      alpha, beta, s_a0, s_b0, s_x0, s_c0,
                      HAS_BIAS: tl.constexpr, OUT_BF16: tl.constexpr,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                      LANES: tl.constexpr, LB: tl.constexpr,
                      GROUP_M: tl.constexpr, PREFETCH: tl.constexpr, WORDS: tl.constexpr = False,
                      TMA: tl.constexpr = False, STAGES: tl.constexpr = 1):
    """``c[b] = epilogue(a[b] @ b[b])`` in the K-lanes order (:class:`.tiles.Lanes`:
    ``LANES`` lanes, interleaved blocks of ``LB`` k, pairwise tree); a [B, M, K], b [B, K, N]
    by strides; grid (cdiv(M, BM) * cdiv(N, BN), B).

    One program holds every lane of its ``BM x BN`` outputs: a [BM, BN, LANES] fp32
    accumulator (no split-K, no workspace, no atomics). Each K step loads ``BK`` k of
    every row, K-contiguous, as ``BK / (LANES * LB)`` rounds (a round: one block of
    ``LB`` k per lane) on the leading dim of a [rounds, rows, LANES * LB] tile, and applies
    the rounds in order, ``LB`` FMAs to every lane at once per round, so k increases
    within each lane. The K tail is one masked step padded with fma(+0, -1, acc) = acc
    (the padded k of every lane leave its bits unchanged, as in the sequential kernel).
    Then :func:`lane_tree`, then the shared epilogue.

    ``WORDS`` (bf16 weights, K-contiguous, every weight offset even and the base 4-byte
    aligned: the launch checks): the main loop loads the weights as 32-bit words and takes
    the two bf16 values of each apart in one instruction each (:func:`_lane_columns`), the same
    FMAs in the same order.

    ``TMA`` (a plain 2-d launch whose weights qualify for ``WORDS`` and whose rows TMA can
    describe: the launch checks): the main loop's weight tiles arrive as words by tensor
    descriptor loads, which Triton pipelines ``STAGES`` deep in shared memory (bytes in
    flight without registers: decode is bound by them; a loop without a dot is pipelined
    only when asked), the activations by plain loads; again the same FMAs in the same
    order."""
    tl.static_assert(BK % (LANES * LB) == 0)
    RK: tl.constexpr = LANES * LB            # k per round
    NR: tl.constexpr = BK // RK              # rounds per K step
    pid = tl.program_id(0)
    pid_b = tl.program_id(1).to(tl.int64)
    a_ptr, b_ptr, bias_ptr, c_ptr = outer_batch(a_ptr, b_ptr, bias_ptr, c_ptr, s_a0, s_b0, s_x0, s_c0)
    rm, rn = grouped_tile(pid, M, N, BM, BN, GROUP_M)
    # a K step as [round, row, k in round]: k = r * RK + c
    kr = tl.arange(0, NR)[:, None, None] * RK + tl.arange(0, RK)[None, None, :]     # [NR, 1, RK]
    mask_m = rm < M
    mask_n = rn < N
    # rows and columns past M and N read row M - 1 and column N - 1: the main loop's
    # loads need no mask (their outputs are never stored)
    rm_in = tl.minimum(rm, M - 1)
    rn_in = tl.minimum(rn, N - 1)
    a_t = a_ptr + pid_b * s_ab + rm_in[None, :, None] * s_am + kr * s_ak      # [NR, BM, RK]
    b_t = b_ptr + pid_b * s_bb + rn_in[None, :, None] * s_bn + kr * s_bk      # [NR, BN, RK]: b as [N, K]
    mask_a = mask_m[None, :, None]
    mask_b = mask_n[None, :, None]
    acc = tl.zeros((BM, BN, LANES), dtype=tl.float32)
    k_main = (K // BK) * BK
    k_main64 = tl.cast(k_main, tl.int64)
    if TMA:
        b_desc = tl.make_tensor_descriptor(b_ptr.to(tl.pointer_type(tl.int32)), shape=[N, K // 2],
                                           strides=[s_bn // 2, 1], block_shape=[BN, BK // 2])
        n0 = (grouped_pid(pid, M, N, BM, BN, GROUP_M)[1] * BN).to(tl.int32)
        for k0 in tl.range(0, k_main, BK, num_stages=STAGES):
            # [BN, BK / 2] words, word c of a step holding k = 2c and 2c + 1 -> [NR, BN, RK / 2]
            bw = b_desc.load([n0, k0 // 2])
            bt = tl.permute(tl.reshape(bw, (BN, NR, RK // 2)), (1, 0, 2))
            at = tl.load(a_t + tl.cast(k0, tl.int64) * s_ak).to(tl.float32)
            acc = _lane_rounds(acc, at, bt, LANES, LB, NR)
    elif PREFETCH:
        # as ieee_tiled_kernel: the next step's tiles load during this step's FMAs (the
        # first tile is unused when K < BK; the last step reloads its own tile)
        if WORDS:  # the weights as words: word j of row n holds k = 2j and 2j + 1 (s_bk == 1)
            kw = tl.arange(0, NR)[:, None, None] * (RK // 2) + tl.arange(0, RK // 2)[None, None, :]
            b_s = (b_ptr.to(tl.pointer_type(tl.int32)) + (pid_b * s_bb) // 2
                   + rn_in[None, :, None] * (s_bn // 2) + kw)                            # [NR, BN, RK / 2]
            b_last = 2 * kw + 1                                                          # a word's last k
        else:
            b_s = b_t
            b_last = kr
        PER: tl.constexpr = 2 if WORDS else 1                                            # k per element
        at = tl.load(a_t, mask=mask_a & (kr < K), other=0.0).to(tl.float32)
        bt = tl.load(b_s, mask=mask_b & (b_last < K), other=0)
        for k0 in range(0, k_main, BK):
            k_next = tl.cast(tl.minimum(k0 + BK, k_main - BK), tl.int64)
            at_next = tl.load(a_t + k_next * s_ak).to(tl.float32)
            bt_next = tl.load(b_s + k_next * s_bk // PER)
            acc = _lane_rounds(acc, at, bt, LANES, LB, NR)
            at = at_next
            bt = bt_next
    else:
        for k0 in range(0, k_main, BK):
            k64 = tl.cast(k0, tl.int64)
            at = tl.load(a_t + k64 * s_ak, mask=mask_a, other=0.0).to(tl.float32)
            bt = tl.load(b_t + k64 * s_bk, mask=mask_b, other=0.0)
            acc = _lane_rounds(acc, at, bt, LANES, LB, NR)
    if k_main < K:
        # the tail: padded k are fma(+0, -1, acc) = acc + (-0) = acc in every lane
        mask_k = (k_main + kr) < K
        a_tail = tl.load(a_t + k_main64 * s_ak, mask=mask_a & mask_k, other=0.0)
        b_tail = tl.load(b_t + k_main64 * s_bk, mask=mask_b & mask_k, other=-1.0)
        acc = _lane_rounds(acc, a_tail.to(tl.float32), b_tail, LANES, LB, NR)
    epilogue(lane_tree(acc), bias_ptr, c_ptr, pid_b, rm, rn, mask_m, mask_n, s_xb, s_xm, s_xn,
             s_cb, s_cm, s_cn, alpha, beta, HAS_BIAS, OUT_BF16)
