"""``shapes``: the problem's shape plus boundary shapes.

For every shape constant ``P`` with fixed value ``v`` the oracle tries ``P = 1``, one
constant at a time; then every constant at once at the largest prime below its ``v``
(a non-multiple of every block size, with a tail), every constant at once at
``v + 1`` (one past the fixed size: the tail a kernel specialised to ``v`` drops),
and every constant set to a different small prime. Each case is built from the problem's own ``get_inputs()`` at that shape and
judged by the comparator(s) of the sequence (``bound`` by default). A shape the
reference itself rejects (a pooling window larger than the input) is skipped and
recorded; a candidate that raises at a valid shape is an ``error``.

A case larger than the problem's small shape (a KernelBench problem at its own shape:
:func:`~kernelaudit.zoo.problems.small_shapes.shrinking_shapes`) is judged at its own
shape once, then the boundary shapes are taken around the small shape, which is judged
too: a tail, a size of 1 or a prime size is the same boundary at either scale, and the
own shape, already judged, is not paid for again by every boundary case (a prime just
below 2^16 costs what 2^16 costs).
"""

from __future__ import annotations

from ..problems.problem_case import ProblemCase
from ..problems.small_shapes import shrinking_shapes
from ...verdict import Status, Verdict
from .base import Comparator, Driver, Subject, combine, release_shape

#: Small primes for the all-prime case (non-multiples of 2, 4, 8, 16, 32, ...).
SMALL_PRIMES = (7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43)


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    i = 2
    while i * i <= n:
        if n % i == 0:
            return False
        i += 1
    return True


def prime_below(v: int) -> int | None:
    """The largest prime strictly below ``v`` (``None`` when there is none)."""
    for n in range(v - 1, 1, -1):
        if _is_prime(n):
            return n
    return None


def shape_variants(base: dict[str, int]) -> list[tuple[str, dict[str, int]]]:
    """(label, shapes) for the boundary cases around ``base``, without duplicates."""
    out: list[tuple[str, dict[str, int]]] = []
    seen = {tuple(sorted(base.items()))}

    def add(label: str, shapes: dict[str, int]) -> None:
        key = tuple(sorted(shapes.items()))
        if key not in seen:
            seen.add(key)
            out.append((label, shapes))

    for name, v in base.items():  # size 1, one constant at a time
        add(f"{name}=1", {**base, name: 1})
    # tails: every constant at once, so a problem with several constants pays two
    # full-size runs for them, not two per constant
    below = {name: prime_below(v) or v for name, v in base.items()}
    add("prime below " + ", ".join(f"{n}={v}" for n, v in below.items()), below)
    past = {name: v + 1 for name, v in base.items()}
    add("one past " + ", ".join(f"{n}={v}" for n, v in past.items()), past)
    primes = iter(SMALL_PRIMES)
    add("all prime", {name: next(primes) for name in base})
    return out


class ShapesOracle(Driver):
    """The fixed shape and every boundary shape, each judged by ``compare``."""

    name = "shapes"

    def __init__(self, compare: Comparator | None = None, *, fixed_judged_by: str | None = None) -> None:
        from .bound import BoundOrClose

        self.compare = compare or BoundOrClose()
        #: Set when an earlier member of a sequence already judged the fixed shape with
        #: the same comparators: that check is not repeated (the sequence reports it).
        self.fixed_judged_by = fixed_judged_by

    def drive(self, case: ProblemCase, subject: Subject) -> Verdict:
        verdicts = {}
        # The earlier comparator could not judge the fixed shape when this one falls back.
        fell_back = getattr(self.compare, "falls_back", lambda c: False)(case)
        if self.fixed_judged_by is None or fell_back:
            verdicts[f"shape {case.label}"] = self.compare.judge(case, subject)
        skipped = []
        base = case.shapes
        small = shrinking_shapes(case.problem, case.shapes)
        variants = shape_variants(base)
        if small is not None:  # the boundaries around the small shape, and the small shape itself
            base = {**case.shapes, **small}
            variants = [("small", base)] + shape_variants(base)
        for label, shapes in variants:
            vcase = None
            try:
                vcase = ProblemCase.make(case.problem, seed=case.seed, device=case.device, shapes=shapes,
                                         label=f"shape {label}")
                vcase.reference()
            except Exception as exc:  # noqa: BLE001 - the reference itself rejects the shape
                skipped.append(f"{label} ({type(exc).__name__})")
                if vcase is not None:
                    release_shape(vcase, subject)
                continue
            verdicts[f"shape {label}"] = self.compare.judge(vcase, subject)
            release_shape(vcase, subject)
        if not verdicts and self.fixed_judged_by is not None:
            v = Verdict(Status.OK, message=f"shapes: no other shape to try; the fixed shape was judged by "
                                           f"{self.fixed_judged_by}", details={})
        else:
            v = combine(self.name, verdicts, context="shapes: ")
        v.details["skipped_shapes"] = skipped
        if self.fixed_judged_by is not None:
            v.details["fixed_shape_judged_by"] = self.fixed_judged_by
        if small is not None:
            v.details["boundaries_around"] = dict(base)
        return v
