"""What every fault model shares: a dispatch-level wrapper of the real kernels.

A fault model is a deliberately wrong backend. It runs the real kernels of the device
it is on, and changes the result of the calls its rules cover, exactly the way the
rules say. It works at the aten level (a ``TorchDispatchMode``), so the calls that
autograd makes in the backward pass are covered too. Cost is irrelevant here: fault
models exist to test the sweep and the guard, not to run fast.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..thresholds import Thresholds


def packed_reading(x: torch.Tensor) -> torch.Tensor:
    """``x`` read as if it were packed row-major from its storage offset (rule A's bug)."""
    strides, acc = [], 1
    for n in reversed(x.shape):
        strides.append(acc)
        acc *= n
    available = x.untyped_storage().nbytes() // x.element_size() - x.storage_offset()
    if available >= x.numel():
        return x.as_strided(x.shape, tuple(reversed(strides)), x.storage_offset())
    # A stride-0 (expanded) operand has less storage than elements: the faulty kernel
    # reads past it; we read what is there and zeros after it.
    flat = x.as_strided((max(available, 0),), (1,), x.storage_offset())
    return torch.cat([flat, flat.new_zeros(x.numel() - flat.numel())]).view(x.shape)


def wrapped_reading(x: torch.Tensor, t32: int) -> torch.Tensor:
    """A copy of ``x`` whose logical flat element i holds element i mod 2^32 (wrapped read)."""
    n = x.numel()
    flat = x.reshape(-1).clone()
    for start in range(t32, n, t32):
        stop = min(start + t32, n)
        flat[start:stop] = flat[: stop - start]
    return flat.view(x.shape)


def wrapped_writing(out: torch.Tensor, t32: int) -> torch.Tensor:
    """What a kernel that writes element i at i mod 2^32 leaves in ``out``.

    The last writer wins; elements at 2^32 and beyond are never written (left zero).
    """
    n = out.numel()
    flat = out.reshape(-1).clone()
    src = out.reshape(-1)
    for start in range(t32, n, t32):
        stop = min(start + t32, n)
        flat[: stop - start] = src[start:stop]
    flat[t32:] = 0
    return flat.view(out.shape)


def written_tensors(func, args, kwargs) -> list[torch.Tensor]:
    """The tensors a call writes into: its ``out=`` buffers and the ``self`` of an
    in-place op (schema arguments marked as written), so a fault model can leave
    their elements as they were where the faulty kernel never writes them."""
    found = []
    for i, a in enumerate(func._schema.arguments):
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        v = kwargs.get(a.name, args[i] if i < len(args) else None)
        for t in (v if isinstance(v, (list, tuple)) else (v,)):
            if isinstance(t, torch.Tensor):
                found.append(t)
    return found


def aliases(y: torch.Tensor, xs: list[torch.Tensor]) -> bool:
    """Whether ``y`` shares its storage with one of ``xs`` (an op's result that is its out= buffer)."""
    ptr = y.untyped_storage().data_ptr()
    return any(x.untyped_storage().data_ptr() == ptr for x in xs)


@dataclass
class FaultStats:
    """How many calls each rule changed (for tests and reports)."""

    calls: int = 0
    changed: dict[str, int] = field(default_factory=dict)

    def hit(self, rule: str) -> None:
        self.changed[rule] = self.changed.get(rule, 0) + 1


def _is_composite(func) -> bool:
    """Whether an aten op is implemented by decomposition into other aten ops."""
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd")
    except (AttributeError, RuntimeError):
        return False


class FaultModel(TorchDispatchMode):
    """Base class: subclasses implement :meth:`handle` for the aten ops they cover."""

    name = "none"
    covered: frozenset = frozenset()

    def __init__(self, th: Thresholds) -> None:
        super().__init__()
        self.th = th
        self.stats = FaultStats()
        self._extra = contextlib.ExitStack()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.overloadpacket in self.covered:
            self.stats.calls += 1
            return self.handle(func, args, kwargs)
        if _is_composite(func):
            # Under inference_mode, composite ops (matmul, linear, einsum) reach the mode
            # whole instead of as the bmm/mm calls they are made of: decompose them here,
            # with the mode on, so their pieces meet the rules as on a real backend.
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        return func(*args, **kwargs)

    def handle(self, func, args, kwargs):  # pragma: no cover - abstract
        return func(*args, **kwargs)

    def extra_contexts(self) -> list:
        """Context managers entered with the model (e.g. forcing an attention backend)."""
        return []

    def __enter__(self):
        for cm in self.extra_contexts():
            self._extra.enter_context(cm)
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._extra.close()


class NoFault(contextlib.nullcontext):
    """The honest backend: a context that changes nothing."""

    name = "none"

    def __init__(self, th: Thresholds) -> None:
        super().__init__()
        self.th = th
        self.stats = FaultStats()
