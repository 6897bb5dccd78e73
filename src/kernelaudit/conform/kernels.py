"""The project's Triton W8A8 GEMM: int8 x int8 -> int32 (``tl.dot``), fused epilogue.

One kernel serves every :class:`Recipe` (except the reference-only ``exact``) and every
planted :class:`Fault`: the epilogue's choices are constexprs, so each variant compiles
to straight-line code. Roundings are written out, not left to casts: the Triton
interpreter casts fp32 to bf16 by truncation (seen with triton 3.9, 2026-12-03), so the
kernel rounds to bf16 with integer bit arithmetic, which is the same on both. It is
launched with ``enable_fp_fusion=False`` so that no multiply and add are contracted into
an FMA (which would round once where the recipe rounds twice).

On Hopper, loading the weight as ``[BLOCK_N, BLOCK_K]`` tiles and transposing in
registers keeps both operands K-major, as int8 wgmma wants.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelaudit import config

config.use_interpreter_without_cuda()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from ..interpreter import skip_dead_overflow_checks  # noqa: E402

skip_dead_overflow_checks()  # under the interpreter only: kernelaudit.interpreter

from .faults import FAULTS, get_fault, swapped_order  # noqa: E402
from .operands import TORCH_DTYPES, check_call, scale_vector  # noqa: E402
from .recipe import Recipe  # noqa: E402

ORDER = {"act_first": 0, "weight_first": 1, "product": 2}
BIAS = {"none": 0, "before_cast": 1, "after_cast": 2}
OUT = {"fp32": 0, "bf16": 1, "fp16": 2, "int8": 3}
F = {name: f.code for name, f in FAULTS.items()}


@dataclass(frozen=True)
class TileConfig:
    """Tiles and launch options: tuning arguments, chosen by the benchmark's sweep. The
    defaults won every M >= 1024 point on the H200 (2026-12-03, K = N = 4096 and 8192)."""

    block_m: int = 256
    block_n: int = 128
    block_k: int = 128
    group_m: int = 8
    num_warps: int = 8
    num_stages: int = 3


INTERPRETER_TILES = TileConfig(16, 32, 32, 4, 4, 1)


@triton.jit
def _round_bf16(x):
    """fp32 -> the nearest bf16 (ties to even), still held in fp32: integer bit arithmetic."""
    u = x.to(tl.uint32, bitcast=True)
    u = u + (0x7FFF + ((u >> 16) & 1))
    u = (u >> 16) << 16
    return u.to(tl.float32, bitcast=True)


@triton.jit
def _truncate_bf16(x):
    u = x.to(tl.uint32, bitcast=True)
    return ((u >> 16) << 16).to(tl.float32, bitcast=True)


@triton.jit
def _round_integer(v, ROUND: tl.constexpr):
    """fp32 -> an integral fp32: half to even (0), half away from zero (1), toward zero (2)."""
    if ROUND == 2:
        r = tl.where(v < 0, -tl.floor(-v), tl.floor(v))
    elif ROUND == 1:
        a = tl.abs(v)
        r = tl.floor(a)
        r = r + tl.where(a - r >= 0.5, 1.0, 0.0)  # a - r is exact
        r = tl.where(v < 0, -r, r)
    else:
        r = tl.floor(v)
        d = v - r
        odd = (r - 2.0 * tl.floor(r * 0.5)) == 1.0
        r = r + tl.where((d > 0.5) | ((d == 0.5) & odd), 1.0, 0.0)
    return r


@triton.jit
def w8a8_kernel(x_ptr, w_ptr, sx_ptr, sw_ptr, b_ptr, y_ptr, inv_out, M, N, K,
                stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_yn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                EVEN_K: tl.constexpr, ORDER: tl.constexpr, BIAS: tl.constexpr, OUT: tl.constexpr,
                ROUND: tl.constexpr, CLAMP_LO: tl.constexpr, FAULT: tl.constexpr):
    """One [BLOCK_M, BLOCK_N] tile of y = epilogue(x @ w^T). ORDER, BIAS, ROUND and CLAMP_LO
    are the recipe's choices (faults that are another recipe's choice arrive through them);
    FAULT plants the faults that are no recipe's (see ``faults.py`` for the codes)."""
    # grouped launch order: GROUP_M row tiles share each weight tile while it is in L2
    pid = tl.program_id(0)
    n_m, n_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    width = GROUP_M * n_n
    first_m = (pid // width) * GROUP_M
    size_m = min(n_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % size_m
    pid_n = (pid % width) // size_m
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    # rows and columns past the edge load clamped indices (valid memory); their results are masked on store
    rmc, rnc = tl.minimum(rm, M - 1), tl.minimum(rn, N - 1)
    x_ptrs = x_ptr + rmc[:, None].to(tl.int64) * stride_xm + rk[None, :] * stride_xk
    w_ptrs = w_ptr + rnc[:, None].to(tl.int64) * stride_wn + rk[None, :] * stride_wk
    sxi = rmc
    swi = rnc
    if FAULT == 9:  # neighbour_channel_scale
        swi = tl.where(rn == N // 2 - 1, N // 2, rnc)
    if FAULT == 10:  # neighbour_token_scale
        sxi = tl.where(rm == M // 2 - 1, M // 2, rmc)
    sx = tl.load(sx_ptr + sxi)[:, None]
    sw = tl.load(sw_ptr + swi)[None, :]
    if FAULT == 1:  # scales_in_bf16
        sx = _round_bf16(sx)
        sw = _round_bf16(sw)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    accp = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(x_ptrs)
            b = tl.load(w_ptrs)
        else:
            kmask = rk[None, :] < K - k0 * BLOCK_K
            a = tl.load(x_ptrs, mask=kmask, other=0)
            b = tl.load(w_ptrs, mask=kmask, other=0)
        if FAULT == 11:  # fp16_partial_sums: each slice's scaled sum stored in fp16, added in fp32
            part = tl.dot(a, tl.trans(b), out_dtype=tl.int32)
            accp += ((part.to(tl.float32) * sx) * sw).to(tl.float16).to(tl.float32)
        else:
            acc = tl.dot(a, tl.trans(b), acc, out_dtype=tl.int32)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk
    # epilogue: every rounding below is one the recipe names
    accf = acc.to(tl.float32)
    if FAULT == 11:
        t = accp
    elif ORDER == 0:
        t = (accf * sx) * sw
    elif ORDER == 1:
        t = (accf * sw) * sx
    else:
        t = accf * (sx * sw)
    if BIAS != 0:
        bias = tl.load(b_ptr + rnc)[None, :]
        if FAULT == 4:  # bias_in_bf16
            bias = _round_bf16(bias)
    if BIAS == 1:
        t = t + bias
    if OUT == 3:
        v = tl.minimum(tl.maximum(t * inv_out, -1048576.0), 1048576.0)
        r = _round_integer(v, ROUND)
        if FAULT == 12:  # no_saturation: wraps modulo 256
            y = r.to(tl.int32).to(tl.int8)
        else:
            y = tl.minimum(tl.maximum(r, CLAMP_LO), 127.0).to(tl.int8)
    elif OUT == 1:
        if FAULT == 5:  # truncating_cast
            yf = _truncate_bf16(t)
        else:
            yf = _round_bf16(t)
        if BIAS == 2:
            yf = _round_bf16(yf + _round_bf16(bias))  # bf16 + bf16: exact or innocuously double rounded
        y = yf.to(tl.bfloat16)  # exact: yf holds a bf16 number
    elif OUT == 2:
        y = t.to(tl.float16)
        if BIAS == 2:
            y = (y.to(tl.float32) + bias.to(tl.float16).to(tl.float32)).to(tl.float16)
    else:
        y = t
        if BIAS == 2:
            y = t + bias
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    y_ptrs = y_ptr + rm[:, None].to(tl.int64) * stride_ym + rn[None, :] * stride_yn
    tl.store(y_ptrs, y, mask=mask)


def epilogue_constants(recipe: Recipe, code: int) -> tuple[int, int, int, float]:
    """``(ORDER, BIAS, ROUND, CLAMP_LO)`` for ``recipe``, with a fault that is another
    recipe's choice (swapped order, bias after the cast, rounding, clamp) applied."""
    order = ORDER[swapped_order(recipe.scale_order) if code == F["scale_order_swapped"] else recipe.scale_order]
    bias = BIAS["after_cast" if code == F["bias_after_cast"] else recipe.bias]
    rnd = 2 if code == F["truncating_requant"] else 1 if (
        recipe.rounding == "half_away" or code == F["half_away_rounding"]) else 0
    clamp_lo = -128.0 if code == F["full_clamp_range"] else float(recipe.clamp_range[0])
    return order, bias, rnd, clamp_lo


def default_tiles(m: int, device) -> TileConfig:
    """The tile for ``m`` rows: the H200 sweep's winners by M (benchmarks/results/
    2026-12-03-h200-conform-int8); small M won by 16 x 128 x 256 at 3 of 4 points."""
    if torch.device(device).type != "cuda":
        return INTERPRETER_TILES
    if m <= 16:
        return TileConfig(16, 128, 256, 1, 4, 4)
    if m <= 256:
        return TileConfig(64, 128, 128, 8, 4, 4)
    return TileConfig()


def triton_w8a8(xq, wq, sx, sw, *, bias=None, out_scale=None, recipe: Recipe = Recipe(),
                fault: str | None = None, tiles: TileConfig | None = None) -> torch.Tensor:
    """The W8A8 GEMM ``recipe`` in one Triton launch (``fault`` plants a mistake)."""
    check_call(xq, wq, sx, sw, bias, out_scale, recipe)
    f = get_fault(fault)
    code = f.code if f is not None and f.applies(recipe) else 0
    order, bias_mode, rnd, clamp_lo = epilogue_constants(recipe, code)
    m, k = xq.shape
    n = wq.shape[0]
    dev = xq.device
    tiles = tiles or default_tiles(m, dev)
    sxv, swv = scale_vector(sx, m, "sx", dev), scale_vector(sw, n, "sw", dev)
    b = swv if bias is None else bias.to(device=dev, dtype=torch.float32).contiguous()
    inv = 0.0 if out_scale is None else float((1.0 / torch.as_tensor(out_scale, dtype=torch.float64)).float())
    y = torch.empty(m, n, dtype=TORCH_DTYPES[recipe.out], device=dev)
    grid = (triton.cdiv(m, tiles.block_m) * triton.cdiv(n, tiles.block_n),)
    w8a8_kernel[grid](
        xq, wq, sxv, swv, b, y, inv, m, n, k,
        xq.stride(0), xq.stride(1), wq.stride(0), wq.stride(1), y.stride(0), y.stride(1),
        BLOCK_M=tiles.block_m, BLOCK_N=tiles.block_n, BLOCK_K=tiles.block_k, GROUP_M=tiles.group_m,
        EVEN_K=k % tiles.block_k == 0, ORDER=order, BIAS=bias_mode,
        OUT=OUT[recipe.out], ROUND=rnd, CLAMP_LO=clamp_lo, FAULT=code,
        num_warps=tiles.num_warps, num_stages=tiles.num_stages, enable_fp_fusion=False)
    return y
