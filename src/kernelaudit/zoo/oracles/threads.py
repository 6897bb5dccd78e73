"""Threads alive after a candidate's call: which of them can still run its work.

A thread that outlives the call may finish the output after the timer and the check
(``tamper``'s and the timing's ``threads left running``). Some threads outlive
calls without deferring anything, and ``torch.compile``'s first call leaves them behind:
reporting them rejected every candidate that compiles. :func:`runs_nothing` tells them
apart from threads that still run a candidate's work:

* a ``concurrent.futures`` pool worker that has finished what it was given and waits for
  more, nothing queued (Inductor's C++ compile threads; any pool the candidate waited on);
* Inductor's compile sidecar (``SubprocPool``, where Inductor compiles in several
  processes, as on a GPU machine): its result reader with no job in flight, and its
  quiesce timer, which calls nothing but the pool's own ``quiesce``.
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
    """Is ``thread`` one of the kinds above, with no work left to run (see the module)?"""
    return _idle_pool_worker(thread) or _idle_inductor_sidecar(thread)


def _idle_pool_worker(thread: threading.Thread) -> bool:
    """A ``concurrent.futures`` pool worker with no work left: its stack holds the pool's own
    loop (``_worker``) and either no work item, or one whose future is done (the callable
    returned; the worker is winding back to wait), and the pool's queue is empty."""
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


def _idle_inductor_sidecar(thread: threading.Thread) -> bool:
    """Inductor's ``SubprocPool`` result reader with no job in flight (no future whose
    callbacks it could run), or the pool's timer whose call is the pool's ``quiesce``."""
    pools = sys.modules.get("torch._inductor.compile_worker.subproc_pool")
    timers = sys.modules.get("torch._inductor.compile_worker.timer")
    pool_cls, timer_cls = getattr(pools, "SubprocPool", None), getattr(timers, "Timer", None)
    target = getattr(thread, "_target", None)
    owner, func = getattr(target, "__self__", None), getattr(target, "__func__", None)
    if pool_cls is None or owner is None:
        return False
    if isinstance(owner, pool_cls) and func is getattr(pool_cls, "_read_thread", None):
        return not getattr(owner, "pending_futures", True)
    call = getattr(owner, "call", None)
    return (timer_cls is not None and isinstance(owner, timer_cls) and func is getattr(timer_cls, "check", None)
            and isinstance(getattr(call, "__self__", None), pool_cls)
            and getattr(call, "__func__", None) is getattr(pool_cls, "quiesce", None))


def settle(threads: list[threading.Thread], timeout_s: float) -> None:
    """Wait, at most ``timeout_s`` in all, until each thread has ended or runs nothing
    (a pool worker back to waiting never ends: joining it would wait the whole timeout)."""
    deadline = time.monotonic() + timeout_s
    for t in threads:
        while t.is_alive() and not runs_nothing(t) and time.monotonic() < deadline:
            t.join(min(SETTLE_POLL_S, max(0.0, deadline - time.monotonic())))
