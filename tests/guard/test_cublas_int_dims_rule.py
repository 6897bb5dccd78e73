"""``cublas_int_dims.json``: cuBLAS's int arguments (m, n, k, leading dims at most INT_MAX,
PyTorch's own checks in ``at::cuda::blas``). A call past them is computed in pieces the
checks accept: rows and columns as before, and a reduction dim ``k`` past the limit in
slices whose products are summed in float32 and rounded once.

Run on the CPU at a scaled limit, with a BLAS stand-in that refuses exactly what
PyTorch's checks refuse, so a piece that would still be refused on the GPU fails here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from kernelaudit.guard.engine import Engine
from kernelaudit.guard.intercept import guarding, policy_from_rules
from kernelaudit.guard.rules import load_rules
from kernelaudit.guard.split import make_plan
from kernelaudit.thresholds import Thresholds

KNOWN = Path(__file__).resolve().parents[2] / "src/kernelaudit/guard/known_faults"
TH = Thresholds(12)          # "2^31" is 2,048 here
INT_MAX = TH.t31 - 1


def _rules(ops=None):
    return [dataclasses.replace(r, device="cpu", versions={}) for r in load_rules(KNOWN / "cublas_int_dims.json")
            if ops is None or r.op in ops]


def _blas(seen: list):
    """A run function that refuses what at::cuda::blas refuses: a matrix dim past INT_MAX
    (m, n, k) or a leading dimension past it."""
    def run(op, overload, *args, **kwargs):
        for t in (*args, kwargs.get("out")):
            if isinstance(t, torch.Tensor) and t.dim() >= 2:
                dims = t.shape[-2:]
                ld = max((st for st, n in zip(t.stride()[-2:], dims) if n > 1), default=0)
                seen.append((max(dims), ld))
                if max(dims) > INT_MAX:
                    raise RuntimeError(f"argument k must be non-negative and less than {INT_MAX} but got {max(dims)}")
                if ld > INT_MAX:
                    raise RuntimeError(f"argument ld must be positive and less than {INT_MAX} but got {ld}")
        fn = getattr(torch.ops.aten, op)
        return fn.out(*args, **kwargs) if overload == "out" else fn.default(*args, **kwargs)
    return run


def test_the_rules_cover_every_engine_op_on_both_matrix_dims_ungated_by_cuda_or_driver():
    rules = load_rules(KNOWN / "cublas_int_dims.json")
    got = {(r.op, r.when["dim"]) for r in rules}
    assert got == {("mm", 0), ("mm", 1), ("addmm", 0), ("addmm", 1), ("bmm", 1), ("bmm", 2),
                   ("baddbmm", 1), ("baddbmm", 2)}
    assert all(r.action == "fix" and r.device == "cuda" and r.versions == {"torch": "==2.11.*"} for r in rules)


def test_a_plan_cuts_the_reduction_dim_only_when_a_one_by_one_piece_is_unsafe():
    policy, _ = policy_from_rules(_rules(), TH)
    from kernelaudit.faults.predicates import TensorMeta
    from kernelaudit.guard.policy import Call

    k = 2 * TH.t31 + 5
    a, b = TensorMeta((2, k), (k, 1), 0), TensorMeta((k, 3), (3, 1), 0)
    plan = make_plan(policy, Call("mm", (a, b), (2, 3), torch.float32, "cpu"))
    assert plan is not None and plan.depth is not None and plan.depth <= INT_MAX
    assert sum(s.stop - s.start for s in plan.depths()) == k and len(plan.depths()) == 3
    assert plan.describe() == f"2 of 2 rows x 3 of 3 columns x {INT_MAX} of {k} along k (fix: 3 products summed in pieces)"
    wide = TensorMeta((2, 4), (4, 1), 0), TensorMeta((4, k), (k, 1), 0)
    plan = make_plan(policy, Call("mm", wide, (2, k), torch.float32, "cpu"))
    assert plan is not None and plan.depth is None and plan.cols <= INT_MAX


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_mm_with_k_past_int_max_sums_slices_the_blas_accepts(dtype):
    # the backward of the grid's addmm.decomposed: grad (2 x N) @ B (N x 2), N past INT_MAX
    g = torch.Generator().manual_seed(3)
    k = TH.t31 + 121
    a = torch.randn(2, k, generator=g).to(dtype)
    b = torch.randn(k, 2, generator=g).to(dtype)
    policy, _ = policy_from_rules(_rules(), TH)
    engine = Engine(policy, "fix")
    seen: list = []
    with pytest.raises(RuntimeError, match="argument k"):
        _blas([])("mm", "default", a, b)                 # bare, as cuBLAS's check refuses it
    got = engine.slow("mm", "default", (a, b), {}, _blas(seen), "cpu")
    assert engine.stats().fixed == 1 and len(seen) >= 4 and max(max(s) for s in seen) <= INT_MAX
    want = a.double() @ b.double()
    assert got.dtype == dtype
    # one rounding of a float32 sum: within a few units of the output's last place
    tol = 1e-5 if dtype == torch.float32 else 2e-3
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol * k ** 0.5)


def test_addmm_and_baddbmm_past_int_max_along_k_keep_alpha_beta_and_bias():
    g = torch.Generator().manual_seed(5)
    k = TH.t31 + 7
    policy, _ = policy_from_rules(_rules(), TH)
    engine = Engine(policy, "fix")
    m, a, b = torch.randn(3, 2, generator=g), torch.randn(3, k, generator=g), torch.randn(k, 2, generator=g)
    got = engine.slow("addmm", "default", (m, a, b), {"beta": 0.5, "alpha": -2.0}, _blas([]), "cpu")
    torch.testing.assert_close(got, torch.addmm(m, a, b, beta=0.5, alpha=-2.0), rtol=1e-5, atol=1e-4)
    m3, a3, b3 = torch.randn(2, 3, 2, generator=g), torch.randn(2, 3, k, generator=g), torch.randn(2, k, 2, generator=g)
    got = engine.slow("baddbmm", "default", (m3, a3, b3), {"beta": 0.0, "alpha": 1.0}, _blas([]), "cpu")
    torch.testing.assert_close(got, torch.bmm(a3, b3), rtol=1e-5, atol=1e-4)
    assert engine.stats().fixed == 2


def test_verify_checks_a_product_whose_reduction_dim_is_cut():
    # verify runs the call as it is, then checks it in pieces the checks accept
    g = torch.Generator().manual_seed(9)
    k = TH.t31 + 33
    a, b = torch.randn(2, k, generator=g), torch.randn(k, 3, generator=g)
    policy, _ = policy_from_rules(_rules(), TH)
    seen: list = []
    checked = _blas(seen)

    def right(op, overload, *args, **kwargs):   # the whole call runs; the check's products must pass
        if args[0].shape[-1] == k:
            return args[0] @ args[1]
        return checked(op, overload, *args, **kwargs)

    def wrong(op, overload, *args, **kwargs):   # a kernel that drops the last slice of k
        if args[0].shape[-1] == k:
            return args[0][:, : TH.t31] @ args[1][: TH.t31]
        return checked(op, overload, *args, **kwargs)
    engine = Engine(policy, "verify")
    torch.testing.assert_close(engine.slow("mm", "default", (a, b), {}, right, "cpu"), a @ b)
    assert engine.stats().verified == 1 and seen and max(max(s) for s in seen) <= INT_MAX
    from kernelaudit.errors import UnsafeCallError
    with pytest.raises(UnsafeCallError, match="verification failed"):
        engine.slow("mm", "default", (a, b), {}, wrong, "cpu")


def test_the_grid_addmm_call_gives_bare_gradients_under_the_guard():
    # addmm(M.t(), a, B.t()) with a wide output, forward and backward, the rules at a
    # small limit on the CPU: every matmul of the backward (k past the limit) is fixed
    n = 300
    g = torch.Generator().manual_seed(11)
    m, a, b = (torch.randn(n, 2, generator=g), torch.randn(2, 2, generator=g), torch.randn(n, 2, generator=g))
    up = torch.randn(2, n, generator=g)
    rules = [dataclasses.replace(r, when={**r.when, "at_least": 128}) for r in _rules()]

    def grads():
        xs = [t.clone().requires_grad_() for t in (m, a, b)]
        torch.addmm(xs[0].t(), xs[1], xs[2].t()).backward(up)
        return [x.grad for x in xs]
    bare = grads()
    with guarding("fix", rules=rules) as engine:
        got = grads()
    st = engine.stats()
    assert st.fixed >= 3 and st.refused == 0, st.summary()   # forward, and the backward's mm
    for x, y in zip(got, bare):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)


def test_the_grid_multi_dot_call_reaches_the_mm_rules_forward_and_backward():
    # the grid's linalg.multi_dot([A (N x 2), B (2 x 1)]) with N past INT_MAX raised
    # cuBLAS's own check bare (H100, 2026-12-07, float32 and float16): multi_dot of two
    # matrices is mm through the dispatcher, so the mm rules see it, and its backward's
    # products (N rows; k = N) too. The rules at a small limit on the CPU.
    n = 300
    g = torch.Generator().manual_seed(13)
    a, b, up = torch.randn(n, 2, generator=g), torch.randn(2, 1, generator=g), torch.randn(n, 1, generator=g)
    rules = [dataclasses.replace(r, when={**r.when, "at_least": 128}) for r in _rules({"mm"})]

    def run():
        xs = [t.clone().requires_grad_() for t in (a, b)]
        out = torch.linalg.multi_dot(xs)
        out.backward(up)
        return [out.detach(), *(x.grad for x in xs)]
    bare = run()
    with guarding("fix", rules=rules) as engine:
        got = run()
    st = engine.stats()
    assert st.fixed >= 3 and st.refused == 0, st.summary()   # the forward, grad A's and grad B's mm
    for x, y in zip(got, bare):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)
