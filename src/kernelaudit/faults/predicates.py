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
        return _transposed(self.shape, self.strides)

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


class Reason(NamedTuple):
    """A reason formatted only when read: ``str(reason)``. The guard decides on the first
    call of every new large shape, and formatting big integers costs more than the rules."""

    template: str
    args: tuple = ()

    def __str__(self) -> str:
        return self.template.format(*self.args)


class Decision(NamedTuple):
    """A rule's verdict on one call: the effect, which rule, which operands, why
    (``reason``, a string; ``why`` holds it unformatted)."""

    effect: Effect
    rule: str | None = None
    operands: tuple[int, ...] = ()
    first_bad_batch: int | None = None
    why: Reason | str = ""

    @property
    def reason(self) -> str:
        return str(self.why)


_OK = Decision(Effect.OK)
_TILED_OK = Decision(Effect.OK, None, (), None, "tiled path without transposed views is correct")
_REASON_A = ("output has {} > {} elements and operand(s) {} are transposed views: "
             "the tiled path reads them as packed")
_REASON_B = "view operand(s) {} have >= {} elements"
_REASON_C = "contiguous operand(s) {} have > {} elements: the flat index wraps from batch {} on"


#: Build a named tuple from its full field tuple, skipping the generated ``__new__`` (the
#: guard's first call of a new shape builds a Decision and a Reason).
_new = tuple.__new__
_PACKED, _RAISE, _WRAP = Effect.PACKED, Effect.RAISE, Effect.WRAP


def _transposed(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """:attr:`TensorMeta.transposed` on plain tuples (the guard's first-call path)."""
    return len(shape) >= 2 and strides[-2] == 1 and strides[-1] >= shape[-2] > 1 and shape[-1] > 1


def mps_matmul_decision(out_shape: Sequence[int], operands: Sequence[TensorMeta],
                        th: Thresholds, packed: Sequence[bool] | None = None) -> Decision:
    """Apply rules A, B, C (in order) to a matmul-family call. ``packed``: per operand,
    whether its strides are row-major packed (``Tensor.is_contiguous()``), when the
    caller knows it; else it is derived from the strides (the same answer, slower)."""
    d = matmul_decision_fields(out_shape, operands, th.t31, th.t32, packed)
    return d if d.__class__ is Decision else _new(Decision, d)


def matmul_decision_fields(out_shape: Sequence[int], operands: Sequence[TensorMeta], t31: int, t32: int,
                           packed: Sequence[bool] | None = None) -> tuple:
    """:func:`mps_matmul_decision` with the thresholds as plain integers (2^31 and 2^32
    at the fault model's scale), returning the :class:`Decision`'s fields as a plain
    tuple ``(effect, rule, operands, first_bad_batch, why)`` (or one of the constant
    Decisions when no rule fires). The guard calls it on the first call of every new
    large shape and needs only ``rule`` and ``why``: plain loops, no comprehension
    frames, no properties, no Decision built."""
    out_numel = math.prod(out_shape)
    if out_numel > t32:
        bad = None
        i = 0
        for m in operands:
            shape, strides = m[0], m[1]  # _transposed(shape, strides), inline
            if len(shape) >= 2 and strides[-2] == 1 and strides[-1] >= shape[-2] > 1 and shape[-1] > 1:
                if bad is None:
                    bad = [i]
                else:
                    bad.append(i)
            i += 1
        if bad:
            return (_PACKED, "A", tuple(bad), 0, _new(Reason, (_REASON_A, (out_numel, t32, bad))))
        return _TILED_OK
    # Contiguity (the costly test) is asked only of the big operands.
    big_views = big = first = None
    i = -1
    for m in operands:
        i += 1
        shape = m[0]
        n = math.prod(shape)
        if n < t31:
            continue
        if not ((packed[i] and not m[2]) if packed is not None else m.contiguous):
            if big_views is None:
                big_views = [i]
            else:
                big_views.append(i)
        elif n > t32:
            if big is None:
                big = [i]
            else:
                big.append(i)
            f = -(-t32 // (n // shape[0] if shape and shape[0] else n))  # per batch: TensorMeta.per_batch
            if first is None or f < first:
                first = f
    if big_views:
        return (_RAISE, "B", tuple(big_views), None, _new(Reason, (_REASON_B, (big_views, t31))))
    if big:
        return (_WRAP, "C", tuple(big), first, _new(Reason, (_REASON_C, (big, t32, first))))
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
