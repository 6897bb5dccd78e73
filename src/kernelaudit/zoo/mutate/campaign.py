"""The campaign: every planned mutant judged by every oracle, in worker processes, into a store.

Planning enumerates the mutants of the chosen subjects and operators (``limit``: a
seeded sample of that many, the same sample every time), drops those already recorded
(resume), and cuts the rest into batches of one subject each. A batch runs in a worker
process (:mod:`.worker`), so the subject's setup is paid once per batch, forked from a
server each job keeps (:class:`Worker`), so the imports are paid once per job; ``jobs``
batches run at a time, the largest first. The worker bounds each mutant with ``timeout_s``; a
worker that dies (a segfault, ``os._exit``) or stops answering is killed, its current
mutant recorded as a ``crash`` or ``timeout``, and a fresh worker takes the rest of the
batch. The first batch of a subject also checks the clean candidate (every oracle must
pass it) and a forced failure (every oracle must catch it).

:func:`run_pool` hands work to local processes (a thread per job, each driving its own
worker subprocess, records streamed as they are made); :func:`run_executor` hands whole
batches to an engine of :mod:`kernelaudit.executors` (``--executor ray``: an existing Ray
cluster, many GPUs on many hosts; the records of a batch come back when it ends).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import select
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import InvalidArgument
from .generate import Mutant, enumerate_mutants
from .operators import Operator, OPERATORS
from .store import CampaignStore, now
from .subjects import Subject

#: Columns judged when ``--oracle`` is not given (the detection table's, with ``strongest`` from its parts).
DEFAULT_COLUMNS = ("kernelbench", "kernelbench@1e-4", "assert-close", "ulp", "bound", "shapes", "values", "tamper",
                   "static", "strongest", "fuzz-baseline")
#: Mutants a worker judges before it is replaced (bounds what one process accumulates). Above the
#: largest corpus subject (153 mutants), so a subject's setup (problem, reference, equivalence
#: inputs, coverage, site table) is paid once, not once per 60 mutants.
DEFAULT_BATCH = 250
#: Extra seconds the parent waits past a mutant's own deadline before it kills the worker.
GRACE_S = 30.0
#: Seconds a worker may take to start and set its subject up (imports, clean checks).
SETUP_TIMEOUT_S = 900.0


#: Most worker processes the CPU default starts (each holds torch and a subject: about 0.3 GB).
CPU_JOBS_MAX = 32


def default_jobs(device: str, executor: str = "local") -> int:
    """Workers when ``--jobs`` is not given: on the CPU one more than the cores this process may
    use (the corpus on 2 cores: 477 s with 3 jobs, 625 s with 2: a worker waiting on a fork, a
    pipe or the store leaves its core to the third), capped at :data:`CPU_JOBS_MAX`; on CUDA 1;
    on Ray 0 (one per GPU, or CPU, of the cluster)."""
    if executor == "ray":
        return 0
    if str(device).startswith("cuda"):
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(cores + 1, CPU_JOBS_MAX)


def local_gpus() -> list[str]:
    """The GPUs of this host the campaign may use (CUDA_VISIBLE_DEVICES's entries, else every
    device torch counts), when there are several; [] for one or none (workers inherit the
    environment as it is)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
    else:
        import torch

        ids = [str(i) for i in range(torch.cuda.device_count())]
    return ids if len(ids) > 1 else []


def parse_columns(spec: str | None) -> list[str]:
    """``--oracle`` columns: comma list of oracle names, ``strongest``, ``kernelbench@TOL``; None: the default.

    Raises :class:`InvalidArgument` naming ``--oracle`` and the allowed values.
    """
    from ..oracles import ALIASES, BASELINE_NAMES, ORACLE_NAMES, SUITE_PREFIX

    if spec is None or not spec.strip():
        return list(DEFAULT_COLUMNS)
    allowed = list(ORACLE_NAMES) + list(ALIASES) + list(BASELINE_NAMES) + ["kernelbench@TOL", SUITE_PREFIX + "FILE"]
    out = []
    for item in (s.strip() for s in spec.split(",") if s.strip()):
        if item.startswith("kernelbench@"):
            try:
                ok = float(item.split("@", 1)[1]) > 0
            except ValueError:
                ok = False
            if not ok:
                raise InvalidArgument(f"Cannot have --oracle={item!r}: kernelbench@TOL needs a positive tolerance, "
                                      "e.g. kernelbench@1e-4")
        elif item.startswith(SUITE_PREFIX):
            from ..oracles.suite import read_suite_file

            read_suite_file(item[len(SUITE_PREFIX):])  # unreadable: a usage error now, not in every worker
        elif item not in ORACLE_NAMES and item not in ALIASES and item not in BASELINE_NAMES:
            raise InvalidArgument(f"Cannot have --oracle={item!r}: allowed values are {', '.join(allowed)}")
        if item not in out:
            out.append(item)
    return out


def plan(subjects: Sequence[Subject], operators: Sequence[Operator] = OPERATORS, *, limit: int | None = None,
         seed: int = 0) -> list[Mutant]:
    """The campaign's mutants, subject by subject; ``limit``: a seeded sample of that many."""
    mutants = list(enumerate_mutants(subjects, operators))
    if limit is not None and limit < len(mutants):
        if limit < 0:
            raise InvalidArgument(f"Cannot have --limit={limit}: allowed is a count of mutants >= 0")
        keep = set(random.Random(seed).sample(range(len(mutants)), limit))
        mutants = [m for i, m in enumerate(mutants) if i in keep]
    return mutants


@dataclass
class Unit:
    """One batch: mutants of one subject for one worker."""

    subject: Subject
    mutants: list[str]
    check_clean: bool


@dataclass
class Progress:
    """Counts as records arrive (for the progress line and the final summary)."""

    total: int
    done: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)

    def add(self, rec: dict[str, Any]) -> None:
        self.done += 1
        self.outcomes[rec["outcome"]] = self.outcomes.get(rec["outcome"], 0) + 1


def _job(unit: Unit, mutants: list[str], check_clean: bool, cfg: dict[str, Any], scratch: Path) -> dict[str, Any]:
    """The JSON job a worker reads: ``mutants`` of ``unit``'s subject and how to judge them."""
    s = unit.subject
    scratch.mkdir(parents=True, exist_ok=True)
    return {"subject": {"id": s.id, "kind": s.kind, "problem_path": str(s.problem_path), "source": s.source,
                        "scope": list(s.scope)},
            "mutants": mutants, "columns": cfg["columns"], "device": cfg["device"], "small": cfg["small"],
            "timeout_s": cfg["timeout_s"], "check_clean": check_clean, "scratch": str(scratch),
            "per_input": cfg.get("per_input", True), "zygote": cfg.get("zygote", True)}


class Worker:
    """The worker process a pool thread drives.

    Where the OS forks, it is a fork server (``worker --serve``): it imports torch, Triton
    and the oracles once (no CUDA context: the children make their own), then runs each job
    it is sent in a forked child and ends the job's events with a ``job_end`` record, so a
    thread pays the imports once for all its batches, not once per subject. Otherwise
    (``serve: False`` in the config, or no fork) each job gets a fresh process whose events
    end at EOF. A worker that hangs or dies is killed and the next job starts a fresh one."""

    def __init__(self, cfg: dict[str, Any], slot: int = 0) -> None:
        self.cfg = cfg
        self.slot = slot  # which of cfg["gpus"] this worker's processes see (round robin)
        self.serve = hasattr(os, "fork") and cfg.get("serve", True)
        self.proc: subprocess.Popen | None = None
        self.events = None
        self.buf = ""

    def submit(self, job: dict[str, Any]) -> None:
        """Start ``job`` (a fresh process unless a fork server is waiting for work)."""
        if self.proc is not None and self.proc.poll() is not None:
            self.kill()  # a fork server that died between jobs
        if self.proc is None or not self.serve:
            self._start()
        line = json.dumps(job).encode()
        try:
            self.proc.stdin.write(line + b"\n" if self.serve else line)
            self.proc.stdin.flush()
            if not self.serve:
                self.proc.stdin.close()
        except BrokenPipeError:
            pass  # the process is gone: its events end at EOF and the batch is retried

    def _start(self) -> None:
        r, w = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        gpus = self.cfg.get("gpus") or []
        if gpus:  # several GPUs on this host: worker k uses GPU k mod N, as its cuda:0
            env["CUDA_VISIBLE_DEVICES"] = str(gpus[self.slot % len(gpus)])
        log = open(self.cfg["log"], "ab")  # noqa: SIM115 - owned by the process
        argv = [sys.executable, "-m", "kernelaudit.zoo.mutate.worker", "--events-fd", str(w)]
        self.proc = subprocess.Popen(argv + (["--serve"] if self.serve else []), stdin=subprocess.PIPE,
                                     stdout=log, stderr=log, env=env, pass_fds=(w,), start_new_session=True)
        os.close(w)
        log.close()
        self.events = os.fdopen(r, "r")
        self.buf = ""

    def read(self, timeout: float) -> list[dict[str, Any]] | None:
        """The records that arrive within ``timeout`` seconds ([] if none), or None at EOF."""
        ready, _, _ = select.select([self.events], [], [], max(0.0, timeout))
        if not ready:
            return []
        chunk = os.read(self.events.fileno(), 1 << 16).decode()
        if not chunk:
            return None
        self.buf += chunk
        *lines, self.buf = self.buf.split("\n")
        return [json.loads(line) for line in lines]

    def kill(self) -> int | None:
        """Kill the process and whatever it started; its exit code."""
        if self.proc is None:
            return None
        _kill(self.proc)
        self.events.close()
        code, self.proc = self.proc.returncode, None
        return code

    def interrupt(self) -> None:
        """Kill the process and whatever it started, from another thread than the one
        reading its events (that thread sees EOF and cleans up)."""
        proc = self.proc
        if proc is not None:
            _kill(proc)

    def ended(self) -> int | None:
        """A one-job process that closed its events: wait for it, and its exit code."""
        if self.serve or self.proc is None:
            return None
        self.proc.wait()
        self.events.close()
        code, self.proc = self.proc.returncode, None
        return code

    def close(self) -> None:
        """End a fork server (EOF on its jobs), else kill what is left."""
        if self.proc is not None and self.serve:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()


def _kill(proc: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the worker's own session: it and what it started
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def drive_unit(unit: Unit, cfg: dict[str, Any], record: Callable[[dict[str, Any]], None],
               worker: Worker | None = None, stop: threading.Event | None = None) -> None:
    """Run one batch to the end on ``worker`` (a fresh one, closed after, when None), replacing
    the worker's process after a crash or a hang; no new process once ``stop`` is set."""
    own = worker is None
    worker = worker or Worker(cfg)
    try:
        _drive(unit, cfg, record, worker, stop)
    finally:
        if own:
            worker.close()


def _drive(unit: Unit, cfg: dict[str, Any], record: Callable[[dict[str, Any]], None], worker: Worker,
           stop: threading.Event | None = None) -> None:
    todo = list(unit.mutants)
    check_clean = unit.check_clean
    with tempfile.TemporaryDirectory(prefix="kernelaudit-mutate-") as tmp:
        while (todo or check_clean) and not (stop is not None and stop.is_set()):
            worker.submit(_job(unit, todo, check_clean, cfg, Path(tmp) / "scratch"))
            current: str | None = None
            saw_start = False
            deadline = time.monotonic() + SETUP_TIMEOUT_S
            ended = code = None
            while ended is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    ended = "timeout"
                    break
                recs = worker.read(min(left, 5.0))
                if recs is None:
                    ended = "crash"
                    break
                for rec in recs:
                    if rec["type"] == "start":
                        current = rec["id"]
                        saw_start = True
                        deadline = time.monotonic() + cfg["timeout_s"] + GRACE_S
                        continue
                    if rec["type"] == "job_end":  # the fork server's child has exited
                        ended, code = "end", rec["code"]
                        continue
                    if rec["type"] == "subject":
                        check_clean = False
                    elif rec["type"] == "mutant":
                        if rec["id"] in todo:
                            todo.remove(rec["id"])
                        current = None
                    record(rec)
            if ended == "crash":  # EOF: a one-job process is done, a fork server died
                code = worker.kill() if worker.serve else worker.ended()
            elif ended == "timeout":
                code = worker.kill()
            if not todo and not check_clean:
                return
            if not saw_start:  # the worker died setting up: nothing of this subject can be judged
                why = f"the worker ended during setup ({'crash' if ended == 'end' else ended}, exit {code}); " \
                      "see worker.log"
                if check_clean:
                    record({"type": "subject", "subject": unit.subject.id, "digest": unit.subject.digest,
                            "kind": unit.subject.kind, "error": why})
                for mid in todo:
                    m = Mutant.parse(mid)
                    record({"type": "mutant", "id": mid, "subject": m.subject, "operator": m.operator,
                            "family": m.family, "site": m.site, "outcome": "unjudged", "reason": why})
                return
            if current is None:
                if not todo:
                    return
                current = todo[0]
            m = Mutant.parse(current)
            how = f"no verdict within {cfg['timeout_s']:g} s (worker killed)" if ended == "timeout" else \
                f"the worker process ended (exit {code}) while judging it"
            record({"type": "mutant", "id": current, "subject": m.subject, "operator": m.operator,
                    "family": m.family, "site": m.site, "outcome": "timeout" if ended == "timeout" else "crash",
                    "reason": how})
            todo.remove(current)


def run_pool(units: Sequence[Unit], jobs: int, cfg: dict[str, Any],
             record: Callable[[dict[str, Any]], None]) -> None:
    """Judge every unit, ``jobs`` at a time: a thread per job, each driving its own worker
    (:class:`Worker`, kept across the thread's units), the largest units first so that no
    long one is left running alone at the end. With ``cfg["gpus"]`` (several GPUs on this
    host) the k-th worker runs on GPU k mod N."""
    local = threading.local()
    workers: list[Worker] = []
    lock = threading.Lock()
    stop = threading.Event()

    def keep(rec: dict[str, Any]) -> None:
        # after an interrupt the killed workers' mutants would read as crashes: drop
        # them, so that a resumed run judges them again
        if not stop.is_set():
            record(rec)

    def work(unit: Unit) -> None:
        if stop.is_set():
            return
        if not hasattr(local, "worker"):
            with lock:
                local.worker = Worker(cfg, slot=len(workers))
                workers.append(local.worker)
        drive_unit(unit, cfg, keep, local.worker, stop)

    order = sorted(units, key=lambda u: -len(u.mutants))
    state = {"stopping": False}
    with _first_interrupt_only(state):
        pool = ThreadPoolExecutor(max_workers=max(1, jobs))
        try:
            for f in [pool.submit(work, u) for u in order]:
                f.result()
        except BaseException:
            # an interrupt (or a failing thread): queued units are cancelled and the running
            # ones' workers killed, so the campaign ends in seconds, not after the queue
            state["stopping"] = True
            stop.set()
            pool.shutdown(wait=False, cancel_futures=True)
            with lock:
                for w in workers:
                    w.interrupt()
            pool.shutdown(wait=True)
            raise
        finally:
            pool.shutdown(wait=True)
            for w in workers:
                w.close()


@contextlib.contextmanager
def _first_interrupt_only(state: dict[str, bool]):
    """While active (main thread only), the first SIGINT raises KeyboardInterrupt and every
    later one, or any once ``state["stopping"]`` is set, is ignored: GNU ``timeout``
    signals the process and then its group, and a second interrupt landing anywhere in
    the clean-up (even before it starts) must not cut it short, leaving workers to finish
    their batches. A SIGINT that is ignored already stays ignored."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.getsignal(signal.SIGINT)
    if old in (signal.SIG_IGN, None):
        yield
        return

    def first_only(signum, frame):  # noqa: ANN001
        if state["stopping"]:
            return
        state["stopping"] = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, first_only)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


class InlineSlot:
    """An executor slot that runs a task in the process hosting it (a Ray actor): the task
    starts its own worker subprocess, so a crashing mutant never takes the actor down."""

    def __init__(self, device: str) -> None:
        self.device = device

    def run(self, task: Callable[[], Any]) -> Any:
        return task()

    def stop(self) -> None:
        pass


class UnitTask:
    """One batch as a picklable task: drives its worker wherever it runs, returns the records."""

    def __init__(self, unit: Unit, cfg: dict[str, Any]) -> None:
        self.unit, self.cfg = unit, cfg

    def __call__(self) -> list[dict[str, Any]]:
        cfg = dict(self.cfg)
        if not Path(cfg["log"]).parent.is_dir():  # another host: the campaign directory is not there
            cfg["log"] = os.path.join(tempfile.gettempdir(), "kernelaudit-mutate-worker.log")
        records: list[dict[str, Any]] = []
        drive_unit(self.unit, cfg, records.append)
        return records


def run_executor(units: Sequence[Unit], cfg: dict[str, Any], record: Callable[[dict[str, Any]], None], *,
                 executor: str, jobs: int, ray_address: str | None = None) -> None:
    """Run every batch on ``executor`` (:mod:`kernelaudit.executors`): ``ray`` puts one batch at a time on
    each worker of a Ray cluster (``jobs`` workers; 0: one per GPU, or CPU, of the cluster), and the
    records come back here, where the store is written (one writer, whatever runs the batches)."""
    from ...executors import open_executor

    device_type = "cuda" if str(cfg["device"]).startswith("cuda") else "cpu"
    devices = [f"{device_type}:{i}" for i in range(jobs)] if jobs > 0 else None
    tasks = {i: UnitTask(u, cfg) for i, u in enumerate(units)}
    with open_executor(executor, InlineSlot, devices=devices, device_type=device_type,
                       ray_address=ray_address) as ex:
        for done in ex.map(tasks):
            if done.ok:
                for rec in done.value:
                    record(rec)
                continue
            unit = units[done.key]  # the whole batch was lost (its host died): recorded, never silently dropped
            for mid in unit.mutants:
                m = Mutant.parse(mid)
                record({"type": "mutant", "id": mid, "subject": m.subject, "operator": m.operator,
                        "family": m.family, "site": m.site, "outcome": "unjudged",
                        "reason": f"the batch failed on {done.device}: {done.error}"[:240]})


def run_campaign(subjects: Sequence[Subject], out: Path, *, columns: Sequence[str] = DEFAULT_COLUMNS,
                 operators: Sequence[Operator] = OPERATORS, device: str = "cpu", small: bool = True,
                 limit: int | None = None, seed: int = 0, jobs: int = 1, timeout_s: float = 120.0,
                 batch: int = DEFAULT_BATCH, resume: bool = False, executor: str = "local",
                 ray_address: str | None = None, per_input: bool = True,
                 on_record: Callable[[dict[str, Any], Progress], None] | None = None) -> Progress:
    """Plan, then judge every mutant not yet recorded in ``out``; returns the counts of this run."""
    from ...errors import check_choice
    from ...executors import EXECUTORS

    check_choice("--executor", executor, EXECUTORS)
    if jobs < 1 and not (executor == "ray" and jobs == 0):
        raise InvalidArgument(f"Cannot have --jobs={jobs}: allowed is a number of worker processes >= 1 "
                              "(0 with --executor ray: one per GPU, or CPU, of the cluster)")
    if timeout_s <= 0:
        raise InvalidArgument(f"Cannot have --timeout={timeout_s}: allowed is a positive number of seconds")
    mutants = plan(subjects, operators, limit=limit, seed=seed)
    manifest = {"columns": list(columns), "device": device, "small": small, "operators": [o.name for o in operators],
                "subjects": {s.id: s.digest for s in subjects}, "plan": {"mutants": len(mutants), "limit": limit,
                                                                          "seed": seed, "at": now()},
                "environment": _environment()}
    store = CampaignStore.create(out, manifest, resume=resume)
    done = store.recorded_mutants()
    checked = store.recorded_subjects()
    by_subject: dict[str, list[str]] = {}
    for m in mutants:
        if m.id not in done:
            by_subject.setdefault(m.subject, []).append(m.id)
    units = []
    planned = {m.subject for m in mutants}
    for s in subjects:
        ids = by_subject.get(s.id, [])
        first = s.id not in checked
        if s.id not in planned or (not ids and not first):
            continue  # a subject the sample left out is not set up at all
        for k in range(0, max(len(ids), 1), batch):
            units.append(Unit(s, ids[k:k + batch], first and k == 0))
    progress = Progress(sum(len(u.mutants) for u in units))
    cfg = {"columns": list(columns), "device": device, "small": small, "timeout_s": float(timeout_s),
           "log": str(store.path / "worker.log"), "per_input": per_input,
           "gpus": local_gpus() if executor == "local" and str(device) == "cuda" else []}
    lock = threading.Lock()

    def record(rec: dict[str, Any]) -> None:
        store.append(rec)
        with lock:
            if rec["type"] == "mutant":
                progress.add(rec)
            if on_record:
                on_record(rec, progress)

    if executor == "local":
        run_pool(units, jobs, cfg, record)
    else:
        run_executor(units, cfg, record, executor=executor, jobs=jobs, ray_address=ray_address)
    store.write_manifest({**store.manifest(), "finished": now(),
                          "wall_s": round(time.perf_counter() - progress.started, 1)})
    return progress


def _environment() -> dict[str, Any]:
    import platform
    from importlib.metadata import PackageNotFoundError, version

    from ...provenance import git_sha, source_digest

    env = {"python": platform.python_version(), "git": git_sha(), "source": source_digest()}
    for name in ("kernelaudit", "torch", "triton", "libcst"):
        try:
            env[name] = version(name)
        except PackageNotFoundError:
            env[name] = None
    return env
