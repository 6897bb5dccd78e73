"""Counting verdicts: per status overall and per op, and skip reasons grouped.

Shared by the terminal summary and the HTML page so both say the same numbers.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from ...verdict import Status
from .run import CaseRecord, Run

#: Column order of every count table: the bad news first after ok.
STATUS_ORDER: tuple[Status, ...] = (Status.OK, Status.WRONG, Status.ERROR, Status.SKIPPED)


@dataclass(frozen=True)
class Counts:
    """How many records of each status (missing statuses count 0)."""

    by_status: dict[Status, int]

    @property
    def total(self) -> int:
        return sum(self.by_status.values())

    def __getitem__(self, status: Status) -> int:
        return self.by_status.get(status, 0)


def count(records: list[CaseRecord] | tuple[CaseRecord, ...]) -> Counts:
    c = Counter(r.status for r in records)
    return Counts({s: c.get(s, 0) for s in STATUS_ORDER})


def counts_per_op(run: Run) -> dict[str, Counts]:
    """Op name -> its counts, ops in the order they were first recorded."""
    ops: dict[str, list[CaseRecord]] = {}
    for r in run.records:
        ops.setdefault(r.op, []).append(r)
    return {op: count(rs) for op, rs in ops.items()}


def by_op(records: list[CaseRecord]) -> dict[str, list[CaseRecord]]:
    """Group records by op, keeping store order inside each group."""
    out: dict[str, list[CaseRecord]] = {}
    for r in records:
        out.setdefault(r.op, []).append(r)
    return out


def plain_repro(records: list[CaseRecord], device: str = "cuda") -> str | None:
    """Plain-torch code for the first of ``records`` (one op's wrong and error cases,
    wrong first) whose op is derived from the op database (:mod:`..ops.plain`) and whose
    recipe in this torch makes the shapes the record ran with, or None (a hand-specified
    op, or one this torch's catalogue lacks or samples otherwise). Cases that say nothing
    of the op (a timeout, a checker failure) are passed over."""
    from ..cases import Case
    from ..ops.plain import plain_torch
    from ..rules_out import unjudged

    for r in sorted(records, key=lambda r: r.status is not Status.WRONG):
        if unjudged(r.verdict.to_json()):
            continue
        try:
            code = plain_torch(Case.from_json(r.case), device, r.case.get("shapes"))
        except Exception:  # noqa: BLE001 - an op this torch does not know: no code, the report goes on
            continue
        if code is not None:
            return code
    return None


_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def reasons(run: Run, status: Status) -> list[tuple[str, int]]:
    """(example message, count) for the cases of ``status``, most common first.

    Messages that differ only in their numbers (bytes needed, sizes) are one reason,
    so a thousand "needs N GB" skips make one line, not a thousand.
    """
    groups: dict[str, list[str]] = {}
    for r in run.with_status(status):
        msg = r.verdict.message or "(no reason given)"
        groups.setdefault(_NUMBER.sub("#", msg), []).append(msg)
    return sorted(((msgs[0], len(msgs)) for msgs in groups.values()), key=lambda t: -t[1])


def progress_text(run: Run) -> str:
    """``1376 of 1376 planned cases recorded`` (or without the plan when unknown)."""
    n = len(run.records)
    planned = run.manifest.planned_cases
    if planned is None:
        return f"{n} cases recorded"
    return f"{n} of {planned} planned cases recorded"


def cases_by_device(run: Run) -> dict[str, int]:
    """Device name -> cases its invocations ran, in the order they first ran (a run resumed
    on other machines; a segment that names no device ran on the manifest's)."""
    m = run.manifest
    on: dict[str, int] = {}
    for s in m.segments:
        name = (s.get("device") or {}).get("name") or m.device.name
        on[name] = on.get(name, 0) + int(s.get("cases_run") or 0)
    return on or {m.device.name: 0}


def wall_text(run: Run) -> str | None:
    """``612 s (10.2 min) in 2 invocations, 1 cut short, 3 workers replaced`` or None
    when unrecorded (workers replaced after a crash, hang or poisoned device: each
    costs a worker start)."""
    m = run.manifest
    if m.wall_s is None:
        return None
    n = len(m.segments)
    cut = sum(1 for s in m.segments if not s.get("completed"))
    replaced = sum(int(s.get("workers_replaced") or 0) for s in m.segments)
    on = cases_by_device(run)
    return (f"{m.wall_s:.0f} s ({m.wall_s / 60:.1f} min) in {n} invocation{'s' if n != 1 else ''}"
            + (f", {cut} cut short" if cut else "")
            + (f", {replaced} worker{'s' if replaced != 1 else ''} replaced" if replaced else "")
            + ("" if len(on) < 2 else "; cases run on " + ", ".join(f"{d} ({k})" for d, k in on.items())))


#: Phases ``execute`` times (``verdict.details["timing"]``), in the order they run.
PHASES = ("inputs_s", "op_s", "judge_s")


@dataclass(frozen=True)
class OpTime:
    """Seconds one op took over a run: in all, per phase (where recorded), slowest case."""

    op: str
    cases: int
    total_s: float
    phases_s: dict[str, float]
    slowest_id: str
    slowest_s: float


def phase_times(details: dict) -> dict:
    """A record's seconds per phase of :data:`PHASES`: its ``timing``, or for a case
    killed at its timeout, what its phase marks said (``phase``, ``phase_s`` and
    ``phases_s``, :class:`~kernelaudit.sweep.phase.Tracker`)."""
    if details.get("timing"):
        return details["timing"]
    if "phase" not in details:
        return {}
    spent = {**(details.get("phases_s") or {}), details["phase"]: details.get("phase_s") or 0.0}
    return {f"{k}_s": float(v) for k, v in spent.items()}


def time_per_op(run: Run) -> list[OpTime]:
    """Where the run's time went, per op, most expensive first (cases with no recorded
    time count 0; a timed-out case's phases as far as it got)."""
    out = []
    for op, records in by_op(run.records).items():
        times = [(r.elapsed_s or 0.0, r) for r in records]
        phases = dict.fromkeys(PHASES, 0.0)
        for r in records:
            timing = phase_times(r.verdict.details or {})
            for k in PHASES:
                phases[k] += float(timing.get(k, 0.0))
        slow_s, slow = max(times, key=lambda t: t[0])
        out.append(OpTime(op, len(records), sum(t for t, _ in times), phases, slow.id, slow_s))
    return sorted(out, key=lambda t: -t.total_s)
