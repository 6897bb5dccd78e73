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

