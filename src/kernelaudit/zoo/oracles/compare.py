"""Shared comparison steps: structure first, then one mismatch message for every oracle.

Like ``torch.testing``'s comparison, the message is built in one place:
``Mismatched elements: k / n (p%)``, the first bad flat index (a Python int), the
values there, and the greatest absolute difference with its index.

:func:`chunked_compare` computes the same figures chunk by chunk (float64 temporaries of
:data:`CHUNK_ELEMENTS` elements, not of the whole output: at KernelBench's own shapes a
whole-output float64 temporary is 12 GiB) and :func:`chunked_mismatch_verdict` words
them like :func:`mismatch_verdict`.
"""

from __future__ import annotations

import math

from collections.abc import Callable
from dataclasses import dataclass, field

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
    at = None
    if first is not None:
        at = (g[first].item(), r[first].item(), None if allowed is None else allowed.reshape(-1)[first].item(),
              diff[worst_i].item(), worst_i)
    return _wrong(case, index, got, metric=metric, value=value, tolerance=tolerance, numel=n, mismatched=k,
                  first=first, at=at, batches=bad_batches(bad), extra=extra, details=details)


# -- chunked comparison: no float64 copy of a whole output ----------------------------

#: Elements compared at a time: float64 temporaries of 8 MiB each, whatever the output's size
#: (a 6 GiB fp32 output compared whole needs several 12 GiB float64 temporaries).
CHUNK_ELEMENTS = 1 << 20
#: The same on a CUDA device: float64 temporaries of 512 MiB. With 1M-element chunks a
#: 1G-element output is a thousand chunks of a dozen small kernels per pass: the GPU waits
#: on launches (tens of seconds a check at KernelBench L1's own shapes on the H200).
CUDA_CHUNK_ELEMENTS = 1 << 26


def chunk_elements(device: torch.device | str) -> int:
    """Elements per chunk of the chunked comparisons and derivations on ``device``."""
    return CUDA_CHUNK_ELEMENTS if torch.device(device).type == "cuda" else CHUNK_ELEMENTS

#: ``allowed(ref64_chunk, start, stop)``: the allowed absolute error of flat elements [start, stop).
Allowed = Callable[[torch.Tensor, int, int], torch.Tensor]


@dataclass
class ChunkedComparison:
    """What :func:`chunked_compare` found: counts, the first bad element, the worst ratio."""

    numel: int
    mismatched: int = 0
    first: int | None = None
    first_got: float = 0.0
    first_ref: float = 0.0
    first_allowed: float | None = None
    worst_ratio: float = 0.0  # max err / allowed over finite errors (0 when exact)
    max_err: float = 0.0  # max finite |got - ref|
    worst_diff: float = 0.0  # max |got - ref| with NaN counted as inf
    worst_index: int = 0
    rows: torch.Tensor | None = field(default=None, repr=False)  # bool per leading index: holds a bad element

    def bad_batches(self) -> BadBatches | None:
        if self.rows is None or not bool(self.rows.any()):
            return None
        idx = self.rows.nonzero().flatten()
        return BadBatches(first=int(idx[0]), last=int(idx[-1]), count=int(idx.numel()))


def chunked_compare(got: torch.Tensor, ref: torch.Tensor, allowed: Allowed | None, *,
                    chunk: int | None = None) -> ChunkedComparison:
    """Compare ``got`` with ``ref`` (float64) chunk by chunk, in flat order.

    ``allowed`` gives each chunk's allowed error; ``None`` means exact: ``got`` must equal
    ``ref`` rounded to ``got``'s dtype bit for bit (NaN meets NaN). Non-finite values must
    agree (:func:`nonfinite_mismatch`) either way. Peak extra memory: a few float64
    temporaries of ``chunk`` elements.
    """
    n = got.numel()
    chunk = chunk or chunk_elements(got.device)
    res = ChunkedComparison(numel=n)
    g_flat, r_flat = got.reshape(-1), ref.reshape(-1)
    row = n // got.shape[0] if got.dim() >= 2 and got.shape[0] else 0
    if row:
        res.rows = torch.zeros(got.shape[0], dtype=torch.bool)
    tiny = torch.finfo(torch.float64).tiny
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        g_raw, r_raw = g_flat[a:b], r_flat[a:b]
        r = r_raw.to(torch.float64)
        err = _abs_err(g_raw, r)
        top = finite_max_or_none(err) if err.numel() else 0.0
        if top is not None and _fits(r, g_raw.dtype):
            # the common case, in fewer passes: |got - ref| is finite everywhere (so both
            # are: nothing non-finite to match) and no reference value overflows got's dtype
            if allowed is None:
                rounded = r_raw.to(g_raw.dtype) if g_raw.is_floating_point() else r_raw
                bad = g_raw != rounded
                del rounded
                al = None
            else:
                al = allowed(r, a, b)
                bad = err > al
            if err.numel():
                res.max_err = max(res.max_err, top)
                if top > res.worst_diff:  # the first of equal maxima, as argmax
                    res.worst_diff, res.worst_index = top, a + int(err.argmax())
                if al is not None:
                    res.worst_ratio = max(res.worst_ratio, _worst_ratio(err, al, g_raw, r))
        else:
            finite = torch.isfinite(err)
            bad = nonfinite_mismatch(g_raw, r_raw)
            if allowed is None:
                rounded = r_raw.to(g_raw.dtype) if g_raw.is_floating_point() else r_raw
                same = g_raw == rounded
                if g_raw.is_floating_point():
                    same |= torch.isnan(g_raw) & torch.isnan(rounded)
                bad |= ~same
                al = None
            else:
                al = allowed(r, a, b)
                bad &= ~_overflow_within(g_raw, r, al)
                bad |= finite & (err > al)
                ratio = torch.where(finite, err / al.clamp_min(tiny), torch.zeros_like(err))
                if ratio.numel():
                    res.worst_ratio = max(res.worst_ratio, float(ratio.max()))
                del ratio
            if bool(finite.any()):
                res.max_err = max(res.max_err, float(torch.where(finite, err, -1.0).max()))
            diff = err.nan_to_num(nan=float("inf"))
            if diff.numel():
                i = int(diff.argmax())
                if float(diff[i]) > res.worst_diff:  # the first of equal maxima, as argmax
                    res.worst_diff, res.worst_index = float(diff[i]), a + i
            del finite, diff
        k = int(bad.sum())
        if k:
            if res.first is None:
                j = int(bad.nonzero()[0])
                res.first, res.first_got, res.first_ref = a + j, float(g_raw[j]), float(r[j])
                if al is not None:
                    res.first_allowed = float(al.reshape(-1)[j]) if al.dim() else float(al)
            res.mismatched += k
            if row:
                res.rows[(bad.nonzero().flatten() + a).div(row, rounding_mode="floor").unique().cpu()] = True
        del r, err, bad, al
    return res


def _abs_err(got: torch.Tensor, ref64: torch.Tensor) -> torch.Tensor:
    """``|got - ref|`` in float64, ``got`` promoted inside the subtraction (no float64 copy
    of it is made first)."""
    if got.dtype == torch.bool:
        got = got.to(torch.float64)
    return torch.sub(got, ref64).abs_()


def finite_max_or_none(t: torch.Tensor) -> float | None:
    """``t.max()`` of non-negative values (errors) when it is finite (then every element
    is: a NaN or an inf would be the maximum), else None. One pass, no mask."""
    top = float(t.max())
    return top if math.isfinite(top) else None


def _fits(ref64: torch.Tensor, dtype: torch.dtype) -> bool:
    """No (finite) reference value rounds to an infinity in ``dtype`` (one min/max pass)."""
    if not dtype.is_floating_point or dtype == torch.float64 or not ref64.numel():
        return True
    lo, hi = torch.aminmax(ref64)
    return max(-float(lo), float(hi)) <= torch.finfo(dtype).max


def _worst_ratio(err: torch.Tensor, al: torch.Tensor, got: torch.Tensor, ref64: torch.Tensor) -> float:
    """``max(err / max(allowed, tiny))``, ``err`` overwritten: divided in place, where no
    allowed error is 0 or overflows the quotient; else (a quotient NaN or inf) computed
    again from ``got`` and ``ref64`` with the clamp."""
    if al.dim() == 0 or al.shape == err.shape:
        worst = float(err.div_(al).max())
        if math.isfinite(worst):
            return worst
        err = _abs_err(got, ref64)
    return float((err / al.clamp_min(torch.finfo(torch.float64).tiny)).max())


def _overflow_within(got: torch.Tensor, ref: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Where a non-finite value meets a finite one legitimately: the float64 reference is
    finite and the error ``allowed`` there reaches past the dtype's largest finite number,
    so a correct order may overflow an intermediate. Then the result may be an inf of the
    reference's sign, a NaN when ``allowed`` alone passes that number (an intermediate
    that overflows meets one that underflows: ``inf * 0``), or, where the reference rounds
    to inf, a finite value within ``allowed`` of it. A scan of products of mixed
    magnitudes (KernelBench's cumprod on mixed values) overflows in one association and
    not in another."""
    if not got.is_floating_point() or got.dtype == torch.float64:
        return torch.zeros_like(ref, dtype=torch.bool)
    top = torch.finfo(got.dtype).max
    g = got.to(torch.float64)
    reach = torch.isfinite(ref) & (ref.abs() + allowed >= top)
    overflowed = torch.isinf(g) & (torch.sign(g) == torch.sign(ref))
    unconstrained = torch.isnan(g) & (allowed >= top)
    kept_finite = torch.isfinite(g) & ((g - ref).abs() <= allowed)
    # an infinite allowance: an intermediate of a correct order may leave the range
    # (derived.intermediate_reach), whatever the final value
    free = torch.isinf(allowed)
    return (reach & (overflowed | unconstrained | kept_finite)) | free


def chunked_mismatch_verdict(
    case: ProblemCase,
    index: int,
    got: torch.Tensor,
    ref: torch.Tensor,
    result: ChunkedComparison,
    *,
    metric: str,
    tolerance: float,
    value: float | None = None,
    extra: str = "",
    details: dict | None = None,
) -> Verdict:
    """:func:`mismatch_verdict`'s ``wrong`` verdict from a :class:`ChunkedComparison` (same message).

    ``value`` defaults to the worst err/allowed ratio (at least 1), or the largest error when exact.
    """
    n, k, first = result.numel, result.mismatched, result.first
    if value is None:
        value = max(result.worst_ratio, 1.0) if tolerance else result.max_err
    at = None
    if first is not None:
        at = (result.first_got, result.first_ref, result.first_allowed, result.worst_diff, result.worst_index)
    return _wrong(case, index, got, metric=metric, value=value, tolerance=tolerance, numel=n, mismatched=k,
                  first=first, at=at, batches=result.bad_batches(), extra=extra, details=details)


def _wrong(case: ProblemCase, index: int, got: torch.Tensor, *, metric: str, value: float, tolerance: float,
           numel: int, mismatched: int, first: int | None, at: tuple | None, batches, extra: str,
           details: dict | None) -> Verdict:
    """The ``wrong`` verdict both mismatch builders return; ``at`` is (got, expected, allowed
    or None, greatest abs diff, its index) at the first bad index."""
    parts = [
        f"{case.describe()}: output {index} {tuple(got.shape)} {str(got.dtype).replace('torch.', '')}",
        f"{metric}={value:.3g} > tol={tolerance:.3g}",
        f"Mismatched elements: {mismatched} / {numel} ({100.0 * mismatched / max(numel, 1):.1f}%)",
    ]
    if at is not None:
        got_at, ref_at, allowed_at, worst_diff, worst_index = at
        line = f"first bad flat index {first}: got {got_at:.8g}, expected {ref_at:.8g}"
        if allowed_at is not None:
            line += f" (allowed error {allowed_at:.3g})"
        parts.append(line)
        parts.append(f"greatest abs diff {worst_diff:.3g} at index {worst_index}")
    if extra:
        parts.append(extra)
    return Verdict(
        Status.WRONG,
        metric=metric,
        value=value,
        tolerance=tolerance,
        bad_batches=batches,
        first_bad_index=first,
        message="; ".join(parts),
        details={"output": index, "mismatched": mismatched, "numel": numel, **(details or {})},
    )


def max_abs_finite(t: torch.Tensor, *, chunk: int | None = None, empty: float = 1.0) -> float:
    """The largest finite ``|t|`` in float64, chunk by chunk (``empty`` when nothing is finite)."""
    chunk = chunk or chunk_elements(t.device)
    flat = t.reshape(-1)
    best = None
    for a in range(0, flat.numel(), chunk):
        raw = flat[a:a + chunk]
        if raw.dtype != torch.bool:
            # one min/max pass in the tensor's own dtype; a NaN or an inf in the chunk
            # makes one of them non-finite, and the masked pass below decides
            lo, hi = torch.aminmax(raw)
            lo, hi = float(lo), float(hi)
            if math.isfinite(lo) and math.isfinite(hi):
                m = max(-lo, hi, 0.0)
                best = m if best is None else max(best, m)
                continue
        c = raw.to(torch.float64).abs()  # not abs_(): .to() of float64 is t itself
        finite = torch.isfinite(c)
        if bool(finite.any()):  # the non-finite as -1, below every |value|: no boolean gather
            m = float(torch.where(finite, c, -1.0).max())
            best = m if best is None else max(best, m)
    return empty if best is None else best
