"""Execution that survives: every case runs in a worker process.

A case that kills its process (a Metal abort, a CUDA illegal address, a segfault)
becomes an ``error`` verdict with the worker's exit status, and a fresh worker takes
the next case; the sweep never dies with it. A worker is also replaced after any
``error`` on a GPU (a sticky CUDA error poisons the context) and after a timeout.
Workers are started with ``spawn``: nothing of the parent's state (or CUDA context)
leaks into them.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any

from .cases import Case
from .verdict import Verdict

#: Seconds a single case may run before its worker is killed.
DEFAULT_CASE_TIMEOUT_S = 600.0
#: Seconds to wait for a worker to start (imports torch, initialises the device).
WORKER_START_TIMEOUT_S = 180.0


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


def _worker_main(conn, cfg: WorkerConfig) -> None:
    """Worker loop: receive a job, run it, send its result, forever."""
    try:
        import torch

        from . import plan
        from .oracle import default_ref_chunk, execute

        device = torch.device(cfg.device)
        if device.type == "cuda":
            torch.cuda.init()
            if cfg.memory_fraction is not None:
                index = device.index if device.index is not None else torch.cuda.current_device()
                torch.cuda.set_per_process_memory_fraction(min(max(float(cfg.memory_fraction), 0.0), 1.0), index)
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
        try:
            case = Case.from_json(job["case"])
            ok, need, avail = plan.fits(case, device, cfg.fault_model, ref_chunk, cfg.memory_limit)
            if not ok:
                v = Verdict.skipped(f"needs about {need / 2**30:.1f} GiB, {avail / 2**30:.1f} GiB available",
                                    needed_bytes=need, available_bytes=avail)
                conn.send({"verdict": v.to_json(), "worst": {}, "elapsed_s": time.perf_counter() - t0})
                continue
            out = execute(case, device, fault_model=cfg.fault_model, tolerances=job.get("tolerances"),
                          ref_device=cfg.ref_device, mode=cfg.mode, ref_chunk=ref_chunk)
            res = {"verdict": out.verdict.to_json(), "worst": out.worst, "elapsed_s": out.elapsed_s}
        except Exception as e:
            v = Verdict.error(f"kernelaudit failed on this case: {type(e).__name__}: {e}",
                              checker_bug=True, traceback=traceback.format_exc(limit=5))
            res = {"verdict": v.to_json(), "worst": {}, "elapsed_s": time.perf_counter() - t0}
        # No empty_cache() between cases: the caching allocator reuses the last case's
        # blocks (returning tens of GiB to the driver and mapping them again cost more
        # than many small cases), the plan counts cached blocks as available, and an
        # allocation that does not fit makes the allocator release its cache and retry.
        conn.send(res)


class WorkerPool:
    """One worker process (the device is one), restarted whenever it cannot go on."""

    def __init__(self, cfg: WorkerConfig, case_timeout_s: float = DEFAULT_CASE_TIMEOUT_S) -> None:
        self.cfg = cfg
        self.case_timeout_s = case_timeout_s
        self._ctx = mp.get_context("spawn")
        self._proc = None
        self._conn = None
        self.restarts = 0

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_worker_main, args=(child, self.cfg), daemon=True)
        proc.start()
        child.close()
        if not parent.poll(WORKER_START_TIMEOUT_S):
            proc.kill()
            raise RuntimeError(f"worker did not start within {WORKER_START_TIMEOUT_S:.0f} s")
        hello = parent.recv()
        if not hello.get("ready"):
            proc.join(5)
            raise RuntimeError(f"worker could not start: {hello.get('error')}")
        self._proc, self._conn = proc, parent

    def stop(self) -> None:
        if self._proc is None:
            return
        try:
            self._conn.send(None)
            self._proc.join(5)
        except (OSError, BrokenPipeError):
            pass
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
        self._proc = self._conn = None

    def _kill(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
        self._proc = self._conn = None
        self.restarts += 1

    def run(self, job: dict[str, Any]) -> dict[str, Any]:
        """Run one job; a dead or hung worker becomes an ``error`` result."""
        if self._proc is None:
            self._start()
        t0 = time.perf_counter()
        try:
            self._conn.send(job)
            deadline = t0 + self.case_timeout_s
            while True:
                if self._conn.poll(0.5):
                    res = self._conn.recv()
                    break
                if not self._proc.is_alive():
                    raise EOFError
                if time.perf_counter() > deadline:
                    self._kill()
                    v = Verdict.error(f"timed out after {self.case_timeout_s:.0f} s (worker killed)")
                    return {"verdict": v.to_json(), "worst": {}, "elapsed_s": time.perf_counter() - t0}
        except (EOFError, OSError, BrokenPipeError):
            code = None
            if self._proc is not None:
                self._proc.join(10)  # reap it, so its exit status is known
                code = self._proc.exitcode
            self._kill()
            v = Verdict.error(f"the process running the case died: {_describe_exit(code)}", exitcode=code)
            return {"verdict": v.to_json(), "worst": {}, "elapsed_s": time.perf_counter() - t0}
        if res.get("verdict", {}).get("status") == "error" and self.cfg.device.startswith(("cuda", "mps")):
            self._kill()  # a device error can poison the context: start clean
        return res

    def device_memory(self) -> dict[str, int] | None:
        """``{"available", "total"}`` bytes of the device as this pool's worker sees it
        (:func:`~kernelaudit.plan.device_memory`; the worker is started if needed), or
        None if the worker could not say."""
        res = self.run({"memory": True})
        return res.get("memory")

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"
