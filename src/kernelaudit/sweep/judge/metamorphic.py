"""Judges that need no per-op reference: metamorphic relations checked at spots.

An op whose output has no batch-local float64 reference (a factory, a random
generator, a whole-tensor reduction, a scan along the scaled dim, an index op whose
output position depends on the data) is judged by a **relation** its output must
satisfy, evaluated with calls of the op itself at sizes far below the thresholds
(:func:`chunk_len`), in the op's own dtype, at **spots**: the first and last
elements, the elements around every threshold the output crosses, and pseudo-random
positions (:func:`spots`). Index positions are int64 maths throughout.

Relations are data (:data:`RELATIONS`), each with the op families it applies to:

* ``slice``: ``op(X)[r0:r1]`` equals ``op(X[r0:r1])`` (bitwise, or within ``tol``);
* ``chunk``: partial results of the op on chunks, combined in float64, equal the op on
  the whole (reductions), or each chunk of a scan equals the scan of that chunk carried
  from the element before it;
* ``closed_form``: factories and ranges against closed-form values at the spots;
* ``statistical``: random generators, per chunk: every value in the support, the
  fraction below a few quantiles within 6 sigma of the distribution's CDF, and the
  chunk past each threshold neither a copy of the head nor constant;
* ``spot_index``: index ops (take, masked_select, nonzero, searchsorted) against the
  element their index says, found by counting chunk by chunk.

Where the op takes ``out=`` or writes into a buffer, the buffer is **poisoned**
(NaN, or the dtype's most negative integer) before the call, outside any fault
model, so an unwritten tail shows even where the right value is 0.

The ops judged this way are in :mod:`.metamorphic_ops`; :func:`check` runs and judges
one at a size ``n``; :func:`judge_case` judges a sweep case's outputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.utils._python_dispatch import _disable_current_modes

from ...errors import InvalidArgument
from ...thresholds import Thresholds
from ...verdict import Status, Verdict
from .. import gen

#: Z-score past which a statistical check fails: 6 sigma, about 2e-9 per check, so a
#: correct generator is essentially never rejected.
Z_TOL = 6.0
#: Pseudo-random spots added to the fixed ones (first, last, around each threshold).
RANDOM_SPOTS = 48
#: Elements per call of the op when it is run at small size to combine or count.
MAX_PASS = 2**24


@dataclass(frozen=True)
class Relation:
    """A metamorphic relation: its name, the families it applies to, what it checks."""

    name: str
    families: tuple[str, ...]
    what: str


RELATIONS: dict[str, Relation] = {r.name: r for r in (
    Relation("slice", ("unary", "binary", "activation", "random", "softmax", "scan", "sort"),
             "op(X)[rows] equals op(X[rows]) at spot row ranges (bitwise for deterministic elementwise ops)"),
    Relation("chunk", ("reduction", "scan"),
             "partial results of chunks computed at small size, combined in float64, equal the whole"),
    Relation("closed_form", ("factory",),
             "closed-form values at spot indexes (int64 index maths, float64 values)"),
    Relation("statistical", ("random",),
             "per chunk: support, CDF at quantiles within 6 sigma, tail not a copy of the head nor constant"),
    Relation("spot_index", ("indexing", "scatter_gather", "sort"),
             "at spot indexes, the element the index names (counted chunk by chunk)"),
)}


@dataclass(frozen=True)
class MetaOp:
    """One op judged by a relation. ``run(n, dtype, device)`` builds its inputs (outside
    any fault model) and runs it on a scaled tensor of ``n`` elements, returning
    ``(inputs, outputs)``; ``params`` configure the relation's judge."""

    name: str
    family: str
    relation: str
    run: Callable
    dtypes: tuple[str, ...] = ("float32",)
    poisoned: bool = False
    params: dict = field(default_factory=dict)
    notes: str = ""


# --------------------------------------------------------------------------- positions

def chunk_len(th: Thresholds, n: int) -> int:
    """Elements per chunk of the relations: 2^(bits-4), far below every threshold, and
    at most :data:`MAX_PASS` (a chunk's float64 copies stay small on a real device)."""
    return max(1, min(n, 2 ** max(th.bits - 4, 4), MAX_PASS))


def spots(n: int, th: Thresholds, *, extra: int = RANDOM_SPOTS, key: int = 7) -> torch.Tensor:
    """int64 flat positions in [0, n): first, last, around each threshold below n, and
    ``extra`` pseudo-random ones (half of them past 2^32 when n is above it)."""
    pos = {0, 1, n - 2, n - 1}
    for t in (th.t31, th.t32, th.t33):
        if t < n:
            pos |= {t - 1, t, t + 1}
    i = torch.arange(extra, dtype=torch.int64)
    pos |= set((gen.hash32(i, key) % n).tolist())
    if n > th.t32:
        pos |= set((th.t32 + gen.hash32(i, key + 1) % (n - th.t32)).tolist())
    return torch.tensor(sorted(p for p in pos if 0 <= p < n), dtype=torch.int64)


def windows(n: int, th: Thresholds) -> list[int]:
    """Start positions of the chunks checked: the head, around each threshold, the tail."""
    c = chunk_len(th, n)
    starts = {0, n - c}
    for t in (th.t31, th.t32, th.t33):
        if t < n:
            starts |= {min(max(t - c // 2, 0), n - c), min(t, n - c)}
    return sorted(starts)


def quiet(fn):
    """Run ``fn`` with every dispatch mode (fault model) off: input generation and
    poisoning are not the op under test."""
    def wrapped(*a, **k):
        with _disable_current_modes():
            return fn(*a, **k)
    return wrapped


def poison(shape, dtype: torch.dtype, device) -> torch.Tensor:
    """A buffer filled with a value no correct op writes there: NaN, or the least integer."""
    v = math.nan if dtype.is_floating_point else torch.iinfo(dtype).min
    with _disable_current_modes():
        return torch.full(shape, v, dtype=dtype, device=device)


def gen_values(idx: torch.Tensor, key: int, dtype: torch.dtype, transform=None) -> torch.Tensor:
    """Generated input values at int64 positions ``idx`` (uniform on [-1, 1) before ``transform``)."""
    u = gen.values_at(idx, key, torch.float32).double()
    v = transform(u, idx) if transform else u
    return v.to(dtype)


def gen_input(n: int, key: int, dtype: torch.dtype, device, transform=None) -> torch.Tensor:
    """The whole generated input of ``n`` elements, chunk by chunk, with modes off."""
    with _disable_current_modes():
        out = torch.empty(n, dtype=dtype, device=device)
        for s in range(0, n, MAX_PASS):
            idx = torch.arange(s, min(n, s + MAX_PASS), dtype=torch.int64, device=device)
            out[s:s + idx.numel()] = gen_values(idx, key, dtype, transform)
        return out


def gen_index(n: int, key: int, dtype: torch.dtype, device, *, high: int | None = None) -> torch.Tensor:
    """``n`` generated integers (in [0, high)) or booleans, chunk by chunk, modes off:
    never an int64 position tensor of all ``n``."""
    with _disable_current_modes():
        out = torch.empty(n, dtype=dtype, device=device)
        for s in range(0, n, MAX_PASS):
            idx = torch.arange(s, min(n, s + MAX_PASS), dtype=torch.int64, device=device)
            out[s:s + idx.numel()] = gen.values_at(idx, key, dtype, high=high)
        return out


# --------------------------------------------------------------------------- findings

@dataclass
class Finding:
    """The worst value of one check (``tol``: the largest value it accepts) and where."""

    check: str
    metric: str
    tol: float
    worst: float = 0.0
    index: int | None = None
    note: str = ""

    def add(self, value: float, index: int | None = None, note: str = "") -> None:
        """Record one value; the first bad one keeps its index and note."""
        value = math.inf if value != value else value
        if value > self.tol and not self.bad:
            self.index, self.note = index, note
        elif not self.bad and value >= self.worst:
            self.note = note
        self.worst = max(self.worst, value)

    @property
    def bad(self) -> bool:
        return not (self.worst <= self.tol)


def _first_bad(err: torch.Tensor, tol: float, idx: torch.Tensor) -> tuple[float, int | None]:
    """(worst error, position of the first over ``tol``) with NaN counted as infinite."""
    err = torch.nan_to_num(err.double(), nan=math.inf)
    if err.numel() == 0:
        return 0.0, None
    bad = torch.nonzero(err > tol).flatten()
    worst = float(err.max())
    return worst, (int(idx.flatten()[int(bad[0])]) if bad.numel() else None)


# --------------------------------------------------------------------------- relations

def _closed_form(op: MetaOp, n: int, dtype, th, inputs, outs) -> list[Finding]:
    """The output at the spots against ``params['expect']`` (float64 at int64 flat
    positions): exact after rounding to the output dtype, or within ``rel`` epsilons."""
    p = op.params
    out = outs[0].reshape(-1)
    m = out.numel()
    idx = spots(m, th).to(out.device)
    exp = p["expect"](idx, inputs, outs[0])
    got = out[idx].double()
    if p.get("rel") is None:  # exact after rounding to the output dtype
        f = Finding("closed-form", "exact", 0.0)
        err = (got - exp.to(out.dtype).double()).abs()
    else:
        f = Finding("closed-form", "rel", p["rel"] * _eps(out.dtype))
        err = (got - exp).abs() / exp.abs().clamp_min(p.get("floor", 1.0))
    worst, at = _first_bad(err, f.tol, idx)
    f.add(worst, at, f"{m} elements, {idx.numel()} spots")
    return [f]


def _eps(dtype) -> float:
    return torch.finfo(dtype).eps if dtype.is_floating_point else 0.0


def _chunk(op: MetaOp, n: int, dtype, th, inputs, outs) -> list[Finding]:
    """Whole reductions: the op on chunks of :func:`chunk_len` elements, combined in
    float64 (``combine_fn``), against the op on the whole; scans: :func:`_scan`."""
    p = op.params
    x = inputs[0]
    kind = p["combine"]
    if kind in ("cumsum", "cummax", "cummin"):
        return _scan(op, n, th, x, outs[0], kind, p)
    # Partials of the op itself at small size: chunk_len elements (rows of a matrix).
    step = max(1, chunk_len(th, n) // (x.shape[1] if x.dim() == 2 else 1))
    if "parts" in p:
        parts = p["parts"](x, step)
    else:
        parts = [p["partial"](x[s:s + step]) for s in range(0, x.shape[0], step)]
    comb = p["combine_fn"](parts)
    got = p["pick"](outs).double()
    if p.get("rel") is None:
        f = Finding("chunk-combine", "exact", 0.0)
        err = (got - comb).abs().reshape(-1)
    else:
        f = Finding("chunk-combine", "rel", p["rel"] * _eps(dtype) + 256 * _eps(torch.float32))
        err = ((got - comb).abs() / comb.abs().clamp_min(1e-300)).reshape(-1)
    if outs[0].is_floating_point():
        # a result past the output dtype's range is right as that infinity (float16's
        # norm of 2^32 values in [0, 4) is about 155,000: inf)
        rounded = comb.to(outs[0].dtype).double()
        err = torch.where((torch.isinf(rounded) & (got == rounded)).reshape(-1), 0.0, err)
    worst, at = _first_bad(err, f.tol, torch.zeros_like(err, dtype=torch.int64))
    f.add(worst, at, f"{len(parts)} chunks of {step}")
    return [f]


def _scan(op, n, th, x, got, kind, p) -> list[Finding]:
    """Each checked chunk of a scan equals the scan of that chunk carried from the
    element before it: ``cumsum`` within a tolerance, ``cummax``/``cummin`` bitwise."""
    c = chunk_len(th, n)
    exact = kind != "cumsum"
    f = Finding("scan-carry", "exact" if exact else "cond", 0.0 if exact else 64 * _eps(x.dtype))
    for s in windows(n, th):
        xs = x[s:s + c]
        local = getattr(torch, kind)(xs, 0)
        local = local[0] if isinstance(local, tuple) else local
        g = got[s:s + c]
        if s == 0:
            ref = local.double()
        elif kind == "cumsum":
            ref = got[s - 1].double() + local.double()
        else:
            ref = (torch.maximum if kind == "cummax" else torch.minimum)(local, got[s - 1]).double()
        err = (g.double() - ref).abs()
        if not exact:
            err = err / (got[s - 1].double().abs() + g.double().abs() + xs.double().abs().sum()).clamp_min(1e-300) \
                if s else err / (xs.double().abs().cumsum(0)).clamp_min(1e-300)
        worst, at = _first_bad(err, f.tol, torch.arange(s, s + c))
        f.add(worst, at)
    return [f]


def _slice(op: MetaOp, n, dtype, th, inputs, outs) -> list[Finding]:
    """The output's rows at each window against the op on those rows of its inputs."""
    c = chunk_len(th, n)
    tol = op.params.get("tol", 0.0)
    f = Finding("slice", "exact" if tol == 0 else "rel", tol)
    got = outs[0]
    for s in windows(n, th):
        small = op.params["call"](*[t[s:s + c] for t in inputs])
        g = got[s:s + c]
        err = (g.double() - small.double()).abs()
        if tol:
            err = err / small.double().abs().max().clamp_min(1e-300)
        err = torch.where(torch.isnan(g) & torch.isnan(small), 0.0, err) if g.is_floating_point() else err
        worst, at = _first_bad(err, f.tol, torch.arange(s, s + c))
        f.add(worst, at)
    return [f]


def _statistical(op: MetaOp, n, dtype, th, inputs, outs) -> list[Finding]:
    """Per window: support, the CDF at a few points (binomial z-score), no constant
    chunk, no chunk past 2^32 repeating the head."""
    p = op.params
    got = outs[0].reshape(-1)
    n = got.numel()
    c = chunk_len(th, n)
    lo, hi = p["support"]
    sup = Finding("support", "exact", 0.0)
    cdf = Finding("cdf", "z", Z_TOL)
    copy = Finding("not-a-copy", "exact", 0.0)
    head = got[:c]
    for s in windows(n, th):
        ch = got[s:s + c].double()
        outside = ~((ch >= lo) & (ch <= hi))  # NaN is outside
        if outside.any():
            sup.add(math.inf, s + int(torch.nonzero(outside).flatten()[0]), "value outside the support")
        for q, F in p["cdf"]:
            frac = float((ch <= q).double().mean())
            lo_F, hi_F = _quantised_cdf(p.get("law"), q, F, got.dtype)
            dev = max(lo_F - frac, frac - hi_F, 0.0)
            sigma = math.sqrt(max(F * (1 - F), 1e-12) / ch.numel())
            want = f"{F:.4f}" if lo_F == hi_F else f"{lo_F:.5f}..{hi_F:.5f}"
            cdf.add(dev / sigma if sigma else math.inf, s, f"P(X<={q}) {frac:.5f} vs {want}")
        if c >= 16 and bool((ch == ch[0]).all()):
            copy.add(math.inf, s, f"constant chunk at {s}")
        if s >= th.t32 and c >= 16 and torch.equal(got[s:s + c], head):
            copy.add(math.inf, s, f"chunk at {s} repeats the head")
    # Past each threshold, the run up to the end (or a chunk) is neither constant nor
    # the head again: a run of L equal draws has probability pmax^(L-1), so only runs
    # long enough for that to be below 1e-9 are judged (L >= 2 for continuous laws).
    pmax = p.get("pmax", 0.0)
    need = 2 if pmax == 0 else math.ceil(math.log(1e-9) / math.log(pmax)) + 1
    for t in (th.t31, th.t32, th.t33):
        L = min(n - t, c)
        if t >= n or L < need:
            continue
        run = got[t:t + L]
        if bool((run == run[0]).all()):
            copy.add(math.inf, t, f"the {L} elements from {t} are all {float(run[0])!r}")
        elif torch.equal(run, got[:L]):
            copy.add(math.inf, t, f"the {L} elements from {t} repeat the head")
    return [sup, cdf, copy]


def _quantised_cdf(law, q: float, F: float, dtype) -> tuple[float, float]:
    """The range of P(X <= q) for a continuous law with CDF ``law`` whose draws are
    stored in ``dtype``: generators draw on a grid about the dtype's epsilon wide or
    coarser (CUDA's bfloat16 uniforms are multiples of 2^-8, so P(X <= 0.25) is 0.2539,
    40 sigma off 0.25 over 2^24 draws; a uniform on [-2, 3] scales that grid by 5), so
    the fraction may be the law anywhere within :data:`GRID_EPS` epsilons (relative) of
    q. Float32's range is 2e-7 wide; a fault that moves mass moves it by percents.
    Without a law (a discrete one): exactly F."""
    if law is None or not dtype.is_floating_point:
        return F, F
    d = GRID_EPS * torch.finfo(dtype).eps * max(1.0, abs(q))
    return min(F, law(q - d)), max(F, law(q + d))


#: Half-width of the statistical check's range around each CDF point, in epsilons of
#: the draws' dtype (relative to the point, at least absolute): see ``_quantised_cdf``.
GRID_EPS = 2.0


def _spot_index(op: MetaOp, n, dtype, th, inputs, outs) -> list[Finding]:
    """The op's own spot judge (``params['judge']``, in :mod:`.metamorphic_ops`)."""
    return op.params["judge"](op, n, th, inputs, outs)


_JUDGES = {"closed_form": _closed_form, "chunk": _chunk, "slice": _slice, "statistical": _statistical,
           "spot_index": _spot_index}


# --------------------------------------------------------------------------- entry points

def judge_outputs(op: MetaOp, n: int, dtype: torch.dtype, th: Thresholds, inputs, outs) -> Verdict:
    """The verdict of ``op``'s relation on its outputs ``outs`` (from inputs ``inputs``)."""
    with torch.no_grad():
        findings = _JUDGES[op.relation](op, n, dtype, th, inputs, outs)
    return _verdict(op, n, dtype, findings)


def _verdict(op, n, dtype, findings: list[Finding]) -> Verdict:
    bad = [f for f in findings if f.bad]
    worst = bad[0] if bad else max(findings, key=lambda f: (f.worst / f.tol) if f.tol else f.worst)
    shapes = f"{op.name} {str(dtype).split('.')[-1]} n={n}"
    msg = (f"{shapes}: relation {op.relation}, check {worst.check} ({worst.metric} {worst.worst:.3g} "
           f"{'>' if bad else '<='} {worst.tol:.3g})"
           + (f" first bad index {worst.index}" if bad and worst.index is not None else "")
           + (f": {worst.note}" if worst.note else ""))
    details = {"relation": op.relation, "checks": {f.check: {"metric": f.metric, "worst": f.worst, "tol": f.tol,
                                                              "index": f.index} for f in findings}}
    return Verdict(Status.WRONG if bad else Status.OK, f"{worst.check}:{worst.metric}", worst.worst, worst.tol,
                   None, worst.index if bad else None, msg, details)


def check(name: str, n: int, *, dtype: str = "float32", device="cpu", scale: int = 10,
          fault_model: str = "none") -> Verdict:
    """Run the metamorphically judged op ``name`` on a scaled tensor of ``n`` elements
    under ``fault_model`` at thresholds 2^``scale``, and judge it by its relation."""
    from ...faults import make_fault_model
    from ..ops.spec import DTYPES
    from .metamorphic_ops import META_OPS

    if name not in META_OPS:
        raise InvalidArgument(f"Cannot have op={name!r}: allowed values are {', '.join(META_OPS)}")
    op = META_OPS[name]
    if dtype not in op.dtypes:
        raise InvalidArgument(f"Cannot have dtype={dtype!r} for op {name!r}: allowed values are {', '.join(op.dtypes)}")
    th = Thresholds(scale)
    dt = DTYPES[dtype]
    fm = make_fault_model(fault_model, th)
    with torch.no_grad():
        with fm:
            inputs, outs = op.run(n, dt, torch.device(device))
    v = judge_outputs(op, n, dt, th, inputs, outs)
    v.details["fault_calls_changed"] = dict(fm.stats.changed)
    return v


def judge_case(case, inputs, outs, tolerances) -> list:
    """A sweep case's outputs judged by its op's relation, as
    :class:`~.metrics.Judgement` s: one per check, metric ``exact`` (tolerance 0) whose
    value is 0 when the check holds, else how far past its own bound it is (the
    worst over the bound, or the worst itself where the bound is 0): the relations'
    bounds are fixed, not calibrated, so calibration must not widen them."""
    from .metrics import Judgement
    from ..tolerance import tolerance_for

    op = case.spec.extra["metamorphic"]
    n = case.batch * case.spec.out_rows(case.series, case.thresholds)[0]
    from ..ops.spec import DTYPES

    with torch.no_grad():
        findings = _JUDGES[op.relation](op, n, DTYPES[case.dtype], case.thresholds, inputs, outs)
    js = []
    for f in findings:
        name = f"{op.relation}/{f.check}"
        j = Judgement(name, "exact", tolerance_for(tolerances, name, "exact"), 1)
        over = 0.0 if not f.bad else (f.worst / f.tol if f.tol else f.worst)
        j.add(f.index or 0, torch.tensor([over], dtype=torch.float64))
        js.append(j)
    return js
