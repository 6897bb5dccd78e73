"""The worker pool's replacement policy after an error."""

from __future__ import annotations

import pytest

from kernelaudit.sweep.worker import device_healthy, needs_restart


def _res(status: str, **extra) -> dict:
    return {"verdict": {"status": status}, **extra}


@pytest.mark.parametrize("device", ["cuda", "cuda:1", "mps"])
def test_a_gpu_worker_is_replaced_after_an_error_only_when_its_probe_failed_or_is_missing(device):
    assert needs_restart(device, _res("error", healthy=False))
    assert needs_restart(device, _res("error"))  # no probe: assume the worst
    assert not needs_restart(device, _res("error", healthy=True))
    assert not needs_restart(device, _res("ok"))
    assert not needs_restart(device, _res("wrong"))


def test_a_cpu_worker_is_never_replaced_after_an_error_it_survived():
    assert not needs_restart("cpu", _res("error"))


def test_the_cpu_is_always_healthy():
    assert device_healthy("cpu")


def test_a_prestarted_worker_runs_the_next_job_and_a_failed_start_is_raised_by_it():
    import torch

    from kernelaudit.sweep.cases import GridSpec, grid
    from kernelaudit.sweep.worker import WorkerConfig, WorkerPool

    case = grid(GridSpec(ops=("add",), dtypes=("float32",), layouts=("contig",), directions=("fwd",),
                         thresholds=("2^31",), positions=("below",), scale=12))[0]
    with WorkerPool(WorkerConfig(device="cpu")) as pool:
        pool.prestart()
        pool.prestart()  # a second call while starting is a no-op
        res = pool.run({"case": case.to_json(), "tolerances": None})
        assert res["verdict"]["status"] == "ok" and pool.restarts == 0
    if torch.cuda.is_available():
        return  # the failing start below needs a machine without CUDA
    with WorkerPool(WorkerConfig(device="cuda")) as pool:
        pool.prestart()
        with pytest.raises(RuntimeError, match="worker could not start"):
            pool.run({"case": case.to_json(), "tolerances": None})


def test_the_probe_reports_a_device_that_raises_as_unhealthy(monkeypatch):
    """A sticky CUDA error makes every later device call raise: the probe says so."""
    import torch

    def sticky(*a, **k):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(torch.cuda, "synchronize", sticky)
    assert not device_healthy("cuda")


@pytest.mark.parametrize("spares", [1, 2])
def test_a_standby_worker_takes_over_from_the_second_replacement_on(spares):
    """A crashed worker's place goes to a spare started at the first replacement (as
    many as ``standby`` says), and every replacement tops the spares up; jobs after each
    crash run normally."""
    from kernelaudit.sweep.worker import WorkerConfig, WorkerPool

    with WorkerPool(WorkerConfig(device="cpu"), standby=spares) as pool:
        assert pool.run({"memory": True}).get("memory") is not None
        assert pool._spares == []                      # none before a replacement
        for crash in range(3):
            pool._proc.kill()  # the case killed its process (an illegal address, a segfault)
            res = pool.run({"memory": True})
            assert res.get("worker_replaced") and res["verdict"]["status"] == "error"
            assert "died" in res["verdict"]["message"]
            assert len(pool._spares) == spares
            assert pool.run({"memory": True}).get("memory") is not None
        assert (pool.restarts, pool.promoted) == (3, 2)
        kept = list(pool._spares)
    assert pool._spares == []  # stopped with the pool
    assert all(not s[2]["worker"][0].is_alive() for s in kept)


def test_a_pool_keeps_two_spares_on_a_gpu_and_none_on_the_cpu():
    from kernelaudit.sweep.worker import WorkerConfig, WorkerPool

    assert WorkerPool(WorkerConfig(device="cuda:1")).standby == 2
    assert WorkerPool(WorkerConfig(device="cpu")).standby == 0


@pytest.mark.parametrize("device", ["cuda", "mps"])
def test_a_skip_the_device_reported_probes_it_and_a_plain_skip_does_not(device):
    oom = _res("skipped", healthy=False)
    oom["verdict"]["details"] = {"out_of_memory": True, "device_error": True}
    assert needs_restart(device, oom)
    oom["healthy"] = True
    assert not needs_restart(device, oom)
    assert not needs_restart(device, {"verdict": {"status": "skipped", "details": {"needed_bytes": 1}}})


def test_cuda_out_of_memory_outside_the_allocator_is_skipped_for_memory_not_an_error(monkeypatch):
    from kernelaudit.sweep.cases import Case
    from kernelaudit.sweep.judge import execution

    def raises(*args, **kwargs):
        raise RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported")

    monkeypatch.setattr(execution, "run_op", raises)
    case = Case("add", "float32", "contig", "out", "2^31", "below", 4, "fwd", scale=12)
    v = execution.execute(case, "cpu", tolerances={"out0:rel": 1e-6}).verdict
    assert v.status.value == "skipped" and v.details["out_of_memory"] and v.details["device_error"]
    assert "outside the caching allocator" in v.message and "RuntimeError" in v.message
    # any other failure of the op stays an error: the finding class
    monkeypatch.setattr(execution, "run_op", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("invalid argument")))
    assert execution.execute(case, "cpu", tolerances={"out0:rel": 1e-6}).verdict.status.value == "error"
