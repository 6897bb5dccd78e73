"""``values``: inputs of every magnitude and sign the op admits.

The problem's own ``get_inputs()`` draws from ``torch.rand`` (uniform [0, 1)), on which
ReLU, LeakyReLU, HardTanh and ELU are the identity. This oracle keeps the shapes and
dtypes of the case's inputs and replaces their values, one kind at a time:

``normal``   signed standard normal;
``negative`` -|normal| (every negative branch);
``large``    normal * 2^12;
``small``    normal * 2^-40;
``mixed``    normal * 2^k, k uniform in [-16, 16] per element;

the suites' composite kind (a candidate input of :mod:`.suite`, not judged here):

``strata``   the rows (the slices along dim 0, or along the fewest leading dims that
             hold at least one per kind: a batch of 3 gives its 3 x C slices) drawn in
             blocks from each of the kinds above in turn and then from KernelBench's uniform
             [0, 1), so that one input holds negative, large, small, mixed and all-positive
             rows: a row-wise fault of any of those kinds shows in its rows (an all-positive
             row is what a minimum whose initial value became 0 gets wrong), and a two-input
             suite carries every kind;

plus the adversarial kinds the problem lists in ``ADVERSARIAL``:

``neg_inf_rows``  a quarter of each row set to -inf (masked positions; column 0 stays
                  finite);
``ties``          normal rounded to multiples of 0.5, so that maxima repeat.

An input declared ``positive`` takes the absolute value, ``probability`` /
``log_probability`` a (log-)softmax over the last dim of the values divided by their
rms and clamped to [-40, 40] (no probability underflows to an exact 0), ``fixed`` (class indexes, masks,
signs) is never changed. Each kind is judged by the comparator(s) of the sequence
(``bound`` by default).

A case larger than the problem's small shape (a KernelBench problem at its own shape:
:func:`~kernelaudit.zoo.problems.small_shapes.shrinking_shapes`) has its value kinds
drawn at the small shape (same seed): signs, magnitudes and ties reach the same branches
there, and ``bound`` has judged the own shape already.
"""

from __future__ import annotations

import torch

from ..problems.problem_case import ProblemCase
from ..problems.small_shapes import shrinking_shapes
from ...verdict import Verdict
from .base import Comparator, Driver, Subject, combine, free_device_memory, judge_or_unjudged, release_shape

#: Value kinds every problem gets.
VALUE_KINDS = ("normal", "negative", "large", "small", "mixed")
#: The suites' composite kind: :data:`STRATA_KINDS` in blocks of rows.
STRATA = "strata"
#: The blocks of a ``strata`` input, in row order: every value kind, then ``rand`` (uniform [0, 1), the
#: distribution of KernelBench's ``get_inputs``: all positive). Last, so that a tensor of fewer elements
#: than kinds drops ``normal``, which a boundary shape's own ``normal`` input carries.
STRATA_KINDS = VALUE_KINDS + ("rand",)
#: Value kinds a problem opts into with ``ADVERSARIAL``.
ADVERSARIAL_KINDS = ("neg_inf_rows", "ties")
#: Scale exponents of the ``large`` and ``small`` kinds, and the range of ``mixed``.
LARGE_EXP, SMALL_EXP, MIXED_EXP = 12, -40, 16
#: Logits of probability inputs stay in [-40, 40]: exp(-80) is still a normal float32.
PROB_LOGIT_CLAMP = 40.0
#: Fraction of each row set to -inf by ``neg_inf_rows``.
NEG_INF_FRACTION = 0.25


def _generator(device: str, seed: int) -> torch.Generator:
    gen = torch.Generator(device=device if str(device).startswith("cuda") else "cpu")
    gen.manual_seed(seed)
    return gen


def draw(kind: str, like: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Values of ``kind`` with the shape, dtype and device of ``like``."""
    base = torch.randn(like.shape, generator=gen, device=gen.device, dtype=torch.float64)
    if kind == STRATA:
        v = base
        if base.numel() > 0 and base.dim() > 0:
            n = strata_rows(base.shape)
            rows_of = base.reshape(n, -1)
            for k, lo, hi in strata_blocks(n):
                rows = rows_of[lo:hi]
                rows.copy_(_scaled(k, rows, gen))
    else:
        v = _scaled(kind, base, gen)
    return v.to(device=like.device, dtype=like.dtype)


def strata_rows(shape) -> int:  # noqa: ANN001 - a torch.Size or a tuple of ints
    """How many rows a ``strata`` tensor of ``shape`` has: its slices along the fewest leading
    dims that number at least one per kind of :data:`STRATA_KINDS` (dim 0's where it is that
    long), so every kind gets whole slices even where a batch has 3 rows; where the tensor
    has fewer elements than kinds, its elements."""
    dims = list(shape)
    if not dims:
        return 1
    lead, n = 0, dims[0]
    while n < len(STRATA_KINDS) and lead + 1 < len(dims):
        lead += 1
        n *= dims[lead]
    return n


def strata_blocks(n: int) -> list[tuple[str, int, int]]:
    """``(kind, lo, hi)``: the rows [lo, hi) of ``n`` that a ``strata`` input draws from each kind
    of :data:`STRATA_KINDS` (rows [i n / 6, (i + 1) n / 6) for kind i; kinds left without a row
    where ``n`` is under 6 are not listed)."""
    m = len(STRATA_KINDS)
    return [(k, i * n // m, (i + 1) * n // m) for i, k in enumerate(STRATA_KINDS) if (i + 1) * n // m > i * n // m]


def block_rms(t: torch.Tensor) -> torch.Tensor:
    """Each element's block's root mean square, float64, flat: ``t``'s rows (:func:`strata_rows`)
    dealt into the blocks a ``strata`` input of ``t``'s shape gives each kind, so for an output
    shaped like its input, the typical magnitude of the kind an element was drawn from (the
    floor of a ``block_floor`` case's error bound: each kind judged as if alone). Non-finite
    values count as 0."""
    flat = torch.nan_to_num(t.detach().to(torch.float64).reshape(-1), nan=0.0, posinf=0.0, neginf=0.0)
    if flat.numel() == 0:
        return flat
    n = strata_rows(t.shape)
    rows = flat.reshape(n, -1)
    out = torch.empty_like(rows)
    for _, lo, hi in strata_blocks(n):
        out[lo:hi] = rows[lo:hi].pow(2).mean().sqrt()
    return out.reshape(-1)


def _scaled(kind: str, base: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """``kind``'s values from standard normal float64 ``base`` (a new tensor or ``base`` itself)."""
    dev = gen.device
    if kind == "normal":
        return base
    if kind == "rand":
        return torch.rand(base.shape, generator=gen, device=dev, dtype=torch.float64)
    if kind == "negative":
        return -base.abs()
    if kind == "large":
        return base * 2.0**LARGE_EXP
    if kind == "small":
        return base * 2.0**SMALL_EXP
    if kind == "mixed":
        e = torch.randint(-MIXED_EXP, MIXED_EXP + 1, base.shape, generator=gen, device=dev)
        return base * torch.pow(2.0, e.to(torch.float64))
    if kind == "neg_inf_rows":
        masked = torch.rand(base.shape, generator=gen, device=dev) < NEG_INF_FRACTION
        if masked.dim() >= 1 and masked.shape[-1] > 0:
            masked[..., 0] = False
        return base.masked_fill(masked, float("-inf"))
    if kind == "ties":
        return torch.round(base * 2) / 2
    raise ValueError(f"unknown value kind {kind!r}: allowed are "
                     f"{', '.join(VALUE_KINDS + (STRATA,) + ADVERSARIAL_KINDS)}")


def shape_for_kind(v: torch.Tensor, input_kind: str) -> torch.Tensor:
    """Apply an input's declared domain (``positive``, ``probability``, ...) to drawn values."""
    if input_kind == "positive":
        return v.abs()
    if input_kind in ("probability", "log_probability"):
        # Probabilities have no scale of their own: normalise the drawn values and clamp
        # the logits so that every probability stays a normal number (no exact zeros,
        # where log() would turn a well-posed problem into inf - inf).
        z = v.to(torch.float64).nan_to_num(neginf=-PROB_LOGIT_CLAMP)
        finite = z[torch.isfinite(z)]
        rms = float(finite.pow(2).mean().sqrt()) if finite.numel() else 1.0
        z = (z / (rms or 1.0)).clamp(-PROB_LOGIT_CLAMP, PROB_LOGIT_CLAMP)
        f = torch.softmax if input_kind == "probability" else torch.log_softmax
        return f(z, dim=-1).to(v.dtype)
    return v


def value_inputs(case: ProblemCase, kind: str, seed: int) -> list:
    """The case's inputs with floating values replaced by ``kind`` (fixed inputs kept)."""
    gen = _generator(case.device, seed)
    kinds = case.problem.input_kinds(len(case.inputs))
    out = []
    for x, ik in zip(case.inputs, kinds):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and ik != "fixed":
            out.append(shape_for_kind(draw(kind, x, gen), ik))
        else:
            out.append(x)
    return out


class ValuesOracle(Driver):
    """Every value kind (and the problem's adversarial kinds), each judged by ``compare``."""

    name = "values"

    def __init__(self, compare: Comparator | None = None) -> None:
        from .bound import BoundOrClose

        self.compare = compare or BoundOrClose()

    def kinds(self, case: ProblemCase) -> tuple[str, ...]:
        return VALUE_KINDS + tuple(k for k in case.problem.adversarial if k in ADVERSARIAL_KINDS)

    def drive(self, case: ProblemCase, subject: Subject) -> Verdict:
        verdicts = {}
        skip = case.problem.value_kinds_skip
        base = case
        small = shrinking_shapes(case.problem, case.shapes)
        if small is not None:
            try:
                base = ProblemCase.make(case.problem, seed=case.seed, device=case.device,
                                        shapes={**case.shapes, **small}, label="small")
            except Exception:  # noqa: BLE001 - get_inputs() refuses the small shape after all: the case's own
                base = case
        for i, kind in enumerate(self.kinds(base)):
            if kind in skip:  # seeds stay tied to the kind's position, skipped or not
                continue
            vcase = base.with_inputs(value_inputs(base, kind, case.seed * 1000 + i), f"values {kind}")
            verdicts[f"values {kind}"] = judge_or_unjudged(self.compare, vcase, subject)  # one kind, not all
            # one kind's inputs, reference and error model at a time: freed before the next is drawn
            free_device_memory(vcase)
            del vcase
        if base is not case:
            release_shape(base, subject)
        v = combine(self.name, verdicts, context="values: ")
        if skip:
            note = "; ".join(f"{k} skipped: {why}" for k, why in skip.items())
            v = Verdict(v.status, v.metric, v.value, v.tolerance, v.bad_batches, v.first_bad_index,
                        f"{v.message} ({note})" if v.message else note, {**(v.details or {}), "skipped_kinds": skip})
        return v
