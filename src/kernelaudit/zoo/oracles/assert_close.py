"""``assert-close``: ``torch.testing.assert_close`` default tolerances per dtype.

The expected value is the float64 reference rounded to the output dtype (a better
expected value than the problem's own fp32 ``Model``, which has rounding errors of
its own). An element passes when ``|got - expected| <= atol + rtol * |expected|``;
NaN must meet NaN and inf the same inf; the output dtype must be the expected one.

===========  ========  ========
dtype        rtol      atol
===========  ========  ========
float16      1e-3      1e-5
bfloat16     1.6e-2    1e-5
float32      1.3e-6    1e-5
float64      1e-7      1e-7
===========  ========  ========
"""

from __future__ import annotations

import torch

from ..problems.problem_case import ProblemCase
from ...verdict import Status, Verdict
from .base import Comparator
from .compare import expected_dtype, mismatch_verdict, nonfinite_mismatch, structure_verdict

#: torch.testing's default (rtol, atol) per dtype.
DEFAULT_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
}


def tolerances(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for ``dtype``; exact (0, 0) for integer and bool outputs."""
    return DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0))


class AssertCloseOracle(Comparator):
    """torch.testing defaults against the float64 reference rounded to the output dtype."""

    name = "assert-close"

    def compare(self, case: ProblemCase, outputs: list[torch.Tensor]) -> Verdict:
        refs = case.reference()
        bad_structure = structure_verdict(case, outputs, refs, metric="close")
        if bad_structure is not None:
            return bad_structure
        worst_ratio = 0.0
        for i, (got, ref) in enumerate(zip(outputs, refs)):
            want = expected_dtype(case, ref)
            if got.dtype != want:
                return Verdict(
                    Status.WRONG, metric="dtype",
                    message=f"{case.describe()}: output {i} has dtype {got.dtype}, expected {want}",
                )
            rtol, atol = tolerances(got.dtype)
            expected = ref.to(got.dtype).to(torch.float64)
            g = got.to(torch.float64)
            allowed = atol + rtol * expected.abs()
            err = (g - expected).abs()
            finite = torch.isfinite(expected) & torch.isfinite(g)
            bad = nonfinite_mismatch(got, ref) | (finite & (err > allowed))
            ratio_all = torch.where(finite, err / allowed.clamp_min(torch.finfo(torch.float64).tiny), 0.0)
            ratio = float(ratio_all.max()) if ratio_all.numel() else 0.0
            if bool(bad.any()):
                return mismatch_verdict(
                    case, i, got, expected, bad, metric="err/(atol+rtol*|expected|)",
                    value=max(ratio, 1.0) if ratio == ratio else float("inf"), tolerance=1.0, allowed=allowed,
                    extra=f"rtol={rtol:g}, atol={atol:g}",
                )
            worst_ratio = max(worst_ratio, ratio)
        return Verdict.passed("err/(atol+rtol*|expected|)", worst_ratio, 1.0)
