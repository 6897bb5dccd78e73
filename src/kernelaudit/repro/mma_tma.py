"""The ``mma`` order's persistent, TMA-fed kernel for plain 2-d GEMMs (mm, addmm, linear).

One program per SM walks the output tiles in grouped order; each tile's K loop loads
``bm x bk`` of ``a`` and ``bn x bk`` of the weight through tensor descriptors (TMA on
sm_90) and accumulates ``tl.dot`` in fp32, k ascending, exactly as
:func:`.gemm._mma_kernel` does: which program computes a tile, and how its operands
arrive, change no bit of it (the tensor cores' k16 chain is the same for every ``bk``
that is a multiple of 16). The epilogue is the shared one (``fma(acc, alpha, beta * bias)``
or ``acc * alpha``, bf16 rounded to nearest even).

It takes only what TMA can describe: 2-d, one 16-bit dtype for both operands, K the
contiguous dim of both (``x`` and ``weight.t()``), a row-major output, a bias that is
absent or one value per column, and 16-byte aligned rows and base pointers
(:func:`eligible`); anything else runs :func:`.gemm._mma_kernel`.

Device-side descriptors need scratch memory: the first launch on a GPU sets Triton's
allocator (``triton.set_allocator``) to one that takes it from torch's caching allocator.
"""

from __future__ import annotations

from .. import config

config.use_interpreter_without_cuda()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from .epilogue import round_bf16  # noqa: E402
from .ieee_kernels import grouped_pid  # noqa: E402

_ALLOCATOR_SET = False


@triton.jit
def mma_tma_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, s_am, s_bn, s_cm, alpha, beta, programs,
                   HAS_BIAS: tl.constexpr, OUT_BF16: tl.constexpr, INTERPRETED: tl.constexpr,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    """``c = epilogue(a @ b^T)`` for a [M, K], b [N, K] (the weight, K-contiguous), c [M, N];
    ``programs`` persistent programs (grid), each taking every ``programs``-th tile."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[s_am, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[s_bn, 1], block_shape=[BN, BK])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[s_cm, 1], block_shape=[BM, BN])
    tiles = tl.cdiv(M, BM) * tl.cdiv(N, BN)
    for tile in tl.range(tl.program_id(0), tiles, programs, flatten=True):
        pid_m, pid_n = grouped_pid(tile, M, N, BM, BN, GROUP_M)
        m0 = pid_m * BM
        n0 = pid_n * BN
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            a = a_desc.load([m0, k0])      # out of bounds: zeros (TMA), in K as in M and N
            b = b_desc.load([n0, k0])
            if INTERPRETED:  # the interpreter's 16-bit tl.dot is not a product (triton 3.9)
                acc = tl.dot(a.to(tl.float32), tl.trans(b.to(tl.float32)), acc, input_precision="tf32")
            else:
                acc = tl.dot(a, tl.trans(b), acc)
        if HAS_BIAS:
            rn = n0 + tl.arange(0, BN)
            x = tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)
            acc = tl.fma(acc, alpha, x[None, :] * beta)
        else:
            acc = acc * alpha
        if OUT_BF16:
            c_desc.store([m0, n0], round_bf16(acc))
        else:
            c_desc.store([m0, n0], acc.to(c_ptr.dtype.element_ty))


def _aligned(*values: int) -> bool:
    return all(v % 16 == 0 for v in values)


def eligible(a3: torch.Tensor, b3: torch.Tensor, bias3: torch.Tensor | None, out3: torch.Tensor) -> bool:
    """Whether TMA can describe this launch of :func:`.gemm._launch` ([B0, B, M, K] views):
    one plain 2-d GEMM of 16-bit operands, K contiguous in both, a row-major output, a
    per-column bias or none, every row and base pointer 16-byte aligned."""
    if a3.shape[0] != 1 or a3.shape[1] != 1 or a3.dtype != b3.dtype or a3.dtype not in (torch.bfloat16, torch.float16):
        return False
    a, b, c = a3[0, 0], b3[0, 0], out3[0, 0]      # a [M, K], b [K, N], c [M, N]
    if a.stride(1) != 1 or b.stride(0) != 1 or c.stride(1) != 1:
        return False
    if bias3 is not None:
        x = bias3[0, 0]  # read per column (bias_ptr + rn): any row stride where there is one row
        if (x.shape[0] != 1 and x.stride(0) != 0) or x.stride(1) != 1:
            return False
    e, ec = a.element_size(), c.element_size()
    return _aligned(a.data_ptr(), b.data_ptr(), c.data_ptr(), a.stride(0) * e, b.stride(1) * e, c.stride(0) * ec,
                    a.shape[1] * e)


def _alloc(size: int, alignment: int, stream):
    """Scratch for device-side tensor descriptors (Triton asks once per launch)."""
    return torch.empty(size, device="cuda", dtype=torch.int8)


def programs(device: torch.device, tiles: int) -> int:
    """Persistent programs: one per SM (at most one per tile); 4 under the interpreter."""
    if config.interpreter_requested() or device.type != "cuda":
        return max(1, min(4, tiles))
    return max(1, min(torch.cuda.get_device_properties(device).multi_processor_count, tiles))


def ensure_allocator() -> None:
    """Give Triton the scratch allocator that device-side tensor descriptors need (once;
    none under the interpreter)."""
    global _ALLOCATOR_SET
    if not _ALLOCATOR_SET and not config.interpreter_requested():
        triton.set_allocator(_alloc)
        _ALLOCATOR_SET = True


def weights_eligible(b3: torch.Tensor) -> bool:
    """Whether TMA can describe the weights of a plain 2-d launch ([1, 1, K, N] by strides,
    K contiguous) as rows of 32-bit words: the K-lanes ``ieee`` kernel's ``TMA``. The
    caller also checks that the words hold bf16 pairs (``gemm._weight_words``)."""
    if b3.shape[0] != 1 or b3.shape[1] != 1 or b3.stride(2) != 1:
        return False
    return _aligned(b3.data_ptr(), b3.stride(3) * b3.element_size())


def launch(a3, b3, bias3, out3, tiles, alpha: float, beta: float) -> None:
    """Run :func:`mma_tma_kernel` on an :func:`eligible` launch."""
    ensure_allocator()
    a, b, c = a3[0, 0], b3[0, 0], out3[0, 0]
    M, K = a.shape
    N = b.shape[1]
    x = bias3[0, 0] if bias3 is not None else c
    n = programs(a.device, triton.cdiv(M, tiles.bm) * triton.cdiv(N, tiles.bn))
    mma_tma_kernel[(n,)](a, b, x, c, M, N, K, a.stride(0), b.stride(1), c.stride(0), float(alpha), float(beta), n,
                         HAS_BIAS=bias3 is not None, OUT_BF16=c.dtype == torch.bfloat16,
                         INTERPRETED=config.interpreter_requested(),
                         BM=tiles.bm, BN=tiles.bn, BK=tiles.bk, GROUP_M=tiles.group_m,
                         num_warps=tiles.num_warps, num_stages=tiles.num_stages)
