"""Triton kernels behind the corpus's verified solutions.

One kernel per family, parametrised by ``tl.constexpr`` (op name, block sizes), with a
small Python wrapper that allocates the output and launches it. The solutions in
``solutions/`` are thin ``ModelNew`` classes over these wrappers; the known-correct
variants call them with other block sizes (so other reduction orders).

Written for triton 3.6 and 3.9. Without CUDA the kernels run in the Triton
interpreter: ``TRITON_INTERPRET=1`` must be in the environment before triton is first
imported, so this module sets it (unless already set) when torch sees no GPU.
"""

from __future__ import annotations

import math
import os

import torch

from ...config import TRITON_INTERPRET, use_interpreter_without_cuda

use_interpreter_without_cuda()  # must precede the first `import triton`

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from ...interpreter import skip_dead_overflow_checks  # noqa: E402

skip_dead_overflow_checks()  # under the interpreter only: kernelaudit.interpreter

# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


@triton.jit
def _round_tf32(x):
    # TF32 keeps 10 mantissa bits: round the low 13 bits of the fp32 pattern to nearest.
    bits = x.to(tl.int32, bitcast=True)
    bits = (bits + 4096) & -8192
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _expm1(x):
    # exp(x) - 1 loses all digits near 0; a degree-6 Taylor polynomial does not.
    t = x * (1.0 + x * (0.5 + x * (1.0 / 6.0 + x * (1.0 / 24.0 + x * (1.0 / 120.0 + x * (1.0 / 720.0))))))
    return tl.where(tl.abs(x) < 0.1, t, tl.exp(x) - 1.0)


def _pow2(n: int, lo: int = 16) -> int:
    return max(lo, triton.next_power_of_2(int(n)))


def interpreted() -> bool:
    """Were this module's kernels decorated for the Triton interpreter (CPU tensors)?"""
    return type(_matmul_kernel).__name__ == "InterpretedFunction"


def set_interpret(flag: bool) -> bool:
    """Switch the corpus kernels between the interpreter (CPU) and compiled (GPU) mode.

    Triton decides at decoration time, from ``TRITON_INTERPRET``; this sets the
    variable and re-imports this module when its kernels are in the other mode, so
    one process can run CPU tests and GPU tests. Candidate files loaded afterwards
    decorate their own kernels in the new mode. Returns the previous mode.
    """
    import importlib
    import sys

    before = interpreted()
    os.environ[TRITON_INTERPRET.name] = "1" if flag else "0"
    if before != flag:
        importlib.reload(sys.modules[__name__])
    return before


# ---------------------------------------------------------------------------
# matmul: C[b] = A[b] @ B[b], any strides (so transposed operands are views)
# ---------------------------------------------------------------------------


@triton.jit
def _matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_cb, s_cm, s_cn,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, TF32: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_b = tl.program_id(2)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptr += pid_b * s_ab
    b_ptr += pid_b * s_bb
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * s_am + kk[None, :] * s_ak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * s_bk + rn[None, :] * s_bn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        if TF32:
            a = _round_tf32(a)
            b = _round_tf32(b)
        acc += tl.dot(a, b, input_precision="ieee")
    c = c_ptr + pid_b * s_cb + rm[:, None] * s_cm + rn[None, :] * s_cn
    tl.store(c, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a: torch.Tensor, b: torch.Tensor, *, block=(32, 32, 32), tf32: bool = False) -> torch.Tensor:
    """``a @ b`` for 2-D or batched 3-D fp32 operands with any strides; fp32 accumulation.

    ``tf32=True`` rounds the operands to TF32 (10 mantissa bits) first, as tensor
    cores do when a problem allows TF32.
    """
    batched = a.dim() == 3
    a3 = a if batched else a.unsqueeze(0)
    b3 = b if batched else b.unsqueeze(0)
    nb, m, k = a3.shape
    n = b3.shape[2]
    c = torch.empty((nb, m, n), device=a.device, dtype=torch.float32)
    bm, bn, bk = block
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn), nb)
    _matmul_kernel[grid](
        a3, b3, c, m, n, k,
        a3.stride(0), a3.stride(1), a3.stride(2), b3.stride(0), b3.stride(1), b3.stride(2),
        c.stride(0), c.stride(1), c.stride(2),
        BM=bm, BN=bn, BK=bk, TF32=tf32,
    )
    return c if batched else c[0]


# ---------------------------------------------------------------------------
# elementwise activations
# ---------------------------------------------------------------------------

#: Activations the unary kernel knows, with the torch function each one matches.
UNARY_OPS = (
    "relu", "leaky_relu", "gelu", "silu", "elu", "selu", "hardtanh",
    "softplus", "sigmoid", "softsign", "hardsigmoid", "hardswish",
)

_SELU_ALPHA = 1.6732632423543772
_SELU_SCALE = 1.0507009873554805


@triton.jit
def _unary_kernel(x_ptr, y_ptr, n, alpha, beta, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    if OP == "relu":
        y = tl.where(x > 0, x, 0.0)
    elif OP == "leaky_relu":
        y = tl.where(x > 0, x, x * alpha)
    elif OP == "gelu":
        y = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    elif OP == "silu":
        y = x * tl.sigmoid(x)
    elif OP == "elu":
        y = tl.where(x > 0, x, alpha * _expm1(x))
    elif OP == "selu":
        y = 1.0507009873554805 * tl.where(x > 0, x, 1.6732632423543772 * _expm1(x))
    elif OP == "hardtanh":
        y = tl.minimum(tl.maximum(x, alpha), beta)
    elif OP == "softplus":
        # torch: x above the threshold 20; log1p(exp(x)) otherwise (exp(x) when tiny).
        y = tl.where(x > 20.0, x, tl.where(x < -15.0, tl.exp(x), tl.log(1.0 + tl.exp(x))))
    elif OP == "sigmoid":
        y = tl.sigmoid(x)
    elif OP == "softsign":
        y = x / (1.0 + tl.abs(x))
    elif OP == "hardsigmoid":
        y = tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) / 6.0
    else:  # hardswish
        y = x * (tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) / 6.0)
    tl.store(y_ptr + offs, y, mask=mask)


def unary(x: torch.Tensor, op: str, *, alpha: float = 0.0, beta: float = 0.0, block: int = 1024) -> torch.Tensor:
    """Apply activation ``op`` (one of :data:`UNARY_OPS`) elementwise to a contiguous copy of ``x``."""
    if op not in UNARY_OPS:
        raise ValueError(f"unknown activation {op!r}: allowed are {', '.join(UNARY_OPS)}")
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    _unary_kernel[(triton.cdiv(n, block),)](x, y, n, float(alpha), float(beta), OP=op, BLOCK=block)
    return y


# ---------------------------------------------------------------------------
# row softmax / log_softmax over the last dim (online max and sum)
# ---------------------------------------------------------------------------


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, N, LOG: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * N
    y_row = y_ptr + row * N
    cols = tl.arange(0, BLOCK)
    m_vec = tl.full((BLOCK,), float("-inf"), tl.float32)
    s_vec = tl.zeros((BLOCK,), tl.float32)
    for c0 in range(0, N, BLOCK):
        x = tl.load(x_row + c0 + cols, mask=c0 + cols < N, other=float("-inf"))
        m_new = tl.maximum(m_vec, x)
        live = m_new > float("-inf")  # a lane that has seen only -inf holds no mass
        s_vec = tl.where(live, s_vec * tl.exp(m_vec - m_new) + tl.exp(x - m_new), 0.0)
        m_vec = m_new
    m = tl.max(m_vec, 0)
    s = tl.sum(tl.where(m_vec > float("-inf"), s_vec * tl.exp(m_vec - m), 0.0), 0)
    for c0 in range(0, N, BLOCK):
        mask = c0 + cols < N
        x = tl.load(x_row + c0 + cols, mask=mask, other=float("-inf"))
        if LOG:
            y = x - m - tl.log(s)
        else:
            y = tl.exp(x - m) / s
        tl.store(y_row + c0 + cols, y, mask=mask)


def softmax(x: torch.Tensor, *, log: bool = False, block: int = 1024) -> torch.Tensor:
    """Softmax (``log=True``: log_softmax) over the last dim."""
    x = x.contiguous()
    n = x.shape[-1]
    y = torch.empty_like(x)
    block = min(block, _pow2(n))
    _softmax_kernel[(x.numel() // n,)](x, y, n, LOG=log, BLOCK=block)
    return y


# ---------------------------------------------------------------------------
# norms over the last dim: layer norm, RMS norm, L2 normalisation
# ---------------------------------------------------------------------------


@triton.jit
def _row_norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, N, eps, KIND: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * N
    y_row = y_ptr + row * N
    cols = tl.arange(0, BLOCK)
    if KIND == "layer":
        acc = tl.zeros((BLOCK,), tl.float32)
        for c0 in range(0, N, BLOCK):
            acc += tl.load(x_row + c0 + cols, mask=c0 + cols < N, other=0.0)
        mean = tl.sum(acc, 0) / N
        acc = tl.zeros((BLOCK,), tl.float32)
        for c0 in range(0, N, BLOCK):
            mask = c0 + cols < N
            d = tl.where(mask, tl.load(x_row + c0 + cols, mask=mask, other=0.0) - mean, 0.0)
            acc += d * d
        scale = 1.0 / tl.sqrt(tl.sum(acc, 0) / N + eps)
    else:
        mean = 0.0
        acc = tl.zeros((BLOCK,), tl.float32)
        for c0 in range(0, N, BLOCK):
            x = tl.load(x_row + c0 + cols, mask=c0 + cols < N, other=0.0)
            acc += x * x
        if KIND == "rms":
            scale = 1.0 / tl.sqrt(tl.sum(acc, 0) / N + eps)
        else:  # l2
            scale = 1.0 / tl.sqrt(tl.sum(acc, 0))
    for c0 in range(0, N, BLOCK):
        mask = c0 + cols < N
        x = tl.load(x_row + c0 + cols, mask=mask, other=0.0)
        y = (x - mean) * scale
        if KIND != "l2":
            y = y * tl.load(w_ptr + c0 + cols, mask=mask, other=0.0)
        if KIND == "layer":
            y = y + tl.load(b_ptr + c0 + cols, mask=mask, other=0.0)
        tl.store(y_row + c0 + cols, y, mask=mask)


def row_norm(x, kind: str, *, weight=None, bias=None, eps: float = 1e-5, normalized: int | None = None, block: int = 1024):
    """Normalise each row of the last ``normalized`` elements (default: the last dim).

    ``kind``: ``layer`` (mean/variance, weight and bias), ``rms`` (weight), ``l2``.
    """
    x = x.contiguous()
    n = normalized if normalized is not None else x.shape[-1]
    y = torch.empty_like(x)
    w = weight.contiguous() if weight is not None else x
    b = bias.contiguous() if bias is not None else x
    block = min(block, _pow2(n))
    _row_norm_kernel[(x.numel() // n,)](x, w, b, y, n, float(eps), KIND=kind, BLOCK=block)
    return y


@triton.jit
def _affine_channel_kernel(x_ptr, scale_ptr, shift_ptr, y_ptr, n, C, HW, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    c = (offs // HW) % C
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = x * tl.load(scale_ptr + c, mask=mask, other=0.0) + tl.load(shift_ptr + c, mask=mask, other=0.0)
    tl.store(y_ptr + offs, y, mask=mask)


@triton.jit
def _bn_coeff_kernel(mean_ptr, var_ptr, w_ptr, b_ptr, scale_ptr, shift_ptr, C, eps, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < C
    inv = 1.0 / tl.sqrt(tl.load(var_ptr + offs, mask=mask, other=1.0) + eps)
    scale = tl.load(w_ptr + offs, mask=mask, other=0.0) * inv
    shift = tl.load(b_ptr + offs, mask=mask, other=0.0) - tl.load(mean_ptr + offs, mask=mask, other=0.0) * scale
    tl.store(scale_ptr + offs, scale, mask=mask)
    tl.store(shift_ptr + offs, shift, mask=mask)


def batch_norm_inference(x, running_mean, running_var, weight, bias, eps: float = 1e-5, *, block: int = 1024):
    """BatchNorm in eval mode on NCHW (or NC) input: y = (x - mean) / sqrt(var + eps) * w + b."""
    x = x.contiguous()
    c = x.shape[1]
    hw = x.numel() // (x.shape[0] * c)
    scale = torch.empty(c, device=x.device, dtype=torch.float32)
    shift = torch.empty_like(scale)
    _bn_coeff_kernel[(triton.cdiv(c, 128),)](running_mean, running_var, weight, bias, scale, shift, c, float(eps), BLOCK=128)
    y = torch.empty_like(x)
    n = x.numel()
    _affine_channel_kernel[(triton.cdiv(n, block),)](x, scale, shift, y, n, c, hw, BLOCK=block)
    return y


# ---------------------------------------------------------------------------
# reductions over one dim, seen as (outer, R, inner)
# ---------------------------------------------------------------------------


@triton.jit
def _sum_kernel(x_ptr, y_ptr, R, INNER, MEAN: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    o = tl.program_id(0).to(tl.int64)
    ri = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    rr = tl.arange(0, BLOCK_R)
    base = x_ptr + o * R * INNER
    acc = tl.zeros((BLOCK_R, BLOCK_I), tl.float32)
    for r0 in range(0, R, BLOCK_R):
        r = r0 + rr
        acc += tl.load(base + r[:, None] * INNER + ri[None, :], mask=(r[:, None] < R) & (ri[None, :] < INNER), other=0.0)
    total = tl.sum(acc, 0)
    if MEAN:
        total = total / R
    tl.store(y_ptr + o * INNER + ri, total, mask=ri < INNER)


@triton.jit
def _max_kernel(x_ptr, y_ptr, R, INNER, NEG: tl.constexpr, ARG: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    # min is max of -x; ties keep the first index, as torch does.
    o = tl.program_id(0).to(tl.int64)
    ri = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    rr = tl.arange(0, BLOCK_R)
    base = x_ptr + o * R * INNER
    best = tl.full((BLOCK_I,), float("-inf"), tl.float32)
    best_i = tl.zeros((BLOCK_I,), tl.int32)
    for r0 in range(0, R, BLOCK_R):
        r = r0 + rr
        mask = (r[:, None] < R) & (ri[None, :] < INNER)
        x = tl.load(base + r[:, None] * INNER + ri[None, :], mask=mask, other=0.0)
        if NEG:
            x = -x
        x = tl.where(mask, x, float("-inf"))
        tile_best = tl.max(x, 0)
        tile_i = tl.min(tl.where((x == tile_best[None, :]) & mask, r[:, None], 2147483647), 0)
        better = tile_best > best
        best_i = tl.where(better, tile_i, best_i)
        best = tl.where(better, tile_best, best)
    if ARG:
        tl.store(y_ptr + o * INNER + ri, best_i.to(tl.int64), mask=ri < INNER)
    else:
        if NEG:
            best = -best
        tl.store(y_ptr + o * INNER + ri, best, mask=ri < INNER)


def _outer_r_inner(x: torch.Tensor, dim: int):
    dim = dim % x.dim()
    shape = list(x.shape)
    outer = math.prod(shape[:dim])
    inner = math.prod(shape[dim + 1:])
    return dim, outer, shape[dim], inner, shape[:dim] + shape[dim + 1:]


def reduce(x: torch.Tensor, dim: int, op: str, *, block_r: int = 32, block_i: int = 32) -> torch.Tensor:
    """Reduce ``x`` over ``dim`` with ``op`` in sum, mean, max, min, argmax, argmin."""
    x = x.contiguous()
    dim, outer, r, inner, out_shape = _outer_r_inner(x, dim)
    grid = (outer, triton.cdiv(inner, block_i))
    if op in ("sum", "mean"):
        y = torch.empty(out_shape, device=x.device, dtype=torch.float32)
        _sum_kernel[grid](x, y, r, inner, MEAN=op == "mean", BLOCK_R=block_r, BLOCK_I=block_i)
    elif op in ("max", "min", "argmax", "argmin"):
        arg = op.startswith("arg")
        y = torch.empty(out_shape, device=x.device, dtype=torch.int64 if arg else torch.float32)
        _max_kernel[grid](x, y, r, inner, NEG=op.endswith("min"), ARG=arg, BLOCK_R=block_r, BLOCK_I=block_i)
    else:
        raise ValueError(f"unknown reduction {op!r}: allowed are sum, mean, max, min, argmax, argmin")
    return y


# ---------------------------------------------------------------------------
# scans over the last dim
# ---------------------------------------------------------------------------

#: Scan modes: inclusive cumsum, exclusive cumsum, reverse cumsum, masked cumsum, cumprod.
SCAN_MODES = ("inclusive", "exclusive", "reverse", "masked", "prod")


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _scan_kernel(x_ptr, m_ptr, y_ptr, L, MODE: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * L
    y_row = y_ptr + row * L
    cols = tl.arange(0, BLOCK)
    if MODE == "prod":
        carry = tl.sum(tl.zeros((BLOCK,), tl.float32), 0) + 1.0
    else:
        carry = tl.sum(tl.zeros((BLOCK,), tl.float32), 0)
    for c0 in range(0, L, BLOCK):
        pos = c0 + cols
        if MODE == "reverse":
            pos = L - 1 - pos  # walk the row from its end: a forward scan of the reversed row
        mask = (pos >= 0) & (pos < L)
        if MODE == "exclusive":
            # y[i] = sum of x[j] for j < i: the inclusive scan of x shifted right by one
            x = tl.load(x_row + pos - 1, mask=mask & (pos >= 1), other=0.0)
        else:
            x = tl.load(x_row + pos, mask=mask, other=0.0)
        if MODE == "masked":
            keep = tl.load(m_ptr + row * L + pos, mask=mask, other=0)
            x = tl.where(keep != 0, x, 0.0)
        if MODE == "prod":
            x = tl.where(mask, x, 1.0)
            y = tl.associative_scan(x, 0, _mul) * carry
            carry = carry * tl.reduce(x, 0, _mul)
        else:
            y = tl.cumsum(x, 0) + carry
            carry = carry + tl.sum(x, 0)
        tl.store(y_row + pos, y, mask=mask)


def scan(x: torch.Tensor, mode: str, *, mask: torch.Tensor | None = None, block: int = 256) -> torch.Tensor:
    """Scan the last dim of ``x``; ``mode`` is one of :data:`SCAN_MODES`."""
    if mode not in SCAN_MODES:
        raise ValueError(f"unknown scan mode {mode!r}: allowed are {', '.join(SCAN_MODES)}")
    x = x.contiguous()
    length = x.shape[-1]
    y = torch.empty_like(x)
    m = mask.contiguous().to(torch.int8) if mask is not None else x
    block = min(block, _pow2(length))
    _scan_kernel[(x.numel() // length,)](x, m, y, length, MODE=mode, BLOCK=block)
    return y


# ---------------------------------------------------------------------------
# losses: per-block partial sums of per-element terms
# ---------------------------------------------------------------------------

#: Elementwise loss terms the partial-sum kernel knows.
LOSS_TERMS = ("mse", "huber", "hinge", "kl")


@triton.jit
def _loss_terms_kernel(p_ptr, t_ptr, part_ptr, n, KIND: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    p = tl.load(p_ptr + offs, mask=mask, other=1.0)
    t = tl.load(t_ptr + offs, mask=mask, other=1.0)
    if KIND == "mse":
        d = p - t
        term = d * d
    elif KIND == "huber":
        d = p - t
        ad = tl.abs(d)
        term = tl.where(ad < 1.0, 0.5 * d * d, ad - 0.5)
    elif KIND == "hinge":
        term = tl.maximum(1.0 - p * t, 0.0)
    else:  # kl: target * (log target - log prediction), 0 where target is 0
        term = tl.where(t > 0, t * (tl.log(t) - tl.log(p)), 0.0)
    term = tl.where(mask, term, 0.0)
    tl.store(part_ptr + pid, tl.sum(term, 0))


def loss_sum(p: torch.Tensor, t: torch.Tensor, kind: str, *, block: int = 1024) -> torch.Tensor:
    """Sum over all elements of the loss term ``kind`` (one of :data:`LOSS_TERMS`), as a 0-d tensor."""
    p = p.contiguous()
    t = t.contiguous()
    n = p.numel()
    parts = torch.empty(triton.cdiv(n, block), device=p.device, dtype=torch.float32)
    _loss_terms_kernel[(parts.numel(),)](p, t, parts, n, KIND=kind, BLOCK=block)
    return parts.sum()


@triton.jit
def _cross_entropy_kernel(x_ptr, t_ptr, loss_ptr, C, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * C
    cols = tl.arange(0, BLOCK)
    m_vec = tl.full((BLOCK,), float("-inf"), tl.float32)
    s_vec = tl.zeros((BLOCK,), tl.float32)
    for c0 in range(0, C, BLOCK):
        x = tl.load(x_row + c0 + cols, mask=c0 + cols < C, other=float("-inf"))
        m_new = tl.maximum(m_vec, x)
        live = m_new > float("-inf")
        s_vec = tl.where(live, s_vec * tl.exp(m_vec - m_new) + tl.exp(x - m_new), 0.0)
        m_vec = m_new
    m = tl.max(m_vec, 0)
    s = tl.sum(tl.where(m_vec > float("-inf"), s_vec * tl.exp(m_vec - m), 0.0), 0)
    target = tl.load(t_ptr + row)
    x_t = tl.load(x_row + target)
    tl.store(loss_ptr + row, m + tl.log(s) - x_t)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, *, block: int = 1024) -> torch.Tensor:
    """Mean cross-entropy of (B, C) logits against (B,) class indexes."""
    logits = logits.contiguous()
    b, c = logits.shape
    losses = torch.empty(b, device=logits.device, dtype=torch.float32)
    _cross_entropy_kernel[(b,)](logits, targets.contiguous(), losses, c, BLOCK=min(block, _pow2(c)))
    return losses.mean()


# ---------------------------------------------------------------------------
# pooling over NCHW, no padding
# ---------------------------------------------------------------------------


@triton.jit
def _pool2d_kernel(x_ptr, y_ptr, n_out, H, W, OH, OW, KH: tl.constexpr, KW: tl.constexpr,
                   SH: tl.constexpr, SW: tl.constexpr, MAX: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_out
    ow = offs % OW
    oh = (offs // OW) % OH
    nc = (offs // (OW * OH)).to(tl.int64)
    base = x_ptr + nc * H * W
    if MAX:
        acc = tl.full((BLOCK,), float("-inf"), tl.float32)
    else:
        acc = tl.zeros((BLOCK,), tl.float32)
    for kh in tl.static_range(KH):
        for kw in tl.static_range(KW):
            v = tl.load(base + (oh * SH + kh) * W + (ow * SW + kw), mask=mask, other=0.0)
            if MAX:
                acc = tl.maximum(acc, v)
            else:
                acc += v
    if not MAX:
        acc = acc / (KH * KW)
    tl.store(y_ptr + offs, acc, mask=mask)


def pool2d(x: torch.Tensor, kernel: int | tuple, stride: int | tuple | None = None, *, op: str = "max", block: int = 256):
    """Max or average pooling over the last two dims of NCHW input (padding 0, dilation 1)."""
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    stride = stride if stride is not None else (kh, kw)
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    x = x.contiguous()
    h, w = x.shape[-2:]
    oh, ow = (h - kh) // sh + 1, (w - kw) // sw + 1
    y = torch.empty((*x.shape[:-2], oh, ow), device=x.device, dtype=x.dtype)
    n_out = y.numel()
    _pool2d_kernel[(triton.cdiv(n_out, block),)](
        x, y, n_out, h, w, oh, ow, KH=kh, KW=kw, SH=sh, SW=sw, MAX=op == "max", BLOCK=block
    )
    return y


# ---------------------------------------------------------------------------
# attention: softmax(Q K^T * scale) V, online softmax over key blocks
# ---------------------------------------------------------------------------


@triton.jit
def _attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, S, D, scale, CAUSAL: tl.constexpr,
                      BM: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    rm = pid_m * BM + tl.arange(0, BM)
    rd = tl.arange(0, BD)
    rn0 = tl.arange(0, BN)
    base = bh * S * D
    q = tl.load(q_ptr + base + rm[:, None] * D + rd[None, :], mask=(rm[:, None] < S) & (rd[None, :] < D), other=0.0)
    m_i = tl.full((BM,), float("-inf"), tl.float32)
    l_i = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, BD), tl.float32)
    for n0 in range(0, S, BN):
        rn = n0 + rn0
        kv_mask = (rn[:, None] < S) & (rd[None, :] < D)
        k = tl.load(k_ptr + base + rn[:, None] * D + rd[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + base + rn[:, None] * D + rd[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        valid = rn[None, :] < S
        if CAUSAL:
            valid = valid & (rn[None, :] <= rm[:, None])
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        live = m_new > float("-inf")
        alpha = tl.where(live, tl.exp(m_i - m_new), 1.0)
        p = tl.where(live[:, None], tl.exp(s - m_new[:, None]), 0.0)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + base + rm[:, None] * D + rd[None, :], out, mask=(rm[:, None] < S) & (rd[None, :] < D))


def attention(q, k, v, *, causal: bool = False, block=(32, 32)) -> torch.Tensor:
    """Scaled dot-product attention on (B, H, S, D) fp32 tensors, scale 1/sqrt(D)."""
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    *lead, s, d = q.shape
    bh = math.prod(lead)
    o = torch.empty_like(q)
    bm, bn = block
    _attention_kernel[(triton.cdiv(s, bm), bh)](
        q, k, v, o, s, d, 1.0 / math.sqrt(d), CAUSAL=causal, BM=bm, BN=bn, BD=_pow2(d)
    )
    return o
