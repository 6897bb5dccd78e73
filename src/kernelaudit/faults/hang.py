"""The ``hang`` fault model: right answers, but late past 2^31 elements.

Some kernels do not fail past the limits, they stall: in the GPU sweeps of record
``torch.mode`` and ``linalg.cond`` ran past a 120 s case timeout at sizes their smaller
neighbours took seconds for. This model plants that: every call that reads or writes a
tensor of at least 2^31 elements (scaled by the thresholds) sleeps :data:`HANG_S`
seconds after it runs the real kernel, so its answer is right and arrives late (views
launch no kernel: never late). It exists to test what a sweep does with cases that time
out (kill, hold back, the slow pass, resume with a longer timeout) without burning a CPU
for the wait: a sleeping worker leaves the cores to the rest of the test suite.
"""

from __future__ import annotations

import time

import torch
from torch.utils._pytree import tree_flatten

from .base import FaultModel

#: Seconds each call past 2^31 elements sleeps after it runs: longer than the 2 s case
#: timeout the tests set, short enough that a slow pass waits little.
HANG_S = 2.5


class HangFaultModel(FaultModel):
    """Sleeps :data:`HANG_S` seconds in every call on a tensor of 2^31 elements or more."""

    name = "hang"

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.is_view:   # no kernel runs: nothing to be late
            return out
        self.stats.calls += 1
        tensors = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
        if max((t.numel() for t in tensors), default=0) >= self.th.t31:
            self.stats.hit("late")
            time.sleep(HANG_S)
        return out
