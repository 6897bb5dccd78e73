"""Batch-invariant companions of the GEMMs: RMSNorm, LayerNorm, softmax, log-softmax and
attention.

Each row is reduced in one order fixed by the row length alone: chunks of ``block``
columns folded left to right into a ``[block]`` fp32 accumulator, then one ``tl.sum`` of
that accumulator; a program holds ``rows_for(n)`` rows. Both numbers come from the row
length, never from the number of rows. So a row's bits do not depend on how many rows there are or where it
sits. The ``tl.sum`` tree is fixed by the compiled layout: run-to-run and batch
invariant on one GPU architecture (the CPU emulator reproduces the ``ieee`` GEMM, not
these reductions).

Attention is composed from the fixed-order ``bmm`` and :func:`softmax`: scores
``q @ k^T * scale`` (+ mask), softmax over the whole key axis in one piece (one split,
fixed by the shape), then ``p @ v``. Decode (one query) and prefill (many) take the
same path, so a query row's bits do not depend on the batch, on the number of queries
computed with it (causal masking is by position) or on padding of other sequences.
"""

from __future__ import annotations

import math

from .. import config

config.use_interpreter_without_cuda()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from ..errors import InvalidArgument  # noqa: E402
from . import gemm  # noqa: E402
from .epilogue import store_rounded  # noqa: E402

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def block_for(n: int) -> int:
    """The chunk width for rows of ``n`` (a function of ``n`` only)."""
    return min(1024, triton.next_power_of_2(max(n, 16)))


def rows_for(n: int) -> int:
    """Rows per program for rows of ``n`` (a function of ``n`` only, so a row's slot
    layout never depends on how many rows there are)."""
    return max(1, min(32, 4096 // block_for(n)))


@triton.jit
def _norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, R, N, s_x, s_y, eps,
                 RMS: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                 ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    mask_r = rows < R
    x_rows = x_ptr + rows[:, None] * s_x          # [ROWS, 1]
    cols = tl.arange(0, BLOCK)[None, :]           # [1, BLOCK]
    acc = tl.zeros((ROWS, BLOCK), dtype=tl.float32)
    mean = tl.zeros((ROWS,), dtype=tl.float32)
    if not RMS:
        for c0 in range(0, N, BLOCK):
            x = tl.load(x_rows + c0 + cols, mask=mask_r[:, None] & (c0 + cols < N), other=0.0).to(tl.float32)
            acc += x
        mean = tl.sum(acc, axis=1) / N
        acc = tl.zeros((ROWS, BLOCK), dtype=tl.float32)
    for c0 in range(0, N, BLOCK):
        m = mask_r[:, None] & (c0 + cols < N)
        x = tl.load(x_rows + c0 + cols, mask=m, other=0.0).to(tl.float32)
        d = tl.where(m, x - mean[:, None], 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=1) / N + eps)
    for c0 in range(0, N, BLOCK):
        m = mask_r[:, None] & (c0 + cols < N)
        x = tl.load(x_rows + c0 + cols, mask=m, other=0.0).to(tl.float32)
        y = (x - mean[:, None]) * rstd[:, None]
        if HAS_W:
            y = y * tl.load(w_ptr + c0 + cols, mask=c0 + cols < N, other=0.0).to(tl.float32)
        if HAS_B:
            y = y + tl.load(b_ptr + c0 + cols, mask=c0 + cols < N, other=0.0).to(tl.float32)
        tl.store(y_ptr + rows[:, None] * s_y + c0 + cols, y.to(y_ptr.dtype.element_ty), mask=m)


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, R, N, s_x, s_y, LQ, LOG: tl.constexpr, CAUSAL: tl.constexpr,
                    OUT_BF16: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    # CAUSAL: rows are query positions i = row % LQ that see columns 0..i (the others read
    # as -inf, so they come out 0), as attention's causal mask would have set them
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    mask_r = rows < R
    x_rows = x_ptr + rows[:, None] * s_x          # [ROWS, 1]
    cols = tl.arange(0, BLOCK)[None, :]           # [1, BLOCK]
    last = (rows % LQ)[:, None] if CAUSAL else N  # the last column a row sees
    mx = tl.full((ROWS, BLOCK), float("-inf"), dtype=tl.float32)
    for c0 in range(0, N, BLOCK):
        m = mask_r[:, None] & (c0 + cols < N) & (c0 + cols <= last)
        mx = tl.maximum(mx, tl.load(x_rows + c0 + cols, mask=m, other=float("-inf")).to(tl.float32))
    top = tl.max(mx, axis=1)
    top = tl.where(top == float("-inf"), 0.0, top)[:, None]  # an all -inf row: NaN like torch, via 0/0
    acc = tl.zeros((ROWS, BLOCK), dtype=tl.float32)
    for c0 in range(0, N, BLOCK):
        m = mask_r[:, None] & (c0 + cols < N) & (c0 + cols <= last)
        acc += tl.exp(tl.load(x_rows + c0 + cols, mask=m, other=float("-inf")).to(tl.float32) - top)
    total = tl.where(mask_r, tl.sum(acc, axis=1), 1.0)[:, None]  # rows past the end: no 0/0
    for c0 in range(0, N, BLOCK):
        m = mask_r[:, None] & (c0 + cols < N)
        x = tl.load(x_rows + c0 + cols, mask=m & (c0 + cols <= last), other=float("-inf")).to(tl.float32)
        if LOG:
            y = x - top - tl.log(total)
        else:
            y = tl.exp(x - top) / total
        store_rounded(y_ptr + rows[:, None] * s_y + c0 + cols, y, m, OUT_BF16)


def _rows(x: torch.Tensor, what: str) -> torch.Tensor:
    if x.dtype not in FLOAT_DTYPES:
        raise InvalidArgument(f"Cannot have {what} dtype={x.dtype}: allowed values are "
                              f"{', '.join(map(str, FLOAT_DTYPES))}")
    return x.reshape(-1, x.shape[-1]).contiguous() if x.numel() else x.reshape(-1, max(x.shape[-1], 1))


def _norm(x, weight, bias, eps, rms: bool):
    x2 = _rows(x, "x")
    y = torch.empty_like(x2)
    if x2.numel():
        n = x2.shape[1]
        w = weight.contiguous() if weight is not None else x2
        b = bias.contiguous() if bias is not None else x2
        r = x2.shape[0]
        _norm_kernel[(triton.cdiv(r, rows_for(n)),)](
            x2, w, b, y, r, n, x2.stride(0), y.stride(0), float(eps), RMS=rms, HAS_W=weight is not None,
            HAS_B=bias is not None, ROWS=rows_for(n), BLOCK=block_for(n))
    return y.reshape(x.shape)


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float | None = None) -> torch.Tensor:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last dim, each row in a fixed order
    (``eps`` None: the dtype's machine epsilon, as torch)."""
    eps = torch.finfo(x.dtype).eps if eps is None else eps
    return _norm(x, weight, None, eps, rms=True)


def layer_norm(x: torch.Tensor, weight=None, bias=None, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm over the last dim (two passes: mean, then centred variance)."""
    return _norm(x, weight, bias, eps, rms=False)


def _softmax(x: torch.Tensor, dim: int, log: bool, dtype=None) -> torch.Tensor:
    if dtype is not None:
        x = x.to(dtype)
    dim = dim % max(x.dim(), 1)
    moved = x.movedim(dim, -1) if x.dim() else x.reshape(1)
    x2 = _rows(moved, "x")
    y = torch.empty_like(x2)
    if x2.numel():
        r, n = x2.shape
        _softmax_kernel[(triton.cdiv(r, rows_for(n)),)](x2, y, r, n, x2.stride(0), y.stride(0), 1, LOG=log,
                                                        CAUSAL=False, OUT_BF16=y.dtype == torch.bfloat16,
                                                        ROWS=rows_for(n), BLOCK=block_for(n))
    y = y.reshape(moved.shape)
    return y.movedim(-1, dim) if x.dim() else y.reshape(())


def softmax(x: torch.Tensor, dim: int = -1, dtype=None) -> torch.Tensor:
    return _softmax(x, dim, False, dtype)


def log_softmax(x: torch.Tensor, dim: int = -1, dtype=None) -> torch.Tensor:
    return _softmax(x, dim, True, dtype)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None,
              *, is_causal: bool = False, scale: float | None = None, order: str = "ieee",
              enable_gqa: bool = False) -> torch.Tensor:
    """``softmax(q @ k^T * scale + mask) @ v`` for q [..., Lq, E], k [..., Lk, E], v [..., Lk, Ev]
    (SDPA's contract without dropout). ``is_causal`` is SDPA's: query i sees keys 0..i
    (top-left aligned when Lq != Lk); a KV-cache decode step passes ``is_causal=False``."""
    *lead, lq, e = q.shape
    lk = k.shape[-2]
    if enable_gqa and k.shape[-3] != q.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(rep, dim=-3), v.repeat_interleave(rep, dim=-3)
    k = k.expand(*lead, lk, e)
    v = v.expand(*lead, lk, v.shape[-1])
    scale = 1.0 / math.sqrt(e) if scale is None else scale
    if len(lead) == 2 and q.dtype == k.dtype == v.dtype:
        return _attention4d(q, k, v, attn_mask, is_causal, scale, order)
    q3, k3, v3 = q.reshape(-1, lq, e), k.reshape(-1, lk, e), v.reshape(-1, lk, v.shape[-1])
    scores = gemm.bmm(q3, k3.transpose(1, 2), order=order, out_dtype=torch.float32)  # [B*, Lq, Lk]
    scores = scores * scale
    if is_causal:
        keep = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        m = attn_mask.expand(*lead, lq, lk).reshape(-1, lq, lk)
        scores = scores.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else scores + m.float()
    p = softmax(scores, -1).to(v.dtype)
    out = gemm.bmm(p, v3, order=order)
    return out.reshape(*lead, lq, v.shape[-1]).to(q.dtype)


def _attention4d(q, k, v, attn_mask, is_causal: bool, scale: float, order: str) -> torch.Tensor:
    """:func:`attention` for [B, H, L, E] operands (the common case), the same arithmetic
    with fewer passes: q, k and v read in place by strides, the scale applied in the
    scores GEMM's epilogue (``acc * scale``: the one rounding ``scores * scale`` makes),
    the causal mask inside the softmax, ``p`` written in v's dtype, and the output laid out
    [B, L, H, E] (returned as its [B, H, L, E] view), so ``out.transpose(1, 2).reshape(B,
    L, H * E)`` is a view as after fused attention."""
    b0, b1, lq, _ = q.shape
    lk, ev = k.shape[-2], v.shape[-1]
    scores = gemm.matmul4d(q, k.transpose(-2, -1), order=order, alpha=scale, out_dtype=torch.float32)
    if attn_mask is not None:
        m = attn_mask.expand(b0, b1, lq, lk)
        if m.dtype == torch.bool:
            scores.masked_fill_(~m, float("-inf"))
        else:
            scores.add_(m.float())
    rows = scores.view(-1, lk)
    p = torch.empty((b0, b1, lq, lk), dtype=v.dtype, device=q.device)
    if rows.numel():
        _softmax_kernel[(triton.cdiv(rows.shape[0], rows_for(lk)),)](
            rows, p, rows.shape[0], lk, rows.stride(0), lk, lq, LOG=False, CAUSAL=is_causal,
            OUT_BF16=p.dtype == torch.bfloat16, ROWS=rows_for(lk), BLOCK=block_for(lk))
    out = torch.empty((b0, lq, b1, ev), dtype=q.dtype, device=q.device).transpose(1, 2)
    return gemm.matmul4d(p, v, order=order, out=out)
