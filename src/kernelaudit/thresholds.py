"""The element-count thresholds where 32-bit index arithmetic breaks.

Thresholds are data: every comparison with 2^31 / 2^32 goes through a
:class:`Thresholds` object, so a fault model's ``scale`` can move all of them down
together (2^32 becomes 2^BITS, 2^31 becomes 2^(BITS-1)) and CPU tests cross them with
small tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from .errors import InvalidArgument

#: Signed 32-bit index limit (INT_MAX + 1).
T31 = 2**31
#: Unsigned 32-bit index limit.
T32 = 2**32
#: Twice the unsigned limit: the third crossing the sweep places sizes around.
T33 = 2 * 2**32

#: Real-hardware scale: thresholds at their true values.
REAL_SCALE_BITS = 32
#: Smallest scale that still leaves room for per-batch shapes of a few elements.
MIN_SCALE_BITS = 8


@dataclass(frozen=True)
class Thresholds:
    """The three crossings at a given scale (``bits`` = log2 of the 2^32 threshold).

    ``shape_bits`` (default: ``bits``) is the scale the ops' per-batch shapes are cut
    for: the size axes that cross a limit with the batch count alone (one dimension,
    attention batch, :mod:`kernelaudit.sweep.axes`) keep per-batch shapes tiny while
    the limits stay at ``bits``.
    """

    bits: int = REAL_SCALE_BITS
    shape_bits: int | None = None

    def __post_init__(self) -> None:
        for name, v in (("scale", self.bits), ("shape_bits", self.shape_bits)):
            if v is not None and not (MIN_SCALE_BITS <= v <= REAL_SCALE_BITS):
                raise InvalidArgument(
                    f"Cannot have {name}={v}: allowed values are "
                    f"{MIN_SCALE_BITS}..{REAL_SCALE_BITS} (log2 of the 2^32 threshold)"
                )

    @property
    def shape_scale(self) -> int:
        """The scale per-batch shapes are cut for (``shape_bits``, else ``bits``)."""
        return self.bits if self.shape_bits is None else self.shape_bits

    @cached_property
    def dim_limit(self) -> int:
        """The grid-dimension limit, 2^16 at the real scale, 2^(bits//2) scaled: one
        dimension of that many blocks or rows no longer fits a CUDA grid's y/z (65535)."""
        return 2 ** (self.bits // 2)

    @cached_property
    def t31(self) -> int:
        """The signed limit, 2^(bits-1)."""
        return 2 ** (self.bits - 1)

    @cached_property
    def t32(self) -> int:
        """The unsigned limit, 2^bits."""
        return 2**self.bits

    @cached_property
    def t33(self) -> int:
        """Twice the unsigned limit, 2^(bits+1)."""
        return 2 ** (self.bits + 1)

    @property
    def scaled(self) -> bool:
        return self.bits != REAL_SCALE_BITS

    def named(self) -> dict[str, int]:
        """Threshold label -> element count, in increasing order."""
        return {"2^31": self.t31, "2^32": self.t32, "2*2^32": self.t33}

    def as_dict(self) -> dict[str, int]:
        return {"bits": self.bits, **self.named()}


REAL = Thresholds(REAL_SCALE_BITS)
