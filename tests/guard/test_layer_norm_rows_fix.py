"""The layer norm's rows fix (``separable.fix_layer_norm_rows``, shipped in
``known_faults/batched_eigh_layer_norm_rows.json``): CUDA's ``native_layer_norm`` refuses
more than 2^31 - 1 rows; the guard runs the rows in pieces, weight and bias whole."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kernelaudit.guard import separable as sep
from kernelaudit.guard.intercept import guarding
from kernelaudit.guard.rules import load_rules

RULES = Path(__file__).resolve().parents[2] / "src/kernelaudit/guard/known_faults/batched_eigh_layer_norm_rows.json"


def _rows_rules(at_least: int):
    """The shipped native_layer_norm rules on the CPU, ungated, from ``at_least`` rows."""
    return [dataclasses.replace(r, device="cpu", versions={}, when={"kind": "dim", "dim": 0, "at_least": at_least})
            for r in load_rules(RULES) if r.op == "native_layer_norm" and r.when["kind"] == "dim"]


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


def test_f_layer_norm_forward_and_backward_under_the_rule_give_the_bare_answer():
    g = torch.Generator().manual_seed(1)
    x, w, b = torch.randn(500, 6, generator=g), torch.randn(6, generator=g), torch.randn(6, generator=g)
    go = torch.randn(500, 6, generator=g)

    def run():
        xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, b))
        y = F.layer_norm(xs, (6,), ws, bs)
        y.backward(go)
        return y, xs.grad, ws.grad, bs.grad

    want = run()
    with guarding("fix", rules=_rows_rules(200), native=False) as engine:
        got = run()
    assert engine.stats().fixed >= 1, engine.stats().summary()
    for g_, w_ in zip(got, want):
        torch.testing.assert_close(g_, w_, rtol=1e-6, atol=1e-6)


def test_a_layer_norm_over_every_dim_has_no_rows_to_cut():
    x = torch.randn(4, 5)
    with pytest.raises(sep.CannotSplit, match="leaves no rows"):
        sep.fix_layer_norm_rows(torch.ops.aten.native_layer_norm.default, (x, [4, 5], None, None, 1e-5), {},
                                lambda n, *a, **k: None, lambda ts, outs: True, [20, 1, 1])
