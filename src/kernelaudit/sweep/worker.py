"""Execution that survives: every case runs in a worker process.

A case that kills its process (a Metal abort, a CUDA illegal address, a segfault)
becomes an ``error`` verdict with the worker's exit status, and a fresh worker takes
the next case; the sweep never dies with it. After an ``error`` on a GPU the worker
probes its device (:func:`device_healthy`): a sticky CUDA error (an illegal address)
poisons the context and fails the probe, and the worker is replaced; an error the op
raised cleanly (a cuDNN status, a size check) leaves the context usable, and the
worker goes on: a replacement costs seconds (imports, device start, kernel loads). A
worker is also replaced after a timeout.
Workers are started with ``spawn``: nothing of the parent's state (or CUDA context)
leaks into them.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from dataclasses import dataclass, replace
from typing import Any

from . import phase
from .cases import Case
from ..executors import describe_exit, kill_worker, spawn_worker, stop_worker
from ..verdict import Verdict

#: Seconds a single case may run before its worker is killed.
DEFAULT_CASE_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class WorkerConfig:
    """What every job of a sweep shares."""

    device: str
    fault_model: str = "none"
    ref_device: str | None = None
    mode: str = "auto"
    memory_limit: int | None = None
    ref_chunk: int | None = None
    #: CUDA only: cap of the worker's caching allocator, as a fraction of the device's
    #: total memory (``torch.cuda.set_per_process_memory_fraction``). Set for workers
    #: that share the device with others (cases side by side); at the cap the allocator
    #: frees its cache and retries before it raises out-of-memory.
    memory_fraction: float | None = None
    #: :data:`.memory.MEMORY_PLANS`: ``strict`` skips a case whose estimate exceeds the
    #: memory available; ``try`` runs it where the call's own tensors fit.
    memory_plan: str = "strict"


def device_healthy(device) -> bool:
    """Whether ``device`` still runs work after an error: synchronise, then run and
    read back one small op. A sticky CUDA error makes both raise. CPU: always."""
    import torch

    device = torch.device(device)
    try:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elif device.type == "mps":
            torch.mps.synchronize()
        else:
            return True
        return int(torch.ones(2, device=device, dtype=torch.int32).sum().item()) == 2
    except Exception:
        return False


def start_device(cfg: WorkerConfig):
    """A worker's device, started: on CUDA pinned (an index), initialised, its caching
    allocator's settings set (:func:`.memory.set_allocator`) before any allocation, and
    capped at ``cfg.memory_fraction``."""
    import torch

    from . import memory as plan

    device = torch.device(cfg.device)
    if device.type == "cuda":
        if device.index is not None:
            # Pinned before CUDA starts: one context, on this GPU only; Triton and
            # every "cuda" without an index launch here (--devices cuda:1,...).
            torch.cuda.set_device(device)
        torch.cuda.init()
        plan.set_allocator(device)
        if cfg.memory_fraction is not None:
            index = device.index if device.index is not None else torch.cuda.current_device()
            torch.cuda.set_per_process_memory_fraction(min(max(float(cfg.memory_fraction), 0.0), 1.0), index)
    return device


def _worker_main(conn, cfg: WorkerConfig) -> None:
    """Worker loop: receive a job, run it, send its result, forever."""
    try:
        # torch's Python meta kernels (the memory plan's) import dynamo on their first call:
        # 1.2-1.8 s on a CPU, which the first case's timeout would count (a 2 s one ran out)
        import torch._dynamo  # noqa: F401

        from . import memory as plan
        from .judge import execution  # noqa: F401 - imported before the hello: no case pays for it
        from .judge.reference import default_ref_chunk

        device = start_device(cfg)
        ref_chunk = cfg.ref_chunk or default_ref_chunk(device)
        conn.send({"ready": True, "pid": os.getpid()})
    except Exception as e:  # pragma: no cover - start-up failure is reported by the parent
        conn.send({"ready": False, "error": f"{type(e).__name__}: {e}"})
        return
    while True:
        job = conn.recv()
        if job is None:
            # Exit at once: the interpreter's teardown with torch loaded took 1.6 s on a
            # CPU, and the sweep waits for it (memory back before the next phase).
            conn.close()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        if job.get("memory"):  # how much of the device this process could use now
            try:
                conn.send({"memory": plan.device_memory(device)})
            except Exception as e:
                conn.send({"memory": None, "error": f"{type(e).__name__}: {e}"})
            continue
        t0 = time.perf_counter()
        with phase.listening(lambda mark: conn.send({"progress": mark})):
            res = _run_job(job, cfg, device, ref_chunk)
        if probes_device(res) and device.type != "cpu":
            res["healthy"] = device_healthy(device)
        # No empty_cache() between cases: the caching allocator reuses the last case's
        # blocks (returning tens of GiB to the driver and mapping them again cost more
        # than many small cases), the plan counts cached blocks as available, and an op
        # that still runs out of memory (cached blocks too fragmented for one large
        # tensor) runs again after execute() returns the cache (judge.execution.OOM_RETRIES).
        res["worker_s"] = time.perf_counter() - t0  # the job in this process, freeing its tensors included
        conn.send(res)


def _run_job(job: dict, cfg: WorkerConfig, device, ref_chunk: int) -> dict:
    """One case in the worker: the memory plan, then the case run and judged; its result
    for the pool (``worker_s`` and the device probe aside)."""
    from . import memory as plan   # both imported by the worker's start already
    from .judge.execution import execute

    t0 = time.perf_counter()
    phase.enter("plan")
    try:
        case = Case.from_json(job["case"])
        ok, need, avail = plan.fits(case, device, cfg.fault_model, ref_chunk, cfg.memory_limit, cfg.memory_plan)
        if not ok:
            tried = {"memory_plan": {"plan": "try"}} if cfg.memory_plan == "try" else {}
            v = Verdict.skipped(f"needs {'at least' if tried else 'about'} {need / 2**30:.1f} GiB, "
                                f"{avail / 2**30:.1f} GiB available", needed_bytes=need, available_bytes=avail,
                                **tried)
            return {"verdict": v.to_json(), "worst": {}, "elapsed_s": time.perf_counter() - t0}
        out = execute(case, device, fault_model=cfg.fault_model, tolerances=job.get("tolerances"),
                      ref_device=cfg.ref_device, mode=cfg.mode, ref_chunk=ref_chunk)
        if need > avail:   # run under the plan ``try``, past the estimate
            out.verdict.details["memory_plan"] = {"plan": "try", "estimate_bytes": need, "available_bytes": avail}
        return {"verdict": out.verdict.to_json(), "worst": out.worst, "elapsed_s": out.elapsed_s}
    except Exception as e:
        v = Verdict.error(f"kernelaudit failed on this case: {type(e).__name__}: {e}",
                          checker_bug=True, traceback=traceback.format_exc(limit=5))
        return {"verdict": v.to_json(), "worst": {}, "elapsed_s": time.perf_counter() - t0}


#: Spare workers a pool keeps from its first replacement on, per device type. Two on a
#: GPU: crashing cases come in runs (every dtype and direction of an op past 2^31), and
#: with one spare each crash after the first of a run waited for the next spare's start
#: (the full grid's H100 segment of 2026-12-05: 41 s of round trips for 8 replacements
#: in 228 cases).
STANDBY_SPARES = {"cuda": 2}


class WorkerPool:
    """One worker process (the device is one), restarted whenever it cannot go on.

    With ``standby`` spares (default :data:`STANDBY_SPARES` for the device type; none on
    the CPU) the first replacement also starts that many spare workers in the
    background, and every later replacement takes a spare (started: imports, device
    start, kernel loads already paid) and starts another: on the H200 a run of crashing
    cases (illegal memory accesses past 2^31) cost a start each, about 45 s of a 300 s
    quick sweep. ``promoted`` counts replacements a spare made."""

    def __init__(self, cfg: WorkerConfig, case_timeout_s: float = DEFAULT_CASE_TIMEOUT_S, *,
                 standby: int | None = None) -> None:
        self.cfg = cfg
        self.case_timeout_s = case_timeout_s
        self.standby = int(standby if standby is not None else STANDBY_SPARES.get(cfg.device.split(":")[0], 0))
        self._proc = None
        self._conn = None
        self.restarts = 0
        self.promoted = 0
        self._starting = None  # (thread, [exception], {"worker": (proc, conn)}) of a start begun in the background
        self._spares: list = []  # the same, for the standby workers, oldest first

    def _begin(self):
        """Start a worker in a background thread; its handle."""
        import threading

        failed: list[BaseException] = []
        holder: dict[str, Any] = {}

        def start() -> None:
            try:
                holder["worker"] = spawn_worker(_worker_main, (self.cfg,), what="worker")
            except BaseException as e:  # raised by the job that waits for it
                failed.append(e)

        t = threading.Thread(target=start, daemon=True)
        t.start()
        return t, failed, holder

    def prestart(self) -> None:
        """Begin starting the worker in the background (imports, device start: seconds),
        so that it overlaps other work; the next job waits for it. No-op if started."""
        if self._proc is not None or self._starting is not None:
            return
        self._starting = self._begin()

    def _ensure_started(self) -> None:
        if self._starting is not None:
            t, failed, holder = self._starting
            t.join()
            self._starting = None
            if failed:
                raise failed[0]
            self._proc, self._conn = holder["worker"]
        if self._proc is None:
            self._start()

    def _start(self) -> None:
        # TaskFailed is a RuntimeError: callers catch a worker that cannot start as one.
        self._proc, self._conn = spawn_worker(_worker_main, (self.cfg,), what="worker")

    def stop(self) -> None:
        for handle in (*self._spares, self._starting):
            if handle is None:
                continue
            t, failed, holder = handle
            t.join()
            if not failed and handle is not self._starting:
                stop_worker(*holder["worker"])
        self._spares = []
        if self._starting is not None:
            t, failed, holder = self._starting
            self._starting = None
            if failed:
                return
            self._proc, self._conn = holder["worker"]
        stop_worker(self._proc, self._conn)
        self._proc = self._conn = None

    def _kill(self) -> None:
        kill_worker(self._proc)
        self._proc = self._conn = None
        self.restarts += 1
        if self.standby:
            if self._spares:  # the oldest spare becomes the worker; another starts
                self._starting = self._spares.pop(0)
                self.promoted += 1
            while len(self._spares) < self.standby:
                self._spares.append(self._begin())

    def run(self, job: dict[str, Any]) -> dict[str, Any]:
        """Run one job; a dead or hung worker becomes an ``error`` result. A result
        after which the worker was replaced carries ``worker_replaced: True``. Where its
        wall time went besides the job: ``start_s``, waiting for a worker to start (a
        spare's, or its own); ``kill_s``, replacing the worker after the job."""
        t_start = time.perf_counter()
        self._ensure_started()
        t0 = time.perf_counter()
        res = self._run_started(job, t0)
        res["start_s"] = t0 - t_start
        if needs_restart(self.cfg.device, res) and not res.get("worker_replaced"):
            t_kill = time.perf_counter()
            self._kill()  # a device error poisoned the context: start clean
            res["worker_replaced"] = True
            res["kill_s"] = time.perf_counter() - t_kill
        return res

    def _run_started(self, job: dict[str, Any], t0: float) -> dict[str, Any]:
        """:meth:`run` on the started worker (a dead or hung one killed: ``kill_s``). A
        job's own ``timeout_s`` (the sweep's slow pass) replaces the pool's."""
        timeout_s = float(job.get("timeout_s") or self.case_timeout_s)
        track = phase.Tracker()   # where the case is, from the worker's marks
        try:
            self._conn.send(job)
            deadline = t0 + timeout_s
            while True:
                # the deadline first: marks arriving every half second keep poll() true
                if time.perf_counter() > deadline:
                    elapsed = time.perf_counter() - t0
                    self._kill()
                    where, details = track.where(elapsed)
                    v = Verdict.error(f"timed out after {timeout_s:.0f} s (worker killed){where}", timed_out=True,
                                      timeout_s=timeout_s, **details)
                    return {"verdict": v.to_json(), "worst": {}, "elapsed_s": elapsed,
                            "worker_replaced": True, "kill_s": time.perf_counter() - t0 - elapsed}
                if self._conn.poll(min(0.5, max(0.0, deadline - time.perf_counter()))):
                    res = self._conn.recv()
                    if "progress" in res:
                        track.note(res["progress"])
                        continue
                    break
                if not self._proc.is_alive():
                    raise EOFError
        except (EOFError, OSError, BrokenPipeError):
            elapsed = time.perf_counter() - t0
            code = None
            if self._proc is not None:
                self._proc.join(10)  # reap it, so its exit status is known
                code = self._proc.exitcode
            self._kill()
            # where, not how long: a crash's verdict is the same on every device and run
            where, details = track.where(elapsed, times=False)
            v = Verdict.error(f"the process running the case died: {describe_exit(code)}{where}", exitcode=code,
                              **{k: details[k] for k in ("phase",) if k in details})
            return {"verdict": v.to_json(), "worst": {}, "elapsed_s": elapsed,
                    "worker_replaced": True, "kill_s": time.perf_counter() - t0 - elapsed}
        return res

    def device_memory(self) -> dict[str, int] | None:
        """``{"available", "total"}`` bytes of the device as this pool's worker sees it
        (:func:`~kernelaudit.sweep.memory.device_memory`; the worker is started if needed), or
        None if the worker could not say."""
        res = self.run({"memory": True})
        return res.get("memory")

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def pool_on(cfg: WorkerConfig, case_timeout_s: float, device: str) -> WorkerPool:
    """The sweep's slot for an executor (:mod:`kernelaudit.executors`): a
    :class:`WorkerPool` with ``cfg`` on ``device``. A CPU stand-in (``cpu:N``) is the
    CPU; ``cuda:N`` pins the worker to that GPU."""
    return WorkerPool(replace(cfg, device="cpu" if device.startswith("cpu") else device), case_timeout_s)


def probes_device(res: dict[str, Any]) -> bool:
    """Whether the device is probed after the job that returned ``res``: after an
    ``error``, and after a skip the device itself reported (``device_error``: CUDA out of
    memory outside torch's allocator)."""
    v = res.get("verdict", {})
    return v.get("status") == "error" or bool((v.get("details") or {}).get("device_error"))


def needs_restart(device: str, res: dict[str, Any]) -> bool:
    """Whether a worker that returned ``res`` must be replaced: after a result that
    probes the device (:func:`probes_device`) on a GPU, unless the worker's probe found
    it healthy (a result without a probe counts as unhealthy)."""
    if not probes_device(res) or not device.startswith(("cuda", "mps")):
        return False
    return not res.get("healthy", False)

