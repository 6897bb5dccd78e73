"""Shared comparison steps: structure first, then one mismatch message for every oracle.

Like ``torch.testing``'s comparison, the message is built in one place:
``Mismatched elements: k / n (p%)``, the first bad flat index (a Python int), the
values there, and the greatest absolute difference with its index.
"""

from __future__ import annotations

import torch

from ..problems.problem_case import ProblemCase
from ...verdict import BadBatches, Status, Verdict


def expected_dtype(case: ProblemCase, ref: torch.Tensor) -> torch.dtype:
    """The dtype the candidate's output must have: the problem's dtype for float outputs."""
    return case.dtype if ref.is_floating_point() else ref.dtype


def structure_verdict(
    case: ProblemCase, outputs: list[torch.Tensor], refs: list[torch.Tensor], *, metric: str
) -> Verdict | None:
    """A ``wrong`` verdict when the count or shapes of the outputs differ, else ``None``."""
    if len(outputs) != len(refs):
        return Verdict(
            Status.WRONG, metric=metric,
            message=f"{case.describe()}: {len(outputs)} outputs, expected {len(refs)}",
        )
    for i, (got, ref) in enumerate(zip(outputs, refs)):
        if tuple(got.shape) != tuple(ref.shape):
            return Verdict(
                Status.WRONG, metric=metric,
                message=f"{case.describe()}: output {i} has shape {tuple(got.shape)}, expected {tuple(ref.shape)}",
            )
    return None


def nonfinite_mismatch(got: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Where NaN/inf disagree: a NaN must meet a NaN, an inf the same inf.

    ``ref`` is compared in ``got``'s dtype, so a float64 value that overflows the
    output dtype is an inf the candidate must also produce.
    """
    got64 = got.to(torch.float64)
    ref_d = ref.to(got.dtype).to(torch.float64) if got.is_floating_point() else ref.to(torch.float64)
    nan_g, nan_r = torch.isnan(got64), torch.isnan(ref_d)
    inf_r = torch.isinf(ref_d)
    inf_g = torch.isinf(got64)
    bad = nan_g ^ nan_r
    bad |= inf_r & ~nan_g & (got64 != ref_d)
    bad |= inf_g & ~inf_r & ~nan_r
    return bad


def bad_batches(bad: torch.Tensor) -> BadBatches | None:
    """Which leading indexes (batches) hold a bad element."""
    if bad.dim() < 2 or not bool(bad.any()):
        return None
    rows = bad.reshape(bad.shape[0], -1).any(dim=1).nonzero().flatten()
    return BadBatches(first=int(rows[0]), last=int(rows[-1]), count=int(rows.numel()))


def mismatch_verdict(
    case: ProblemCase,
    index: int,
    got: torch.Tensor,
    ref: torch.Tensor,
    bad: torch.Tensor,
    *,
    metric: str,
    value: float,
    tolerance: float,
    allowed: torch.Tensor | None = None,
    extra: str = "",
    details: dict | None = None,
) -> Verdict:
    """A ``wrong`` verdict that explains itself: op, shape, dtype, metric, tolerance, first bad index.

    ``allowed`` (same shape, optional) is the per-element tolerance shown at the first
    bad index.
    """
    n = bad.numel()
    k = int(bad.sum())
    flat = bad.reshape(-1)
    first = int(flat.nonzero()[0]) if k else None
    g = got.reshape(-1).to(torch.float64)
    r = ref.reshape(-1).to(torch.float64)
    diff = (g - r).abs().nan_to_num(nan=float("inf"))
    worst_i = int(diff.argmax()) if n else 0
    parts = [
        f"{case.describe()}: output {index} {tuple(got.shape)} {str(got.dtype).replace('torch.', '')}",
        f"{metric}={value:.3g} > tol={tolerance:.3g}",
        f"Mismatched elements: {k} / {n} ({100.0 * k / max(n, 1):.1f}%)",
    ]
    if first is not None:
        at = f"first bad flat index {first}: got {g[first].item():.8g}, expected {r[first].item():.8g}"
        if allowed is not None:
            at += f" (allowed error {allowed.reshape(-1)[first].item():.3g})"
        parts.append(at)
        parts.append(f"greatest abs diff {diff[worst_i].item():.3g} at index {worst_i}")
    if extra:
        parts.append(extra)
    return Verdict(
        Status.WRONG,
        metric=metric,
        value=value,
        tolerance=tolerance,
        bad_batches=bad_batches(bad),
        first_bad_index=first,
        message="; ".join(parts),
        details={"output": index, "mismatched": k, "numel": n, **(details or {})},
    )
