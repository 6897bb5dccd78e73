"""Where a running case is: the phase it is in and how far through, for whoever listens.

A case's time goes to phases: the worker's memory plan, generating the inputs, the op
(torch's time), the judgement (kernelaudit's: references and comparisons, batch after
batch) and, for a wrong output, rechecking it alone. The code of each phase calls
:func:`enter` as it starts and the judgement :func:`advance` as it goes; nothing is paid
unless someone listens (:func:`listening`). The sweep's worker listens while it runs a
job and passes each mark up its pipe, so that the pool, killing a case at its timeout or
finding its process dead, can say where it was (:class:`Tracker`): in the op or in the
judgement, how many batches were judged, and how long all of them would take at that
rate. A slow pass can then tell torch's slowness from kernelaudit's, and its timeout
from what the case needs."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Iterator

#: The phases of a case, in order, and how a message names each.
PHASES = {
    "plan": "the memory plan",
    "inputs": "generating the inputs",
    "op": "the op",
    "judge": "the judgement",
    "recheck": "rechecking a wrong output alone",
}

#: Seconds between two :func:`advance` marks passed on: a judgement of millions of
#: batches in small chunks would otherwise send a message a chunk.
ADVANCE_INTERVAL_S = 0.5

_listener: Callable[[dict], None] | None = None
_t0 = 0.0
_last_advance = 0.0
_current: str | None = None


@contextmanager
def listening(tell: Callable[[dict], None]) -> Iterator[None]:
    """While inside, every mark is passed to ``tell`` as ``{"phase": name, "at_s":
    seconds since entering}``, with ``"done"`` and ``"total"`` batches for an
    :func:`advance`. A failing ``tell`` (a closed pipe) stops the listening, not the case."""
    global _listener, _t0, _last_advance, _current
    _listener, _t0, _last_advance, _current = tell, time.perf_counter(), 0.0, None
    try:
        yield
    finally:
        _listener = _current = None


def _tell(mark: dict) -> None:
    global _listener
    if _listener is None:
        return
    try:
        _listener(mark)
    except Exception:  # noqa: BLE001 - the case goes on untold
        _listener = None


def enter(name: str) -> None:
    """The running case enters phase ``name`` (a key of :data:`PHASES`)."""
    global _current
    if name not in PHASES:
        raise ValueError(f"phase: name must be one of {', '.join(PHASES)}; got {name!r}")
    if _listener is not None:
        _current = name
        _tell({"phase": name, "at_s": time.perf_counter() - _t0})


def advance(done: int, total: int) -> None:
    """``done`` of the current phase's ``total`` batches are through. Passed on at most
    every :data:`ADVANCE_INTERVAL_S`."""
    global _last_advance
    if _listener is None or _current is None:
        return
    now = time.perf_counter() - _t0
    if now - _last_advance < ADVANCE_INTERVAL_S:
        return
    _last_advance = now
    _tell({"phase": _current, "at_s": now, "done": int(done), "total": int(total)})


class Tracker:
    """The marks of one job as they arrive (:meth:`note`), and where the job was when it
    stopped (:meth:`where`)."""

    def __init__(self) -> None:
        self.starts: dict[str, float] = {}   # phase -> its (last) start, seconds into the job
        self.current: str | None = None
        self.done: tuple[int, int, float] | None = None   # (done, total, at_s) of the current phase

    def note(self, mark: dict) -> None:
        name, at = mark.get("phase"), float(mark.get("at_s") or 0.0)
        if name not in PHASES:
            return
        if name != self.current:
            self.current, self.starts[name], self.done = name, at, None
        if "done" in mark:
            self.done = (int(mark["done"]), int(mark["total"]), at)

    def where(self, elapsed_s: float, times: bool = True) -> tuple[str, dict]:
        """Where the job was after ``elapsed_s`` seconds: a phrase for a message
        (``""`` when no mark came; with ``times``, how long each phase took and, in a
        judgement that counted batches, the projection) and details: ``phase``,
        ``phase_s`` (seconds in it), ``phases_s`` (the phases before it, seconds each)
        and, where the judgement had counted batches, ``batches_done``, ``batches`` and
        ``projected_s`` (the whole job's seconds at the rate of the batches judged)."""
        if self.current is None:
            return "", {}
        order = sorted(self.starts.items(), key=lambda kv: kv[1])
        before = {name: round(nxt[1] - at, 3) for (name, at), nxt in zip(order, order[1:])}
        start = self.starts[self.current]
        spent = max(0.0, elapsed_s - start)
        details = {"phase": self.current, "phase_s": round(spent, 3), "phases_s": before}
        text = f" in {PHASES[self.current]}"
        if self.done is not None and self.done[0] > 0:
            done, total, at = self.done
            projected = start + (at - start) / done * total   # at the rate of the batches judged
            details.update(batches_done=done, batches=total, projected_s=round(projected, 1))
            if times:
                text += f" ({done:,} of {total:,} batches judged: about {projected:.0f} s for the case at that rate)"
        if times:
            text += f", {spent:.1f} s into it" + ("; before it " + ", ".join(f"{k} {v:.1f} s" for k, v in before.items())
                                                 if before else "")
        return text, details
