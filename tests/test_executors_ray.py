"""``--executor ray`` on a local Ray (``ray.init`` on the CPU, two CPU workers): each task
runs once, a crash costs only its task (even one that kills the Ray actor), and a sweep
records exactly what the local executor records. Skipped when ray is not installed
(``pip install 'kernelaudit[ray]'``)."""

from __future__ import annotations

import ctypes
import functools
import os
import sys

import pytest

from kernelaudit import GridSpec, run_sweep
from kernelaudit.config import WORKER_DEVICE
from kernelaudit.errors import InvalidArgument
from kernelaudit.executors import RayExecutor

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.xdist_group("ray")  # one local Ray per xdist worker at most

#: bmm fp32 forward past 2^32 (scaled to 2^12), contig and aT, output and input
#: crossing: under the mps fault model one ok, two wrong (rule A), one error (rule B raises).
SPEC = GridSpec(ops=("bmm",), dtypes=("float32",), layouts=("contig", "aT"), directions=("fwd",),
                thresholds=("2^32",), positions=("above",), scale=12)


def content(store) -> dict:
    """Case key -> (case, verdict) without run-time figures (as tests/sweep/test_executors.py)."""
    out = {}
    for key, rec in store.latest().items():
        verdict = dict(rec["verdict"])
        verdict.pop("traceback", None)
        verdict["details"] = {k: v for k, v in (verdict.get("details") or {}).items() if k != "timing"}
        out[key] = (rec["case"], verdict)
    return out


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    """One local Ray for the module: two CPUs, no dashboard. The executors join it and
    leave it running."""
    ray.init(num_cpus=2, include_dashboard=False, logging_level="error", log_to_driver=False)
    # The dying slot below lives in this module, which Ray's workers cannot import by name.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    ray.shutdown()


class DyingSlot:
    """A slot that kills its own process (the Ray actor) on the task ``"die"``."""

    def __init__(self, device: str) -> None:
        self.device = device

    def run(self, task):
        if task == "die":
            os._exit(1)
        return task, self.device

    def stop(self) -> None:
        pass


def test_each_task_runs_once_on_a_ray_worker_and_a_crash_costs_only_its_task():
    tasks = {i: functools.partial(pow, 2, i) for i in range(6)}
    tasks["device"] = functools.partial(os.getenv, WORKER_DEVICE.name)
    tasks["segfault"] = functools.partial(ctypes.string_at, 0)
    with RayExecutor(device_type="cpu", workers=2) as ex:
        assert len(set(ex.devices)) == 2
        done = {d.key: d for d in ex.map(tasks)}
    assert sorted(map(str, done)) == sorted(map(str, tasks))
    assert {i: done[i].value for i in range(6)} == {i: 2**i for i in range(6)}
    assert done["device"].value == "cpu:0"  # as the worker names its own device
    assert "died: killed by signal SIGSEGV" in done["segfault"].error
    assert ray.is_initialized()  # a Ray the executor did not start is left running


def test_an_actor_that_dies_fails_its_task_alone_and_is_replaced():
    tasks = {"a": "a", "die": "die", "b": "b", "c": "c"}
    with RayExecutor(DyingSlot, device_type="cpu", workers=1) as ex:
        done = {d.key: d for d in ex.map(tasks)}
    assert done["die"].error.startswith(f"the Ray worker on {ex.devices[0]} died")
    assert {k: done[k].value for k in "abc"} == {k: (k, "cpu:0") for k in "abc"}


def test_more_workers_than_the_cluster_has_are_refused_naming_what_it_has():
    with pytest.raises(InvalidArgument, match="Cannot have 3 cpu workers on the Ray cluster: it has 2 CPUs"):
        with RayExecutor(device_type="cpu", workers=3):
            pass
    with pytest.raises(InvalidArgument, match="Cannot have 0 cuda workers on the Ray cluster: it has 0 GPUs"):
        with RayExecutor(device_type="cuda"):
            pass


def test_a_sweep_on_ray_records_the_same_cases_and_verdicts_as_one_local_device(tmp_path):
    one = run_sweep(SPEC, tmp_path / "one", device="cpu", fault_model="mps")
    on_ray = run_sweep(SPEC, tmp_path / "ray", fault_model="mps", devices="cpu:0,cpu:1", executor="ray")
    assert content(on_ray.store) == content(one.store)
    assert sorted(r["verdict"]["status"] for r in one.store.records()) == ["error", "ok", "wrong", "wrong"]
    ids = [r["case"]["id"] for r in on_ray.store.records()]
    assert len(ids) == len(set(ids)) == 4
    manifest = on_ray.store.manifest()
    assert manifest["executor"] == "ray" and len(set(manifest["segments"][-1]["devices"])) == 2
    assert {r["device"] for r in on_ray.store.records()} <= set(manifest["segments"][-1]["devices"])
    assert ray.is_initialized()
