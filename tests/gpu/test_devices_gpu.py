"""``--devices cuda:N`` on real GPUs (skipped without CUDA): each worker is pinned to its
GPU, and a sweep over every GPU of the host records what the default path records."""

from __future__ import annotations

import functools
import os

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def _content(store) -> dict:
    """Case key -> (case, status, metric, first bad index): measured values may differ
    in their last bits from run to run on a GPU (atomics in reductions), verdicts not."""
    return {key: (rec["case"], rec["verdict"]["status"], rec["verdict"]["metric"], rec["verdict"]["first_bad_index"])
            for key, rec in store.latest().items()}


def test_each_process_slot_sees_only_its_own_gpu():
    from kernelaudit.executors import LocalExecutor

    devices = [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    tasks = {d: functools.partial(os.getenv, "CUDA_VISIBLE_DEVICES") for d in devices}
    with LocalExecutor(devices) as ex:
        seen = {d.device: d.value for d in ex.map(tasks)}
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    expect = {d: (visible[i] if visible else str(i)) for i, d in enumerate(devices)}
    assert {d: seen[d] for d in seen} == {d: expect[d] for d in seen} and len(set(seen.values())) == len(seen)


def test_a_sweep_on_every_gpu_records_what_the_default_path_records(tmp_path):
    from kernelaudit import GridSpec, run_sweep

    spec = GridSpec(ops=("bmm", "add"), dtypes=("float16",), layouts=("contig", "aT"), directions=("fwd", "bwd"),
                    thresholds=("2^32",), positions=("above",), scale=20)
    one = run_sweep(spec, tmp_path / "default", device="cuda", fault_model="mps")
    devices = ",".join(f"cuda:{i}" for i in range(torch.cuda.device_count()))
    spread = run_sweep(spec, tmp_path / "devices", fault_model="mps", devices=devices)
    assert _content(spread.store) == _content(one.store)
    assert {r["device"] for r in spread.store.records()} <= set(devices.split(","))
    assert {"ok", "wrong"} <= set(spread.counts)
