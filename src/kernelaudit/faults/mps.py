"""The ``mps`` fault model: Apple MPS's silent wrong matmuls (rules A, B, C).

Wraps the real mm/bmm/addmm/baddbmm kernels (and addmm_/baddbmm_) of whatever device it runs on and
corrupts their results exactly as :mod:`kernelaudit.faults.predicates` says, forward and
backward. Attention is forced through PyTorch's math path (as MPS's attention is), so
its score product meets the same rules.
"""

from __future__ import annotations

import torch

from .base import FaultModel, packed_reading, wrapped_reading
from .predicates import MPS_INT_MAX_MESSAGE, Effect, TensorMeta, mps_matmul_decision

aten = torch.ops.aten

# op -> positions of its two matrix operands in args
MATMUL_OPERANDS = {
    aten.mm: (0, 1),
    aten.bmm: (0, 1),
    aten.addmm: (1, 2),
    aten.baddbmm: (1, 2),
    # in place (self += ...): the same MPS matmul kernels, so the same rules
    aten.addmm_: (1, 2),
    aten.baddbmm_: (1, 2),
}


def _math_attention_only():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.MATH])


class MpsFaultModel(FaultModel):
    """Rules A, B and C of BACKGROUND section 1, applied to the real kernels."""

    name = "mps"
    covered = frozenset(MATMUL_OPERANDS)

    def handle(self, func, args, kwargs):
        pos = MATMUL_OPERANDS[func.overloadpacket]
        mats = [args[i] for i in pos]
        out_shape = _out_shape(func.overloadpacket, mats)
        d = mps_matmul_decision(out_shape, [TensorMeta.of(m) for m in mats], self.th)
        if d.effect is Effect.OK:
            return func(*args, **kwargs)
        self.stats.hit(d.rule)
        if d.effect is Effect.RAISE:
            raise RuntimeError(f"{MPS_INT_MAX_MESSAGE} (kernelaudit fault model mps, rule B: {d.reason})")
        args = list(args)
        for i in d.operands:
            m = args[pos[i]]
            args[pos[i]] = packed_reading(m) if d.effect is Effect.PACKED else wrapped_reading(m, self.th.t32)
        return func(*args, **kwargs)

    def extra_contexts(self):
        return [_math_attention_only()]


def _out_shape(op, mats):
    a, b = mats
    return (*a.shape[:-1], b.shape[-1])


class MpsAbortFaultModel(MpsFaultModel):
    """Like ``mps``, but rule B kills the process (as a failed Metal assertion does)
    instead of raising: the sweep must record an ``error`` and carry on."""

    name = "mps-abort"

    def handle(self, func, args, kwargs):
        pos = MATMUL_OPERANDS[func.overloadpacket]
        mats = [args[i] for i in pos]
        d = mps_matmul_decision(_out_shape(func.overloadpacket, mats), [TensorMeta.of(m) for m in mats], self.th)
        if d.effect is Effect.RAISE:
            import os
            import sys

            sys.stderr.write(f"-[MTLComputeEncoder]: failed assertion: {MPS_INT_MAX_MESSAGE} (kernelaudit mps-abort)\n")
            sys.stderr.flush()
            os.abort()
        return super().handle(func, args, kwargs)
