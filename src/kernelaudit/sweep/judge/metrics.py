"""Per-batch metrics and their accumulation into a verdict (:class:`Judgement`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ...config import FUSED_COMPARE, FUSED_SUMMARY, Knob, fused_enabled
from ...errors import CheckerBug
from ...verdict import BadBatches, Status, Verdict

_TINY = 1e-300


def rel_floor(dtype: torch.dtype) -> float:
    """The least denominator of the ``rel`` metric for outputs of ``dtype``: its smallest
    normal number. Below it a float has only absolute precision (subnormals, or flushed
    to zero), so a batch whose every true value lies there is judged on that scale: a
    float16 mean gradient ``g / 16384`` that correctly rounds to 0 is not a wrong batch."""
    return float(torch.finfo(dtype).tiny) if dtype.is_floating_point else _TINY


@dataclass
class Judgement:
    """Accumulates per-batch metrics of one output over the chunks."""

    name: str
    metric: str
    tol: float | None
    numel_per_batch: int
    worst: float = 0.0
    bad_first: int | None = None
    bad_last: int | None = None
    bad_count: int = 0
    first_bad_index: int | None = None
    worst_batch: int | None = None
    located: bool = False  # the first bad element of a Freivalds-localised batch was found
    details: dict = field(default_factory=dict)  # what the judge set aside, and why

    def add(self, b0: int, per_batch: torch.Tensor, first_bad_local=None) -> None:
        """Record metrics of batches b0.. (``first_bad_local(b) -> flat index within batch``)."""
        if per_batch.numel():
            self.add_summary(b0, summarize(per_batch.detach().reshape(1, -1), [self.tol]).cpu()[0], first_bad_local)

    def add_exact(self, b0: int) -> None:
        """Record batches b0.. whose every metric is 0 (equal to their reference bit for
        bit): what :meth:`add` records for a tensor of zeros, without summarizing one (on
        the host that cost about 10 ms per 2^27-element chunk, ten passes over its batches:
        most of a 2^32-element ``abs`` case's judge on the H200)."""
        self.add_summary(b0, torch.zeros(5, dtype=torch.float64))

    def add_summary(self, b0: int, summary: torch.Tensor, first_bad_local=None) -> None:
        """Record batches b0.. from their :func:`summarize` row (worst, its batch, bad
        count, first and last bad batch; batches counted from 0 at b0)."""
        worst, arg, count, first, last = summary.tolist()
        if worst > self.worst or self.worst_batch is None:
            self.worst, self.worst_batch = worst, b0 + int(arg)
        if self.tol is None or not count:
            return
        if self.bad_first is None:
            self.bad_first = b0 + int(first)
            local = first_bad_local(int(first)) if first_bad_local else 0
            self.first_bad_index = self.bad_first * self.numel_per_batch + int(local)
        self.bad_last = b0 + int(last)
        self.bad_count += int(count)

    def verdict(self) -> Verdict:
        if self.bad_count:
            return Verdict(Status.WRONG, f"{self.name}:{self.metric}", self.worst, self.tol,
                           BadBatches(self.bad_first, self.bad_last, self.bad_count), self.first_bad_index,
                           details=dict(self.details))
        return Verdict(Status.OK, f"{self.name}:{self.metric}", self.worst, self.tol, details=dict(self.details))


def summarize(per_batch: torch.Tensor, tols: list[float | None]) -> torch.Tensor:
    """(k, 5) float64 on ``per_batch``'s device, for k rows of per-batch metrics (NaN
    counts as inf) and a tolerance per row: the worst metric, its batch, how many
    batches exceed the tolerance (None: none do), the first and the last of them (0
    when none). Batch indexes stay far below 2^53, exact in float64. Computed where the
    metrics are, so that a GPU check moves 5 numbers a row to the host, not a batch's.
    On CUDA one Triton launch (:mod:`.kernels.summary`) does what takes about twenty
    small torch kernels here."""
    if _fused_summary_enabled(per_batch.device):
        from ..kernels.summary import MAX_ROWS, summary_rows

        if 1 <= per_batch.shape[0] <= MAX_ROWS and per_batch.shape[1] >= 1:
            return summary_rows(per_batch, tols)
    pb = per_batch.double()
    pb = torch.where(torch.isnan(pb), torch.full_like(pb, math.inf), pb)
    worst, arg = pb.max(1)
    # row by row against Python floats: a tensor of tolerances would be a host-to-device
    # copy, which can wait for the GPU's queued work
    bad = torch.stack([pb[i] > (math.inf if t is None else t) for i, t in enumerate(tols)]).to(torch.int32)
    n = pb.shape[1]
    first = bad.argmax(1)
    count = bad.sum(1)
    last = torch.where(count > 0, n - 1 - bad.flip(1).argmax(1), 0)  # as documented: 0 when none
    return torch.stack([worst, arg.double(), count.double(), first.double(), last.double()], 1)


def _batch_view(t: torch.Tensor, nb: int) -> torch.Tensor:
    return t.reshape(nb, -1)


def _elementwise_error(got: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """``|got - ref|``, 0 where they are equal or both NaN (the op left its domain there,
    and so did its reference: ``inf - inf`` and ``nan - nan`` would be NaN), infinite
    where exactly one side is NaN. At 2^32 elements a 16-bit ``atanh`` meets its poles
    (thousands of inputs round to exactly +-1) and ``mvlgamma``'s gradient its NaNs."""
    zero = torch.zeros((), dtype=got.dtype, device=got.device)
    nan_g, nan_r = torch.isnan(got), torch.isnan(ref)
    err = torch.where((got == ref) | (nan_g & nan_r), zero, (got - ref).abs())
    return torch.where(nan_g ^ nan_r, torch.full((), math.inf, dtype=got.dtype, device=got.device), err)


def overflow_threshold(dtype: torch.dtype) -> float:
    """The smallest ``|x|`` that rounds to infinity in floating ``dtype``: its largest
    finite value plus half an ulp there, ``2^(emax+1) - 2^(emax-m-1)`` with ``m``
    mantissa bits (round to nearest even goes up at the tie: the largest value's last bit
    is 1); ``inf`` for integers and float64."""
    if not dtype.is_floating_point or dtype == torch.float64:
        return math.inf
    m = {torch.float16: 10, torch.bfloat16: 7, torch.float32: 23}[dtype]
    e = math.frexp(float(torch.finfo(dtype).max))[1]  # emax + 1
    return 2.0 ** e - 2.0 ** (e - m - 2)


def _overflowed(ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``ref`` with the values that round to infinity in the case's ``dtype`` made that
    infinity: a float16 ``1/x`` gradient past 65504 is ``inf`` when right."""
    ovf = overflow_threshold(dtype)
    if math.isinf(ovf):
        return ref
    return torch.where(ref.abs() >= ovf, torch.copysign(torch.full_like(ref, math.inf), ref), ref)


def _finite_abs(ref: torch.Tensor) -> torch.Tensor:
    """``|ref|`` with infinities and NaNs as 0: a batch's scale is its largest finite
    magnitude, so one infinite reference value does not make every other error in the
    batch vanish."""
    return torch.where(torch.isfinite(ref), ref.abs(), torch.zeros((), dtype=ref.dtype, device=ref.device))


def compare_rows(j: Judgement, b0: int, got: torch.Tensor, ref: torch.Tensor, exact: bool,
                 scale: torch.Tensor | None = None) -> None:
    """Per-batch rel (or exact) metric of a chunk; both tensors hold whole batches.

    ``scale`` (per element, optional) replaces the batch's ``max|ref|`` as the error's
    denominator: reductions pass ``sum|x|`` so a sum near zero is not a false alarm.
    On CUDA the per-batch maxima come from one fused pass (:mod:`.kernels.compare`)."""
    nb = _nb_of(j, got)
    g = _batch_view(got.detach(), nb)
    r = _batch_view(ref.detach(), nb)  # float64, or the case's dtype for exact ops
    if g.shape != r.shape:
        raise CheckerBug(f"{j.name}: got chunk {tuple(g.shape)} vs reference {tuple(r.shape)}")
    sc = _batch_view(scale.detach().to(torch.float64), nb) if scale is not None and not exact else None
    if _fused_compare_enabled(r.device):
        from ..kernels.compare import row_max

        err_max, ref_max = row_max(g, r, sc, _TINY)
    else:
        g64, r = g.to(torch.float64), _overflowed(r.to(torch.float64), got.dtype)
        err = _elementwise_error(g64, r)
        if sc is not None:
            err = err / sc.clamp_min(_TINY)
        err_max, ref_max = err.amax(1), _finite_abs(r).amax(1)
    floor = rel_floor(got.dtype)
    per = err_max if (exact or sc is not None) else err_max / ref_max.clamp_min(floor)

    def local(bi: int) -> int:
        """First element of batch ``bi`` over the tolerance (one row, in torch)."""
        gi, ri = g[bi].to(torch.float64), _overflowed(r[bi].to(torch.float64), got.dtype)
        e = _elementwise_error(gi, ri)
        tol = j.tol if j.tol is not None else 0.0
        if exact:
            thresh = torch.zeros_like(e)
        elif sc is not None:
            e = e / sc[bi].clamp_min(_TINY)
            thresh = torch.full_like(e, tol)
        else:
            thresh = torch.full_like(e, tol * float(_finite_abs(ri).amax().clamp_min(floor)))
        over = torch.nonzero(e > thresh).flatten()
        return int(over[0]) if over.numel() else 0

    j.add(b0, per, local)


def _fused_summary_enabled(device: torch.device) -> bool:
    """The one-launch judgement summary (``KERNELAUDIT_FUSED_SUMMARY``)."""
    return _fused_enabled(device, FUSED_SUMMARY, "summary")


def _fused_compare_enabled(device: torch.device) -> bool:
    """The fused per-batch comparison (``KERNELAUDIT_FUSED_COMPARE``)."""
    return _fused_enabled(device, FUSED_COMPARE, "compare")


def _nb_of(j: Judgement, got: torch.Tensor) -> int:
    return max(1, got.numel() // max(1, j.numel_per_batch))


def _fused_enabled(device: torch.device, knob: Knob, module: str) -> bool:
    """A fused Triton kernel of :mod:`kernelaudit.sweep.kernels` runs where ``knob``
    says (:func:`kernelaudit.config.fused_enabled`: ``auto`` on CUDA only), and not
    at all without Triton installed (the torch path then judges)."""
    import importlib

    if not fused_enabled(knob, device):
        return False
    try:
        importlib.import_module(f"kernelaudit.sweep.kernels.{module}")
    except ModuleNotFoundError as e:
        if e.name != "triton":
            raise
        return False
    return True
