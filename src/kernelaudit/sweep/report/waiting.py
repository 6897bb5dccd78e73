"""Cases waiting on a longer timeout, with the time each op's judged cases project.

A case that ran past ``--case-timeout`` is recorded as timed out, and it holds back its
op's larger cases (:class:`~kernelaudit.sweep.timeouts.TimedOut`); both wait for a slow
pass or a longer timeout. How long would that have to be? The op's largest judged case
says, without another run: its whole time (inputs, op, judgement) per crossing element,
times the waiting case's elements (:func:`~kernelaudit.sweep.timeouts.projection`).
Where the op's time per element jumps past a limit (a performance cliff,
:mod:`.cliffs`) the case runs longer than projected, and a case that timed out counts
its timeout as a lower bound. On the full grid of 2026-12-07 this is how the batched
``qr`` and ``ldl_factor`` cases show to need hours each, where an op past a limit that
never returns shows as a cliff instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..timeouts import case_rates, projection, timeout_of
from .run import CaseRecord, Run


@dataclass(frozen=True)
class Waiting:
    """One op's cases waiting on a longer timeout, and what they are projected to take."""

    op: str
    timed_out: int
    held_back: int
    projected: tuple[float, ...]   # seconds a case, one per case with a projection
    unknown: int                   # cases no judged case of their op, direction and shapes projects
    source: str                    # the id of a case the rate comes from ("" if none)

    @property
    def cases(self) -> int:
        return self.timed_out + self.held_back

    @property
    def total_s(self) -> float:
        """The projected seconds of every case with a projection, together."""
        return sum(self.projected)

    def row(self) -> list[str]:
        """The op as the cells of :data:`COLUMNS`."""
        span = (f"{min(self.projected):,.0f}-{max(self.projected):,.0f}" if len(set(self.projected)) > 1
                else f"{self.projected[0]:,.0f}" if self.projected else "-")
        return [self.op, str(self.cases), str(self.timed_out), str(self.held_back), span,
                f"{self.total_s:,.0f}" if self.projected else "-", str(self.unknown), self.source or "-"]


#: The columns of the table of waiting ops (summary and HTML report), and its caption.
COLUMNS = ("op", "cases", "timed out", "held back", "s a case", "s together", "no projection", "from case")
CAPTION = ("cases waiting on a longer timeout, with the seconds each op's largest judged case projects for them "
           "(its whole time per crossing element; a timed-out case at least its timeout; longer past a "
           "performance cliff)")


def _latest(run: Run) -> dict[str, dict]:
    return {r.key: {"case": r.case, "verdict": r.verdict.to_json()} for r in run.records}


def waiting(run: Run) -> list[Waiting]:
    """Every op with cases timed out or held back after a timeout (``after_timeout``), the
    most projected seconds first (ops without a projection last)."""
    latest = _latest(run)
    rates = case_rates(latest)
    groups: dict[str, list[CaseRecord]] = {}
    for r in run.records:
        d = r.verdict.details or {}
        if d.get("timed_out") or d.get("after_timeout"):
            groups.setdefault(r.op, []).append(r)
    out = []
    for op, records in groups.items():
        projected, unknown, source = [], 0, ""
        for r in records:
            p = projection(r.case, rates)
            if p is None:
                unknown += 1
                continue
            floor = timeout_of(latest[r.key]["verdict"]) or 0.0
            projected.append(max(p[0], floor))
            source = source or p[1]
        timed_out = sum(bool((r.verdict.details or {}).get("timed_out")) for r in records)
        out.append(Waiting(op, timed_out, len(records) - timed_out, tuple(projected), unknown, source))
    return sorted(out, key=lambda w: (not w.projected, -w.total_s))


def duration(seconds: float) -> str:
    """``152 s``, ``41 min`` or ``14.2 h``: seconds under two minutes, minutes under two hours."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def total_line(ops: list[Waiting]) -> str:
    """``92 cases: 48 projected, 14.2 h together (the longest 4.4 h), 4 without a projection``."""
    cases = sum(w.cases for w in ops)
    seconds = [s for w in ops for s in w.projected]
    unknown = sum(w.unknown for w in ops)
    text = f"{cases} case{'s' if cases != 1 else ''}"
    if seconds:
        text += f": {len(seconds)} projected, {duration(sum(seconds))} together (the longest {duration(max(seconds))})"
    if unknown:
        text += f"{',' if seconds else ':'} {unknown} without a projection"
    return text
