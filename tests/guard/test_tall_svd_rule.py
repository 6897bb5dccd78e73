"""The guard's fix of a tall (or wide) matrix's SVD (``separable.fix_tall_svd``, the shipped
rule ``known_faults/tall_svd.json``): cuSOLVER refuses the SVD under ``linalg.pinv`` of
one 858,993,410 x 5 float32 matrix, which no split along a dim can cut. The fix runs a QR
of row pieces (TSQR) and the n x n R's SVD: on the CPU, with a small limit, the same
singular values as torch's SVD, an orthonormal U and V that rebuild the matrix, and the
same ``pinv``, for tall, wide, batched and rank-deficient inputs, float64 and float32."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from kernelaudit.guard import separable as sep

SVD = torch.ops.aten._linalg_svd.default
RULES = Path(__file__).resolve().parents[2] / "src/kernelaudit/guard/known_faults/tall_svd.json"


def _matrix(shape, dtype, seed, rank=None):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(*shape, generator=g, dtype=torch.float64)
    if rank is not None:   # columns past `rank` are combinations of the first ones
        m, n = shape[-2:]
        a = a[..., :, :rank] @ torch.randn(rank, n, generator=g, dtype=torch.float64)
    return a.to(dtype)


def _fix(a, limit, compute_uv=True, full=False):
    """The fix with every tensor of ``limit`` or more elements unsafe; the calls it ran."""
    calls = []

    def run(name, *args, **kwargs):
        calls.append((name, tuple(args[0].shape)))
        return getattr(torch.ops.aten, name)(*args, **kwargs)

    def safe(ts, out_numels):
        return all(t.numel() < limit for t in ts)

    return sep.fix_tall_svd(SVD, (a, full, compute_uv), {}, run, safe, []), calls


@pytest.mark.parametrize("shape, rank", [((2000, 5), None), ((5, 1500), None), ((3, 400, 4), None),
                                         ((1200, 6), 3), ((300, 20), None)])
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 2e-4)])
def test_a_tall_svd_through_row_pieces_equals_the_whole_svd(shape, rank, dtype, tol):
    a = _matrix(shape, dtype, seed=sum(shape), rank=rank)
    (u, s, vh), calls = _fix(a, limit=600)
    m, n = shape[-2:]
    # only small matrices went to the SVD kernel: the pieces' R, never the whole matrix
    assert calls and all(c[1][-2] * c[1][-1] < 600 for c in calls), calls
    torch.testing.assert_close(s, torch.linalg.svdvals(a), rtol=tol, atol=tol * float(s.max()))
    eye = torch.eye(min(m, n), dtype=dtype).expand(*shape[:-2], -1, -1)
    torch.testing.assert_close(u.mH @ u, eye, rtol=tol, atol=tol * 10)
    torch.testing.assert_close(vh @ vh.mH, eye, rtol=tol, atol=tol * 10)
    torch.testing.assert_close((u * s.unsqueeze(-2)) @ vh, a, rtol=tol, atol=tol * float(s.max()) * 10)


def test_singular_values_alone_and_the_refusals():
    a = _matrix((3000, 4), torch.float64, seed=3)
    (u, s, vh), _ = _fix(a, limit=800, compute_uv=False)
    assert u.numel() == 0 and vh.numel() == 0
    torch.testing.assert_close(s, torch.linalg.svdvals(a))
    with pytest.raises(sep.CannotSplit, match="full_matrices"):
        _fix(a, limit=800, full=True)
    with pytest.raises(sep.CannotSplit, match="rows"):
        _fix(a, limit=4)     # not even one 4 x 4 piece is safe


def test_pinv_of_a_program_is_fixed_under_the_guard_with_the_shipped_rule():
    """The shipped rule moved to the CPU at a small size: ``torch.linalg.pinv`` of a tall
    matrix is fixed (its SVD through row pieces) and equals the bare call's, rank-deficient
    included; ``torch.linalg.svd`` and ``svdvals`` take the same route."""
    from kernelaudit.guard.intercept import guarding
    from kernelaudit.guard.rules import load_rules

    (rule,) = load_rules(RULES)
    assert (rule.op, rule.action, rule.split_dim, rule.aten) == ("linalg.pinv", "fix", None,
                                                                 ("_linalg_svd", "_linalg_svd.U"))
    small = dataclasses.replace(rule, device="cpu", versions={}, when={**rule.when, "at_least": 1000})
    for shape, rank in (((4000, 5), None), ((3000, 6), 2), ((7, 2500), None)):
        a = _matrix(shape, torch.float64, seed=7, rank=rank)
        want = torch.linalg.pinv(a)
        with guarding("fix", rules=[small]) as engine:
            got = torch.linalg.pinv(a)
            s = torch.linalg.svdvals(a)
        st = engine.stats()
        assert (st.fixed, st.refused) == (2, 0), st.summary()
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9 * float(want.abs().max()))
        torch.testing.assert_close(s, torch.linalg.svdvals(a))


def test_a_batch_of_small_matrices_runs_in_pieces_of_whole_matrices_with_the_same_bits():
    """A batch whose matrices are each safe (the batched SVD's fault past 2^31 elements)
    runs in pieces of whole matrices, never matrix by matrix through row pieces: each
    matrix's SVD is the one the whole call computes, bit for bit on the CPU."""
    a = _matrix((3, 170, 5, 5), torch.float32, seed=11)
    want = torch.ops.aten._linalg_svd(a, False, True)
    (u, s, vh), calls = _fix(a, limit=2000)
    assert len(calls) >= 8 and all(c[0] == "_linalg_svd" and len(c[1]) == 3 and c[1][1:] == (5, 5)
                                   and c[1][0] * 25 < 2000 for c in calls), calls
    assert sum(c[1][0] for c in calls) == 3 * 170
    for g, w in zip((u, s, vh), want):
        assert g.shape == w.shape and torch.equal(g, w)
    (u, s, vh), _ = _fix(a, limit=2000, compute_uv=False)
    assert u.numel() == 0 and vh.numel() == 0 and torch.equal(s, torch.ops.aten._linalg_svd(a, False, False)[1])


def _batched_rule_on_the_cpu():
    """``known_faults/batched_svd.json`` as shipped, and moved to the CPU from 5,000 elements."""
    from kernelaudit.guard.rules import load_rules

    (rule,) = load_rules(RULES.with_name("batched_svd.json"))
    return rule, dataclasses.replace(rule, device="cpu", versions={}, when={**rule.when, "at_least": 5000})


def test_pinverse_of_a_batch_is_fixed_under_the_guard_with_the_shipped_batched_rule():
    """``known_faults/batched_svd.json`` moved to the CPU at a small size:
    ``torch.pinverse`` of a batch of 5 x 5 matrices is fixed at its SVD (pieces of whole
    matrices) and equals the bare call; a batch below the rule's size runs as it is."""
    from kernelaudit.guard.intercept import guarding

    rule, small = _batched_rule_on_the_cpu()
    assert (rule.op, rule.action, rule.split_dim, rule.aten) == ("pinverse", "fix", None,
                                                                 ("_linalg_svd", "_linalg_svd.U"))
    a = _matrix((400, 5, 5), torch.float32, seed=5)
    want = torch.pinverse(a)
    with guarding("fix", rules=[small]) as engine:
        got = torch.pinverse(a)
        below = torch.pinverse(a[:100])
    st = engine.stats()
    assert (st.fixed, st.refused) == (1, 0), st.summary()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
    assert torch.equal(below, torch.pinverse(a[:100]))
    # the backward: the forward's SVD in pieces, autograd's pinv_backward whole (matrices
    # 4 I + U[0, 0.5), every condition number below 4.4: a gradient rounding cannot swing)
    g = torch.Generator().manual_seed(8)
    x = (torch.rand(400, 5, 5, generator=g) * 0.5 + 4 * torch.eye(5)).requires_grad_()
    torch.pinverse(x).sum().backward()
    want_grad, x.grad = x.grad, None
    with guarding("fix", rules=[small]) as engine:
        torch.pinverse(x).sum().backward()
    assert engine.stats().fixed == 1
    torch.testing.assert_close(x.grad, want_grad, rtol=1e-5, atol=1e-6)


def test_nuclear_norm_and_cond_of_a_batch_are_fixed_by_the_batched_svd_rule():
    """The full grid's ``norm.nuc`` and ``linalg.cond`` float32 cases past 2^31 elements
    (85,899,580 and 85,899,520 5 x 5 matrices) raised the illegal memory access of
    ``pinverse``'s batched SVD on an H100: both reach ``_linalg_svd`` (``svdvals``), so the
    same rule, moved to the CPU at a small size, fixes them, forward and backward, with the
    bare call's answer."""
    from kernelaudit.guard.intercept import guarding

    _, small = _batched_rule_on_the_cpu()
    a = _matrix((400, 5, 5), torch.float32, seed=6) + 4 * torch.eye(5)
    calls = {"norm.nuc": lambda x: torch.linalg.matrix_norm(x, "nuc"), "linalg.cond": torch.linalg.cond}
    for name, f in calls.items():
        want = f(a)
        with guarding("fix", rules=[small]) as engine:
            got = f(a)
        assert (engine.stats().fixed, engine.stats().refused) == (1, 0), (name, engine.stats().summary())
        torch.testing.assert_close(got, want, rtol=1e-5, atol=0)
        # the backward (``cond``'s came back silently wrong past 2^31 elements on an H100):
        # the SVD in pieces under autograd, the same gradient as the bare call's
        x = a.clone().requires_grad_()
        f(x).sum().backward()
        want_grad, x.grad = x.grad, None
        with guarding("fix", rules=[small]) as engine:
            f(x).sum().backward()
        assert engine.stats().fixed == 1, (name, engine.stats().summary())
        # pieces and the whole batch take LAPACK's SVD through other SIMD paths on other CPUs:
        # a few gradient elements differ by rounding (3.8e-6 of values near 1, one machine)
        torch.testing.assert_close(x.grad, want_grad, rtol=1e-5, atol=1e-5)


def test_matrix_rank_of_a_batch_is_fixed_by_the_batched_svd_rule():
    """The full grid's ``linalg.matrix_rank`` float32 case of 171,798,528 5 x 5 matrices
    (just below 2^32 elements) came back **silently wrong** on an H100 (ranks off by up to
    5 from matrix 86,035,275 on): it reaches the batched SVD through ``svdvals``
    (``_linalg_svd`` without U and V), so the same rule, moved to the CPU at a small size,
    fixes it with the bare call's ranks, rank-deficient matrices included."""
    from kernelaudit.guard.intercept import guarding

    _, small = _batched_rule_on_the_cpu()
    g = torch.Generator().manual_seed(9)
    a = torch.randn(400, 5, 5, generator=g)
    a[::3, :, 4] = a[::3, :, 0] + a[::3, :, 1]          # every third matrix of rank 4
    a[1::7] = 0.0                                       # some of rank 0
    want = torch.linalg.matrix_rank(a)
    assert set(want.unique().tolist()) == {0, 4, 5}
    with guarding("fix", rules=[small]) as engine:
        got = torch.linalg.matrix_rank(a)
    assert (engine.stats().fixed, engine.stats().refused) == (1, 0), engine.stats().summary()
    assert torch.equal(got, want)


def test_pinv_of_a_batch_of_rank_one_matrices_is_fixed_by_the_batched_svd_rule():
    """The full grid's ``linalg.pinv.singular`` float32 case (``pinv(a @ b.mT)`` of
    238,609,320 rank-one 3 x 3 matrices, just past 2^31 elements) came back **silently
    wrong** on an H100 (relative error 1.73 in 3 of 7,953,644 batches): ``linalg.pinv``
    reaches the batched SVD (``_linalg_svd``), so the same rule, moved to the CPU at a
    small size, fixes it, forward and backward, with the bare call's answer."""
    from kernelaudit.guard.intercept import guarding

    _, small = _batched_rule_on_the_cpu()
    g = torch.Generator().manual_seed(10)
    a, b = torch.rand(600, 3, 1, generator=g), torch.rand(600, 3, 1, generator=g)
    x = a @ b.mT
    assert x.numel() >= small.when["at_least"]
    want = torch.linalg.pinv(x)
    with guarding("fix", rules=[small]) as engine:
        got = torch.linalg.pinv(x)
    assert (engine.stats().fixed, engine.stats().refused) == (1, 0), engine.stats().summary()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
    # the backward through the factors, as the sweep's case runs it (rank kept)
    fa, fb = a.clone().requires_grad_(), b.clone().requires_grad_()
    torch.linalg.pinv(fa @ fb.mT).sum().backward()
    want_grads = (fa.grad, fb.grad)
    fa.grad = fb.grad = None
    with guarding("fix", rules=[small]) as engine:
        torch.linalg.pinv(fa @ fb.mT).sum().backward()
    assert engine.stats().fixed == 1, engine.stats().summary()
    for got_grad, want_grad in zip((fa.grad, fb.grad), want_grads):
        torch.testing.assert_close(got_grad, want_grad, rtol=1e-4, atol=1e-4 * float(want_grad.abs().max()))
