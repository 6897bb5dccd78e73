"""The ``ieee`` decode GEMM in the 8 x 8 K-lanes order, written in Gluon: each thread owns
one lane of a few columns for every row, so the K loop is loads, one unpack a weight and
FMAs, with no data moved between threads until the tree.

The order is :class:`.tiles.Lanes` ``(8, 8)`` (the table's order of 16-bit weights from
K = 1024): k belongs to lane ``(k // 8) % 8``; each lane is one fp32 chain
``s = fma(a[m, k], b[k, n], s)`` over its k in increasing order from +0.0; then the tree
``((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))`` and the shared epilogue
(``fma(acc, alpha, fp32(beta * bias))`` or ``acc * alpha``, one rounding). The same bits
as :func:`.ieee_kernels.ieee_lanes_kernel` and :mod:`.emulate`, by construction: only
which thread computes a chain differs.

How the FMAs are fed (:func:`lanes_decode_kernel`): a round is 64 k, one 8-k block per
lane. Thread ``(t, l)`` of a warp (4 x 8) holds lane ``l`` of ``NT`` columns and every
row: ``[BM, NT]`` accumulators. Per round it loads its columns' lane block as one 16-byte
word vector each (bf16 weights read as int32 words, word c holding k = 2c in its low half
and 2c + 1 in its high half: ``w << 16`` and ``w & 0xffff0000`` are their fp32 bits) and
its lane's 8 activations of each row (fp32: the launch upcasts 16-bit activations, exactly,
once), then does the block's 8 k in order. A step is ``NR`` rounds; the next step's
weights load during this one's FMAs (the activations are small and shared by every program,
so they are read where used). Every tensor's layout is a slice of one parent, so splitting
a block into its k moves nothing between threads (compiled for sm_90 with Triton 3.6: the
K loop at 4 rows, 1 column a thread, 4 rounds a step: 230 instructions for 128 FFMA, 66
registers; the Triton kernel's TMA table tile: 240 for 128, with 27 shared loads and three
barriers). With ``num_stages`` > 1 the
weights instead arrive ``num_stages - 1`` steps ahead in shared memory by cp.async, each
thread copying the 16-byte chunks it later reads back itself (so it waits on its own
copies only; Triton's barrier pass still puts two barriers in each step).

k past K (one masked step) reads ``a`` as +0.0 and the weight as -1.0: ``fma(+0, -1, s)
= s`` for every s, signed zeros and NaN included, as in every ieee kernel. Rows past M and
columns past N read row M - 1 and column N - 1 and are never stored.

Gluon kernels run compiled only: :func:`usable` says where this one can run; elsewhere the
launch runs :func:`.ieee_kernels.ieee_lanes_kernel` (the same bits).

Measured (H100, 2026-12-06, ``benchmarks/results/2026-12-06-h100-gluon-decode-guard-tests-segment-9/``):
the bits equal the emulator's, but every tile is slower than the Triton kernel's table tiles
(M = 4, K = N = 8192: 0.087 ms against 0.056): one step of weights in flight in registers
is too few bytes for decode, which the table's TMA tiles keep several steps deep in shared
memory. No table row uses it; it is a benchmark candidate. The cp.async stages
(``num_stages`` > 1; H100, K = N = 8192,
``benchmarks/results/2026-12-06-h100-prefill-k-unroll-ncu-segment-10/``) help at 2 rows
(0.061 ms against 0.083) and not at 4 (0.091 against 0.087); the Triton tiles stay ahead
(0.050, 0.056).
"""

from __future__ import annotations

import torch
import triton

from .. import config

try:  # Gluon: Triton 3.4 on (cp.async: `async_copy_global_to_shared` to 3.6, `async_load` from 3.7)
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy as _cp

    _cp_load = getattr(_cp, "async_load", None) or _cp.async_copy_global_to_shared
except (ImportError, AttributeError):  # pragma: no cover - an old Triton
    gluon = gl = None

#: The only order this kernel computes: 8 lanes of 8 k (16-bit weights, K >= 1024).
LANES, BLOCK = 8, 8
#: k per round: one block of every lane.
ROUND = LANES * BLOCK


def split(tiles) -> tuple[int, int]:
    """``(NT, NR)`` of a tile: columns a thread (``bn / (4 * warps)``) and rounds a K step
    (``bk / 64``)."""
    return tiles.bn // (4 * tiles.num_warps), tiles.bk // ROUND


def usable(a3: torch.Tensor, b3: torch.Tensor, tiles, lanes) -> bool:
    """Whether :func:`lanes_decode_kernel` can run this launch: Gluon present, a compiled
    CUDA launch, the 8 x 8 order, weights the caller found readable as words
    (``gemm._weight_words``) with an even K, and a tile it was written for (``bn`` a
    multiple of 4 * warps, ``bk`` a multiple of 64, at most 16 rows)."""
    if gl is None or config.interpreter_requested() or a3.device.type != "cuda":
        return False
    K = a3.shape[-1]
    nt, nr = split(tiles)
    return ((lanes.count, lanes.block) == (LANES, BLOCK) and K % 2 == 0 and tiles.bm <= 16
            and nt >= 1 and nt * 4 * tiles.num_warps == tiles.bn and nr >= 1 and nr * ROUND == tiles.bk
            and nr & (nr - 1) == 0)


def launch(a3, b3, bias3, out3, tiles, alpha: float, beta: float) -> None:
    """Run :func:`lanes_decode_kernel` on a :func:`usable` launch (all four tensors [B0, B,
    ...]; ``b3`` [B0, B, K, N] K-contiguous bf16)."""
    B0, B, M, K = a3.shape
    N = b3.shape[3]
    if a3.dtype != torch.float32 or a3.stride(3) != 1:
        a3 = a3.float().contiguous()     # decode-sized: once, exactly
    xb = bias3 if bias3 is not None else out3
    nt, nr = split(tiles)
    grid = (triton.cdiv(M, tiles.bm) * triton.cdiv(N, tiles.bn), B, B0)
    lanes_decode_kernel[grid](
        a3, b3, xb, out3, M, N, K, a3.stride(0), a3.stride(1), a3.stride(2),
        b3.stride(0), b3.stride(1), b3.stride(3), *xb.stride(), *out3.stride(), float(alpha), float(beta),
        HAS_BIAS=bias3 is not None, OUT_BF16=out3.dtype == torch.bfloat16, BM=tiles.bm, NT=nt, NR=nr,
        STAGES=tiles.num_stages, num_warps=tiles.num_warps)


def compile_for(tiles, capability: int = 90, bias: bool = False):
    """:func:`lanes_decode_kernel` compiled for ``sm_<capability>`` as a decode launch of
    ``tiles`` takes it (fp32 activations, bf16 weights and output, strides divisible by
    16), on any machine: Triton's own ptxas, no GPU."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    k = lanes_decode_kernel
    nt, nr = split(tiles)
    const = dict(HAS_BIAS=bias, OUT_BF16=True, BM=tiles.bm, NT=nt, NR=nr, STAGES=tiles.num_stages)
    ptr = {"a_ptr": "*fp32", "b_ptr": "*bf16", "x_ptr": "*bf16", "c_ptr": "*bf16"}
    sig = {n: "constexpr" if n in const else ptr.get(n, "fp32" if n in ("alpha", "beta") else "i32")
           for n in k.arg_names}
    div16 = [n for n in k.arg_names if n.endswith("_ptr") or n in ("N", "K") or
             (n.startswith("s_") and not n.endswith("n"))] + ["s_bn"]
    attrs = {(k.arg_names.index(n),): [["tt.divisibility", 16]] for n in div16}
    return triton.compile(GluonASTSource(fn=k, signature=sig, constexprs=const, attrs=attrs),
                          target=GPUTarget("cuda", capability, 32), options=dict(num_warps=tiles.num_warps))


if gl is not None:
    @gluon.jit
    def _word_columns(w):
        """w [BN, 8, 4] int32 -> its 4 word columns [BN, 8] (c = 0..3), data in place."""
        BN: gl.constexpr = w.shape[0]
        even, odd = gl.split(gl.reshape(w, [BN, 8, 2, 2]))     # c = 2 * c1 + c0: c0 = 0, 1
        w0, w2 = gl.split(even)
        w1, w3 = gl.split(odd)
        return w0, w1, w2, w3

    @gluon.jit
    def _k_columns(a):
        """a [BM, 8, 8] fp32 -> the 8 k columns [BM, 8] of each lane block (j = 0..7): the Gluon
        twin of ``gemm._columns8`` (a Gluon kernel cannot call a ``triton.jit`` function)."""
        BM: gl.constexpr = a.shape[0]
        e, o = gl.split(gl.reshape(a, [BM, 8, 4, 2]))          # j = 2 * h + j0
        ee, eo = gl.split(gl.reshape(e, [BM, 8, 2, 2]))        # j in (0, 4) and (2, 6)
        oe, oo = gl.split(gl.reshape(o, [BM, 8, 2, 2]))        # j in (1, 5) and (3, 7)
        a0, a4 = gl.split(ee)
        a2, a6 = gl.split(eo)
        a1, a5 = gl.split(oe)
        a3, a7 = gl.split(oo)
        return a0, a1, a2, a3, a4, a5, a6, a7

    @gluon.jit
    def _fma(acc, a, w, acc_l: gl.constexpr):
        """``acc[m, n, l] = fma(a[m, l], w[n, l], acc[m, n, l])``; the layout conversions are
        between equal layouts (slices of the same parent): no instruction."""
        a3 = gl.expand_dims(gl.convert_layout(a, gl.SliceLayout(1, acc_l)), 1)
        w3 = gl.expand_dims(gl.convert_layout(w, gl.SliceLayout(0, acc_l)), 0)
        return gl.fma(a3, w3, acc)

    @gluon.jit
    def _round(acc, at, wt, acc_l: gl.constexpr):
        """One round in k order: at [BM, 8, 8] fp32, wt [BN, 8, 4] words (low half first)."""
        a0, a1, a2, a3, a4, a5, a6, a7 = _k_columns(at)
        w0, w1, w2, w3 = _word_columns(wt)
        acc = _fma(acc, a0, (w0 << 16).to(gl.float32, bitcast=True), acc_l)
        acc = _fma(acc, a1, (w0 & -65536).to(gl.float32, bitcast=True), acc_l)
        acc = _fma(acc, a2, (w1 << 16).to(gl.float32, bitcast=True), acc_l)
        acc = _fma(acc, a3, (w1 & -65536).to(gl.float32, bitcast=True), acc_l)
        acc = _fma(acc, a4, (w2 << 16).to(gl.float32, bitcast=True), acc_l)
        acc = _fma(acc, a5, (w2 & -65536).to(gl.float32, bitcast=True), acc_l)
        acc = _fma(acc, a6, (w3 << 16).to(gl.float32, bitcast=True), acc_l)
        acc = _fma(acc, a7, (w3 & -65536).to(gl.float32, bitcast=True), acc_l)
        return acc

    @gluon.jit
    def _rounds(acc, at, wt, acc_l: gl.constexpr, NR: gl.constexpr):
        """``NR`` rounds in order (at [BM, NR, 8, 8], wt [BN, NR, 8, 4]): halves, first
        then second, down to one round."""
        BM: gl.constexpr = at.shape[0]
        BN: gl.constexpr = wt.shape[0]
        if NR == 1:
            acc = _round(acc, gl.reshape(at, [BM, 8, 8]), gl.reshape(wt, [BN, 8, 4]), acc_l)
        else:
            a_lo, a_hi = gl.split(gl.permute(gl.reshape(at, [BM, 2, NR // 2, 8, 8]), [0, 2, 3, 4, 1]))
            w_lo, w_hi = gl.split(gl.permute(gl.reshape(wt, [BN, 2, NR // 2, 8, 4]), [0, 2, 3, 4, 1]))
            acc = _rounds(acc, a_lo, w_lo, acc_l, NR // 2)
            acc = _rounds(acc, a_hi, w_hi, acc_l, NR // 2)
        return acc

    @gluon.jit
    def _offsets4(i0, i1, i2, i3):
        """The [D0, D1, D2, D3] sum of four 1-d offsets, each a slice of the same 4-d layout.
        The kernel sums a tile's offsets here before they meet the pointer, the K offsets
        carried at the rows' width (``rows * 0 + ...``): sm_90, Triton 3.6, 2 rows x 16 x 256,
        a K loop of 140 instructions, against 152 with the offsets added one by one."""
        return (gl.expand_dims(gl.expand_dims(gl.expand_dims(i0, 1), 2), 3)
                + gl.expand_dims(gl.expand_dims(gl.expand_dims(i1, 0), 2), 3)
                + gl.expand_dims(gl.expand_dims(gl.expand_dims(i2, 0), 1), 3)
                + gl.expand_dims(gl.expand_dims(gl.expand_dims(i3, 0), 1), 2))

    @gluon.jit
    def _axis(n: gl.constexpr, dim: gl.constexpr, layout: gl.constexpr):
        """``arange(0, n)`` as dim ``dim`` of the 4-d ``layout``."""
        if dim == 0:
            lay: gl.constexpr = gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, layout)))
        elif dim == 1:
            lay: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(2, gl.SliceLayout(3, layout)))
        elif dim == 2:
            lay: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, layout)))
        else:
            lay: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, layout)))
        return gl.arange(0, n, layout=lay)

    @gluon.jit
    def _round_bf16(value):
        """fp32 -> bf16 bits, nearest even, NaN a quiet NaN (:func:`.epilogue.round_bf16`)."""
        bits = value.to(gl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        bits = gl.where(value != value, 0x7FC0, bits)
        return bits.to(gl.uint16).to(gl.bfloat16, bitcast=True)

    @gluon.jit
    def lanes_decode_kernel(a_ptr, b_ptr, x_ptr, c_ptr, M, N, K, s_a0, s_ab, s_am, s_b0, s_bb, s_bn,
                            s_x0, s_xb, s_xm, s_xn, s_c0, s_cb, s_cm, s_cn, alpha, beta,
                            HAS_BIAS: gl.constexpr, OUT_BF16: gl.constexpr,
                            BM: gl.constexpr, NT: gl.constexpr, NR: gl.constexpr, STAGES: gl.constexpr = 1):
        """``c = epilogue(a @ b)`` in the 8 x 8 K-lanes order: a fp32 [B0, B, M, K] (K
        contiguous), b bf16 [B0, B, K, N] (K contiguous, read as words), bias x and c by
        strides; grid (row blocks x column blocks of ``BM x NT * 4 * warps``, B, B0)."""
        NW: gl.constexpr = gl.num_warps()
        BN: gl.constexpr = NT * 4 * NW
        STEP: gl.constexpr = NR * 64
        # thread (t, l) of a warp: lane l of NT columns, every row
        acc_l: gl.constexpr = gl.BlockedLayout([BM, NT, 1], [1, 4, 8], [1, NW, 1], [2, 1, 0])
        w_l: gl.constexpr = gl.BlockedLayout([NT, NR, 1, 4], [4, 1, 8, 1], [NW, 1, 1, 1], [3, 2, 1, 0])
        a_l: gl.constexpr = gl.BlockedLayout([BM, NR, 1, 8], [4, 1, 8, 1], [NW, 1, 1, 1], [3, 2, 1, 0])

        grid_m = gl.cdiv(M, BM)
        pid = gl.program_id(0)
        pid_m = pid % grid_m
        pid_n = pid // grid_m
        pid_b = gl.program_id(1).to(gl.int64)
        b0 = gl.program_id(2).to(gl.int64)
        # words [BN, NR, 8, 4]: word (n, r, l, c) holds k = 2 * (r * 32 + l * 4 + c) (+ 1)
        rn = gl.minimum(pid_n.to(gl.int64) * BN + _axis(BN, 0, w_l), N - 1)
        w_k = _offsets4(rn * 0, _axis(NR, 1, w_l) * 32, _axis(8, 2, w_l) * 4, _axis(4, 3, w_l))
        wp = (b_ptr.to(gl.pointer_type(gl.int32)) + (b0 * s_b0 + pid_b * s_bb) // 2
              + _offsets4(rn * (s_bn // 2), _axis(NR, 1, w_l) * 0, _axis(8, 2, w_l) * 0, _axis(4, 3, w_l) * 0) + w_k)
        # activations [BM, NR, 8, 8]: (m, r, l, j) is k = r * 64 + l * 8 + j
        rm = gl.minimum(pid_m.to(gl.int64) * BM + _axis(BM, 0, a_l), M - 1)
        a_k = _offsets4(rm * 0, _axis(NR, 1, a_l) * 64, _axis(8, 2, a_l) * 8, _axis(8, 3, a_l))
        ap = a_ptr + b0 * s_a0 + pid_b * s_ab + _offsets4(rm * s_am, _axis(NR, 1, a_l) * 0,
                                                         _axis(8, 2, a_l) * 0, _axis(8, 3, a_l) * 0) + a_k

        acc = gl.zeros([BM, BN, 8], gl.float32, layout=acc_l)
        k_main = (K // STEP) * STEP
        if STAGES == 1:
            # step 0; when K < STEP the loop does not run and nothing is read here
            wt = gl.load(wp, mask=(w_k * 0 + k_main) > 0, other=0)
            for k0 in range(0, k_main, STEP):
                # the next step's weights load during this step's FMAs (the last reloads its own)
                k_next = gl.minimum(k0 + STEP, k_main - STEP).to(gl.int64)
                wt_next = gl.load(wp + k_next // 2)
                at = gl.load(ap + k0.to(gl.int64))
                acc = _rounds(acc, at, wt, acc_l, NR)
                wt = wt_next
        else:
            # STAGES - 1 steps of weights in flight in shared memory (cp.async), each thread
            # copying the 16-byte chunks it reads back itself, so it needs only its own wait
            # (Triton's barrier pass still puts two barriers in each step: sm_90, Triton 3.6).
            # A step's buffer is refilled the step after its words reached registers.
            ws = gl.allocate_shared_memory(gl.int32, [STAGES, BN, NR, 8, 4],
                                           gl.SwizzledSharedLayout(1, 1, 1, [3, 2, 1, 0]))
            n_steps = k_main // STEP
            live = (w_k * 0 + n_steps) > 0     # nothing is read when K < STEP
            for s in gl.static_range(STAGES - 1):
                k_s = (gl.minimum(s, n_steps - 1) * STEP).to(gl.int64)
                _cp_load(ws.index(s), wp + gl.maximum(k_s, 0) // 2, mask=live)
                _cp.commit_group()
            for i in range(n_steps):
                k_j = (gl.minimum(i + STAGES - 1, n_steps - 1) * STEP).to(gl.int64)
                _cp_load(ws.index((i + STAGES - 1) % STAGES), wp + k_j // 2)
                _cp.commit_group()
                _cp.wait_group(STAGES - 1)     # step i's words are in
                wt = ws.index(i % STAGES).load(w_l)
                at = gl.load(ap + (i * STEP).to(gl.int64))
                acc = _rounds(acc, at, wt, acc_l, NR)
            _cp.wait_group(0)
        if k_main < K:
            # padded k: fma(+0, -1, s) = s + (-0) = s in every lane (0xBF80BF80: -1.0 in
            # both halves of a word)
            wt = gl.load(wp + k_main // 2, mask=k_main + 2 * w_k < K, other=-1082081408)
            at = gl.load(ap + k_main, mask=k_main + a_k < K, other=0.0)
            acc = _rounds(acc, at, wt, acc_l, NR)

        # the tree: lanes into one thread, then t[i] = t[2i] + t[2i + 1], level by level
        tree_l: gl.constexpr = gl.BlockedLayout([1, 1, 8], [8, 4, 1], [1, NW, 1], [2, 1, 0])
        t = gl.convert_layout(acc, tree_l)
        even, odd = gl.split(gl.reshape(t, [BM, BN, 4, 2]))
        t = even + odd
        even, odd = gl.split(gl.reshape(t, [BM, BN, 2, 2]))
        t = even + odd
        even, odd = gl.split(t)
        t = even + odd

        om = pid_m.to(gl.int64) * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, t.type.layout))
        on = pid_n.to(gl.int64) * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, t.type.layout))
        mask = gl.expand_dims(om < M, 1) & gl.expand_dims(on < N, 0)
        if HAS_BIAS:
            x = gl.load(x_ptr + b0 * s_x0 + pid_b * s_xb + gl.expand_dims(om * s_xm, 1)
                        + gl.expand_dims(on * s_xn, 0), mask=mask, other=0.0).to(gl.float32)
            t = gl.fma(t, alpha, x * beta)
        else:
            t = t * alpha
        cp = c_ptr + b0 * s_c0 + pid_b * s_cb + gl.expand_dims(om * s_cm, 1) + gl.expand_dims(on * s_cn, 0)
        if OUT_BF16:
            gl.store(cp, _round_bf16(t), mask=mask)
        else:
            gl.store(cp, t.to(c_ptr.dtype.element_ty), mask=mask)
else:  # pragma: no cover
    lanes_decode_kernel = None
