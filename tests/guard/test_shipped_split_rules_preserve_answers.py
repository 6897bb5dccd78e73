"""Every ``fix`` rule the full grid's rule files ship splits its op without changing the
answer: for each, the case it came from (its provenance) is run on the CPU at a small
batch, bare and under the guard holding that rule scaled down (so the call is cut into
pieces), forward outputs or gradients compared. A rule whose split dim were not
separable for its aten entry (an op whose output does not follow its inputs' pieces)
would fail here before it reached a user's GPU. Rules with no store case of their own
(logdet under the slogdet rule, the hand-written ``batched_lu_solve.json``, the layer norm's
backward: ``test_layer_norm_rows_fix.py``) are checked on calls of their own."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kernelaudit.guard.intercept import guarding
from kernelaudit.guard.rules import load_rules
from kernelaudit.sweep.cases import Case
from kernelaudit.sweep.judge.execution import run_op

ROOT = Path(__file__).resolve().parents[2]
KNOWN = ROOT / "src/kernelaudit/guard/known_faults"
#: The full grid's store of record, whose records the files below were derived from.
STORE = ROOT / "benchmarks/results/2026-12-08-h100-small-prefill-row-grown-qr-ldl-2p32-ok/store/verdicts.jsonl.gz"
FILES = ("full_grid_pools_factories.json", "full_grid_2_31.json", "full_grid_batched_lu_chunk_cat.json",
         "full_grid_float32.json", "batched_eigh_layer_norm_rows.json")
BATCH = 24


def _cases() -> dict[str, dict]:
    out = {}
    with gzip.open(STORE, "rt") as f:
        for line in f:
            r = json.loads(line)
            out.setdefault(r["case"]["id"], r["case"])
    return out


def _fix_rules():
    # a hand-written rule with no store case (the layer norm's backward) has tests of its own
    rules = [r for name in FILES for r in load_rules(KNOWN / name)
             if r.action == "fix" and r.aten and (r.provenance or {}).get("cases")]
    # a rule whose aten ops, predicate kind, split dim and direction are an earlier one's takes
    # the same split path (another dtype, or another sweep op reaching the same aten op:
    # upsample_bilinear and interpolate's bilinear mode): run by default once, the others with `-m slow`
    seen, out = set(), []
    for r in rules:
        path = (r.aten, r.when["kind"], r.split_dim, r.provenance["cases"][0].rsplit("/", 1)[-1])
        out.append(pytest.param(r, id=r.name.removeprefix("sweep-cuda-"), marks=pytest.mark.slow if path in seen else ()))
        seen.add(path)
    return out


@pytest.fixture(scope="module")
def cases():
    if not STORE.is_file():
        pytest.skip("the full grid's store is not in this checkout")
    return _cases()


def _scaled(rule, tensors):
    """The rule moved to the CPU, ungated, starting at half the largest of ``tensors`` (in
    its measure: elements, bytes or the size of its dim), so the whole call is unsafe and
    its pieces are not."""
    kind, d = rule.when["kind"], rule.when.get("dim")
    big = max(t.untyped_storage().nbytes() if kind == "bytes" else (t.shape[d] if t.dim() > d else 0)
              if kind == "dim" else t.numel() for t in tensors)
    return dataclasses.replace(rule, device="cpu", versions={}, when={**rule.when, "at_least": max(2, big // 2)})


def _cpu_kernel(entry: str) -> bool:
    # what the guard's screens register on (intercept._Screens)
    from kernelaudit.guard.intercept import _kernel_named

    return _kernel_named(entry, "CPU") is not None


def _split_recorded_calls(rule, small: Case) -> int:
    """For an entry point with no CPU kernel of its own (a composite there, which the CPU
    guard does not screen: ``_chunk_cat``): its calls in the case, recorded, each split
    along the rule's dim by the guard's own splitter and compared with the whole call.
    Returns how many calls were split."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    from kernelaudit.guard import separable as sep

    calls = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if sep.entry_name(func) in rule.aten:
                calls.append((func, args, kwargs or {}))
            return func(*args, **(kwargs or {}))

    with Record():
        run_op(small, "cpu", "none")
    for func, args, kwargs in calls:
        want = func(*args, **kwargs)
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        half = max(t.numel() for t in tensors) // 2   # the whole call is unsafe, its eighths are not
        got = sep.fix_split(func, args, kwargs, lambda n, *a, **k: func(*a, **k),
                            lambda ts, outs: max(t.numel() for t in ts) < half, (rule.split_dim,), [want.numel()])
        assert torch.equal(got, want), rule.name
    return len(calls)


@pytest.mark.parametrize("rule", _fix_rules())
def test_a_shipped_split_rule_gives_the_bare_calls_answer(rule, cases):
    case = Case.from_json(cases[rule.provenance["cases"][0]])
    if case.spec.call is None:
        pytest.skip("a factory: its pieces are checked in test_guard_fix_generic.py")
    small = case.with_batch(BATCH)
    if not all(_cpu_kernel(a) for a in rule.aten):
        assert _split_recorded_calls(rule, small) >= 1, rule.name
        return
    torch.manual_seed(0)
    placed, want, _, _ = run_op(small, "cpu", "none")
    scaled = _scaled(rule, want)
    with guarding("fix", rules=[scaled], native=False) as engine:
        _, got, _, _ = run_op(small, "cpu", "none")
    assert engine.stats().fixed >= 1, (rule.name, engine.stats().summary())
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape, rule.name
        torch.testing.assert_close(g, w, rtol=2e-3 if w.dtype == torch.float16 else 1e-5, atol=1e-3,
                                   equal_nan=True, msg=lambda m: f"{rule.name}: {m}")


def test_the_avg_pool2d_rules_also_fix_local_response_norms_inner_calls():
    # the grid's local_response_norm errors ("integer out of range" past 2^31) come from
    # the avg_pool2d its 3-d path calls: that op's shipped rules split those calls

    from kernelaudit.guard.rules import load_rules

    rules = [dataclasses.replace(r, device="cpu", versions={}, when={**r.when, "at_least": 1000})
             for r in load_rules(KNOWN / "full_grid_2_31.json")
             if r.op == "nn.functional.avg_pool2d" and r.when["kind"] == "numel"]
    x = torch.randn(240, 6, 3, generator=torch.Generator().manual_seed(0))

    def forward_backward():
        xs = x.clone().requires_grad_()
        y = F.local_response_norm(xs, 2, alpha=3e-5, beta=0.5, k=1.25)
        y.backward(torch.ones_like(y))
        return y, xs.grad

    want = forward_backward()
    with guarding("fix", rules=rules, native=False) as engine:
        got = forward_backward()
    assert engine.stats().fixed == 2, engine.stats().summary()   # avg_pool2d and its backward
    for g, w in zip(got, want):
        assert torch.equal(g, w)


def test_the_addmm_column_rules_compute_a_wide_addmm_in_pieces_with_its_answer():
    # addmm.decomposed: cuBLAS refuses 2^31 or more output columns; the engine's pieces of
    # columns (these rules carry no aten entry: the engine screens addmm itself)
    rules = [r for r in load_rules(KNOWN / "full_grid_2_31.json") if r.op == "addmm"]
    assert {(r.action, r.dtypes) for r in rules} == {("fix", ("float16",)), ("fix", ("float32",))}
    (rule,) = [r for r in rules if r.dtypes == ("float32",)]
    g = torch.Generator().manual_seed(7)
    m, a, b = torch.randn(2, 600, generator=g), torch.randn(2, 2, generator=g), torch.randn(2, 600, generator=g)
    bare = torch.addmm(m, a, b, beta=0.5, alpha=2.0)
    with guarding("fix", rules=[_scaled(rule, [m, b])]) as engine:
        got = torch.addmm(m, a, b, beta=0.5, alpha=2.0)
    st = engine.stats()
    assert st.fixed == 1 and st.refused == 0, st.summary()
    torch.testing.assert_close(got, bare, rtol=1e-6, atol=1e-6)


def test_addmm_pieces_of_a_row_past_int_range_reach_the_blas_with_leading_dims_it_takes():
    # the sweep's addmm.decomposed call, addmm(M.t(), a, B.t()) with 2^31 + 121 columns:
    # cuBLAS refuses it bare (m), and refused the guard's pieces too (ldc: each piece
    # wrote into its slice of the whole row-major output, whose rows are 2^31 + 121 long;
    # H100, 2026-12-06). Here at scale 12 (int range: 2^11), with a run that refuses any
    # leading dimension past it as cuBLAS does: pieces go through compact copies.
    from kernelaudit.guard.engine import Engine
    from kernelaudit.guard.intercept import policy_from_rules
    from kernelaudit.thresholds import Thresholds

    th = Thresholds(12)
    (rule,) = [r for r in load_rules(KNOWN / "full_grid_2_31.json") if r.op == "addmm" and r.dtypes == ("float32",)]
    g = torch.Generator().manual_seed(7)
    n = th.t31 + 121
    m, a, b = torch.randn(n, 2, generator=g).t(), torch.randn(2, 2, generator=g), torch.randn(n, 2, generator=g).t()
    policy, _ = policy_from_rules([_scaled(rule, [m, b])], th)
    engine = Engine(policy, "fix")
    seen = []

    def blas(op, overload, *args, **kwargs):
        for t in (*args, kwargs.get("out")):
            if isinstance(t, torch.Tensor) and t.dim() == 2:
                ld = max((st for st, k in zip(t.stride(), t.shape) if k > 1), default=0)
                seen.append(ld)
                if ld > th.t31 - 2:
                    raise RuntimeError(f"argument ld must be positive and less than {th.t31 - 1} but got {ld}")
        return getattr(torch.ops.aten, op).out(*args, **kwargs)

    got = engine.slow("addmm", "default", (m, a, b), {"beta": 0.5, "alpha": 2.0}, blas, "cpu")
    assert engine.stats().fixed == 1 and len(seen) >= 2 * 4 and max(seen) <= th.t31 - 2   # two pieces or more
    torch.testing.assert_close(got, torch.addmm(m, a, b, beta=0.5, alpha=2.0), rtol=1e-6, atol=1e-6)


def _on_cpu(file: str, op: str, at_least: int):
    """``op``'s rules in the shipped ``file``, moved to the CPU, ungated, from ``at_least``."""
    rules = [dataclasses.replace(r, device="cpu", versions={}, when={**r.when, "at_least": at_least})
             for r in load_rules(KNOWN / file) if r.op == op]
    assert rules, f"no {op} rule in {file}"
    return rules


def test_the_slogdet_rule_also_fixes_logdet():
    # logdet reaches the same _linalg_slogdet kernel (the grid's logdet errors past 2^31
    # matrices): the slogdet rule splits its calls with the same answer
    rules = _on_cpu("full_grid_batched_lu_chunk_cat.json", "linalg.slogdet", 100)
    x = torch.rand(240, 2, 2, generator=torch.Generator().manual_seed(0)) + torch.eye(2)
    want = torch.logdet(x)
    with guarding("fix", rules=rules, native=False) as engine:
        got = torch.logdet(x)
    assert engine.stats().fixed >= 1, engine.stats().summary()
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


# known_faults/batched_lu_solve.json (hand-written from a GPU test, no store case): det's
# backward solves with the forward's LU factors through linalg_lu_solve, whose batched
# cuBLAS call fails on the H200 past 2^31 - 8 matrices even with the forward in pieces
def test_det_backward_under_the_det_and_lu_solve_rules_is_split_and_bitwise_the_bare_gradient():
    g = torch.Generator().manual_seed(3)
    x = torch.rand(3000, 3, 3, generator=g) - 0.5
    go = torch.rand(3000, generator=g)
    bare = x.clone().requires_grad_()
    torch.linalg.det(bare).backward(go)
    rules = (_on_cpu("full_grid_batched_lu_chunk_cat.json", "linalg.det", 1000)
             + _on_cpu("batched_lu_solve.json", "linalg.lu_solve", 1000))
    xg = x.clone().requires_grad_()
    with guarding("fix", rules=rules, native=False) as engine:
        torch.linalg.det(xg).backward(go)
    st = engine.stats()
    assert st.fixed == 2 and st.refused == 0, st.summary()      # the forward and the solve
    assert torch.equal(xg.grad, bare.grad)


def test_a_direct_lu_solve_past_the_scaled_threshold_equals_the_bare_call():
    g = torch.Generator().manual_seed(4)
    a = torch.rand(700, 4, 4, generator=g) + 4 * torch.eye(4)
    b = torch.rand(700, 4, 2, generator=g)
    lu, piv = torch.linalg.lu_factor(a)
    want = torch.linalg.lu_solve(lu, piv, b)
    with guarding("fix", rules=_on_cpu("batched_lu_solve.json", "linalg.lu_solve", 2000), native=False) as engine:
        got = torch.linalg.lu_solve(lu, piv, b)
    assert engine.stats().fixed == 1, engine.stats().summary()
    assert torch.equal(got, want)


# known_faults/multilabel_margin_loss_backward.json (hand-written from the H100's guarded
# plain-torch run: the forward rule split the forward, the backward kernel then raised)
def _multilabel_rules(at_least: int):
    return (_on_cpu("full_grid_2_31.json", "nn.functional.multilabel_margin_loss", at_least)
            + _on_cpu("multilabel_margin_loss_backward.json", "nn.functional.multilabel_margin_loss", at_least))


def _multilabel_grad(x, target, go, reduction: str):
    xg = x.clone().requires_grad_()
    loss = F.multilabel_margin_loss(xg, target, reduction=reduction)
    loss.backward(go if reduction == "none" else None)
    return loss.detach(), xg.grad


def test_multilabel_margin_loss_forward_and_backward_in_pieces_give_the_bare_loss_and_gradient():
    g = torch.Generator().manual_seed(5)
    x = torch.rand(3000, 5, generator=g) * 2 - 1
    target = torch.randint(-1, 5, (3000, 5), generator=g)
    go = torch.rand(3000, generator=g)
    want = _multilabel_grad(x, target, go, "none")
    with guarding("fix", rules=_multilabel_rules(6000), native=False) as engine:
        got = _multilabel_grad(x, target, go, "none")
    st = engine.stats()
    assert st.fixed == 2 and st.refused == 0, st.summary()   # the forward and the backward
    assert st.by_rule.get("multilabel-margin-loss-backward-2-31") == 1, st.summary()
    for a, b in zip(got, want):
        assert torch.equal(a, b)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_a_reduced_loss_past_its_rule_is_refused_not_scaled_piece_by_piece(reduction):
    # each piece of a mean loss's backward would divide by its own rows: refused, loudly
    from kernelaudit.errors import UnsafeCallError

    g = torch.Generator().manual_seed(6)
    x, target = torch.rand(3000, 5, generator=g), torch.randint(-1, 5, (3000, 5), generator=g)
    with guarding("fix", rules=_multilabel_rules(6000), native=False) as engine:
        with pytest.raises(UnsafeCallError, match="reduction="):
            _multilabel_grad(x, target, None, reduction)
    assert engine.stats().refused >= 1 and engine.stats().fixed == 0


# known_faults/full_grid_reflect_pad_rows.json: reflect padding's backward over more rows
# than its CUDA grid holds (65,575 raised, 65,532 ran): pieces of rows, the real threshold
def test_reflect_pad_backward_past_its_grids_rows_runs_in_pieces_of_rows_with_the_bare_gradient():
    g = torch.Generator().manual_seed(8)
    x = torch.rand(70000, 3, generator=g) * 2 - 1
    go = torch.rand(70000, 6, generator=g)

    def grad():
        xs = x.clone().requires_grad_()
        F.pad(xs, (1, 2), "reflect").backward(go)
        return xs.grad

    want = grad()
    rules = [dataclasses.replace(r, device="cpu", versions={})
             for r in load_rules(KNOWN / "full_grid_reflect_pad_rows.json")]
    with guarding("fix", rules=rules, native=False) as engine:
        got = grad()
    st = engine.stats()
    assert st.fixed == 1 and st.refused == 0, st.summary()
    assert torch.equal(got, want)
