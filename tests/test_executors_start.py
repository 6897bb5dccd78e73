"""kernelaudit.executors' worker start, shared by ProcessSlot and the sweep's WorkerPool:
a worker that never says hello, or dies first, fails its start with a sentence that says
so, and leaves no process behind."""

from __future__ import annotations

import multiprocessing as mp
import sys
import time
from multiprocessing.connection import Connection

import pytest

from kernelaudit.executors import TaskFailed, spawn_worker


def test_a_worker_that_never_says_hello_is_killed_at_the_start_timeout():
    t0 = time.monotonic()
    with pytest.raises(TaskFailed, match=r"^the test worker did not start within 1 s$"):
        spawn_worker(Connection.recv, what="the test worker", timeout_s=1)  # waits on its pipe forever
    assert time.monotonic() - t0 < 30
    assert not mp.active_children()  # killed and reaped, not left running


def test_a_worker_that_dies_before_its_hello_fails_with_its_exit_status():
    with pytest.raises(TaskFailed, match=r"^worker died before it said it was ready: exit status 1$"):
        spawn_worker(sys.exit)  # sys.exit(conn): exit status 1, no hello
    assert not mp.active_children()




def _say_environment(conn, name: str) -> None:
    """A worker that says hello, then one environment variable's value, then waits."""
    import os

    conn.send({"ready": True})
    conn.send(os.environ.get(name))
    conn.recv()


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_a_worker_runs_in_the_environment_of_the_moment_it_was_asked_for(method, monkeypatch):
    from kernelaudit.config import WORKER_START
    from kernelaudit.executors import start_method, stop_worker

    if method not in mp.get_all_start_methods():
        pytest.skip(f"no {method} on this platform")
    monkeypatch.setenv(WORKER_START.name, method)
    assert start_method() == method
    seen = []
    for value in ("first", "second"):  # the second starts after the forkserver is up
        monkeypatch.setenv("KERNELAUDIT_TEST_WORKER_ENV", value)
        proc, conn = spawn_worker(_say_environment, ("KERNELAUDIT_TEST_WORKER_ENV",))
        seen.append(conn.recv())
        stop_worker(proc, conn)
    assert seen == ["first", "second"]


def test_auto_forks_workers_from_a_server_on_linux_and_spawns_them_elsewhere(monkeypatch):
    from kernelaudit.config import WORKER_START
    from kernelaudit.errors import InvalidArgument
    from kernelaudit.executors import start_method

    monkeypatch.delenv(WORKER_START.name, raising=False)
    assert start_method() == ("forkserver" if sys.platform.startswith("linux") else "spawn")
    monkeypatch.setattr(sys, "platform", "darwin")
    assert start_method() == "spawn"  # fork after torch's import is not safe on macOS
    monkeypatch.setenv(WORKER_START.name, "fork")
    with pytest.raises(InvalidArgument, match="KERNELAUDIT_WORKER_START.*forkserver"):
        start_method()


def test_a_forkserver_that_cannot_start_is_said_once_and_workers_are_spawned(monkeypatch, capsys):
    from kernelaudit import executors
    from kernelaudit.config import WORKER_START

    real = executors._start
    tried = []

    def start(method, target, args):
        tried.append(method)
        if method == "forkserver":
            raise OSError("no Unix sockets here")
        return real(method, target, args)

    monkeypatch.setattr(executors, "_start", start)
    monkeypatch.setattr(executors, "_FORKSERVER_FAILED", [])
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv(WORKER_START.name, raising=False)
    for _ in range(2):
        proc, conn = spawn_worker(_say_environment, ("PATH",))
        assert conn.recv() is not None
        executors.stop_worker(proc, conn)
    assert tried == ["forkserver", "spawn", "spawn"]   # tried once, then spawned
    err = capsys.readouterr().err
    assert err.count("the forkserver did not start (OSError: no Unix sockets here)") == 1
    monkeypatch.setenv(WORKER_START.name, "forkserver")   # asked for by name: its failure is the user's to see
    with pytest.raises(OSError, match="no Unix sockets"):
        spawn_worker(_say_environment, ("PATH",))
