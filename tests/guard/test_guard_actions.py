"""The guard's actions and installation, through the ``torch.library`` overrides.

The ``mps`` rules are applied to CPU tensors here (``mps_policy(th, device_types=("cpu",))``)
so the real override path runs on any machine; the CPU kernels are honest, so a fix
must give the unguarded result bit for bit (batch splits) or within tolerance.
"""

from __future__ import annotations

import logging
import threading

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelaudit import guard
from kernelaudit.errors import InvalidArgument, UnsafeCallError
from kernelaudit.guard.engine import Engine
from kernelaudit.guard.intercept import GuardMode
from kernelaudit.thresholds import Thresholds

TH = Thresholds(14)          # 2^32 -> 16384, 2^31 -> 8192
CPU_MPS = guard.mps_policy(TH, device_types=("cpu",))


pytestmark = pytest.mark.usefixtures("clean_guard")


def _rand(*shape, dtype=torch.float32):
    g = torch.Generator().manual_seed(hash(shape) % 2**31)
    return torch.randn(*shape, generator=g).to(dtype)


def _transposed_bmm():
    """(5,64,16) @ (5,16,64) with b a transposed view: output 20480 > 2^14 -> rule A."""
    return _rand(5, 64, 16), _rand(5, 64, 16).transpose(1, 2)


# -- fix ---------------------------------------------------------------------------------
def test_guard_fixes_transposed_view_over_2p32_bitwise():
    a, b = _transposed_bmm()
    ref = torch.bmm(a, b)
    with guard.guarding("fix", policy=CPU_MPS) as g:
        got = torch.bmm(a, b)
    assert torch.equal(got, ref)
    assert g.stats().fixed == 1 and g.stats().by_rule == {"A": 1}


@pytest.mark.parametrize("call", [
    pytest.param(lambda a, b: torch.bmm(a, b), id="bmm"),
    pytest.param(lambda a, b: torch.bmm(a, b, out=torch.empty(5, 64, 64)), id="bmm.out"),
    pytest.param(lambda a, b: torch.baddbmm(_rand(5, 64, 64), a, b, beta=0.5, alpha=2.0), id="baddbmm"),
    pytest.param(lambda a, b: torch.baddbmm(_rand(64), a, b), id="baddbmm-broadcast-bias"),
    pytest.param(lambda a, b: torch.matmul(a, b), id="matmul"),
    pytest.param(lambda a, b: torch.einsum("bij,bjk->bik", a, b), id="einsum"),
])
def test_guard_fix_matches_the_unguarded_result_for_batched_ops(call):
    a, b = _transposed_bmm()
    ref = call(a, b)
    with guard.guarding("fix", policy=CPU_MPS) as g:
        got = call(a, b)
    assert torch.equal(got, ref)
    assert g.stats().fixed >= 1


@pytest.mark.parametrize("call", [
    pytest.param(lambda a, b: torch.mm(a, b), id="mm"),
    pytest.param(lambda a, b: torch.addmm(_rand(64), a, b, beta=0.5, alpha=2.0), id="addmm"),
    pytest.param(lambda a, b: torch.nn.functional.linear(a, b.t(), _rand(64)), id="linear"),
    pytest.param(lambda a, b: torch.mm(a, b, out=torch.empty(320, 64)), id="mm.out"),
])
def test_guard_fix_splits_rows_of_one_large_matrix(call):
    # (320,16)@(16,64) with b transposed: a 20480-element output in one matrix
    a, b = _rand(320, 16), _rand(64, 16).t()
    ref = call(a, b)
    with guard.guarding("fix", policy=CPU_MPS) as g:
        got = call(a, b)
    torch.testing.assert_close(got, ref, rtol=1.2e-5, atol=1e-6)
    assert g.stats().fixed >= 1


def test_guard_fix_splits_columns_when_one_row_block_is_still_too_big():
    # b alone is a view with 8*2048 = 16384 >= 2^13 elements: rule B needs column pieces
    a, b = _rand(4, 8), _rand(2049, 8)[1:].t()  # b: transposed and offset
    ref = torch.mm(a, b)
    with guard.guarding("fix", policy=CPU_MPS) as g:
        got = torch.mm(a, b)
    torch.testing.assert_close(got, ref)
    plan = g.planner.plan(guard.Call.of("mm", (a, b)))
    assert plan.cols < 2048


def test_guard_gradients_are_fixed_by_the_same_overrides():
    a, b = _transposed_bmm()
    a1, a2 = a.clone().requires_grad_(), a.clone().requires_grad_()
    torch.bmm(a1, b).square().sum().backward()
    with guard.guarding("fix", policy=CPU_MPS) as g:
        torch.bmm(a2, b).square().sum().backward()
    assert torch.equal(a1.grad, a2.grad)
    assert g.stats().inspected >= 2


@pytest.mark.parametrize("ctx", [
    pytest.param(torch.no_grad, id="no_grad"),
    pytest.param(torch.inference_mode, id="inference_mode"),
    pytest.param(lambda: torch.autocast("cpu", dtype=torch.bfloat16), id="autocast-bf16"),
])
def test_guard_works_under_no_grad_inference_mode_and_autocast(ctx):
    a, b = _transposed_bmm()
    with ctx():
        ref = torch.bmm(a, b)
    with guard.guarding("fix", policy=CPU_MPS) as g, ctx():
        got = torch.bmm(a, b)
    assert got.dtype == ref.dtype
    assert torch.equal(got, ref)
    assert g.stats().fixed == 1


class _Allocations(TorchDispatchMode):
    """Records the size of every tensor an op allocates (factories and copies)."""

    ALLOC = {"empty", "empty_strided", "new_empty", "clone", "_to_copy", "contiguous", "zeros", "empty_like",
             "cat", "stack", "copy"}

    def __init__(self):
        super().__init__()
        self.sizes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket.__name__ in self.ALLOC and isinstance(out, torch.Tensor):
            self.sizes.append(out.numel())
        return out


def test_guard_fix_allocates_the_output_once_and_no_other_large_tensor():
    a, b = _rand(20, 64, 16).transpose(1, 2).contiguous().transpose(1, 2), _rand(20, 64, 16).transpose(1, 2)
    engine = Engine(guard.mps_policy(TH, device_types=None), "fix")
    rec = _Allocations()
    with rec, GuardMode(engine):
        out = torch.bmm(a, b)
    assert engine.stats().fixed == 1
    big = [n for n in rec.sizes if n >= TH.t31]
    assert big == [out.numel()], rec.sizes


# -- raise / verify / warn ------------------------------------------------------------------
def test_guard_raise_names_op_shapes_strides_dtype_rule_and_largest_safe_chunk():
    a, b = _transposed_bmm()
    with guard.guarding("raise", policy=CPU_MPS) as g:
        with pytest.raises(UnsafeCallError) as e:
            torch.bmm(a, b)
    msg = str(e.value)
    for part in ("bmm", "float32", "(5, 64, 16)", "strides (1024, 1, 16)", "rule A", "largest safe chunk: 4 of 5 batches"):
        assert part in msg, part
    assert g.stats().refused == 1


def test_guard_verify_passes_a_correct_result():
    a, b = _transposed_bmm()
    with guard.guarding("verify", policy=CPU_MPS) as g:
        got = torch.bmm(a, b)
    assert torch.equal(got, torch.bmm(a, b))
    assert g.stats().verified == 1 and g.stats().mismatches == 0


def test_guard_warn_logs_and_passes_through(caplog):
    a, b = _transposed_bmm()
    with caplog.at_level(logging.WARNING, logger="kernelaudit.guard"), guard.guarding("warn", policy=CPU_MPS) as g:
        torch.bmm(a, b)
    assert "rule A" in caplog.text
    assert g.stats().warned == 1


def test_rule_actions_override_the_global_action():
    a, b = _transposed_bmm()
    with guard.guarding("fix", policy=CPU_MPS, rule_actions={"A": "raise"}):
        with pytest.raises(UnsafeCallError):
            torch.bmm(a, b)
        # rule C still fixed: contiguous operand over 2^14 elements
        x, y = _rand(17, 32, 32), _rand(17, 32, 8)
        torch.testing.assert_close(torch.bmm(x, y), torch.stack([x[i] @ y[i] for i in range(17)]))


def test_a_call_no_rule_flags_is_never_touched():
    # contiguous operands, output over 2^14: rule A's tiled path is correct without
    # transposed views (the blanket rule would block this call)
    a, b = _rand(5, 64, 16), _rand(5, 16, 64)
    with guard.guarding("raise", policy=CPU_MPS) as g:
        out = torch.bmm(a, b)
        small = torch.bmm(_rand(2, 4, 4), _rand(2, 4, 4))
    s = g.stats()
    assert s.inspected == 2 and s.passed == 2 and s.flagged == 0
    assert torch.equal(out, torch.bmm(a, b)) and small.shape == (2, 4, 4)


# -- installation -------------------------------------------------------------------------------
def test_install_is_idempotent_and_uninstall_restores_the_kernels():
    a, b = _transposed_bmm()
    e1 = guard.install("raise", policy=CPU_MPS)
    e2 = guard.install("raise", policy=CPU_MPS)
    assert e1 is e2 and guard.is_installed()
    with pytest.raises(UnsafeCallError):
        torch.bmm(a, b)
    guard.uninstall()
    guard.uninstall()
    assert not guard.is_installed()
    torch.bmm(a, b)  # the original kernel again


def test_default_install_intercepts_nothing_on_cpu():
    guard.install()
    torch.bmm(*_transposed_bmm())
    assert guard.stats().inspected == 0  # the mps policy covers MPS tensors only


def test_env_variable_picks_the_action(monkeypatch):
    monkeypatch.setenv("KERNELAUDIT_GUARD", "raise")
    guard.install(policy=CPU_MPS)
    with pytest.raises(UnsafeCallError):
        torch.bmm(*_transposed_bmm())
    monkeypatch.setenv("KERNELAUDIT_GUARD", "off")
    assert guard.install(policy=CPU_MPS) is None and not guard.is_installed()


def test_guard_is_thread_safe_and_counts_every_thread():
    a, b = _transposed_bmm()
    ref = torch.bmm(a, b)
    guard.install("fix", policy=CPU_MPS)
    bad = []

    def work():
        for _ in range(20):
            if not torch.equal(torch.bmm(a, b), ref):
                bad.append(1)
            torch.mm(_rand(4, 4), _rand(4, 4))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    s = guard.stats()
    assert not bad
    assert s.fixed == 80 and s.inspected == 160 and s.passed == 80


def test_guarding_restores_the_previous_installation():
    guard.install("raise", policy=CPU_MPS)
    with guard.guarding("fix", policy=CPU_MPS):
        torch.bmm(*_transposed_bmm())
    with pytest.raises(UnsafeCallError):
        torch.bmm(*_transposed_bmm())


BAD_ARGUMENTS = [
    (guard.install, dict(action="explode")),
    (guard.install, dict(action="fix", scale=16)),
    (guard.install, dict(action="fix", fault_model="nonsense", scale=16)),
    (guard.install, dict(action="fix", fault_model="mps", scale=40)),
    (guard.install, dict(action="fix", rule_actions={"A": "explode"}, policy=CPU_MPS)),
    (guard.Rule, dict(name="x", check=lambda c: None, explain="", ops=("conv",))),
    (guard.Rule, dict(name="x", check=lambda c: None, explain="", action="explode")),
    (guard.make_policy, dict(name="nope")),
]


@pytest.mark.parametrize("fn,kwargs", BAD_ARGUMENTS)
def test_bad_arguments_raise_invalid_argument(fn, kwargs):
    with pytest.raises(InvalidArgument):
        fn(**kwargs)
    assert not guard.is_installed()


@pytest.mark.skipif(__import__("shutil").which("g++") is None and __import__("shutil").which("cc") is None,
                    reason="torch.compile on CPU needs a C++ compiler")
def test_guard_fixes_calls_inside_torch_compile_extern_kernels():
    # Inductor lowers bmm to an extern kernel call that goes through the dispatcher,
    # so the override on the backend key sees it at run time.
    a, b = _transposed_bmm()

    def f(x, y):
        return torch.bmm(x, y) * 2

    ref = f(a, b)
    compiled = torch.compile(f)
    with guard.guarding("fix", policy=CPU_MPS) as g:
        got = compiled(a, b)
    assert torch.equal(got, ref)
    assert g.stats().fixed == 1


def test_wrap32_what_if_is_fixed_by_its_own_policy():
    # a contiguous bmm whose output passes 2^14: the wrap32 fault model wraps its index
    a, b = _rand(5, 64, 16), _rand(5, 16, 64)
    ref = torch.bmm(a, b)
    with guard.guarding("off", fault_model="wrap32", scale=14) as g:
        bad = torch.bmm(a, b)
    assert not torch.equal(bad, ref) and g.stats().ignored == 1
    with guard.guarding("fix", fault_model="wrap32", scale=14) as g:
        got = torch.bmm(a, b)
    assert torch.equal(got, ref) and g.stats().by_rule == {"wrap32": 1}


@pytest.mark.parametrize("native", [False, None], ids=["python-overrides", "native-if-available"])
def test_both_override_paths_fix_refuse_and_count_alike(native):
    a, b = _transposed_bmm()
    ref = torch.bmm(a, b)
    with guard.guarding("fix", policy=CPU_MPS, native=native) as g:
        got = torch.bmm(a, b)
        torch.addmm(_rand(64), _rand(320, 16), _rand(64, 16).t())
        torch.mm(_rand(4, 4), _rand(4, 4))
    assert torch.equal(got, ref)
    s = g.stats()
    assert s.inspected == 3 and s.fixed == 2 and s.passed == 1
    with guard.guarding("raise", policy=CPU_MPS, native=native):
        with pytest.raises(UnsafeCallError, match="rule A"):
            torch.bmm(a, b)


def test_native_screen_is_used_when_it_builds():
    from kernelaudit.guard import native

    if native.load() is None:
        pytest.skip("no C++ toolchain here: the Python overrides are used")
    import importlib

    inst = importlib.import_module("kernelaudit.guard.intercept")  # the module, not the function
    guard.install("fix", policy=CPU_MPS)
    assert inst._STATE.overrides.native is not None
