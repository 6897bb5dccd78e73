"""Executors: run tasks on named devices, one worker per device, results as they finish.

One interface, two engines:

* :class:`LocalExecutor` ``(devices=["cuda:0", "cuda:1"])``: one *slot* per device of
  this host (or several per device, ``slots_per_device``), each driven by one thread
  of the caller's process.
* :class:`RayExecutor` ``(address=None | "auto" | "ray://...")``: one Ray actor per
  device (``num_gpus=1`` on GPUs), on an existing cluster or on a local one that
  ``ray.init()`` starts; ``ray`` is imported only here, and only when used.

Either way, :meth:`~LocalExecutor.map` takes ``{key: task}`` and yields one
:class:`Done` per task in completion order, in the caller's thread: a caller that
records results (the sweep's run store) stays the only writer, so the store is one
append-only file whatever runs the tasks.

A **slot** runs one task at a time on one device: ``run(task) -> value`` (raising
when the task could not run), ``stop()``, and optionally ``prestart()``. The default,
:class:`ProcessSlot`, runs picklable zero-argument callables in a worker process
(:func:`spawn_worker`) pinned to its device (``CUDA_VISIBLE_DEVICES``): a task that kills the process, or
runs past ``timeout_s``, fails alone and a fresh process takes the next one. A product
can pass its own slot factory (the sweep passes its
:class:`~kernelaudit.sweep.worker.WorkerPool`, which adds device health probes).

Device names: ``cuda:N`` (a GPU of this host, as torch numbers them here) and
``cpu:N`` (stand-ins that let tests and CPU runs use several workers; one per core).
Inside a worker, :func:`worker_device` names the device as the worker sees it:
``cuda:0`` once ``CUDA_VISIBLE_DEVICES`` has pinned it.

Dependency rule: shared core; imports no product and nothing heavy at import time
(torch only to count GPUs when ``cuda:N`` names are checked, ray only in
:class:`RayExecutor`).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .config import WORKER_DEVICE, WORKER_START
from .errors import InvalidArgument, check_choice

#: Engines ``--executor`` accepts.
EXECUTORS = ("local", "ray")
#: Seconds to wait for a worker process to start and say it is ready.
START_TIMEOUT_S = 180.0
#: What ``pip`` needs for ``--executor ray``.
RAY_INSTALL = "pip install 'kernelaudit[ray]'  (or: pip install 'ray>=2.9')"

_DEVICE = re.compile(r"(cpu|cuda):(\d+)")


@dataclass(frozen=True)
class Done:
    """One finished task: its ``key``, the ``device`` that ran it, and either the
    slot's ``value`` or, when the task could not run (its process died, it timed
    out, the slot raised), ``error``: a sentence saying why."""

    key: Any
    device: str
    value: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class TaskFailed(RuntimeError):
    """A slot could not run a task (its process died, it timed out, the task raised)."""


class Slot(Protocol):
    """One worker on one device: runs one task at a time."""

    def run(self, task: Any) -> Any: ...

    def stop(self) -> None: ...


#: Builds the slot of one device from its name (picklable when a RayExecutor uses it).
SlotFactory = Callable[[str], Slot]


# --- devices ---------------------------------------------------------------------------
def parse_devices(text: str | Sequence[str], *, argument: str = "devices", here: bool = True) -> tuple[str, ...]:
    """``"cuda:0,cuda:1"`` (or a list of names) -> ``("cuda:0", "cuda:1")``, checked:
    every name is ``cuda:N`` or ``cpu:N``, all of one type, none twice, and (``here``)
    each exists on this host (``cuda:N`` below torch's device count, ``cpu:N`` below the
    core count). A bad list raises :class:`InvalidArgument` naming ``argument``, the
    allowed form and the devices this machine has."""
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text)]
    names = [n for n in names if n]
    form = "a comma list of cuda:N or of cpu:N (one type), e.g. cuda:0,cuda:1"
    if not names:
        raise InvalidArgument(f"Cannot have an empty {argument}: allowed is {form}")
    for n in names:
        if not _DEVICE.fullmatch(n):
            raise InvalidArgument(f"Cannot have {argument}={','.join(names)!r}: {n!r} is not cuda:N or cpu:N; "
                                  f"allowed is {form}")
    types = {n.split(":")[0] for n in names}
    if len(types) > 1:
        raise InvalidArgument(f"Cannot have {argument}={','.join(names)!r}: it mixes {' and '.join(sorted(types))}; "
                              f"allowed is {form}")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise InvalidArgument(f"Cannot have {argument}={','.join(names)!r}: {', '.join(dup)} named twice")
    if not here:
        return tuple(names)
    visible = visible_devices(types.pop())
    missing = [n for n in names if n not in visible]
    if missing:
        have = ", ".join(visible) if visible else "none"
        raise InvalidArgument(f"Cannot have {argument}={','.join(names)!r}: {', '.join(missing)} does not exist "
                              f"here; visible: {have}")
    return tuple(names)


def visible_devices(kind: str) -> list[str]:
    """The devices of type ``kind`` (``cuda`` or ``cpu``) a worker of this host can be
    pinned to: ``cuda:0..`` as torch counts them here, ``cpu:0..`` one per core."""
    check_choice("device type", kind, ("cuda", "cpu"))
    if kind == "cpu":
        return [f"cpu:{i}" for i in range(os.cpu_count() or 1)]
    import torch

    return [f"cuda:{i}" for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0)]


def pinned_environment(device: str) -> dict[str, str]:
    """The environment that pins a child process to ``device``: ``CUDA_VISIBLE_DEVICES``
    set to that one GPU (mapped through this process's own ``CUDA_VISIBLE_DEVICES``,
    so ``cuda:1`` of a process that sees ``4,5`` is GPU 5), or to nothing for a CPU
    stand-in; and :data:`~kernelaudit.config.WORKER_DEVICE` to the name the child
    uses (``cuda:0``, ``cpu:N``)."""
    kind, index = device.split(":") if ":" in device else (device, "0")
    if kind != "cuda":
        return {"CUDA_VISIBLE_DEVICES": "", WORKER_DEVICE.name: device}
    seen = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    physical = seen[int(index)] if "CUDA_VISIBLE_DEVICES" in os.environ and int(index) < len(seen) else index
    return {"CUDA_VISIBLE_DEVICES": physical, WORKER_DEVICE.name: "cuda:0"}


def worker_device() -> str:
    """Inside an executor's worker process, the device it is pinned to as this process
    names it (``cuda:0``, ``cpu:1``); ``""`` outside one."""
    return WORKER_DEVICE.get()


# --- worker processes -------------------------------------------------------------------
#: Imported once by the forkserver, so a worker starts with them loaded (torch: about
#: 2 s of a spawned worker's start on a CPU). Nothing that reads the environment when
#: imported in a way a worker could need changed (Triton's kernels read TRITON_INTERPRET).
FORKSERVER_PRELOAD = ("torch",)


#: Set when this process could not start its forkserver: ``auto`` spawns from then on.
_FORKSERVER_FAILED: list[str] = []


def start_method() -> str:
    """How :func:`spawn_worker` starts processes (:data:`~kernelaudit.config.WORKER_START`):
    ``forkserver`` on Linux by default, else ``spawn`` (and ``spawn`` once a forkserver
    could not start in this process, unless ``forkserver`` was asked for by name)."""
    method = WORKER_START.get()
    if method == "auto":
        method = "forkserver" if sys.platform.startswith("linux") and not _FORKSERVER_FAILED else "spawn"
    return method


def _in_environment(env: dict[str, str], target: Callable[..., None], conn, *args) -> None:
    """A worker's first step: the environment of the parent when it asked for the worker
    (a forkserver's children would otherwise inherit the server's, from its start)."""
    os.environ.clear()
    os.environ.update(env)
    target(conn, *args)


def _start(method: str, target: Callable[..., None], args: tuple):
    """The started process and the parent's end of its pipe."""
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(list(FORKSERVER_PRELOAD))
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_in_environment, args=(dict(os.environ), target, child, *args), daemon=True)
    try:
        proc.start()
    except BaseException:
        parent.close()
        raise
    finally:
        child.close()
    return proc, parent


def spawn_worker(target: Callable[..., None], args: tuple = (), *, what: str = "worker",
                 timeout_s: float | None = None):
    """Start ``target(conn, *args)`` in a fresh daemon process and wait for its hello on
    ``conn``: ``{"ready": True, ...}`` or ``{"ready": False, "error": ...}``. Returns
    ``(process, parent end of the pipe)``. Raises :class:`TaskFailed` (``what`` names the
    worker in the message) when no hello comes within ``timeout_s`` (default
    :data:`START_TIMEOUT_S`; the process is killed), the process dies before its hello,
    or the hello says it could not start.

    Started by :func:`start_method`: ``forkserver`` forks it from a server process that
    imported :data:`FORKSERVER_PRELOAD` and nothing else, ``spawn`` runs a new
    interpreter; either way nothing of this process's state (or CUDA context) leaks into
    the worker, and it runs in this process's current environment."""
    timeout_s = START_TIMEOUT_S if timeout_s is None else timeout_s
    method = start_method()
    try:
        proc, parent = _start(method, target, args)
    except (OSError, EOFError, RuntimeError) as e:
        if method != "forkserver" or WORKER_START.get() == "forkserver":
            raise
        # a host where the forkserver cannot run (no Unix sockets, a locked-down /tmp):
        # say so once, and spawn from now on
        _FORKSERVER_FAILED.append(f"{type(e).__name__}: {e}")
        print(f"kernelaudit: worker processes are spawned: the forkserver did not start ({_FORKSERVER_FAILED[0]})",
              file=sys.stderr)
        proc, parent = _start("spawn", target, args)
    if not parent.poll(timeout_s):
        kill_worker(proc)
        raise TaskFailed(f"{what} did not start within {timeout_s:.0f} s")
    try:
        hello = parent.recv()
    except EOFError:  # the pipe closed before a hello: the process died starting
        proc.join(5)  # reaped, so its exit status is known
        raise TaskFailed(f"{what} died before it said it was ready: {describe_exit(proc.exitcode)}") from None
    if not hello.get("ready"):
        proc.join(5)
        raise TaskFailed(f"{what} could not start: {hello.get('error')}")
    return proc, parent


def stop_worker(proc, conn) -> None:
    """Ask a worker of :func:`spawn_worker` to exit (``None`` on its pipe), wait up to
    5 s, then kill it if it is still alive. ``proc`` None: nothing to stop."""
    if proc is None:
        return
    try:
        conn.send(None)
        proc.join(5)
    except OSError:  # the pipe is gone with the process: killed below if alive
        pass
    kill_worker(proc)


def kill_worker(proc) -> None:
    """Kill ``proc`` if it is alive and reap it (up to 5 s); None or dead: nothing."""
    if proc is not None and proc.is_alive():
        proc.kill()
        proc.join(5)


# --- the default slot: a pinned process ------------------------------------------------
def _process_main(conn, env: dict[str, str]) -> None:
    """A :class:`ProcessSlot`'s child: pin, say ready, then run tasks until told to stop.
    The environment is set before any task is unpickled, so before torch is imported."""
    os.environ.update(env)
    conn.send({"ready": True, "pid": os.getpid()})
    while True:
        task = conn.recv()
        if task is None:
            conn.close()
            os._exit(0)  # no interpreter teardown: the parent waits for this exit
        try:
            value = task()
            conn.send({"value": value})
        except Exception as e:  # the task's own failure (or a value pickle refuses): reported for it alone
            conn.send({"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=8)})


class ProcessSlot:
    """A worker process pinned to ``device`` that runs picklable zero-argument
    callables; it is replaced after a task kills it or runs past ``timeout_s``."""

    def __init__(self, device: str, timeout_s: float | None = None) -> None:
        self.device = device
        self.timeout_s = timeout_s
        self.restarts = 0
        self._proc = self._conn = None

    def _start(self) -> None:
        self._proc, self._conn = spawn_worker(_process_main, (pinned_environment(self.device),),
                                              what=f"the worker on {self.device}")

    def run(self, task: Callable[[], Any]) -> Any:
        """``task()`` in the worker; raises :class:`TaskFailed` if the task raised, its
        process died (then the next task gets a fresh one) or it timed out."""
        if self._proc is None:
            self._start()
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        try:
            self._conn.send(task)  # pickled first: a task pickle refuses raises here, the worker untouched
            while not self._conn.poll(0.2):
                if not self._proc.is_alive():
                    raise EOFError
                if deadline is not None and time.monotonic() > deadline:
                    self._replace()
                    raise TaskFailed(f"timed out after {self.timeout_s:g} s on {self.device} (worker killed)")
            res = self._conn.recv()
        except (EOFError, OSError):
            self._proc.join(5)  # reaped, so its exit status is known
            code = self._proc.exitcode
            self._replace()
            raise TaskFailed(f"the worker process on {self.device} died: {describe_exit(code)}") from None
        if "error" in res:
            raise TaskFailed(f"{res['error']}\n{res['traceback']}")
        return res["value"]

    def _replace(self) -> None:
        kill_worker(self._proc)
        self._proc = self._conn = None
        self.restarts += 1

    def stop(self) -> None:
        stop_worker(self._proc, self._conn)
        self._proc = self._conn = None


def describe_exit(code: int | None) -> str:
    """A process's exit status in words: ``killed by signal SIGSEGV``, ``exit status 3``."""
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    if code == 255:   # also the forkserver's word for a status it lost under load (CPython #140867)
        return "exit status 255 (or unknown: a forkserver reports 255 for a status it lost)"
    return f"exit status {code}"


# --- engines ---------------------------------------------------------------------------
def _groups(tasks: Mapping[Any, Any], group: Callable[[Any], Any] | None) -> list[list]:
    """The keys of ``tasks`` by ``group`` (each key its own group without one), groups in
    the order of their first key, keys in ``tasks``' order within each."""
    out: dict[Any, list] = {}
    for n, key in enumerate(tasks):
        out.setdefault(group(key) if group is not None else (n,), []).append(key)
    return list(out.values())


class LocalExecutor:
    """``slots_per_device`` slots on each of ``devices`` (this host), each driven by a
    thread; the slots live from ``with`` to its end, across several :meth:`map` calls."""

    def __init__(self, devices: Sequence[str], slot_factory: SlotFactory = ProcessSlot, *,
                 slots_per_device: int = 1) -> None:
        if slots_per_device < 1:
            raise InvalidArgument(f"Cannot have slots_per_device={slots_per_device}: it must be 1 or more")
        if not devices:
            raise InvalidArgument("Cannot have an empty devices list: name at least one device (cuda:N or cpu:N)")
        self.devices = tuple(devices)
        self._labels = [d for d in self.devices for _ in range(slots_per_device)]
        self._factory = slot_factory
        self._slots: list[Slot] | None = None
        self._busy: list[threading.Thread] = []

    def __enter__(self) -> "LocalExecutor":
        self._slots = [self._factory(d) for d in self._labels]
        return self

    def prestart(self) -> None:
        """Begin starting every slot that can (``prestart()``: imports, the device), so
        that it overlaps other work; otherwise each starts with its first task."""
        for s in self._slots or []:
            if hasattr(s, "prestart"):
                s.prestart()

    def __exit__(self, *exc) -> None:
        # A slot whose thread is still in a task (an interrupt) is stopped by a daemon
        # thread once that task ends: the caller goes on at once, and a process that
        # exits first takes the daemon worker with it.
        busy = dict(zip(map(id, self._slots or []), self._busy))
        for s in self._slots or []:
            t = busy.get(id(s))
            if t is not None and t.is_alive():
                threading.Thread(target=lambda t=t, s=s: (t.join(), s.stop()), daemon=True).start()
            else:
                s.stop()
        self._slots, self._busy = None, []

    def map(self, tasks: Mapping[Any, Any], group: Callable[[Any], Any] | None = None) -> Iterator[Done]:
        """Run every task (``key -> task``), started in ``tasks``' order, and yield a
        :class:`Done` per task as it finishes. Leaving the loop early (an interrupt)
        stops every slot after its current task, whose result is dropped.

        ``group`` (key -> its group): a slot takes a whole group at a time and runs its
        tasks in order, groups in the order of their first task. Tasks that share first
        calls then pay them once: on a GPU an op's first call in a process loads its
        kernels, and calibration has several tasks per op."""
        if self._slots is None:
            raise RuntimeError("LocalExecutor.map is used inside `with LocalExecutor(...) as ex:`")
        groups = _groups(tasks, group)
        todo: queue.Queue = queue.Queue()
        for keys in groups:
            todo.put(keys)
        done: queue.Queue = queue.Queue()
        stop = threading.Event()

        def serve(slot: Slot, device: str) -> None:
            while not stop.is_set():
                try:
                    keys = todo.get_nowait()
                except queue.Empty:
                    return
                for key in keys:
                    if stop.is_set():
                        return
                    try:
                        done.put(Done(key, device, value=slot.run(tasks[key])))
                    except Exception as e:  # this task failed; the slot takes the next
                        done.put(Done(key, device, error=str(e) if isinstance(e, TaskFailed)
                                      else f"{type(e).__name__}: {e}"))

        n = min(len(self._slots), len(groups))
        self._busy = [threading.Thread(target=serve, args=(s, d), daemon=True)
                      for s, d in zip(self._slots[:n], self._labels[:n])]
        for t in self._busy:
            t.start()
        try:
            for _ in range(len(tasks)):
                yield done.get()
        finally:
            stop.set()


class _SlotHost:
    """The body of a Ray actor: one slot on the device Ray gave it."""

    def __init__(self, slot_factory: SlotFactory, device: str) -> None:
        self._slot = slot_factory(device)
        if hasattr(self._slot, "prestart"):
            self._slot.prestart()

    def where(self) -> str:
        import socket

        gpus = os.environ.get("CUDA_VISIBLE_DEVICES")
        return socket.gethostname() + (f"/gpu{gpus}" if gpus else f"/pid{os.getpid()}")

    def run(self, task: Any) -> Any:
        return self._slot.run(task)

    def stop(self) -> None:
        self._slot.stop()


def import_ray():
    """``ray``, or :class:`InvalidArgument` naming ``--executor`` and the install command."""
    try:
        import ray
    except ImportError:
        raise InvalidArgument(f"Cannot have --executor ray: ray is not installed; install it with {RAY_INSTALL}, "
                              "or use --executor local") from None
    return ray


class RayExecutor:
    """One Ray actor per worker, each holding one slot: ``workers`` actors of
    ``device_type`` (``cuda``: ``num_gpus=1`` each, Ray pins the GPU; ``cpu``:
    ``num_cpus=1``). ``workers=None``: one per GPU (or CPU) of the cluster.

    ``address``: ``None`` starts a local Ray (or joins the one ``RAY_ADDRESS`` names),
    ``"auto"`` joins the cluster running on this node, ``"ray://host:10001"`` a remote
    one. A Ray this executor started is shut down at the end of ``with``; one that was
    already running (a test's fixture, a user's session) is left alone. Every node
    needs kernelaudit installed."""

    def __init__(self, slot_factory: SlotFactory = ProcessSlot, *, device_type: str = "cuda",
                 workers: int | None = None, address: str | None = None) -> None:
        check_choice("device type", device_type, ("cuda", "cpu"))
        if workers is not None and workers < 1:
            raise InvalidArgument(f"Cannot have workers={workers}: it must be 1 or more")
        self._ray = import_ray()
        self._factory, self.device_type, self.workers, self.address = slot_factory, device_type, workers, address
        self._started_ray = False
        self._actors: list = []
        self.devices: tuple[str, ...] = ()

    def __enter__(self) -> "RayExecutor":
        ray = self._ray
        if not ray.is_initialized():
            ray.init(address=self.address, include_dashboard=False, logging_level="warning")
            self._started_ray = True
        resource = "GPU" if self.device_type == "cuda" else "CPU"
        have = int(ray.cluster_resources().get(resource, 0))
        n = self.workers or have
        if n < 1 or n > have:
            self.__exit__()
            raise InvalidArgument(f"Cannot have {n} {self.device_type} workers on the Ray cluster: it has {have} "
                                  f"{resource}s; allowed is 1 to {have}")
        self._remote = ray.remote(max_restarts=0)(_SlotHost).options(
            **({"num_gpus": 1} if self.device_type == "cuda" else {"num_cpus": 1}))
        self._actors = [self._new_actor() for _ in range(n)]
        self.devices = tuple(ray.get([a.where.remote() for a in self._actors]))
        return self

    def _new_actor(self):
        # Inside the actor Ray has set CUDA_VISIBLE_DEVICES to its GPU: cuda:0 there.
        return self._remote.remote(self._factory, "cuda:0" if self.device_type == "cuda" else "cpu:0")

    def __exit__(self, *exc) -> None:
        ray = self._ray
        for a in self._actors:
            try:
                ray.get(a.stop.remote(), timeout=10)
            except Exception:  # a dead or busy actor: killed below
                pass
            ray.kill(a)
        self._actors = []
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

    def map(self, tasks: Mapping[Any, Any], group: Callable[[Any], Any] | None = None) -> Iterator[Done]:
        """As :meth:`LocalExecutor.map` (``group`` included: an actor takes a whole group
        in a row): one task in flight per actor, results yielded as they finish. A dead
        actor fails its task alone and is replaced; the replacement goes on with the group."""
        ray = self._ray
        from ray.exceptions import RayActorError, RayTaskError

        groups = _groups(tasks, group)
        mine: list[list] = [[] for _ in self._actors]  # the rest of each actor's group
        pending: dict = {}  # object ref -> (actor index, key)

        def submit(i: int) -> None:
            if not mine[i] and groups:
                mine[i] = groups.pop(0)
            if mine[i]:
                key = mine[i].pop(0)
                pending[self._actors[i].run.remote(tasks[key])] = (i, key)

        for i in range(len(self._actors)):
            submit(i)
        while pending:
            [ref], _ = ray.wait(list(pending), num_returns=1)
            i, key = pending.pop(ref)
            device = self.devices[i]
            try:
                yield Done(key, device, value=ray.get(ref))
            except RayActorError as e:
                self._actors[i] = self._new_actor()
                yield Done(key, device, error=f"the Ray worker on {device} died: {str(e).splitlines()[0]}")
            except RayTaskError as e:
                cause = e.cause if getattr(e, "cause", None) is not None else e
                yield Done(key, device, error=str(cause) if isinstance(cause, TaskFailed)
                           else f"{type(cause).__name__}: {cause}")
            submit(i)


def open_executor(executor: str, slot_factory: SlotFactory = ProcessSlot, *, devices: Sequence[str] | None = None,
                  device_type: str = "cuda", ray_address: str | None = None, slots_per_device: int = 1):
    """The engine ``--executor`` names: ``local`` on ``devices`` (required), or ``ray``
    with one worker per name in ``devices`` (``None``: one per GPU, or CPU, of the
    cluster; Ray picks which). Use it with ``with``."""
    check_choice("executor", executor, EXECUTORS)
    if executor == "local":
        if ray_address is not None:
            raise InvalidArgument("Cannot have --ray-address with --executor local: it needs --executor ray")
        return LocalExecutor(devices or (), slot_factory, slots_per_device=slots_per_device)
    return RayExecutor(slot_factory, device_type=device_type, workers=len(devices) if devices else None,
                       address=ray_address)
