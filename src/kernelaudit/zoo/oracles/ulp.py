"""``ulp``: the distance in units in the last place, maximum and distribution.

Distances are exact counts of representable values between the candidate's output
and the float64 reference rounded to the output dtype, from the ordered integer
patterns of the dtype itself: 32-bit patterns for float32, 16-bit for float16 and
for bfloat16 (bfloat16 is *not* float16 and not the top of a float32 for this
purpose: its 7-bit mantissa gives it its own spacing; rounding the reference to
bfloat16 first is what makes the count right).

A ULP count is meaningless for outputs near zero that come from cancellation (a
LayerNorm output of 1e-9 has a tiny ULP and an absolute error set by its inputs), so
below ``ULP_FLOOR_REL * rms(reference)`` an element's distance is measured in ULPs of
that floor instead. The verdict is ``wrong`` when the maximum exceeds
:data:`ULP_TOLERANCE` for the dtype; the distribution (p50, p90, p99, max) is the
evidence either way.
"""

from __future__ import annotations

import torch

from ..problems.problem_case import ProblemCase
from ...verdict import Status, Verdict
from .base import Comparator
from .compare import expected_dtype, mismatch_verdict, nonfinite_mismatch, structure_verdict

#: Largest accepted ULP distance per output dtype. float32 allows for reduction-order
#: differences in long sums (sqrt(K) growth); half types for one rounding each side.
ULP_TOLERANCE: dict[torch.dtype, float] = {
    torch.float32: 2048.0,
    torch.float16: 4.0,
    torch.bfloat16: 4.0,
    torch.float64: 2048.0,
}
#: Near-zero floor, relative to the reference's root mean square.
ULP_FLOOR_REL = 2.0**-6

_BITS = {
    torch.float64: (torch.int64, 52, 0x7FFF_FFFF_FFFF_FFFF),
    torch.float32: (torch.int32, 23, 0x7FFF_FFFF),
    torch.float16: (torch.int16, 10, 0x7FFF),
    torch.bfloat16: (torch.int16, 7, 0x7FFF),
}


def mantissa_bits(dtype: torch.dtype) -> int:
    """Explicit mantissa bits: 23 (float32), 10 (float16), 7 (bfloat16), 52 (float64)."""
    return _BITS[dtype][1]


def ordered_bits(t: torch.Tensor) -> torch.Tensor:
    """Map float bit patterns to int64 so that adjacent floats differ by one (+0 == -0)."""
    int_type, _, mag_mask = _BITS[t.dtype]
    bits = t.contiguous().view(int_type).to(torch.int64)
    mag = bits & mag_mask
    return torch.where(bits < 0, -mag, mag)


def ulp_distance(got: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """Exact ULP distance between two tensors of the same floating dtype (as float64).

    NaN meets NaN at 0; NaN against a number, or different infinities, at inf.
    """
    if got.dtype != expected.dtype:
        raise ValueError(f"ulp_distance needs one dtype, got {got.dtype} and {expected.dtype}")
    d = (ordered_bits(got) - ordered_bits(expected)).abs().to(torch.float64)
    nan_g, nan_e = torch.isnan(got), torch.isnan(expected)
    d = torch.where(nan_g & nan_e, torch.zeros_like(d), d)
    d = torch.where(nan_g ^ nan_e, torch.full_like(d, float("inf")), d)
    return d


def spacing(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The gap between ``|x|`` and the next float of ``dtype`` (subnormal gap at the bottom)."""
    info = torch.finfo(dtype)
    p = mantissa_bits(dtype)
    ax = x.abs().to(torch.float64).clamp_min(info.tiny)
    _, exp = torch.frexp(ax)  # ax = m * 2**exp, m in [0.5, 1)
    return torch.ldexp(torch.ones_like(ax), (exp - 1 - p).to(torch.int32))


def ulp_profile(got: torch.Tensor, ref64: torch.Tensor) -> torch.Tensor:
    """Per-element ULP distance with the near-zero floor (see module docs)."""
    expected = ref64.to(got.dtype)
    exact = ulp_distance(got, expected)
    finite_ref = ref64[torch.isfinite(ref64)]
    rms = float(finite_ref.pow(2).mean().sqrt()) if finite_ref.numel() else 0.0
    floor = ULP_FLOOR_REL * rms
    if floor <= 0:
        return exact
    floor_t = torch.full_like(ref64, floor, dtype=torch.float64)
    scaled = (got.to(torch.float64) - ref64).abs() / spacing(floor_t, got.dtype)
    near_zero = ref64.abs() < floor
    return torch.where(near_zero & torch.isfinite(scaled), torch.minimum(exact, scaled), exact)


def quantiles(d: torch.Tensor) -> dict[str, float]:
    """p50, p90, p99 and max of a distance tensor."""
    if d.numel() == 0:
        return {"p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}
    flat = d.reshape(-1).to(torch.float64)
    finite = flat.clamp(max=torch.finfo(torch.float64).max)
    if finite.numel() > 2**24:  # quantile() refuses huge inputs; a strided sample is enough
        finite = finite[:: finite.numel() // 2**24 + 1]
    q = torch.quantile(finite, torch.tensor([0.5, 0.9, 0.99], dtype=torch.float64, device=finite.device))
    return {"p50": float(q[0]), "p90": float(q[1]), "p99": float(q[2]), "max": float(flat.max())}


class UlpOracle(Comparator):
    """Maximum ULP distance within :data:`ULP_TOLERANCE` of the output dtype."""

    name = "ulp"

    def compare(self, case: ProblemCase, outputs: list[torch.Tensor]) -> Verdict:
        refs = case.reference()
        bad_structure = structure_verdict(case, outputs, refs, metric="ulp")
        if bad_structure is not None:
            return bad_structure
        profiles = []
        worst = 0.0
        tol = 0.0
        for i, (got, ref) in enumerate(zip(outputs, refs)):
            want = expected_dtype(case, ref)
            if got.dtype != want:
                return Verdict(Status.WRONG, metric="dtype",
                               message=f"{case.describe()}: output {i} has dtype {got.dtype}, expected {want}")
            if not got.is_floating_point():
                bad = got != ref.to(got.dtype)
                if bool(bad.any()):
                    return mismatch_verdict(case, i, got, ref, bad, metric="ulp", value=float("inf"), tolerance=0.0,
                                            extra="integer output must match exactly")
                profiles.append({"max": 0.0})
                continue
            tol = ULP_TOLERANCE[got.dtype]
            d = ulp_profile(got, ref)
            prof = quantiles(d)
            profiles.append(prof)
            bad = (d > tol) | nonfinite_mismatch(got, ref)
            if bool(bad.any()):
                dist = ", ".join(f"{k}={v:.3g}" for k, v in prof.items())
                return mismatch_verdict(case, i, got, ref, bad, metric="ulp", value=prof["max"], tolerance=tol,
                                        extra=f"ULP distribution {dist}", details={"ulp": prof})
            worst = max(worst, prof["max"])
        return Verdict.passed("ulp", worst, tol, ulp=profiles)
