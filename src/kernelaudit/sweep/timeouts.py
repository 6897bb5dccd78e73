"""Case timeouts: which cases a timeout holds back, and which a slow pass runs.

A case that runs past ``--case-timeout`` is killed with its worker and recorded as
timed out (:func:`timeout_of` reads the timeout back). :class:`TimedOut` holds back the
later cases of its op from half its size up (:data:`HOLD_DIVISOR`), so one slow op
costs a timeout once per size, not once per case; the slow pass (:func:`slow_cases`)
runs the timed-out and held-back cases after the others under a longer timeout, and a
resumed sweep with a longer ``--case-timeout`` runs them again (:func:`unheld_under`).
Each case is projected from its op's largest judged case of the same per-batch shapes
(:func:`case_rates`); a record of other shapes than the plan builds now
(:func:`reshaped`) is of another case, and the case runs again.
"""

from __future__ import annotations

import re

from .cases import Case, in_turns
from .store import RunStore
from .worker import DEFAULT_CASE_TIMEOUT_S
from ..verdict import Status, Verdict


def timeout_of(verdict: dict) -> float | None:
    """The case timeout a timed-out verdict ran under (None: not timed out); a record
    older than ``timeout_s`` in its details says it in its message, else it was the
    default."""
    d = verdict.get("details") or {}
    if not d.get("timed_out"):
        return None
    if "timeout_s" in d:
        return float(d["timeout_s"])
    m = re.match(r"timed out after (\d+(?:\.\d+)?) s", verdict.get("message") or "")
    return float(m.group(1)) if m else DEFAULT_CASE_TIMEOUT_S


def longest_timeouts(latest: dict) -> dict[str, float]:
    """Op -> the longest case timeout (:func:`timeout_of`) a case of it timed out under,
    from ``latest`` (a store's :meth:`~.RunStore.latest`); ops that never timed out are
    absent. The longest, not the last recorded: an op that ran out of 120 s will run out
    of 60 s too, whatever shorter timeout one of its cases also ran out of."""
    out: dict[str, float] = {}
    for r in latest.values():
        if (t := timeout_of(r["verdict"])) is not None:
            op = r["case"]["op"]
            out[op] = max(out.get(op, 0.0), t)
    return out


#: A timeout holds back the cases of its op whose crossing tensor has at least
#: 1/HOLD_DIVISOR of the elements of the smallest case of the op that timed out: a case
#: half its size may well run out of the same timeout, one a quarter of it or less
#: (the ``dim`` axis's cases, the ``bytes`` axis's in wide dtypes) rarely does. The full
#: grid's store of 2026-12-06 held 348 cases back, 177 of them below that (60 on the dim
#: axis, 0.5 s a case or less where they ran).
HOLD_DIVISOR = 2


def held_by(c_numel: int, slow_numel: int) -> bool:
    """Whether a case whose crossing tensor has ``c_numel`` elements is held back by a
    timeout of its op's case of ``slow_numel`` (:data:`HOLD_DIVISOR`)."""
    return c_numel * HOLD_DIVISOR >= slow_numel


def holding_cases(latest: dict) -> dict[str, Case]:
    """Op -> its smallest case (by crossing elements) that ran out of the op's longest
    timeout (:func:`longest_timeouts`), from ``latest``: the case that holds its op's
    cases back (:func:`held_by`), one no shorter timeout outlasts."""
    longest = longest_timeouts(latest)
    out: dict[str, Case] = {}
    for r in latest.values():
        t = timeout_of(r["verdict"])
        if t is not None and t == longest[op := r["case"]["op"]]:
            c = Case.from_json(r["case"])
            if op not in out or c.crossing_numel < out[op].crossing_numel:
                out[op] = c
    return out


class TimedOut:
    """The ops that timed out: a later case of such an op, as large as half the smallest
    case of it that timed out or larger (:data:`HOLD_DIVISOR`), is recorded as not run
    (``skipped``, naming that case) instead of costing another ``--case-timeout`` and a
    worker replacement; its smaller cases run. On the H200, ``interpolate`` timed out at
    every size from 2^31 elements (its CUDA kernels loop over batch x channels in each
    thread), and a full grid holds 16 such ops, each at up to eight sizes and directions.
    Seeded from the store, so a resumed sweep keeps what an earlier call learnt, unless
    this call's timeout is longer: then ``--resume --case-timeout N`` judges the
    timed-out cases and the ones they held back again."""

    def __init__(self, store: RunStore | None, case_timeout_s: float = 0.0) -> None:
        latest = store.latest() if store is not None else {}
        longest = longest_timeouts(latest)
        # a longer timeout now: tried again; else held back in the name of the smallest
        # case that ran out of the longest, which this call's cannot outlast
        self.first: dict[str, Case] = {op: c for op, c in holding_cases(latest).items()
                                       if longest[op] >= case_timeout_s}

    def note(self, c: Case) -> None:
        """``c`` timed out: it holds back its op's cases from half its size up."""
        held = self.first.get(c.op)
        if held is None or c.crossing_numel < held.crossing_numel:
            self.first[c.op] = c

    def verdict(self, c: Case) -> Verdict | None:
        """A ``skipped`` verdict for ``c`` if a case of its op at most twice its size
        timed out."""
        slow = self.first.get(c.op)
        if slow is None or not held_by(c.crossing_numel, slow.crossing_numel):
            return None
        return Verdict.skipped(f"not run: {slow.id} (batch {slow.batch}) timed out; the op's other cases from "
                               f"half its size wait for a slow pass (--slow-timeout SECONDS) or --ops {c.op} "
                               f"--case-timeout SECONDS", after_timeout=slow.id)


RateKey = tuple[str, str, tuple]


def per_batch_shapes(case: dict) -> tuple:
    """A case's JSON's operand shapes less the batch dim: what one batch holds. Cases of
    one op with other per-batch shapes (a sample grown on larger limits,
    :func:`.ops.recipe.grow_factor`) are other cases: another time per element, no pair
    around a limit."""
    return tuple(tuple(s[1:]) for s in case.get("shapes") or ())


def rate_key(case: dict) -> RateKey:
    """(op, direction, per-batch shapes) of a case's JSON (:func:`per_batch_shapes`)."""
    return (case["op"], case.get("direction", "fwd"), per_batch_shapes(case))


def case_rates(latest: dict) -> dict[RateKey, tuple[float, str]]:
    """:func:`rate_key` -> (seconds a crossing element, id of the case it comes from), from
    ``latest`` (a store's :meth:`~.RunStore.latest`): the whole case's timed phases
    (inputs, op, judgement) over its crossing elements, for the judged case (ok or wrong)
    of that op, direction and per-batch shapes with the most crossing elements and a time
    recorded. The largest, as a small case's fixed costs (a launch, a worker's first call)
    inflate its time per element; an op whose time per element jumps past a limit (a
    performance cliff, :mod:`.report.cliffs`) runs longer than this projects."""
    best: dict[RateKey, tuple[int, float, str]] = {}
    for r in latest.values():
        v, c = r["verdict"], r["case"]
        timing = (v.get("details") or {}).get("timing") or {}
        seconds = sum(float(t) for t in timing.values() if isinstance(t, (int, float)))
        numel = int(c.get("crossing_numel") or 0)
        # ok or wrong: the op ran to the end and its output was judged (an error may not have)
        if v.get("status") not in (Status.OK.value, Status.WRONG.value) or seconds <= 0 or numel <= 0:
            continue
        key = rate_key(c)
        if key not in best or numel > best[key][0]:
            best[key] = (numel, seconds, c["id"])
    return {key: (seconds / numel, cid) for key, (numel, seconds, cid) in best.items()}


def projection(case: dict, rates: dict[RateKey, tuple[float, str]]) -> tuple[float, str] | None:
    """(seconds the case ``case`` (a case's JSON) is projected to take, id of the case the
    rate comes from) by :func:`case_rates`, or None where no case of its op, direction and
    per-batch shapes was judged with a time. Linear in the crossing elements (int64
    maths: Python ints)."""
    rate = rates.get(rate_key(case))
    if rate is None:
        return None
    return rate[0] * int(case.get("crossing_numel") or 0), rate[1]


def reshaped(recorded: dict, planned: Case) -> bool:
    """Whether the plan now builds ``planned`` with other operand shapes than its record
    ``recorded`` (a case's JSON) ran with (a sample grown since,
    :func:`.ops.recipe.grow_factor`): what the record says of it, a verdict, a timeout or
    a projection, is of another case, so it runs again."""
    if "shapes" not in recorded:
        return False
    shapes = [list(o.shape) for o in planned.spec.operands(planned.series, planned.batch, planned.thresholds)]
    return recorded.get("batch") != planned.batch or recorded["shapes"] != shapes


def unheld_under(details: dict, op: str, slowest: dict[str, float], timeout_s: float) -> bool:
    """Whether a case whose verdict ``details`` say it timed out, or was held back after a
    case of its op did (``after_timeout``), runs again under ``timeout_s``: its op's longest
    timeout so far (``slowest``, :func:`longest_timeouts`) is shorter, or none of the op's
    cases times out any more (judged since: the hold is lifted)."""
    return bool(details.get("timed_out") or details.get("after_timeout")) and slowest.get(op, 0.0) < timeout_s


def slow_cases(latest: dict, planned: list[Case], slow_timeout_s: float,
               beyond: set[str] | None = None) -> list[Case]:
    """The planned cases a slow pass with ``slow_timeout_s`` a case runs: those whose
    last verdict in ``latest`` (a store's :meth:`~.RunStore.latest`) timed out, or was
    held back by a case of its op that did (``after_timeout``), where the op's longest
    timeout so far is shorter (:func:`unheld_under`); less a case whose judgement, when
    it timed out, projected more than ``slow_timeout_s`` for it (``projected_s``,
    :class:`.phase.Tracker`), or whose time the op's largest judged case projects past
    it (the keys ``beyond``, else those of :func:`projected_beyond`): it would time out
    again, and ``--case-timeout`` longer than its projection runs it. Each op's cases
    from the smallest crossing tensor up, so that a slow op's cheap cases are judged
    before its largest can time out again and hold back the rest; the ops
    taken in turns (every op's smallest case, in the plan's order of ops, then every op's
    second, ...), so that a pass cut short by its device call's time has probed every op
    instead of spending it on one op's dozens of cases (the full grid's held 56 of one)."""
    if beyond is None:
        beyond = {c.key for c, _, _ in projected_beyond(latest, planned, slow_timeout_s)}
    slowest = longest_timeouts(latest)
    runs = []
    for c in planned:
        r = latest.get(c.key)
        d = (r["verdict"].get("details") or {}) if r is not None else {}
        if c.key in beyond or (float(d.get("projected_s") or 0.0) > slow_timeout_s and not reshaped(r["case"], c)):
            continue
        if unheld_under(d, c.op, slowest, slow_timeout_s):
            runs.append(c)
    return in_turns(runs)


def projected_beyond(latest: dict, planned: list[Case], timeout_s: float) -> list[tuple[Case, float, str]]:
    """(case, projected seconds, id of the case the rate comes from) for each planned
    case waiting on a longer timeout (timed out, or held back after a case of its op did:
    ``after_timeout``) whose time the op's largest judged case projects past
    ``timeout_s`` (:func:`case_rates`, :func:`projection`), in the plan's order: a slow
    pass at ``timeout_s`` would see it time out again. On the full grid of 2026-12-07, the
    batched ``qr``, ``linalg.qr`` and ``ldl_factor(_ex)`` cases from 2^31 bytes: 1,504 to
    50,044 s each (70 to 290 us a 5 x 5 matrix over the whole case, from their cases at
    a dimension of 2^16)."""
    rates = case_rates(latest)
    out = []
    for c in planned:
        r = latest.get(c.key)
        d = (r["verdict"].get("details") or {}) if r is not None else {}
        if not (d.get("timed_out") or d.get("after_timeout")):
            continue
        p = projection(c.to_json(), rates)  # the case as planned now (its record may be of other shapes)
        if p is not None and p[0] > timeout_s:
            out.append((c, p[0], p[1]))
    return out
