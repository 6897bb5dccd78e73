"""The worker pool's replacement policy after an error."""

from __future__ import annotations

import pytest

from kernelaudit.runner import device_healthy, needs_restart


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
