"""The functions and global flags that checking and timing rely on, and whether a candidate changed them.

A candidate that replaces ``torch.allclose``, ``torch.testing.assert_close``,
``torch.cuda.synchronize``, ``torch.cuda.Event.elapsed_time``, ``time.perf_counter`` or
the very op the reference calls (``torch.nn.functional.gelu``) fools every check and
timer that runs after it, while its own output may look right. This module keeps a
snapshot of those namespaces taken when kernelaudit's oracles are imported (before any
candidate is loaded), and says which names now hold another object:

* :data:`PRISTINE` - the snapshot (public names and dunder methods of ``torch``,
  ``torch.nn.functional``, ``torch.Tensor``, ``torch.nn.Module`` and every ``torch.nn``
  layer class, ``torch.special``, ``torch.linalg``, ``torch.fft``, ``torch.testing``,
  ``torch.cuda``, ``torch.cuda.Event``, ``torch.cuda.Stream``, ``time``);
* :func:`replaced` - the names whose object changed since, put back when asked;
* :func:`flags` - the global switches a reference's numerics depend on (TF32, reduced
  precision reductions, the float32 matmul precision, the default dtype, deterministic
  algorithms), compared before and after a candidate runs.

torch itself wraps a few functions after import (``torch._dynamo`` wraps
``torch.manual_seed``; the first ``torch.compile`` call replaces ``torch.nn.Module.__init__``
and ``__setstate__`` with closures that call them): a replacement whose code lives in torch's
own package and that reaches the original through its ``__wrapped__`` chain or its closure
is not a change.
"""

from __future__ import annotations

import time
import types
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

_TORCH_DIR = str(Path(torch.__file__).resolve().parent)


def _owners() -> list[tuple[str, Any]]:
    """(dotted name, namespace object) of everything watched."""
    owners: list[tuple[str, Any]] = [
        ("torch", torch), ("torch.nn.functional", F), ("torch.Tensor", torch.Tensor),
        ("torch._C.TensorBase", torch._C.TensorBase), ("torch._C._VariableFunctions", torch._C._VariableFunctions),
        ("torch.nn.Module", nn.Module), ("torch.special", torch.special), ("torch.linalg", torch.linalg),
        ("torch.fft", torch.fft), ("torch.testing", torch.testing), ("torch.cuda", torch.cuda),
        ("torch.cuda.Event", torch.cuda.Event), ("torch.cuda.Stream", torch.cuda.Stream), ("time", time),
    ]
    for name, cls in vars(nn).items():
        if isinstance(cls, type) and issubclass(cls, nn.Module) and cls is not nn.Module:
            owners.append((f"torch.nn.{name}", cls))
    return owners


def _watched(name: str) -> bool:
    # Private module state (torch.cuda._initialized, _queued_calls) changes legitimately.
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def snapshot() -> dict[str, tuple[Any, str, Any]]:
    """``{"torch.allclose": (owner, attr, object), ...}`` for every watched name now."""
    snap = {}
    for owner_name, owner in _owners():
        for attr, value in list(getattr(owner, "__dict__", {}).items()):
            # Callables only: data attributes such as torch.cuda.default_generators change
            # legitimately (lazy CUDA init), and putting the old value back breaks torch.
            if _watched(attr) and callable(value) and not isinstance(value, types.ModuleType):
                snap[f"{owner_name}.{attr}"] = (owner, attr, value)
    return snap


#: The watched namespaces as they were when the oracles were imported, before any candidate;
#: :func:`rebase` retakes it when a check starts.
PRISTINE = snapshot()


def rebase() -> None:
    """Retake :data:`PRISTINE` now, before a check loads its problem and candidate: in a
    long-lived process (a test session, a notebook) other libraries may have wrapped torch
    functions since the import, and that is not the candidate's doing."""
    PRISTINE.clear()
    PRISTINE.update(snapshot())


def _torch_wrapper_of(new: Any, old: Any) -> bool:
    """Is ``new`` torch's own wrapper of ``old``: code inside torch, and ``old`` reached by its
    ``functools.wraps`` chain or held in its closure (dynamo's ``patched_init``)?"""
    code = getattr(new, "__code__", None)
    if code is None or not str(Path(code.co_filename).resolve()).startswith(_TORCH_DIR):
        return False
    for cell in getattr(new, "__closure__", None) or ():
        try:
            if cell.cell_contents is old:
                return True
        except ValueError:  # a cell not filled yet
            continue
    seen = 0
    while hasattr(new, "__wrapped__") and seen < 8:
        new, seen = new.__wrapped__, seen + 1
        if new is old:
            return True
    return False


def replaced(before: dict[str, tuple[Any, str, Any]] = PRISTINE, *, restore: bool = True) -> list[str]:
    """Watched names whose object is no longer the one in ``before`` (sorted).

    A name deleted counts too. With ``restore`` the original objects are put back, so
    the checks that run next use the real functions.
    """
    changed = []
    for key, (owner, attr, old) in before.items():
        now = owner.__dict__.get(attr, _MISSING)
        if now is old or _torch_wrapper_of(now, old):
            continue
        changed.append(key)
        if restore:
            setattr(owner, attr, old)
    return sorted(changed)


_MISSING = object()


def flags() -> dict[str, Any]:
    """The global switches a reference's numerics depend on, by name."""
    out: dict[str, Any] = {
        "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision(),
        "torch.get_default_dtype()": torch.get_default_dtype(),
        "torch.are_deterministic_algorithms_enabled()": torch.are_deterministic_algorithms_enabled(),
        "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "torch.backends.cudnn.enabled": torch.backends.cudnn.enabled,
    }
    matmul = torch.backends.cuda.matmul
    for name in ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"):
        try:
            out[f"torch.backends.cuda.matmul.{name}"] = getattr(matmul, name)
        except (AttributeError, RuntimeError):  # absent in this torch build
            pass
    return out


def flag_changes(before: dict[str, Any], *, restore: bool = True) -> list[str]:
    """``name: old -> new`` for every switch that changed since ``before`` (and set it back)."""
    now = flags()
    changed = [f"{k}: {before[k]!r} -> {now[k]!r}" for k in before if now.get(k) != before[k]]
    if changed and restore:
        _set_flags(before)
    return changed


def _set_flags(values: dict[str, Any]) -> None:
    """Set back the switches that differ (only those: some setters import half of torch)."""
    now = flags()
    setters = {
        "torch.get_float32_matmul_precision()": torch.set_float32_matmul_precision,
        "torch.get_default_dtype()": torch.set_default_dtype,
        "torch.are_deterministic_algorithms_enabled()": torch.use_deterministic_algorithms,
    }
    for key, setter in setters.items():  # first: the matmul precision also sets allow_tf32
        if now[key] != values[key]:
            setter(values[key])
    for key, value in values.items():
        if key.startswith("torch.backends.") and flags()[key] != value:
            owner, attr = key.rsplit(".", 1)
            setattr(torch.backends.cudnn if owner == "torch.backends.cudnn" else torch.backends.cuda.matmul, attr, value)
