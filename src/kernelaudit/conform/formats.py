"""Floating-point formats by their numbers, and correct rounding into them (numpy, float64).

Rounding here is written out from the format's parameters (precision ``p``, smallest
normal exponent ``emin``, largest exponent ``emax``) rather than taken from a cast, so
the reference does not share its rounding with the code under test.
``round_to_format`` is exact for any float64 input: scaling by a power of two is exact
and ``np.rint`` rounds half to even.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np


@dataclass(frozen=True)
class Format:
    name: str
    p: int  # significand bits, the leading one included
    emin: int  # exponent of the smallest normal number
    emax: int  # exponent of the largest finite number

    @property
    def max_finite(self) -> float:
        return (2.0 - 2.0 ** (1 - self.p)) * 2.0 ** self.emax


FORMATS = {
    "fp32": Format("fp32", 24, -126, 127),
    "bf16": Format("bf16", 8, -126, 127),
    "fp16": Format("fp16", 11, -14, 15),
}


def quantum(x: np.ndarray, fmt: Format) -> np.ndarray:
    """The spacing of ``fmt`` at ``|x|`` (the unit in the last place), float64."""
    _, e = np.frexp(np.abs(x))  # |x| = f * 2^e, f in [0.5, 1): leading bit at e - 1
    lead = np.maximum(e - 1, fmt.emin)
    return np.ldexp(1.0, lead - (fmt.p - 1))


def round_to_format(x: np.ndarray, fmt: Format | str) -> np.ndarray:
    """``x`` (float64) rounded to nearest even in ``fmt``, subnormals kept, overflow to inf."""
    fmt = FORMATS[fmt] if isinstance(fmt, str) else fmt
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        q = quantum(x, fmt)
        r = np.rint(x / q) * q
        r = np.where(np.abs(r) > fmt.max_finite, np.copysign(np.inf, x), r)
    return np.where(np.isfinite(x), r, x)


def round_integer(x: np.ndarray, rounding: str) -> np.ndarray:
    """``x`` (float64) rounded to an integer: ``half_even`` or ``half_away`` (from zero)."""
    x = np.asarray(x, dtype=np.float64)
    if rounding == "half_even":
        return np.rint(x)
    a = np.abs(x)
    r = np.floor(a)
    return np.copysign(r + (a - r >= 0.5), x)  # a - r is exact: no x + 0.5 rounding trap


def round_fraction(v: Fraction, fmt: Format) -> float:
    """An exact rational rounded once (nearest even) into ``fmt``, returned as a float."""
    if v == 0:
        return 0.0
    a = abs(v)
    lead = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** lead > a:  # bit lengths give lead or lead + 1
        lead -= 1
    q = Fraction(2) ** (max(lead, fmt.emin) - (fmt.p - 1))
    r = float(round(a / q) * q)  # Fraction.__round__ rounds half to even
    if r > fmt.max_finite:
        r = float("inf")
    return r if v > 0 else -r


def round_fraction_integer(v: Fraction, rounding: str) -> int:
    if rounding == "half_even":
        return round(v)
    a = abs(v)
    r = int(a + Fraction(1, 2))  # floor for a >= 0
    return r if v >= 0 else -r
