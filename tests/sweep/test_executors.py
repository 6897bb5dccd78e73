"""More than one device on one host (``--devices``): the executor runs each task once on
one pinned worker, a crash costs only its task, and a sweep over two CPU stand-ins
records exactly what one device records, even interrupted and resumed."""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import time

import pytest

from kernelaudit import GridSpec, run_sweep
from kernelaudit.config import WORKER_DEVICE
from kernelaudit.errors import InvalidArgument
from kernelaudit.executors import LocalExecutor, ProcessSlot, TaskFailed, parse_devices, pinned_environment
from kernelaudit.sweep.store import RunStore

TWO = ("cpu:0", "cpu:1")
pytestmark = pytest.mark.xdist_group("executors")  # the module's sweeps are built once, on one xdist worker

#: bmm fp32 forward past 2^32 (scaled to 2^12): contig and aT, output and input
#: crossing: under the mps-abort fault model one ok, two wrong (rule A), and aT/in kills
#: its worker (rule B).
SPEC = GridSpec(ops=("bmm",), dtypes=("float32",), layouts=("contig", "aT"), directions=("fwd",),
                thresholds=("2^32",), positions=("above",), scale=12)


def content(store) -> dict:
    """Case key -> (case, verdict) without run-time figures: what must not depend on
    which worker or how many devices ran it."""
    out = {}
    for key, rec in store.latest().items():
        verdict = dict(rec["verdict"])
        verdict.pop("traceback", None)
        verdict["details"] = {k: v for k, v in (verdict.get("details") or {}).items() if k != "timing"}
        out[key] = (rec["case"], verdict)
    return out


def recorded_ids(store) -> list[str]:
    return [rec["case"]["id"] for rec in store.records()]


# --- the executor ----------------------------------------------------------------------
def test_each_task_runs_once_on_a_pinned_worker_and_a_crash_costs_only_its_task():
    tasks = {i: functools.partial(pow, 2, i) for i in range(8)}
    tasks["device"] = functools.partial(os.getenv, WORKER_DEVICE.name)
    tasks["cuda"] = functools.partial(os.getenv, "CUDA_VISIBLE_DEVICES")
    tasks["segfault"] = functools.partial(ctypes.string_at, 0)
    tasks["exit"] = functools.partial(os._exit, 3)
    tasks["raises"] = functools.partial(int, "x")
    with LocalExecutor(TWO) as ex:
        done = {d.key: d for d in ex.map(tasks)}
    assert sorted(map(str, done)) == sorted(map(str, tasks))  # each task reported once
    assert {i: done[i].value for i in range(8)} == {i: 2**i for i in range(8)}
    assert all(done[i].ok for i in range(8))
    assert done["device"].value == done["device"].device  # the worker knows its device
    assert done["cuda"].value == ""  # a CPU stand-in sees no GPU
    assert {d.device for d in done.values()} == set(TWO)
    assert "died: killed by signal SIGSEGV" in done["segfault"].error
    if "or unknown" in done["exit"].error:   # the forkserver lost the status under load (CPython #140867): again
        with LocalExecutor(TWO[:1]) as ex:
            (done["exit"],) = ex.map({"exit": tasks["exit"]})
    assert done["exit"].error.endswith("died: exit status 3")
    assert done["raises"].error.startswith("ValueError: invalid literal for int()")


def test_a_group_of_tasks_runs_in_one_slot_in_order_and_every_task_is_reported():
    ran: list[tuple[int, str]] = []

    class Recording:
        def __init__(self, device: str) -> None:
            self.id = len(slots)
            slots.append(self)

        def run(self, task):
            ran.append((self.id, task))
            time.sleep(0.001)  # let the other slots take groups meanwhile
            return task.upper()

        def stop(self) -> None:
            pass

    slots: list = []
    tasks = {f"{op}/{i}": f"{op}/{i}" for op in ("add", "mul", "sum", "cat", "mm") for i in range(4)}
    with LocalExecutor(("cpu:0",), Recording, slots_per_device=3) as ex:
        done = {d.key: d.value for d in ex.map(tasks, group=lambda key: key.split("/")[0])}
    assert done == {k: v.upper() for k, v in tasks.items()}
    by_op: dict[str, set[int]] = {}
    for slot, key in ran:
        by_op.setdefault(key.split("/")[0], set()).add(slot)
    assert all(len(s) == 1 for s in by_op.values())  # each op in one slot
    assert len({s for ss in by_op.values() for s in ss}) > 1  # and the slots shared the ops
    for op in by_op:
        assert [k for _, k in ran if k.startswith(op + "/")] == [f"{op}/{i}" for i in range(4)]


def test_a_task_past_its_timeout_is_killed_and_the_next_task_gets_a_fresh_worker():
    slot = ProcessSlot("cpu:0", timeout_s=0.5)
    try:
        t0 = time.perf_counter()
        with pytest.raises(TaskFailed, match=r"timed out after 0.5 s on cpu:0"):
            slot.run(functools.partial(time.sleep, 30))
        assert time.perf_counter() - t0 < 10
        assert slot.run(functools.partial(pow, 3, 2)) == 9 and slot.restarts == 1
    finally:
        slot.stop()


def test_a_cuda_device_is_pinned_through_the_parents_own_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    assert pinned_environment("cuda:1") == {"CUDA_VISIBLE_DEVICES": "5", WORKER_DEVICE.name: "cuda:0"}
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert pinned_environment("cuda:3") == {"CUDA_VISIBLE_DEVICES": "3", WORKER_DEVICE.name: "cuda:0"}


@pytest.mark.parametrize("text, message", [
    ("", "Cannot have an empty devices: allowed is a comma list of cuda:N or of cpu:N"),
    ("gpu0", "'gpu0' is not cuda:N or cpu:N; allowed is a comma list"),
    ("cpu:0,cuda:0", "it mixes cpu and cuda"),
    ("cpu:1,cpu:1", "cpu:1 named twice"),
    (f"cpu:0,cpu:{os.cpu_count()}", f"cpu:{os.cpu_count()} does not exist here; visible: cpu:0"),
])
def test_bad_device_lists_are_refused_naming_the_argument_and_the_allowed_form(text, message):
    with pytest.raises(InvalidArgument, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_devices(text)


def test_cuda_devices_this_machine_lacks_are_refused_with_the_visible_ones(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert parse_devices("cuda:0") == ("cuda:0",)
    with pytest.raises(InvalidArgument, match="devices='cuda:0,cuda:1': cuda:1 does not exist here; visible: cuda:0$"):
        parse_devices("cuda:0,cuda:1")


# --- the sweep over two CPU stand-ins ---------------------------------------------------
@pytest.fixture(scope="module")
def one_device(tmp_path_factory):
    """The reference: SPEC under the mps-abort fault model on one device, the default
    path (rule B kills the worker running bmm aT/in)."""
    return run_sweep(SPEC, tmp_path_factory.mktemp("one"), device="cpu", fault_model="mps-abort")


@pytest.fixture(scope="module")
def two_devices(tmp_path_factory):
    """SPEC on cpu:0,cpu:1, interrupted (KeyboardInterrupt from the progress callback)
    right after its third verdict, then resumed on cpu:0,cpu:1 (one case left: one
    worker starts): (ids handed back before the interrupt, the ids in the store then,
    the resumed run's result)."""
    out = tmp_path_factory.mktemp("two")
    seen = []

    def interrupt_after_three_cases(total=None, advance=0, description="", status=None):
        if status is not None:
            seen.append(description)
            if len(seen) == 3:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(SPEC, out, fault_model="mps-abort", devices="cpu:0,cpu:1", progress=interrupt_after_three_cases)
    at_interrupt = recorded_ids(RunStore.open(out))
    return seen, at_interrupt, run_sweep(SPEC, out, fault_model="mps-abort", devices="cpu:0,cpu:1", resume=True)


def test_two_devices_record_the_same_cases_and_verdicts_as_one(one_device, two_devices):
    *_, two = two_devices
    assert content(two.store) == content(one_device.store)
    assert sorted(r["verdict"]["status"] for r in one_device.store.records()) == ["error", "ok", "wrong", "wrong"]
    assert {r["device"] for r in two.store.records()} <= set(TWO)
    assert two.store.manifest()["segments"][-1]["devices"] == list(TWO)
    assert two.store.manifest()["tolerances"] == one_device.store.manifest()["tolerances"]


def test_an_interrupted_sweep_keeps_every_verdict_handed_back_and_resumes_without_recomputing(two_devices):
    seen, at_interrupt, res = two_devices
    assert at_interrupt == seen and len(seen) == 3  # every verdict handed back is in the store, no other
    assert (res.resumed, res.ran) == (3, 1)
    ids = recorded_ids(res.store)
    assert ids[:3] == seen and len(ids) == len(set(ids)) == 4  # nothing recorded twice
    assert [s["completed"] for s in res.store.manifest()["segments"]] == [False, True]


def test_a_case_that_kills_its_worker_costs_only_that_case(two_devices):
    *_, res = two_devices
    statuses = {r["case"]["id"]: r["verdict"] for r in res.store.latest().values()}
    crashed = statuses.pop("bmm/float32/aT/in/2^32+/fwd")
    assert crashed["status"] == "error"
    assert "the process running the case died: killed by signal SIGABRT" in crashed["message"]
    assert {v["status"] for v in statuses.values()} == {"ok", "wrong"}  # the other three were judged
    assert sum(s["workers_replaced"] for s in res.store.manifest()["segments"]) == 1


def test_workers_side_by_side_and_a_ray_address_without_ray_are_refused_before_anything_is_written(tmp_path):
    with pytest.raises(InvalidArgument, match=r"case_workers=2 \(--workers\) with --devices"):
        run_sweep(SPEC, tmp_path, devices="cpu:0,cpu:1", case_workers=2)
    with pytest.raises(InvalidArgument, match=r"ray_address='auto' \(--ray-address\) with executor='local'"):
        run_sweep(SPEC, tmp_path, devices="cpu:0", ray_address="auto")
    with pytest.raises(InvalidArgument, match="device='cuda' with devices='cpu:0'"):
        run_sweep(SPEC, tmp_path, device="cuda", devices="cpu:0")
    assert not (tmp_path / "verdicts.jsonl").exists()


def test_the_ray_executor_without_ray_names_the_option_and_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed: `import ray` raises ImportError
    with pytest.raises(InvalidArgument, match=r"Cannot have --executor ray: ray is not installed; install it with "
                                              r"pip install 'kernelaudit\[ray\]'"):
        run_sweep(SPEC, tmp_path, devices="cpu:0,cpu:1", executor="ray")
    assert not (tmp_path / "verdicts.jsonl").exists()
