"""The MPS fault rules of BACKGROUND section 1, as pure predicates over tensor metadata.

No rule reads data or syncs a device: each looks at shapes, strides, storage offset
and element counts only, so the same functions serve the ``mps`` fault model (which
corrupts data the way the rules say) and the guard's ``mps`` policy (which stops the
calls the rules flag). Thresholds come from a :class:`~kernelaudit.thresholds.Thresholds`
so that a scaled fault model and its guard move together.

The rules, applied in this order, for a matmul-family call (mm, bmm, addmm, baddbmm):

* **A**: the output has more than 2^32 elements -> tiled path. A transposed-view
  operand is read as if it were packed (every batch wrong); otherwise correct.
* **B**: otherwise, a view operand (transposed or with a storage offset) with at
  least 2^31 elements raises ``MPSGraph does not support tensor dims larger than INT_MAX``.
* **C**: otherwise, a contiguous operand with more than 2^32 elements has its flat
  index wrap modulo 2^32: batches from ceil(2^32 / per-batch elements) on are wrong.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import torch

from ..thresholds import Thresholds

MPS_INT_MAX_MESSAGE = "MPSGraph does not support tensor dims larger than INT_MAX"


class TensorMeta(NamedTuple):
    """What a rule may look at: shape, strides, storage offset (never data).

    A named tuple, not a dataclass: the guard builds two per intercepted call, and
    its decision must stay within a few microseconds."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0

    @classmethod
    def of(cls, t: torch.Tensor) -> "TensorMeta":
        return cls(tuple(t.shape), t.stride(), t.storage_offset())

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def contiguous(self) -> bool:
        """Row-major packed (size-1 dims may have any stride), no storage offset."""
        if self.offset:
            return False
        expected = 1
        for n, st in zip(reversed(self.shape), reversed(self.strides)):
            if n != 1 and st != expected:
                return False
            expected *= n
        return True

    @property
    def transposed(self) -> bool:
        """The last two dims are swapped relative to packing (an ``aT``/``bT`` view)."""
        if len(self.shape) < 2:
            return False
        r, c = self.shape[-2:]
        sr, sc = self.strides[-2:]
        return r > 1 and c > 1 and sr == 1 and sc >= r

    @property
    def view(self) -> bool:
        """A view in the study's sense: transposed, offset, or otherwise not packed."""
        return not self.contiguous

    @property
    def per_batch(self) -> int:
        """Elements per leading index (per row for a 2-D operand)."""
        return self.numel // self.shape[0] if self.shape and self.shape[0] else self.numel


class Effect(str, enum.Enum):
    """What a faulty backend does with one call."""

    OK = "ok"
    RAISE = "raise"     # rule B
    PACKED = "packed"   # rule A: transposed operands read as packed
    WRAP = "wrap"       # rule C: a big contiguous operand's index wraps


class Decision(NamedTuple):
    """A rule's verdict on one call: the effect, which rule, which operands, why."""

    effect: Effect
    rule: str | None = None
    operands: tuple[int, ...] = ()
    first_bad_batch: int | None = None
    reason: str = ""


_OK = Decision(Effect.OK)
_TILED_OK = Decision(Effect.OK, None, (), None, "tiled path without transposed views is correct")


def mps_matmul_decision(out_shape: Sequence[int], operands: Sequence[TensorMeta],
                        th: Thresholds) -> Decision:
    """Apply rules A, B, C (in order) to a matmul-family call."""
    t32 = th.t32
    out_numel = math.prod(out_shape)
    if out_numel > t32:
        bad = tuple(i for i, m in enumerate(operands) if m.transposed)
        if bad:
            return Decision(Effect.PACKED, "A", bad, 0,
                            f"output has {out_numel} > {t32} elements and operand(s) {list(bad)} "
                            "are transposed views: the tiled path reads them as packed")
        return _TILED_OK
    numels = [m.numel for m in operands]
    t31 = th.t31
    if max(numels) < t31:
        return _OK  # the common case: every operand is small
    contiguous = [m.contiguous for m in operands]
    big_views = tuple(i for i, n in enumerate(numels) if not contiguous[i] and n >= t31)
    if big_views:
        return Decision(Effect.RAISE, "B", big_views, None,
                        f"view operand(s) {list(big_views)} have >= {t31} elements")
    big = tuple(i for i, n in enumerate(numels) if contiguous[i] and n > t32)
    if big:
        first = min(-(-t32 // operands[i].per_batch) for i in big)
        return Decision(Effect.WRAP, "C", big, first,
                        f"contiguous operand(s) {list(big)} have > {t32} elements: "
                        f"the flat index wraps from batch {first} on")
    return _OK


def attention_scores_decision(q_shape: Sequence[int], k_shape: Sequence[int],
                              th: Thresholds) -> Decision:
    """The attention-score rule: an attention whose score tensor (..., L, S) has more
    than 2^32 elements goes through the faulty tiled bmm (and some versions crash)."""
    scores = math.prod(q_shape[:-1]) * k_shape[-2]
    if scores > th.t32:
        return Decision(Effect.PACKED, "attention-scores", (1,), 0,
                        f"attention scores have {scores} > {th.t32} elements")
    return Decision(Effect.OK)
