"""Performance cliffs: an op whose time per element jumps just past a limit.

A kernel that counts or indexes in 32 bits may do worse past 2^31 or 2^32 than answer
wrong: slow down by orders of magnitude, or never return (on an H100, torch 2.11,
2026-12-06: ``torch.mode`` past 2^31 elements and ``bernoulli`` past 2^32 had not
returned after 120 s, where the sizes just below took 2.6 s and 25 ms). A sweep places
each op's cases in pairs around every limit (``below`` and ``above``, same op, dtype,
layout, series, direction and axis), so its records say this without another run: the
op phase's seconds per element of the case above against the case below. A case killed
in its op at the timeout counts its time there as a lower bound.

What a record times is one call, so a one-time cost of the size above counts too:
compiling a 64-bit-index variant of a runtime-compiled (jiterator) kernel takes 0.5-1.5 s
on the first call past 2^31 elements, a hundred times a bandwidth-bound op's
milliseconds. ``min_s`` (default 5 s) keeps such costs out; a cliff it passes is a
difference of seconds that a user pays on every call, or a hang.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..timeouts import per_batch_shapes
from .counts import phase_times
from .run import CaseRecord, Run

#: Defaults: a cliff is a time per element ``RATIO`` times the case below's, where the
#: case above spent at least ``MIN_S`` seconds in its op.
RATIO = 3.0
MIN_S = 5.0


@dataclass(frozen=True)
class Cliff:
    """One pair of cases around a limit whose op time per element jumps."""

    below: CaseRecord
    above: CaseRecord
    below_s: float
    above_s: float
    timed_out: bool   # the case above was killed in its op: ``above_s`` is a lower bound

    @property
    def ratio(self) -> float:
        """Seconds per element above over seconds per element below (a lower bound
        where the case above timed out)."""
        return (self.above_s / _numel(self.above)) / (self.below_s / _numel(self.below))

    def row(self) -> list[str]:
        """The cliff as the cells of :data:`COLUMNS` (``>=`` before a lower bound)."""
        more = ">= " if self.timed_out else ""
        return [self.above.op, self.above.dtype, self.above.direction, self.above.axis, self.below.size,
                f"{self.below_s:.3g}", self.above.size, f"{more}{self.above_s:.3g}", f"{more}{self.ratio:.0f}"]


#: The columns of a table of cliffs (summary and HTML report), and its caption.
COLUMNS = ("op", "dtype", "direction", "axis", "below", "s", "above", "s", "x per element")
CAPTION = (f"op time per element just above a limit against just below, where the case above spent {MIN_S:g} s "
           "or more in its op (one timed call each; >= where it was killed there at its timeout)")


def _numel(r: CaseRecord) -> int:
    return max(int(r.crossing_numel or 1), 1)


def op_seconds(r: CaseRecord) -> tuple[float, bool] | None:
    """(seconds the case spent in its op, whether it was killed there at its timeout),
    or None where the record says neither (skipped, an error before the op, no timing,
    killed in another phase); the seconds as :func:`.counts.phase_times` reads them."""
    d = r.verdict.details or {}
    killed_in_op = bool(d.get("timed_out")) and d.get("phase") == "op"
    if not d.get("timing") and not killed_in_op:
        return None
    seconds = phase_times(d).get("op_s")
    return None if seconds is None else (float(seconds), killed_in_op)


def cliffs(run: Run, ratio: float = RATIO, min_s: float = MIN_S) -> list[Cliff]:
    """Every pair of ``run``'s cases around one limit whose op time per element above is
    ``ratio`` times or more the time below, the case above having spent ``min_s`` seconds
    or more in its op (or been killed there), steepest first. A pair has the same
    per-batch shapes: a store resumed after a sample was grown (larger matrices, far fewer)
    may hold one side recorded with the old shapes until it runs again."""
    pairs: dict[tuple, dict[str, CaseRecord]] = {}
    for r in run.records:
        position = r.case.get("position")
        if position in ("below", "above"):
            key = (r.op, r.dtype, r.layout, r.series, r.direction, r.axis, r.case.get("threshold"), r.seed,
                   per_batch_shapes(r.case))
            pairs.setdefault(key, {})[position] = r
    out = []
    for pair in pairs.values():
        if len(pair) < 2:
            continue
        below, above = op_seconds(pair["below"]), op_seconds(pair["above"])
        if below is None or above is None or below[1] or below[0] <= 0 or above[0] < min_s:
            continue
        c = Cliff(pair["below"], pair["above"], below[0], above[0], above[1])
        if c.ratio >= ratio:
            out.append(c)
    return sorted(out, key=lambda c: -c.ratio)
