"""``deterministic()``: run a model's GEMMs, norms, softmaxes and attention through the
fixed-order kernels, by ``torch.library`` overrides of the aten ops (like the guard).

    with kernelaudit.deterministic():          # or install() ... uninstall()
        logits = model(ids)

Covered (float32, bfloat16, float16; anything else goes to the original kernel):

=========================================  ===========================================
aten op (dispatch key)                     replaced by
=========================================  ===========================================
mm, addmm, bmm (CPU, CUDA)                 :mod:`.gemm` in the chosen order
linear (CompositeImplicitAutograd)         :func:`.gemm.linear` (no reshape copies)
_softmax, _log_softmax (CPU, CUDA)         :mod:`.companions`, last dim or any dim
layer_norm, rms_norm (CompositeImplicit)   one normalized dim; else the original
scaled_dot_product_attention (Composite)   :func:`.companions.attention`; dropout: original
=========================================  ===========================================

Inference only: the replacements have no backward. One installation at a time;
``install`` again changes the order. Overrides hold only while installed: ``uninstall``
(or leaving the context) restores every original kernel.
"""

from __future__ import annotations

import contextlib
import threading
import warnings

import torch

from ..errors import check_choice
from .tiles import ORDERS

#: torch device type -> backend dispatch key.
BACKEND_KEYS = {"cpu": "CPU", "cuda": "CUDA"}
COMPOSITE = "CompositeImplicitAutograd"
FLOATS = (torch.float32, torch.bfloat16, torch.float16)

_lock = threading.Lock()
_state: dict = {"lib": None, "order": None}


def _original(name: str, key: str):
    if key == COMPOSITE:
        # the composite kernel as the CPU entry computes it (it redispatches, any device)
        key = "CPU"
    elif not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", getattr(torch._C.DispatchKey, key)):
        return None
    dk = getattr(torch._C.DispatchKey, key)
    kernel = torch._C._dispatch_get_computed_kernel_for_dispatch_key(f"aten::{name}", dk)
    keyset = torch._C.DispatchKeySet(dk)
    return lambda *args, **kwargs: kernel.call_boxed(keyset, *args, **kwargs)


def _floats(*tensors) -> bool:
    return all(t is None or (t.dtype in FLOATS and not t.is_complex()) for t in tensors)


def _same_float(*tensors) -> bool:
    dts = {t.dtype for t in tensors if t is not None}
    return len(dts) == 1 and _floats(*tensors)


def _overrides(order: str, orig: dict) -> dict:
    """name -> Python kernel; each falls back to ``orig[name]`` outside its contract."""
    from . import companions, gemm

    def mm(a, b):
        if not _same_float(a, b):
            return orig["mm"](a, b)
        return gemm.mm(a, b, order=order)

    def addmm(bias, a, b, *, beta=1, alpha=1):
        if not _same_float(bias, a, b) or bias.dim() > 2:
            return orig["addmm"](bias, a, b, beta=beta, alpha=alpha)
        return gemm.addmm(bias, a, b, beta=beta, alpha=alpha, order=order)

    def bmm(a, b):
        if not _same_float(a, b):
            return orig["bmm"](a, b)
        return gemm.bmm(a, b, order=order)

    def linear(x, weight, bias=None):
        if not _same_float(x, weight, bias) or weight.dim() != 2 or (bias is not None and bias.dim() > 1):
            return orig["linear"](x, weight, bias)
        return gemm.linear(x, weight, bias, order=order)

    def softmax(x, dim, half_to_float):
        if not _floats(x):
            return orig["_softmax"](x, dim, half_to_float)
        return companions.softmax(x, dim, torch.float32 if half_to_float else None)

    def log_softmax(x, dim, half_to_float):
        if not _floats(x):
            return orig["_log_softmax"](x, dim, half_to_float)
        return companions.log_softmax(x, dim, torch.float32 if half_to_float else None)

    def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
        if len(normalized_shape) != 1 or not _same_float(x, weight, bias):
            return orig["layer_norm"](x, normalized_shape, weight, bias, eps, cudnn_enable)
        return companions.layer_norm(x, weight, bias, eps)

    def rms_norm(x, normalized_shape, weight=None, eps=None):
        if len(normalized_shape) != 1 or not _same_float(x, weight):
            return orig["rms_norm"](x, normalized_shape, weight, eps)
        return companions.rms_norm(x, weight, eps)

    def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False):
        if dropout_p or not _same_float(q, k, v) or (attn_mask is not None and attn_mask.dtype != torch.bool
                                                      and not _floats(attn_mask)):
            return orig["scaled_dot_product_attention"](q, k, v, attn_mask, dropout_p, is_causal,
                                                        scale=scale, enable_gqa=enable_gqa)
        return companions.attention(q, k, v, attn_mask, is_causal=is_causal, scale=scale, order=order,
                                    enable_gqa=enable_gqa)

    return {"mm": mm, "addmm": addmm, "bmm": bmm, "_softmax": softmax, "_log_softmax": log_softmax,
            "linear": linear, "layer_norm": layer_norm, "rms_norm": rms_norm,
            "scaled_dot_product_attention": sdpa}


#: op -> "backend" (one registration per device type) or the composite key.
KEYS = {"mm": "backend", "addmm": "backend", "bmm": "backend", "_softmax": "backend",
        "_log_softmax": "backend", "linear": COMPOSITE, "layer_norm": COMPOSITE, "rms_norm": COMPOSITE,
        "scaled_dot_product_attention": COMPOSITE}


def install(order: str = "ieee", *, device_types: tuple[str, ...] = ("cpu", "cuda")) -> None:
    """Route the covered aten ops through the fixed-order kernels until :func:`uninstall`."""
    check_choice("order", order, ORDERS)
    for dt in device_types:
        check_choice("device_types", dt, tuple(BACKEND_KEYS))
    with _lock:
        _uninstall_locked()
        lib = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "Overriding a previously registered kernel"
            plan = []
            for name, where in KEYS.items():
                keys = [BACKEND_KEYS[dt] for dt in device_types] if where == "backend" else [COMPOSITE]
                plan += [(name, key, _original(name, key)) for key in keys]
            for key in {k for _, k, _ in plan}:
                orig = {name: fn for name, k, fn in plan if k == key and fn is not None}
                fns = _overrides(order, _Fallback(orig))
                for name in orig:
                    lib.impl(name, fns[name], key)
        _state.update(lib=lib, order=order)


class _Fallback(dict):
    """The originals of one key; a miss is a covered op this build lacks on that key."""

    def __missing__(self, name):  # pragma: no cover - only on builds without the backend
        from ..errors import CheckerBug
        raise CheckerBug(f"no original kernel of aten::{name} captured")


def _uninstall_locked() -> None:
    if _state["lib"] is not None:
        _state["lib"]._destroy()
    _state.update(lib=None, order=None)


def uninstall() -> None:
    """Restore every original kernel (nothing to do when none is installed)."""
    with _lock:
        _uninstall_locked()


def installed() -> str | None:
    """The installed order, or None."""
    return _state["order"]


@contextlib.contextmanager
def deterministic(order: str = "ieee", *, device_types: tuple[str, ...] = ("cpu", "cuda")):
    """A context in which the covered ops are batch-invariant and run-to-run identical
    (``ieee``: also the same bits on any GPU the emulator agrees with). Restores what was
    installed before on exit."""
    before = installed()
    install(order, device_types=device_types)
    try:
        yield
    finally:
        if before is None:
            uninstall()
        else:
            install(before, device_types=device_types)
