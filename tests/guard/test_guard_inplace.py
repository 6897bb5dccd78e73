"""In-place ``addmm_`` / ``baddbmm_``: the mps fault model corrupts them like their
out-of-place forms, and the guard fixes, refuses or verifies them, writing into self."""

from __future__ import annotations

import pytest
import torch

from kernelaudit import guard
from kernelaudit.errors import UnsafeCallError
from kernelaudit.faults import make_fault_model
from kernelaudit.thresholds import Thresholds

TH = Thresholds(14)          # 2^32 -> 16384, 2^31 -> 8192
CPU_MPS = guard.mps_policy(TH, device_types=("cpu",))


pytestmark = pytest.mark.usefixtures("clean_guard")


def _rand(*shape):
    g = torch.Generator().manual_seed(sum(shape) * 7919 + len(shape))
    return torch.randn(*shape, generator=g)


def _baddbmm_args():
    """self (5,64,64) += a (5,64,16) @ b, b a transposed view: 20480 > 2^14 outputs -> rule A."""
    return _rand(5, 64, 64), _rand(5, 64, 16), _rand(5, 64, 16).transpose(1, 2)


def _addmm_args():
    """self (320,64) += a (320,16) @ b (16,64) transposed view: 20480 outputs -> rule A."""
    return _rand(320, 64), _rand(320, 16), _rand(64, 16).t()


CALLS = {
    "baddbmm_": (_baddbmm_args, lambda c, a, b: c.baddbmm_(a, b, beta=0.5, alpha=2.0)),
    "addmm_": (_addmm_args, lambda c, a, b: c.addmm_(a, b, beta=0.5, alpha=2.0)),
}


@pytest.mark.parametrize("name", CALLS)
def test_the_mps_fault_model_corrupts_in_place_calls_like_their_out_of_place_forms(name):
    make, call = CALLS[name]
    c, a, b = make()
    honest = call(c.clone(), a, b)
    corrupted = c.clone()
    with make_fault_model("mps", TH) as fm:
        call(corrupted, a, b)
    assert fm.stats.changed == {"A": 1}
    assert not torch.allclose(corrupted, honest)


@pytest.mark.parametrize("name", CALLS)
def test_guard_fix_writes_the_in_place_result_into_self_bitwise(name):
    make, call = CALLS[name]
    c, a, b = make()
    honest = call(c.clone(), a, b)
    with guard.guarding("fix", policy=CPU_MPS) as g:
        ptr = c.data_ptr()
        out = call(c, a, b)
    assert out is c and c.data_ptr() == ptr
    assert torch.equal(c, honest)
    assert g.stats().fixed == 1 and g.stats().by_rule == {"A": 1}


@pytest.mark.parametrize("name", CALLS)
def test_guard_raise_refuses_an_in_place_call_and_leaves_self_alone(name):
    make, call = CALLS[name]
    c, a, b = make()
    before = c.clone()
    with guard.guarding("raise", policy=CPU_MPS) as g:
        with pytest.raises(UnsafeCallError, match="rule A"):
            call(c, a, b)
    assert torch.equal(c, before) and g.stats().refused == 1


@pytest.mark.parametrize("name", CALLS)
def test_guard_verify_checks_an_in_place_call_against_the_bias_it_overwrote(name):
    make, call = CALLS[name]
    c, a, b = make()
    honest = call(c.clone(), a, b)
    with guard.guarding("verify", policy=CPU_MPS) as g:
        call(c, a, b)
    assert torch.equal(c, honest)
    assert g.stats().verified == 1 and g.stats().mismatches == 0


@pytest.mark.parametrize("name", CALLS)
@pytest.mark.parametrize("action", ["fix", "raise", "verify"])
def test_what_if_run_under_the_fault_model_guards_in_place_calls(name, action):
    make, call = CALLS[name]
    c, a, b = make()
    honest = call(c.clone(), a, b)
    guard.install(action, fault_model="mps", scale=14)
    try:
        if action == "fix":
            call(c, a, b)
            assert torch.equal(c, honest)
        else:  # raise refuses; verify sees the fault model's corruption and raises
            with pytest.raises(UnsafeCallError):
                call(c, a, b)
        small = _rand(4, 8).addmm_(_rand(4, 3), _rand(3, 8))
        assert small.shape == (4, 8)
        s = guard.stats()
    finally:
        guard.uninstall()
    assert s.inspected == 2 and s.passed == 1  # the small call went through untouched
