"""Threads a candidate's call leaves alive: those that run nothing (what ``torch.compile``
leaves behind) are told apart from those that still run work (zoo/oracles/threads.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

INDUCTOR_SIDECAR = """
import json, threading, time
import torch._inductor.config as cfg
cfg.compile_threads = 2  # compile in a sidecar process, as Inductor does on a many-core GPU machine
from torch._inductor.async_compile import AsyncCompile
from torch._inductor.compile_worker.timer import Timer
from kernelaudit.zoo.oracles.threads import runs_nothing
before = set(threading.enumerate())
pool = AsyncCompile.process_pool()
pool.submit(time.sleep, 0.01).result()  # its first result starts the reader and the quiesce timer
time.sleep(0.1)
left = [t for t in threading.enumerate() if t not in before]
idle = {t.name: runs_nothing(t) for t in left}
reader = next(t for t in left if t.name == "InductorSubproc")
job = pool.submit(time.sleep, 0.5)
in_flight = runs_nothing(reader)  # a job's future is pending: its callbacks run on the reader
job.result()
other = Timer(60, lambda: None)  # torch's timer class, calling something other than the pool's quiesce
other.record_call()
print(json.dumps({"idle": idle, "in_flight": in_flight, "other_timer": runs_nothing(other.background_thread)}), flush=True)
other.quit()
import os; os._exit(0)  # the sidecar ends when its pipe closes; a clean shutdown waits 2 s more
"""


def test_inductors_compile_sidecar_threads_run_nothing_between_jobs_and_something_during_one():
    pytest.importorskip("torch._inductor.compile_worker.subproc_pool")
    proc = subprocess.run([sys.executable, "-c", INDUCTOR_SIDECAR], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["idle"].get("InductorSubproc") is True and all(out["idle"].values()), out
    assert out["in_flight"] is False and out["other_timer"] is False, out
