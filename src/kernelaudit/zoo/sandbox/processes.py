"""Bounded processes, also as root: the parent's side of a sandboxed check.

``RLIMIT_NPROC`` does not bind root, and seccomp cannot count forks. So the parent bounds
the *tasks* (processes and threads) alive at once in the child's tree, by the first of:

1. a **pids cgroup** (v1 ``pids`` hierarchy, or v2 with the ``pids`` controller): a fresh
   cgroup with ``pids.max``, which the child joins before it loads anything; the kernel
   refuses a fork past it, and ``pids.events`` counts the refusals;
2. a **watchdog**: the parent counts the tasks of the child's descendants and session
   (the child is a subreaper, so a double fork does not escape) every few milliseconds.

Either way, past the bound every process of the check is killed and the verdict says
the candidate forked without bound, naming the mechanism that bound it.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

#: Seconds between two looks at the child's tree.
POLL_S = 0.02
_counter = itertools.count()


@dataclass
class Finished:
    """How the child ended: its exit code, output, and whether the bound or the deadline ended it."""

    returncode: int
    stdout: str
    stderr: str
    unbounded: str | None = None
    timed_out: bool = False


def _mounts() -> list[tuple[str, str, str]]:
    try:
        with open("/proc/self/mounts") as f:
            return [(p[1], p[2], p[3]) for p in (line.split() for line in f) if len(p) >= 4]
    except OSError:
        return []


def _own_cgroup(v1_controller: str | None) -> str:
    with open("/proc/self/cgroup") as f:
        for line in f:
            _id, controllers, path = line.rstrip("\n").split(":", 2)
            if (v1_controller in controllers.split(",")) if v1_controller else controllers == "":
                return path
    raise OSError("not in such a cgroup")


def make_pids_cgroup(max_tasks: int) -> tuple[str, str] | tuple[None, str]:
    """A fresh pids cgroup with ``pids.max = max_tasks``: (its directory, what it is), or (None, why not)."""
    why = []
    for mount, fstype, options in _mounts():
        v1 = fstype == "cgroup" and "pids" in options.split(",")
        if not (v1 or fstype == "cgroup2"):
            continue
        d = None
        try:
            parent = Path(mount) / _own_cgroup("pids" if v1 else None).lstrip("/")
            d = parent / f"kernelaudit-{os.getpid()}-{next(_counter)}"
            d.mkdir()
            if not (d / "pids.max").exists():  # v2: the controller must be enabled for the parent's children
                try:
                    (parent / "cgroup.subtree_control").write_text("+pids")
                except OSError:
                    pass
            if not (d / "pids.max").exists():
                d.rmdir()
                why.append(f"{mount} (cgroup2) has no pids controller for {parent}")
                continue
            (d / "pids.max").write_text(str(max_tasks))
            return str(d), f"pids cgroup {'v1' if v1 else 'v2'} {d} (pids.max {max_tasks})"
        except OSError as exc:
            why.append(f"{mount}: {exc.strerror or exc}")
            if d is not None and d.is_dir():
                try:
                    d.rmdir()
                except OSError:
                    pass
    return None, "; ".join(why) or "no cgroup filesystem with the pids controller is mounted"


def join_cgroup(cgroup: str) -> None:
    """Move this process into ``cgroup`` (the child does, before its sandbox closes /sys)."""
    Path(cgroup, "cgroup.procs").write_text(str(os.getpid()))


class TaskBound:
    """At most ``max_tasks`` tasks alive at once in a child's tree: a pids cgroup, else a watchdog."""

    def __init__(self, max_tasks: int, *, use_cgroup: bool = True) -> None:
        self.max_tasks = max_tasks
        self.peak_processes = 0  # the most processes seen alive at once in the tree (each look)
        self.cgroup, why = make_pids_cgroup(max_tasks) if use_cgroup else (None, "not asked for")
        self.mechanism = why if self.cgroup else (f"watchdog in the parent counting the child's tasks every "
                                                  f"{POLL_S * 1000:g} ms (no pids cgroup: {why})")

    def __enter__(self) -> "TaskBound":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- looking --------------------------------------------------------------
    def exceeded(self, root: int) -> str | None:
        """Why the tree of ``root`` is past the bound, or None."""
        if self.cgroup:
            self.peak_processes = max(self.peak_processes, len(self._pids(root)))
            events = _read(Path(self.cgroup, "pids.events"))
            refused = int(events.split()[-1]) if events.startswith("max") else 0
            if refused:
                peak = _read(Path(self.cgroup, "pids.peak")) or _read(Path(self.cgroup, "pids.current"))
                return (f"{peak} tasks alive at once, the kernel refused {refused} fork(s) past the bound of "
                        f"{self.max_tasks}; bound by the {self.mechanism}")
            return None
        tree = _tree(root)
        self.peak_processes = max(self.peak_processes, len(tree))
        tasks = sum(n for _pid, n in tree)
        if tasks > self.max_tasks:
            return f"{tasks} tasks alive at once, past the bound of {self.max_tasks}; bound by the {self.mechanism}"
        return None

    def capped_elsewhere(self, exception: str, message: str, max_processes: int) -> str | None:
        """Why a candidate's failed fork was a fork bomb that a process limit of this machine capped first.

        Where the kernel enforces ``RLIMIT_NPROC`` for root, or the container has a pids
        limit of its own, that limit can be reached below :attr:`max_tasks`: the bomb is
        capped, and the candidate's next fork fails with ``EAGAIN`` (``BlockingIOError``,
        or "can't start new thread") as if it were its own error. It was the bomb when the
        parent saw more than ``max_processes`` processes alive at once in the tree."""
        refused = exception == "BlockingIOError" or "can't start new thread" in message or "[Errno 11]" in message
        if not refused or self.peak_processes <= max_processes:
            return None
        return (f"a fork was refused (EAGAIN) with {self.peak_processes} processes of the check alive at once, "
                f"past its {max_processes}: this machine's process limit (RLIMIT_NPROC or a pids cgroup) capped "
                f"them before the check's own bound of {self.max_tasks} tasks; seen by the {self.mechanism}")

    def kill(self, root: int) -> None:
        """Kill every process of the check (several passes: a fork bomb forks while it dies)."""
        if self.cgroup:
            _write(Path(self.cgroup, "pids.max"), "0")  # no more forks while the killing goes on
            _write(Path(self.cgroup, "cgroup.kill"), "1")  # v2 kills the whole cgroup at once
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            pids = self._pids(root)
            if not pids:
                return
            for sig in (signal.SIGSTOP, signal.SIGKILL):  # stopped first: none forks a replacement
                for pid in pids:
                    try:
                        os.kill(pid, sig)
                    except (ProcessLookupError, PermissionError):
                        pass
            time.sleep(0.005)

    def _pids(self, root: int) -> list[int]:
        if self.cgroup:
            return [int(p) for p in _read(Path(self.cgroup, "cgroup.procs")).split()]
        return [pid for pid, _n in _tree(root)]

    def close(self) -> None:
        """Remove the cgroup (once it is empty)."""
        if self.cgroup:
            for _ in range(200):
                try:
                    os.rmdir(self.cgroup)
                    return
                except FileNotFoundError:
                    return
                except OSError:
                    time.sleep(0.01)


def run_bounded(cmd: list[str], *, env: dict[str, str], timeout_s: float, out_dir: str,
                bound: TaskBound | None) -> Finished:
    """Run ``cmd`` in its own session, bounded in time and (with ``bound``) in tasks; everything it
    started is killed when it ends, overruns or forks past the bound."""
    out, err = Path(out_dir, "stdout.txt"), Path(out_dir, "stderr.txt")
    with open(out, "w") as fo, open(err, "w") as fe:  # files, not pipes: a chatty child never blocks
        proc = subprocess.Popen(cmd, env=env, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    deadline = time.monotonic() + timeout_s
    unbounded, timed_out = None, False
    while proc.poll() is None:
        if bound is not None:
            unbounded = bound.exceeded(proc.pid)
            if unbounded:
                break
        if time.monotonic() > deadline:
            timed_out = True
            break
        time.sleep(POLL_S)
    if bound is not None:
        # a child that gave up when its fork was refused may end before the next look: the cgroup remembers
        unbounded = unbounded or (None if timed_out else bound.exceeded(proc.pid))
        bound.kill(proc.pid)
    else:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.kill()
    proc.wait()
    return Finished(proc.returncode, out.read_text(errors="replace"), err.read_text(errors="replace"),
                    unbounded, timed_out)


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError:
        pass


def _tree(root: int) -> list[tuple[int, int]]:
    """(pid, threads) of ``root``, its live descendants and its session."""
    children: dict[int, list[int]] = {}
    info: dict[int, int] = {}
    session: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] in "ZX":  # dead already: holds no task a fork bomb could use, cannot be killed
            continue
        pid = int(entry.name)
        info[pid] = int(fields[17])
        children.setdefault(int(fields[1]), []).append(pid)
        if int(fields[3]) == root:
            session.add(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in found or pid not in info:
            continue
        found.add(pid)
        todo.extend(children.get(pid, []))
    return [(pid, info[pid]) for pid in found | (session & info.keys())]
