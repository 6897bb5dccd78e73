"""The sweep workers' CUDA caching allocator: expandable segments (``KERNELAUDIT_CUDA_ALLOC``)
unless the user set torch's own variable, and what ran recorded with the run."""

from __future__ import annotations

import pytest
import torch

from kernelaudit.config import CUDA_ALLOC
from kernelaudit.sweep import memory


@pytest.fixture
def settings_set(monkeypatch):
    """A clean environment and the settings calls a CUDA allocator would receive."""
    for var in (*memory.ALLOC_CONF_VARS, CUDA_ALLOC.name):
        monkeypatch.delenv(var, raising=False)
    calls: list[str] = []
    monkeypatch.setattr(memory, "_settings_setter", lambda: calls.append)
    return monkeypatch, calls


def test_a_cuda_worker_sets_expandable_segments_by_default(settings_set):
    _, calls = settings_set
    memory.set_allocator(torch.device("cuda", 0))
    assert calls == ["expandable_segments:True"]
    assert memory.allocator_in_force() == "expandable_segments:True"


@pytest.mark.parametrize("var", memory.ALLOC_CONF_VARS)
def test_the_users_own_allocator_variable_wins_and_is_recorded(settings_set, var):
    monkeypatch, calls = settings_set
    monkeypatch.setenv(var, "max_split_size_mb:512")
    memory.set_allocator(torch.device("cuda"))
    assert calls == []                                  # torch reads the user's variable itself
    assert memory.allocator_in_force() == f"{var}=max_split_size_mb:512"


def test_the_knob_sets_other_settings_and_empty_leaves_torchs_defaults(settings_set):
    monkeypatch, calls = settings_set
    monkeypatch.setenv(CUDA_ALLOC.name, "garbage_collection_threshold:0.6")
    memory.set_allocator(torch.device("cuda"))
    monkeypatch.setenv(CUDA_ALLOC.name, "")
    memory.set_allocator(torch.device("cuda"))
    assert calls == ["garbage_collection_threshold:0.6"]
    assert memory.allocator_in_force() == ""


@pytest.mark.parametrize("device", ["cpu", "mps"])
def test_workers_off_cuda_leave_the_allocator_alone(settings_set, device):
    _, calls = settings_set
    memory.set_allocator(torch.device(device))
    assert calls == []


def test_settings_the_allocator_refuses_say_which_knob_to_empty(settings_set):
    monkeypatch, _ = settings_set

    def refuse(settings):
        raise RuntimeError(f"Unrecognized key {settings!r}")

    monkeypatch.setattr(memory, "_settings_setter", lambda: refuse)
    monkeypatch.setenv(CUDA_ALLOC.name, "no_such_key:1")
    with pytest.raises(RuntimeError, match="'no_such_key:1' \\(KERNELAUDIT_CUDA_ALLOC\\) refused.*KERNELAUDIT_CUDA_ALLOC= \\(empty\\)"):
        memory.set_allocator(torch.device("cuda"))


@pytest.mark.parametrize("name,fraction", [("cuda", None), ("cuda:1", 0.5)])
def test_a_cuda_worker_sets_its_allocator_after_cuda_starts_and_before_its_memory_cap(settings_set, name,
                                                                                      fraction):
    from kernelaudit.sweep.worker import WorkerConfig, start_device

    monkeypatch, _ = settings_set
    steps: list[tuple] = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: steps.append(("pin", str(d))))
    monkeypatch.setattr(torch.cuda, "init", lambda: steps.append(("init",)))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(memory, "_settings_setter", lambda: lambda s: steps.append(("alloc", s)))
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, i: steps.append(("cap", f, i)))
    device = start_device(WorkerConfig(device=name, memory_fraction=fraction))
    assert str(device) == name
    pinned = [("pin", name)] if ":" in name else []
    capped = [("cap", fraction, 1)] if fraction is not None else []
    assert steps == [*pinned, ("init",), ("alloc", "expandable_segments:True"), *capped]


def test_a_cpu_worker_starts_without_touching_cuda(settings_set):
    from kernelaudit.sweep.worker import WorkerConfig, start_device

    monkeypatch, calls = settings_set
    monkeypatch.setattr(torch.cuda, "init", lambda: calls.append("init"))
    assert str(start_device(WorkerConfig(device="cpu"))) == "cpu" and calls == []


def test_the_settings_go_through_torchs_current_setter_not_its_deprecated_one():
    setter = memory._settings_setter()
    assert callable(setter)
    if hasattr(torch._C, "_accelerator_setAllocatorSettings"):   # torch 2.9 on: torch.cuda's warns
        assert setter is torch._C._accelerator_setAllocatorSettings
    else:
        assert setter is torch.cuda.memory._set_allocator_settings
