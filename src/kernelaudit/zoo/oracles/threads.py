"""Threads alive after a candidate's call: which of them can still run its work.

A thread that outlives the call may finish the output after the timer and the check
(``tamper``'s and the timing's ``threads left running``). One kind of thread outlives
calls without deferring anything: a ``concurrent.futures`` pool worker that has finished
what it was given and waits for more. ``torch.compile``'s Inductor leaves such a worker
behind its first call (one per compile thread); reporting it rejected every candidate
that compiles. :func:`runs_nothing` tells it apart from a worker still running a
submitted callable, or with work queued.
"""

from __future__ import annotations

import concurrent.futures.thread
import sys
import threading
import time

#: Seconds between looks at a thread that :func:`settle` waits for.
SETTLE_POLL_S = 0.005

_WORKER_CODE = concurrent.futures.thread._worker.__code__


def runs_nothing(thread: threading.Thread) -> bool:
    """Is ``thread`` a ``concurrent.futures`` pool worker with no work left to run?

    Its stack holds the pool's own loop (``_worker``) and either no work item, or one
    whose future is done (the callable returned; the worker is winding back to wait),
    and the pool's queue is empty. A worker running a submitted callable has a work item
    whose future is not done; a thread of any other kind is not a pool worker.
    """
    frame = sys._current_frames().get(thread.ident)
    while frame is not None and frame.f_code is not _WORKER_CODE:
        frame = frame.f_back
    if frame is None:
        return False
    local = frame.f_locals
    queue = local.get("work_queue")
    if queue is None or not queue.empty():
        return False
    item = local.get("work_item")
    future = getattr(item, "future", None)
    return item is None or (future is not None and future.done())


def settle(threads: list[threading.Thread], timeout_s: float) -> None:
    """Wait, at most ``timeout_s`` in all, until each thread has ended or runs nothing
    (a pool worker back to waiting never ends: joining it would wait the whole timeout)."""
    deadline = time.monotonic() + timeout_s
    for t in threads:
        while t.is_alive() and not runs_nothing(t) and time.monotonic() < deadline:
            t.join(min(SETTLE_POLL_S, max(0.0, deadline - time.monotonic())))
