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


def _sdpa_call(backend: str) -> Callable:
    import torch.nn.functional as F

    def call(q, k, v):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        # The float64 reference (and only it) goes through the math backend: no fused
        # backend takes float64, and the reference must not share the fused kernel.
        chosen = SDPBackend.MATH if q.dtype == torch.float64 else getattr(SDPBackend, SDPA_BACKENDS[backend])
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
            dtypes=("float16", "bfloat16") if b in ("flash", "cudnn") else FLOAT_DTYPES,
            notes=f"scaled_dot_product_attention under sdpa_kernel({SDPA_BACKENDS[b]})")
    return out


#: Where each SDPA backend runs (a backend a device lacks is listed, not counted, there).
SDPA_DEVICES = {"flash": ("cpu", "cuda"), "efficient": ("cuda",), "cudnn": ("cuda",), "math": ("cpu", "cuda")}

