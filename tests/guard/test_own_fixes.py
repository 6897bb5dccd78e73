"""The guard's fixes of their own (``separable.OWN_FIX``), for entries no split along one
dim fixes. Softmax's backward (``_softmax_backward_data`` / ``_log_softmax_backward_data``)
over a dim that is not the last runs over the last dim (grad and output with the dim
moved last, the gradient moved back), so CUDA's spatial kernel, wrong in float16 past
2^32 elements, is never run: on the CPU the same gradients as the call over its own dim
(float64: to rounding; float16: to its precision), for every dim of 2-4-d tensors.
``linalg_matrix_exp`` splits along its batch only, never across a matrix. (multinomial:
``test_random_draw_rules.py``; unique_consecutive: ``test_unique_consecutive_rule.py``.)"""

from __future__ import annotations

import pytest
import torch

from kernelaudit.guard import separable as sep

ENTRIES = [torch.ops.aten._softmax_backward_data.default, torch.ops.aten._log_softmax_backward_data.default]


def _call(func, shape, dim, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, dtype=torch.float64)
    y = (torch.softmax if "log" not in str(func) else torch.log_softmax)(x, dim).to(dtype)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype), y


@pytest.mark.parametrize("func", ENTRIES, ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("shape", [(6, 5), (3, 4, 5), (2, 3, 4, 5)])
def test_a_backward_over_any_non_last_dim_equals_the_call_over_its_own_dim(func, shape):
    calls = []

    def run(name, *args):
        calls.append((name, tuple(args[0].shape), args[2], args[0].is_contiguous()))
        return getattr(torch.ops.aten, name)(*args)

    for dim in range(len(shape) - 1):
        for dtype, tol in ((torch.float64, 1e-12), (torch.float16, 2e-3)):
            grad, out = _call(func, shape, dim, dtype, seed=dim)
            want = func(grad, out, dim, dtype)
            got = sep.fix_softmax_backward_last_dim(func, (grad, out, dim, dtype), {}, run, None, [])
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, rtol=tol, atol=tol)
            moved = list(shape)
            moved.append(moved.pop(dim))
            assert calls[-1] == (func._schema.name.split("::")[1], tuple(moved), -1, True)


@pytest.mark.parametrize("func", ENTRIES, ids=["softmax", "log_softmax"])
def test_a_backward_over_the_last_dim_is_not_rerouted(func):
    grad, out = _call(func, (4, 5), 1, torch.float32)
    for dim in (1, -1):
        with pytest.raises(sep.CannotSplit, match="already the last"):
            sep.fix_softmax_backward_last_dim(func, (grad, out, dim, torch.float32), {}, None, None, [])


def test_the_rules_data_and_the_guards_own_fixes_name_the_same_entries():
    from kernelaudit.guard.rules import OWN_FIXES, own_fixed

    assert set(sep.OWN_FIX) == OWN_FIXES
    assert own_fixed(("_softmax_backward_data",)) and own_fixed(("multinomial", "multinomial.out"))
    assert not own_fixed(()) and not own_fixed(("_softmax_backward_data", "mm"))


def test_a_rule_whose_split_dim_is_the_softmax_dim_falls_back_to_the_last_dim_fix():
    # masked.log_softmax's shipped rule splits along dim 1 (the sweep's layout: softmax over
    # dim 0 of a (5, n) view); a program's softmax over dim 1 of a 3-d tensor cannot be cut there
    import dataclasses
    from pathlib import Path

    from kernelaudit.guard.intercept import guarding
    from kernelaudit.guard.rules import load_rules

    shipped = Path(__file__).resolve().parents[2] / "src/kernelaudit/guard/known_faults/full_grid_2_31.json"
    (rule,) = [r for r in load_rules(shipped) if r.op == "masked.log_softmax"]
    assert (rule.split_dim, rule.aten) == (1, ("_log_softmax_backward_data",))
    small = dataclasses.replace(rule, device="cpu", versions={}, when={**rule.when, "at_least": 64})
    g0 = torch.Generator().manual_seed(5)
    x = torch.randn(4, 6, 5, generator=g0, dtype=torch.float16)
    go = torch.randn(4, 6, 5, generator=g0, dtype=torch.float16)

    def grad():
        xs = x.clone().requires_grad_()
        torch.log_softmax(xs, 1).backward(go)
        return xs.grad

    want = grad()
    with guarding("fix", rules=[small]) as engine:
        got = grad()
    st = engine.stats()
    assert (st.fixed, st.refused) == (1, 0), st.summary()
    torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3)


def test_matrix_exp_forward_and_backward_split_along_the_batch_and_never_across_a_matrix():
    # full_grid_2_31.json: float16 matrix_exp raised CUBLAS_STATUS_INTERNAL_ERROR from its
    # batched GEMMs past 2^31 elements; the backward's rule says fix by the entry's own fix
    import dataclasses
    from pathlib import Path

    from kernelaudit.errors import UnsafeCallError
    from kernelaudit.guard.intercept import guarding
    from kernelaudit.guard.rules import load_rules

    shipped = Path(__file__).resolve().parents[2] / "src/kernelaudit/guard/known_faults/full_grid_2_31.json"
    rules = [r for r in load_rules(shipped) if r.op == "matrix_exp"]
    assert {(r.action, r.aten) for r in rules} == {("fix", ("linalg_matrix_exp",))}
    assert {r.split_dim for r in rules} == {0, None}              # forward: traced split; backward: own fix
    cpu = [dataclasses.replace(r, device="cpu", versions={}, dtypes=("float64",), when={**r.when, "at_least": 200})
           for r in rules if r.when["kind"] == "numel"]
    g0 = torch.Generator().manual_seed(6)
    a = torch.randn(40, 3, 3, generator=g0, dtype=torch.float64) / 3
    go = torch.randn(40, 3, 3, generator=g0, dtype=torch.float64)

    def both():
        x = a.clone().requires_grad_()
        y = torch.linalg.matrix_exp(x)
        y.backward(go)
        return y.detach(), x.grad

    want = both()
    with guarding("fix", rules=cpu) as engine:
        got = both()
        with pytest.raises(UnsafeCallError, match="works along dim 0"):
            torch.linalg.matrix_exp(torch.eye(15, dtype=torch.float64))   # one matrix: its rows are not pieces
    st = engine.stats()
    assert st.fixed >= 2 and st.refused == 1, st.summary()
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)
