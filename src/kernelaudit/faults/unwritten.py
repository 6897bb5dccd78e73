"""The ``unwritten-tail`` fault model: outputs past the 2^32-th element are never written.

A kernel whose grid, or whose loop bound, is computed in 32 bits stops at element
2^32 (scaled by the thresholds): everything past it is left as it was. In a buffer the
caller passed (``out=``, the ``self`` of an in-place op) that is the buffer's previous
content; in a fresh allocation it is whatever the allocator handed out, modelled as
zeros (what a freshly mapped page holds, and the hardest value to tell from a right
0). Every op that computes values is covered; views, metadata and the allocators
themselves (``empty``: unwritten by definition) are not.
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

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.is_view or func.overloadpacket in NOT_WRITING:
            return func(*args, **kwargs)
        self.stats.calls += 1
        return self.handle(func, args, kwargs)

    def handle(self, func, args, kwargs):
        t = self.th.t32
        written = [w for w in written_tensors(func, args, kwargs) if w.numel() > t and w.is_contiguous()]
        tails = [(w, w.view(-1)[t:].clone()) for w in written]
        out = func(*args, **kwargs)
        changed = bool(tails)
        for w, tail in tails:
            w.view(-1)[t:].copy_(tail)

        def blank(y):
            nonlocal changed
            if not isinstance(y, torch.Tensor) or y.numel() <= t or aliases(y, written):
                return y
            changed = True
            y = y.clone().contiguous()
            y.view(-1)[t:] = 0
            return y

        out = type(out)(blank(y) for y in out) if isinstance(out, (tuple, list)) else blank(out)
        if changed:
            self.stats.hit("unwritten-tail")
        return out
