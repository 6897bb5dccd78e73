"""The emulator's fp32 FMA rounds once: checked against exact rational arithmetic,
including the cases where rounding through float64 first (double rounding) is wrong."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from kernelaudit.repro.emulate import fma32


def _round32(x: Fraction) -> np.float32:
    """binary32 round-to-nearest-even of an exact rational (neighbours of a guess)."""
    guess = np.float32(float(x))
    with np.errstate(over="ignore"):
        cands = {guess, np.nextafter(guess, np.float32(np.inf)), np.nextafter(guess, np.float32(-np.inf))}
    cands = [c for c in cands if np.isfinite(c)]
    best = min(abs(Fraction(float(c)) - x) for c in cands)
    tied = [c for c in cands if abs(Fraction(float(c)) - x) == best]
    if len(tied) == 1:
        return tied[0]
    return next(c for c in tied if int(np.array(c).view(np.int32)) % 2 == 0)


def _exact(a, b, c) -> np.float32:
    return _round32(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)))


def _t(x: float) -> torch.Tensor:
    return torch.tensor([x], dtype=torch.float32)


def test_fma32_rounds_once_where_float64_double_rounding_is_wrong():
    # exact = (1 + 2^-23) + 2^-24 - 2^-70: just below the midpoint between 1 + 2^-23 (odd)
    # and 1 + 2^-22 (even); float64 rounds it onto the midpoint, which then ties to even.
    a, b, c = (1 - 2**-23) * 2**-24, 1 + 2**-23, 1 + 2**-23
    naive = np.float32(float(Fraction(a) * Fraction(b) + Fraction(c)))
    assert naive == np.float32(1 + 2**-22)                     # the double-rounding answer
    assert fma32(_t(a), _t(b), _t(c)).item() == 1 + 2**-23      # one rounding
    assert _exact(a, b, c) == np.float32(1 + 2**-23)
    # the mirror case: just above a midpoint whose lower neighbour is even
    a, b, c = (1 + 2**-23) * 2**-24, 1 + 2**-23, 1.0
    assert fma32(_t(a), _t(b), _t(c)).item() == _exact(a, b, c) == np.float32(1 + 2**-23)


def test_fma32_differs_from_multiply_then_add():
    a = b = 1 + 2**-12                     # a*b = 1 + 2^-11 + 2^-24: not a float32
    c = -(1 + 2**-11)
    assert fma32(_t(a), _t(b), _t(c)).item() == 2**-24
    assert (_t(a) * _t(b) + _t(c)).item() == 0.0


def test_fma32_special_values_follow_ieee():
    inf, nan = float("inf"), float("nan")
    assert fma32(_t(inf), _t(2.0), _t(1.0)).item() == inf
    assert torch.isnan(fma32(_t(inf), _t(0.0), _t(1.0))).all()
    assert torch.isnan(fma32(_t(nan), _t(1.0), _t(1.0))).all()
    assert fma32(_t(3e38), _t(10.0), _t(0.0)).item() == inf        # overflow
    assert fma32(_t(-0.0), _t(1.0), _t(0.0)).item() == 0.0         # +0: -0 + +0
    tiny = float(np.float32(1.4e-45))                                # subnormal results
    assert fma32(_t(tiny), _t(0.5), _t(tiny)).item() == _exact(tiny, 0.5, tiny)


_f32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
_near1 = st.integers(-2**12, 2**12).map(lambda i: float(np.float32(1 + i * 2**-23)))


@settings(max_examples=300, deadline=None)
@given(st.one_of(_f32, _near1), st.one_of(_f32, _near1), st.one_of(_f32, _near1))
def test_fma32_equals_exact_rounding(a, b, c):
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    got = fma32(_t(a), _t(b), _t(c)).item()
    if abs(exact) >= Fraction(float(np.finfo(np.float32).max)) * (1 + Fraction(1, 2**24)):
        assert abs(got) == float("inf")
        return
    assert np.float32(got) == _round32(exact)


def test_bit_mismatches_lets_a_nan_match_any_nan_but_nothing_else_differ():
    from kernelaudit.repro.emulate import bit_mismatches, same_bits

    gpu_nan = torch.tensor([0x7FFFFFFF], dtype=torch.int32).view(torch.float32)
    cpu_nan = torch.tensor([-0x400000], dtype=torch.int32).view(torch.float32)   # 0xffc00000
    base = torch.tensor([1.0, -0.0, float("inf"), 0.0])
    got, want = torch.cat([base, gpu_nan]), torch.cat([base, cpu_nan])
    assert same_bits(got, want)
    assert bit_mismatches(torch.tensor([0.0]), torch.tensor([-0.0])) == 1          # signed zeros count
    assert bit_mismatches(torch.tensor([float("nan")]), torch.tensor([float("inf")])) == 1
    one_ulp = torch.nextafter(torch.tensor([1.0]), torch.tensor([2.0]))
    assert bit_mismatches(torch.cat([one_ulp, gpu_nan]), want[[0, 4]]) == 1
    assert bit_mismatches(got.bfloat16(), want.bfloat16()) == 0


def test_bit_mismatches_refuses_tensors_of_different_shape_or_dtype():
    from kernelaudit.repro.emulate import bit_mismatches

    with pytest.raises(ValueError, match="bit_mismatches"):
        bit_mismatches(torch.zeros(2), torch.zeros(3))
    with pytest.raises(ValueError, match="float16"):
        bit_mismatches(torch.zeros(2), torch.zeros(2, dtype=torch.float16))
