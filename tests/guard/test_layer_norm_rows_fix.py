"""The layer norm's rows fixes (``separable.fix_layer_norm_rows`` and
``fix_layer_norm_backward_rows``, shipped in ``known_faults/batched_eigh_layer_norm_rows.json``):
CUDA's ``native_layer_norm`` and its backward refuse more than 2^31 - 1 rows; the guard runs
the rows in pieces, weight and bias whole, and sums the weight and bias gradients itself."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kernelaudit.guard import separable as sep
from kernelaudit.guard.intercept import guarding
from kernelaudit.guard.rules import load_rules, screen_reason

RULES = Path(__file__).resolve().parents[2] / "src/kernelaudit/guard/known_faults/batched_eigh_layer_norm_rows.json"


def _rows_rules(at_least: int):
    """The shipped layer-norm rules on the CPU, ungated, from ``at_least`` rows."""
    rules = [dataclasses.replace(r, device="cpu", versions={}, when={**r.when, "at_least": at_least})
             for r in load_rules(RULES) if r.when["kind"] == "rows"]
    assert {a for r in rules for a in r.aten} == {"native_layer_norm", "native_layer_norm_backward"}
    return rules


def test_the_rows_predicate_counts_rows_over_every_leading_dim():
    (rule, _) = _rows_rules(100)
    x = torch.empty(10, 11, 6)
    assert screen_reason(rule, [x], [660], args={"normalized_shape": [6]}) == "110 >= 100 rows of 6 normalized elements"
    assert screen_reason(rule, [x], [660], args={"normalized_shape": [11, 6]}) is None    # 10 rows
    assert screen_reason(rule, [x], [660], args={}) is None                              # not a normalization


@pytest.mark.parametrize("affine", [True, False])
def test_a_layer_norm_over_two_dims_in_row_pieces_is_bitwise_the_bare_call(affine):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 7, 3, 4, generator=g)
    w, b = (torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g)) if affine else (None, None)
    want = torch.ops.aten.native_layer_norm(x, [3, 4], w, b, 1e-5)
    with guarding("fix", rules=_rows_rules(100), native=False) as engine:
        got = torch.ops.aten.native_layer_norm(x, [3, 4], w, b, 1e-5)
    st = engine.stats()
    assert st.fixed == 1 and st.refused == 0, st.summary()
    for g_, w_ in zip(got, want):
        assert g_.shape == w_.shape and torch.equal(g_, w_)


@pytest.mark.parametrize("dtype,affine", [(torch.float32, True), (torch.float32, False), (torch.bfloat16, True)])
def test_f_layer_norm_forward_and_backward_past_the_rows_give_the_bare_answer(dtype, affine):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(50, 10, 2, 3, generator=g, dtype=torch.float64)
    w, b = (torch.randn(2, 3, generator=g, dtype=torch.float64),
            torch.randn(2, 3, generator=g, dtype=torch.float64)) if affine else (None, None)
    go = torch.randn(50, 10, 2, 3, generator=g, dtype=torch.float64)

    def run(dt, rounded_to=None):
        def cast(t):   # the inputs as ``dt`` (first rounded to ``rounded_to``, for a float64 reference)
            return (t.to(rounded_to) if rounded_to is not None else t).to(dt)
        xs = cast(x).requires_grad_()
        ws, bs = (cast(t).requires_grad_() if t is not None else None for t in (w, b))
        y = F.layer_norm(xs, (2, 3), ws, bs)
        y.backward(cast(go))
        return [y, xs.grad] + ([ws.grad, bs.grad] if affine else [])

    bare = run(dtype)
    with guarding("fix", rules=_rows_rules(64), native=False) as engine:   # 500 rows: pieces of at most 63
        got = run(dtype)
    st = engine.stats()
    assert st.fixed == 2 and st.refused == 0, st.summary()   # the forward and the backward
    for g_, w_ in zip(got, bare):
        assert g_.dtype == w_.dtype and g_.shape == w_.shape
    if dtype == torch.float32:
        for g_, w_ in zip(got, bare):
            torch.testing.assert_close(g_, w_, rtol=1e-5, atol=1e-5)
    else:
        # bfloat16: the output and input gradient are the bare kernel's, row by row; the
        # weight's and bias's gradients, sums over 500 rows, the fix sums in float32 and is
        # at least as close to float64 (on the same rounded inputs) as the bare kernel
        assert torch.equal(got[0], bare[0]) and torch.equal(got[1], bare[1])
        ref = run(torch.float64, rounded_to=dtype)
        for i in (2, 3):
            err = float((got[i].double() - ref[i]).abs().max())
            one_rounding = 2**-8 * float(ref[i].abs().max())   # a bfloat16 ulp at the largest sum
            assert err <= float((bare[i].double() - ref[i]).abs().max()) and err <= one_rounding, (i, err)


def test_the_backward_fix_leaves_out_the_gradients_the_mask_leaves_out():
    g = torch.Generator().manual_seed(2)
    x, go = torch.randn(40, 5, generator=g), torch.randn(40, 5, generator=g)
    w, b = torch.randn(5, generator=g), torch.randn(5, generator=g)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [5], w, b, 1e-5)
    func = torch.ops.aten.native_layer_norm_backward.default
    args = (go, x, [5], mean, rstd, w, b, [False, True, False])
    got = sep.fix_layer_norm_backward_rows(func, args, {}, lambda n, *a, **k: func(*a, **k),
                                           lambda ts, outs: ts[0].shape[0] <= 8, [200, 5, 5])
    want = func(*args)
    assert got[0] is None and got[2] is None
    torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-5)


def test_a_layer_norm_over_every_dim_has_no_rows_to_cut():
    x = torch.randn(4, 5)
    with pytest.raises(sep.CannotSplit, match="leaves no rows"):
        sep.fix_layer_norm_rows(torch.ops.aten.native_layer_norm.default, (x, [4, 5], None, None, 1e-5), {},
                                lambda n, *a, **k: None, lambda ts, outs: True, [20, 1, 1])


def test_the_rows_and_norm_rows_rules_together_fix_a_backward_over_two_normalized_dims():
    # past 2^31 rows over two normalized dims both shipped backward rules flag the call: the
    # rows fix runs, its pieces kept under both (no piece reaches the two-pass gamma path)
    norm_rows = [dataclasses.replace(r, device="cpu", versions={}, when={**r.when, "at_least": 100})
                 for r in load_rules(RULES.parent / "norm_backward_rows.json") if r.op == "nn.functional.layer_norm"]
    rules = _rows_rules(300) + norm_rows
    g = torch.Generator().manual_seed(3)
    x, go = torch.randn(50, 10, 2, 3, generator=g), torch.randn(50, 10, 2, 3, generator=g)
    w = torch.randn(2, 3, generator=g)

    def run():
        xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
        F.layer_norm(xs, (2, 3), ws).backward(go)
        return xs.grad, ws.grad

    want = run()
    pieces = []
    with guarding("fix", rules=rules, native=False) as engine:
        real = sep.fix_layer_norm_backward_rows

        def counted(func, args, kwargs, run_, safe, outs):   # records each piece's rows
            def run_piece(name, *a, **k):
                pieces.append(a[0].shape[0])
                return run_(name, *a, **k)
            return real(func, args, kwargs, run_piece, safe, outs)
        sep.OWN_FIX["native_layer_norm_backward"] = counted
        try:
            got = run()
        finally:
            sep.OWN_FIX["native_layer_norm_backward"] = real
    assert engine.stats().fixed == 2 and engine.stats().refused == 0, engine.stats().summary()
    assert pieces and sum(pieces) == 500 and max(pieces) < 100   # every row once, every piece under both rules
    for g_, w_ in zip(got, want):
        torch.testing.assert_close(g_, w_, rtol=1e-5, atol=1e-5)
