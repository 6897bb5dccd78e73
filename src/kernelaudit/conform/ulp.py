"""ULP tools: signed distances in units in the last place, done right for bf16 and fp16.

* Two tensors of one float dtype: the signed count of representable numbers between
  them (``ordered(a) - ordered(b)`` on the bit patterns, so crossing zero or a binade
  is counted right; +0 and -0 are one number).
* A tensor against a higher-precision reference: ``(a - ref) / spacing(ref)`` with the
  format's own spacing at the reference (not ``eps * |x|``, which is off by up to 2x,
  and not at ``a``), subnormals included.
* int8: the integer difference.

:func:`compare_ulp` gathers a histogram, a sign test (is the signed error centred?) and
the worst elements, with flat indexes as Python ints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from kernelaudit.errors import InvalidArgument

from .formats import FORMATS, quantum

HIST_CLIP = 16  # histogram keys +-17 count every error beyond +-16 ulp
FORMAT_OF = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
_BITS = {torch.float32: (torch.int32, 0x7FFFFFFF), torch.bfloat16: (torch.int16, 0x7FFF),
         torch.float16: (torch.int16, 0x7FFF)}


def ordered(t: torch.Tensor) -> torch.Tensor:
    """Bit patterns of a float tensor mapped to int64 so that order and distance agree."""
    int_dtype, mag = _BITS[t.dtype]
    bits = t.contiguous().view(int_dtype).long()
    return torch.where(bits < 0, -(bits & mag), bits)


def ulp_distance(got: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Signed ULP distance ``got - ref`` (int64) for two tensors of one dtype."""
    if got.dtype != ref.dtype or got.shape != ref.shape:
        raise InvalidArgument(f"Cannot compare {got.dtype} {tuple(got.shape)} with {ref.dtype} {tuple(ref.shape)} "
                              "bit for bit: allowed are tensors of one dtype and shape")
    got, ref = got.detach().cpu(), ref.detach().cpu()
    if got.dtype in _BITS:
        return ordered(got) - ordered(ref)
    if got.dtype.is_floating_point or got.dtype.is_complex:
        raise InvalidArgument(f"Cannot have dtype={got.dtype}: allowed values are torch.float32, torch.bfloat16, "
                              "torch.float16 and integer dtypes")
    return got.long() - ref.long()


def ulp_error(got: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """``(got - ref) / spacing of got's format at ref`` (float64) for a more precise ``ref``."""
    fmt = FORMAT_OF.get(got.dtype)
    if fmt is None:
        raise InvalidArgument(f"Cannot have got.dtype={got.dtype}: allowed values are {', '.join(map(str, FORMAT_OF))}")
    g = got.detach().cpu().double().numpy()
    r = ref.detach().cpu().double().numpy()
    with np.errstate(invalid="ignore"):
        return torch.from_numpy((g - r) / quantum(r, FORMATS[fmt]))


@dataclass
class SignTest:
    """Two-sided sign test of the nonzero signed errors against a median of zero."""

    positive: int
    negative: int
    p_value: float

    @property
    def centred(self) -> bool:
        return self.p_value >= 1e-3


def sign_test(errors: torch.Tensor) -> SignTest:
    e = errors[torch.isfinite(errors.double())] if errors.is_floating_point() else errors
    pos, neg = int((e > 0).sum()), int((e < 0).sum())
    return SignTest(pos, neg, binomial_two_sided(min(pos, neg), pos + neg))


def binomial_two_sided(k: int, n: int) -> float:
    """P(X <= k or X >= n - k) for X ~ Binomial(n, 1/2), k <= n / 2."""
    if n == 0:
        return 1.0
    if n > 5000:  # normal approximation with continuity correction
        z = (k + 0.5 - n / 2) / math.sqrt(n / 4)
        return min(1.0, math.erfc(-z / math.sqrt(2)))
    log_terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2)
                 for i in range(k + 1)]
    top = max(log_terms)
    tail = math.exp(top) * sum(math.exp(t - top) for t in log_terms)
    return min(1.0, 2 * tail)


@dataclass
class UlpComparison:
    """What :func:`compare_ulp` found: every figure derived from the signed errors."""

    dtype: str
    shape: tuple[int, ...]
    numel: int
    differing: int
    nan_mismatch: int
    max_abs: float
    mean: float
    histogram: dict[int, int]
    sign: SignTest
    worst: list[dict] = field(default_factory=list)
    errors: torch.Tensor | None = field(default=None, repr=False)

    @property
    def bit_exact(self) -> bool:
        return self.differing == 0 and self.nan_mismatch == 0

    def summary(self) -> str:
        lines = [f"{self.dtype} {self.shape}: {self.differing} / {self.numel} elements differ "
                 f"({100.0 * self.differing / max(self.numel, 1):.3g}%), max |error| {self.max_abs:.4g} ulp, "
                 f"mean signed error {self.mean:+.4g} ulp, NaN mismatches {self.nan_mismatch}",
                 f"sign test: {self.sign.positive} above, {self.sign.negative} below, p = {self.sign.p_value:.3g} "
                 f"({'centred' if self.sign.centred else 'BIASED'})",
                 "histogram (ulp: count): " + ", ".join(f"{k:+d}: {v}" for k, v in sorted(self.histogram.items()))]
        for w in self.worst:
            lines.append(f"  index {w['index']} {tuple(w['coords'])}: got {w['got']!r} ref {w['ref']!r} "
                         f"({w['ulp']:+.4g} ulp)")
        return "\n".join(lines)


def compare_ulp(got: torch.Tensor, ref: torch.Tensor, *, worst: int = 5) -> UlpComparison:
    """Signed ULP errors of ``got`` against ``ref`` (same dtype: integer distances; a more
    precise ``ref``: real-valued), with histogram, sign test and the ``worst`` elements."""
    got, ref = torch.as_tensor(got).detach().cpu(), torch.as_tensor(ref).detach().cpu()
    if got.shape != ref.shape:
        raise InvalidArgument(
            f"Cannot compare shapes {tuple(got.shape)} and {tuple(ref.shape)}: allowed are equal shapes")
    err = (ulp_distance(got, ref) if got.dtype == ref.dtype else ulp_error(got, ref)).reshape(-1)
    gn = torch.isnan(got.double()).reshape(-1) if got.is_floating_point() else torch.zeros(err.shape, dtype=torch.bool)
    rn = torch.isnan(ref.double()).reshape(-1) if ref.is_floating_point() else torch.zeros(err.shape, dtype=torch.bool)
    nan_mismatch = int((gn != rn).sum())
    both_nan = gn & rn
    e = err.double().masked_fill(both_nan, 0.0)
    finite = torch.isfinite(e)
    ef = e[finite]
    rounded = torch.clamp(torch.round(ef), -HIST_CLIP - 1, HIST_CLIP + 1).long()
    values, counts = torch.unique(rounded, return_counts=True)
    mag = e.abs().masked_fill(~finite, float("inf"))
    order = torch.argsort(mag, descending=True, stable=True)[:worst]
    worst_rows = [_element(int(i), got, ref, float(e[i])) for i in order if float(mag[i]) > 0]
    return UlpComparison(
        dtype=str(got.dtype).replace("torch.", ""), shape=tuple(got.shape), numel=err.numel(),
        differing=int((e != 0).sum()), nan_mismatch=nan_mismatch,
        max_abs=float(mag.max()) if mag.numel() else 0.0, mean=float(ef.mean()) if ef.numel() else 0.0,
        histogram={int(v): int(c) for v, c in zip(values, counts)}, sign=sign_test(ef),
        worst=worst_rows, errors=e)


def _element(i: int, got, ref, ulp: float) -> dict:
    coords = np.unravel_index(i, tuple(got.shape)) if got.dim() else ()
    return {"index": i, "coords": [int(c) for c in coords], "got": got.reshape(-1)[i].item(),
            "ref": ref.reshape(-1)[i].item(), "ulp": ulp}


def plot_ulp(cmp: UlpComparison, path, *, title: str = "") -> None:
    """A bar chart of the signed ULP histogram (log counts), with the sign test in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2))
    keys = sorted(cmp.histogram)
    ax.bar(keys, [cmp.histogram[k] for k in keys], color=["#c44" if k else "#4a4" for k in keys])
    ax.set_yscale("log")
    ax.set_xlabel(f"signed error ({cmp.dtype} ulp)")
    ax.set_ylabel("elements")
    ax.set_title(title or f"{cmp.differing}/{cmp.numel} differ; sign test p = {cmp.sign.p_value:.2g}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
