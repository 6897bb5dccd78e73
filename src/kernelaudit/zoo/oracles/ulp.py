"""``ulp``: the distance in units in the last place, maximum and distribution.

Distances are exact counts of representable values between the candidate's output
and the float64 reference rounded to the output dtype, from the ordered integer
patterns of the dtype itself: 32-bit patterns for float32, 16-bit for float16 and
for bfloat16 (bfloat16 is *not* float16 and not the top of a float32 for this
purpose: its 7-bit mantissa gives it its own spacing; rounding the reference to
bfloat16 first is what makes the count right).

A ULP count is meaningless for outputs near zero that come from cancellation (a
LayerNorm output of 1e-9 has a tiny ULP and an absolute error set by its inputs), so
an element smaller than its *floor* is measured in ULPs of that floor instead. The
floor is the larger of ``ULP_FLOOR_REL * rms(reference)`` and the magnitude the
element's legitimate rounding errors carry: ``ULP_FLOOR_SCALE * scale / u`` from the derived error model
(:mod:`.derived`: the spread of correct evaluation orders around the float64
reference, blended over the output). So an output that is about 0 everywhere (``x -
x``, a sum that cancels) is measured against the size of what was summed, not against
its own size, and a badly conditioned element (a long transposed convolution that
cancels, InstanceNorm, Mish's tail) counts the ULPs of its conditioning; where the
derivation fails, the rms floor alone applies. The verdict is ``wrong`` when the maximum exceeds
:data:`ULP_TOLERANCE` for the dtype; the distribution (p50, p90, p99, max) is the
evidence either way.
"""

from __future__ import annotations

import torch

from ..problems.problem_case import ProblemCase
from ...verdict import Status, Verdict
from .base import Comparator
from .compare import expected_dtype, mismatch_verdict, nonfinite_mismatch, structure_verdict
from .derived import UNIT_ROUNDOFF

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
#: The derived floor is ``ULP_FLOOR_SCALE * scale / u``: the magnitude at which an
#: element's legitimate error is 32 ULPs, so the float32 tolerance of 2048 ULPs accepts
#: errors up to about 128 x ``scale`` there (``bound`` accepts 64 x, ``derived.SAFETY``).
ULP_FLOOR_SCALE = 2.0**-5

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


def ulp_profile(got: torch.Tensor, ref64: torch.Tensor, floor: torch.Tensor | None = None) -> torch.Tensor:
    """Per-element ULP distance with the near-zero floor (see module docs).

    ``floor`` (optional, per element, float64) raises the floor above
    ``ULP_FLOOR_REL * rms(ref64)``.
    """
    expected = ref64.to(got.dtype)
    exact = ulp_distance(got, expected)
    finite_ref = ref64[torch.isfinite(ref64)]
    rms = float(finite_ref.pow(2).mean().sqrt()) if finite_ref.numel() else 0.0
    floor_t = torch.full_like(ref64, ULP_FLOOR_REL * rms, dtype=torch.float64)
    if floor is not None:
        floor_t = torch.maximum(floor_t, torch.nan_to_num(floor.to(torch.float64), nan=0.0, posinf=0.0))
    if not bool((floor_t > 0).any()):
        return exact
    scaled = (got.to(torch.float64) - ref64).abs() / spacing(floor_t, got.dtype)
    near_zero = (ref64.abs() < floor_t) & (floor_t > 0)
    return torch.where(near_zero & torch.isfinite(scaled), torch.minimum(exact, scaled), exact)


def derived_floors(case: ProblemCase) -> list[torch.Tensor | None]:
    """Per output, the magnitude its legitimate errors carry (``scale / u``), or ``None``
    (exact output, or no derivable error model)."""
    from .bound import derive_or_none

    derived = derive_or_none(case)
    if isinstance(derived, str):
        return [None] * len(case.reference())
    u = UNIT_ROUNDOFF.get(case.dtype, 2.0**-24)
    return [None if s is None else s * ULP_FLOOR_SCALE / u for s in derived.native_scale]


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

    def prepare(self, case: ProblemCase) -> None:
        derived_floors(case)

    def compare(self, case: ProblemCase, outputs: list[torch.Tensor]) -> Verdict:
        refs = case.reference()
        floors = derived_floors(case)
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
            d = ulp_profile(got, ref, floors[i] if got.dtype == case.dtype else None)
            prof = quantiles(d)
            profiles.append(prof)
            bad = (d > tol) | nonfinite_mismatch(got, ref)
            if bool(bad.any()):
                dist = ", ".join(f"{k}={v:.3g}" for k, v in prof.items())
                return mismatch_verdict(case, i, got, ref, bad, metric="ulp", value=prof["max"], tolerance=tol,
                                        extra=f"ULP distribution {dist}", details={"ulp": prof})
            worst = max(worst, prof["max"])
        return Verdict.passed("ulp", worst, tol, ulp=profiles)
