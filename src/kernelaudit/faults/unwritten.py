"""The unwritten fault models: output elements a kernel never writes.

``unwritten-tail``: a kernel whose grid, or whose loop bound, is computed in 32 bits
stops at element 2^32 (scaled by the thresholds): everything past it is left as it was.
``unwritten-head``: a kernel that writes only the last 2^31 - 4 elements of a longer
output, so its first n - 2^31 + 4 are left as they were: ``torch.bernoulli`` on an H100
(torch 2.11, 2026-12-06: 20 of 2^31 + 16 elements, 16,388 of 2^31 + 16384), a fault no
statistical judge sees in a fresh allocation of zeros, only a poisoned ``out=`` buffer.

In a buffer the caller passed (``out=``, the ``self`` of an in-place op) an unwritten
element keeps the buffer's previous content; in a fresh allocation it is whatever the
allocator handed out, modelled as zeros (what a freshly mapped page holds, and the
hardest value to tell from a right 0). Every op that computes values is covered; views,
metadata and the allocators themselves (``empty``: unwritten by definition) are not.
"""

from __future__ import annotations

import torch

from .base import FaultModel, aliases, written_tensors

aten = torch.ops.aten

#: Ops that write nothing (allocators, lifting a constant): never changed.
NOT_WRITING = frozenset({
    aten.empty, aten.empty_like, aten.empty_strided, aten.new_empty, aten.new_empty_strided,
    aten.empty_permuted, aten.lift_fresh, aten.detach, aten.alias, aten._local_scalar_dense,
})


class UnwrittenTailFaultModel(FaultModel):
    """Leaves every output element at flat index 2^32 (scaled) and beyond unwritten."""

    name = "unwritten-tail"

    def region(self, n: int) -> slice | None:
        """The flat elements of an ``n``-element output left unwritten (None: none)."""
        t = self.th.t32
        return slice(t, n) if n > t else None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.is_view or func.overloadpacket in NOT_WRITING:
            return func(*args, **kwargs)
        self.stats.calls += 1
        return self.handle(func, args, kwargs)

    def handle(self, func, args, kwargs):
        written = [(w, r) for w in written_tensors(func, args, kwargs)
                   if w.is_contiguous() and (r := self.region(w.numel())) is not None]
        kept = [(w, r, w.view(-1)[r].clone()) for w, r in written]
        out = func(*args, **kwargs)
        changed = bool(kept)
        for w, r, old in kept:
            w.view(-1)[r].copy_(old)

        def blank(y):
            nonlocal changed
            r = self.region(y.numel()) if isinstance(y, torch.Tensor) else None
            if r is None or aliases(y, [w for w, _ in written]):
                return y
            changed = True
            y = y.clone().contiguous()
            y.view(-1)[r] = 0
            return y

        out = type(out)(blank(y) for y in out) if isinstance(out, (tuple, list)) else blank(out)
        if changed:
            self.stats.hit(self.name)
        return out


class UnwrittenHeadFaultModel(UnwrittenTailFaultModel):
    """Leaves the first n - 2^31 + 4 (scaled) elements of an output of n > 2^31 unwritten:
    the kernel writes its last 2^31 - 4 only (bernoulli's fault on an H100)."""

    name = "unwritten-head"

    def region(self, n: int) -> slice | None:
        t = self.th.t31
        return slice(0, n - t + 4) if n > t else None
