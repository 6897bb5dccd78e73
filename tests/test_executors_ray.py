"""``--executor ray`` on one local Ray (``ray.init`` on the CPU, two CPU workers) for the
whole module: each task runs once, a crash costs only its task (even one that kills the
Ray actor), and a sweep and a mutation campaign record exactly what the local executor
records. Skipped when ray is not installed (it is in the ``test`` extra; ``pip install
'kernelaudit[ray]'`` elsewhere)."""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest

from kernelaudit import GridSpec, run_sweep
from kernelaudit.config import WORKER_DEVICE
from kernelaudit.errors import InvalidArgument
from kernelaudit.executors import RayExecutor

pytestmark = [
    pytest.mark.xdist_group("ray"),  # one local Ray for the whole suite: every Ray test on one xdist worker
    # find_spec, not importorskip: importing ray takes about a second, paid only where the tests run
    pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                       reason="ray is not installed: pip install 'kernelaudit[ray]'"),
]

#: bmm fp32 forward past 2^32 (scaled to 2^12), contig and aT, output and input
#: crossing: under the mps fault model one ok, two wrong (rule A), one error (rule B raises).
SPEC = GridSpec(ops=("bmm",), dtypes=("float32",), layouts=("contig", "aT"), directions=("fwd",),
                thresholds=("2^32",), positions=("above",), scale=12)

#: The campaign's subject: a KernelBench-format problem whose model is its own correct candidate.
#: Two mutants: ``relu(x) * 2 -> x * 2`` (survives kernelbench's torch.rand inputs) and
#: ``* 2 -> / 2`` (killed): both outcomes cross from the Ray worker.
PROBLEM = textwrap.dedent('''
    import torch
    import torch.nn as nn

    N = 12

    class Model(nn.Module):
        def __init__(self):
            super().__init__()

        def forward(self, x):
            return torch.relu(x) * 2.0

    def get_inputs():
        return [torch.rand(N)]

    def get_init_inputs():
        return []
''')
MUTATIONS = "call-dropped,mul-to-div"


def sweep_content(store) -> dict:
    """Case key -> (case, verdict) without run-time figures (as tests/sweep/test_executors.py)."""
    out = {}
    for key, rec in store.latest().items():
        verdict = dict(rec["verdict"])
        verdict.pop("traceback", None)
        verdict["details"] = {k: v for k, v in (verdict.get("details") or {}).items() if k != "timing"}
        out[key] = (rec["case"], verdict)
    return out


def campaign_content(path) -> list[dict]:
    """A campaign's records in order of id, without run-time figures (seconds per stage)."""
    from kernelaudit.zoo.mutate.store import CampaignStore

    recs = [{k: v for k, v in r.items() if k not in ("timing", "seconds")} for r in CampaignStore.open(path).records()]
    return sorted(recs, key=lambda r: (r["type"], r.get("id", r.get("subject"))))


def run_mutants(out, subject, **executor) -> None:
    """The tiny campaign: both mutants of ``subject``, judged by kernelbench, per input."""
    from kernelaudit.zoo.mutate.campaign import run_campaign
    from kernelaudit.zoo.mutate.operators import get_operators

    run_campaign([subject], out, columns=["kernelbench"], operators=get_operators(MUTATIONS), timeout_s=180,
                 **executor)


@pytest.fixture(scope="module")
def subject(tmp_path_factory):
    from kernelaudit.zoo.mutate.subjects import Subject, model_as_candidate

    problem = tmp_path_factory.mktemp("problem") / "relu2.py"
    problem.write_text(PROBLEM)
    return Subject("kb/level0/relu2", "torch", problem, model_as_candidate(PROBLEM), ("ModelNew",))


@pytest.fixture(scope="module")
def local_runs(tmp_path_factory, subject):
    """The local executor's sweep and campaign, the references the Ray runs must equal. They run
    in threads while ``ray.init`` starts, each in its own worker process as always: ``ray.init``
    mostly waits for Ray's own processes (profiled here: 13.1 s wall, 12.4 s of it polling for
    the dashboard, the raylet and the driver's connection)."""
    base = tmp_path_factory.mktemp("local")
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield {"sweep": pool.submit(run_sweep, SPEC, base / "sweep", device="cpu", fault_model="mps"),
               "campaign": pool.submit(run_mutants, base / "campaign", subject),
               "campaign_path": base / "campaign"}


@pytest.fixture(scope="module", autouse=True)
def ray(local_runs):
    """One local Ray for the module (the ``ray`` module): two CPUs, no dashboard, no logs to the
    driver, no usage report (tests make no network calls). The executors join it and leave it running."""
    import ray

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")  # read by the processes ray.init starts
        ray.init(num_cpus=2, include_dashboard=False, logging_level="error", log_to_driver=False)
    # The dying slot below lives in this module, which Ray's workers cannot import by name.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def ray_runs(ray, subject, tmp_path_factory):
    """The same sweep and campaign on Ray, side by side in threads (one Ray worker each: the
    cluster's two CPUs), once the tests that need both CPUs are done: their worker processes'
    imports overlap."""
    base = tmp_path_factory.mktemp("on_ray")
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield {"sweep": pool.submit(run_sweep, SPEC, base / "sweep", fault_model="mps", devices="cpu:0",
                                    executor="ray"),
               "campaign": pool.submit(run_mutants, base / "campaign", subject, executor="ray", jobs=1),
               "campaign_path": base / "campaign"}


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


def test_each_task_runs_once_on_a_ray_worker_and_a_crash_costs_only_its_task(ray):
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


def test_a_group_of_tasks_runs_on_one_ray_worker_in_a_row():
    # os.getpid names the slot's worker process: every task of a group sees the same one
    tasks = {f"{g}/{i}": functools.partial(os.getpid) for g in "abcd" for i in range(3)}
    with RayExecutor(device_type="cpu", workers=2) as ex:
        done = [(d.key, d.value) for d in ex.map(tasks, group=lambda key: key.split("/")[0])]
    assert sorted(k for k, _ in done) == sorted(tasks)
    for g in "abcd":
        assert len({pid for k, pid in done if k.startswith(g)}) == 1
        assert [k for k, _ in done if k.startswith(g)] == [f"{g}/{i}" for i in range(3)]  # in order
    assert len({pid for _, pid in done}) == 2  # both workers took groups


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


def test_a_sweep_on_ray_records_the_same_cases_and_verdicts_as_one_local_device(local_runs, ray_runs, ray):
    """One Ray worker (each costs two torch imports: the actor's and its worker process's); the
    tests above show tasks spread over two."""
    on_ray, one = ray_runs["sweep"].result(), local_runs["sweep"].result()
    assert sweep_content(on_ray.store) == sweep_content(one.store)
    assert sorted(r["verdict"]["status"] for r in one.store.records()) == ["error", "ok", "wrong", "wrong"]
    ids = [r["case"]["id"] for r in on_ray.store.records()]
    assert len(ids) == len(set(ids)) == 4
    manifest = on_ray.store.manifest()
    assert manifest["executor"] == "ray" and len(manifest["segments"][-1]["devices"]) == 1
    assert {r["device"] for r in on_ray.store.records()} == set(manifest["segments"][-1]["devices"])
    assert ray.is_initialized()


def test_a_campaign_on_ray_records_what_the_local_executor_records(local_runs, ray_runs):
    """``kernelaudit mutate --executor ray``: the batch runs on a Ray worker (its own worker
    subprocess there) and its records, per-input kills included, come back to this process's store."""
    ray_runs["campaign"].result()
    local_runs["campaign"].result()
    on_ray, local = campaign_content(ray_runs["campaign_path"]), campaign_content(local_runs["campaign_path"])
    assert on_ray == local
    assert [r["type"] for r in local] == ["mutant", "mutant", "subject"]
    call_dropped, mul_to_div, subj = local
    assert (call_dropped["operator"], call_dropped["outcome"]) == ("call-dropped", "survived")
    assert (mul_to_div["operator"], mul_to_div["outcome"]) == ("mul-to-div", "killed")
    assert subj["clean"] == {"kernelbench": "survived"} and subj["forced"] == {"kernelbench": "killed"}
    # the kill matrix a suite is chosen from: every suite input judged alone, on Ray as here
    assert set(call_dropped["inputs"]) == {s["label"] for s in subj["suite_inputs"]}
    assert {lab for lab, k in call_dropped["inputs"].items() if not k} == {
        s["label"] for s in subj["suite_inputs"] if s["kind"] == "rand"}  # only signed inputs kill relu dropped
