"""The epilogue every GEMM kernel of :mod:`.gemm` and :mod:`.ieee_kernels` ends with.

One fixed order: ``fma(acc, alpha, fp32(beta * bias))`` (or ``acc * alpha`` without
bias), then one rounding to the output dtype (bf16 to nearest even with integer ops,
because the Triton interpreter truncates a bf16 cast). :mod:`.emulate` does the same.
"""

from __future__ import annotations

import triton
import triton.language as tl
from ..interpreter import skip_dead_overflow_checks

skip_dead_overflow_checks()  # under the interpreter only: kernelaudit.interpreter


@triton.jit
def outer_batch(a_ptr, b_ptr, bias_ptr, c_ptr, s_a0, s_b0, s_x0, s_c0):
    """The four pointers moved to this program's outer batch (grid dim 2): a GEMM batched
    over two dims ([B0, B1, ...], e.g. attention's batch and heads) reads strided views
    in place, with no copy to merge B0 and B1."""
    b0 = tl.program_id(2).to(tl.int64)
    return a_ptr + b0 * s_a0, b_ptr + b0 * s_b0, bias_ptr + b0 * s_x0, c_ptr + b0 * s_c0


@triton.jit
def epilogue(acc, bias_ptr, c_ptr, pid_b, rm, rn, mask_m, mask_n, s_xb, s_xm, s_xn, s_cb, s_cm, s_cn,
             alpha, beta, HAS_BIAS: tl.constexpr, OUT_BF16: tl.constexpr):
    """Both orders' epilogue, in one fixed order: ``fma(acc, alpha, beta * bias)`` (or
    ``acc * alpha``), then the store, bf16 rounded to nearest even with integer ops."""
    if HAS_BIAS:
        x = tl.load(bias_ptr + pid_b * s_xb + rm[:, None] * s_xm + rn[None, :] * s_xn,
                    mask=mask_m[:, None] & mask_n[None, :], other=0.0).to(tl.float32)
        acc = tl.fma(acc, alpha, x * beta)
    else:
        acc = acc * alpha
    c = c_ptr + pid_b * s_cb + rm[:, None] * s_cm + rn[None, :] * s_cn
    store_rounded(c, acc, mask_m[:, None] & mask_n[None, :], OUT_BF16)


@triton.jit
def round_bf16(value):
    """fp32 ``value`` rounded to bf16, nearest even, with integer ops: torch's and PTX
    cvt.rn.bf16.f32 bits (the Triton interpreter truncates a bf16 cast); NaN stays a
    quiet NaN."""
    bits = value.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    bits = tl.where(value != value, 0x7FC0, bits)
    return bits.to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def store_rounded(ptrs, value, mask, OUT_BF16: tl.constexpr):
    """Store fp32 ``value`` at ``ptrs``, rounded to nearest even (bf16: :func:`round_bf16`;
    any other dtype by its cast)."""
    if OUT_BF16:
        tl.store(ptrs, round_bf16(value), mask=mask)
    else:
        tl.store(ptrs, value.to(ptrs.dtype.element_ty), mask=mask)
