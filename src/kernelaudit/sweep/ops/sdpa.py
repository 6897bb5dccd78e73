"""The explicit SDPA backends: ``sdpa.flash``, ``sdpa.efficient``, ``sdpa.cudnn`` and
``sdpa.math``, each the same attention pinned to one backend with
``torch.nn.attention.sdpa_kernel``.
"""

from __future__ import annotations

from typing import Callable

import torch

from .spec import FLOAT_DTYPES, OpSpec, Series

SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                 "cudnn": "CUDNN_ATTENTION", "math": "MATH"}


#: The dtypes each backend's cases run in; any other is a reference's (float32 for a
#: 16-bit case, float64 for a float32 one), which goes through the math backend.
SDPA_DTYPES = {"flash": ("float16", "bfloat16"), "cudnn": ("float16", "bfloat16"),
               "efficient": FLOAT_DTYPES, "math": FLOAT_DTYPES}


def _sdpa_call(backend: str) -> Callable:
    import torch.nn.functional as F

    own = {getattr(torch, d) for d in SDPA_DTYPES[backend]} - {torch.float64}

    def call(q, k, v):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        # A reference goes through the math backend: flash and cuDNN take no float32
        # (their 16-bit cases' references raised "No available kernel" on the H100,
        # 2026-12-05), no fused backend takes float64, and the reference must not share
        # the fused kernel where it can be told apart by its dtype.
        chosen = getattr(SDPBackend, SDPA_BACKENDS[backend]) if q.dtype in own else SDPBackend.MATH
        with sdpa_kernel([chosen]):
            return F.scaled_dot_product_attention(q, k, v)

    return call


def sdpa_specs() -> dict[str, OpSpec]:
    """``sdpa.flash``, ``sdpa.efficient``, ``sdpa.cudnn``, ``sdpa.math``: the same attention
    pinned to one backend each (a backend the device lacks is an ``error`` case)."""
    from .catalog import _attn_shapes, dims

    out = {}
    for b in SDPA_BACKENDS:
        out[f"sdpa.{b}"] = OpSpec(
            f"sdpa.{b}", "attention", _sdpa_call(b), _attn_shapes,
            {"scores": Series("scores", lambda th: dims(th)[0] ** 2)}, layouts=("contig", "slice"),
            dtypes=SDPA_DTYPES[b],
            notes=f"scaled_dot_product_attention under sdpa_kernel({SDPA_BACKENDS[b]})")
    return out


#: Where each SDPA backend runs (a backend a device lacks is listed, not counted, there).
SDPA_DEVICES = {"flash": ("cpu", "cuda"), "efficient": ("cuda",), "cudnn": ("cuda",), "math": ("cpu", "cuda")}

