"""A slow op's reference may take another route to the same values (``OpSpec.ref_call``):
cdist by broadcasting. The route must give cdist's values and gradients, and the judge
that uses it must still pass a right call and catch a planted fault."""

from __future__ import annotations

import math

import pytest
import torch

from kernelaudit.sweep.ops import routes


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 3.0, math.inf])
def test_cdist_by_broadcast_gives_cdists_values(p):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 5, 3, generator=g, dtype=torch.float64)
    y = torch.randn(7, 6, 3, generator=g, dtype=torch.float64)
    x[:, :2, 0] = y[:, :2, 0]  # equal coordinates: what p = 0 counts
    got, want = routes.cdist_by_broadcast(x, y, p), torch.cdist(x, y, p)
    assert got.shape == want.shape
    if p in (0.0, 1.0, math.inf):
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-13)


def test_cdist_by_broadcast_has_cdists_zero_gradient_at_p0():
    x = torch.randn(4, 5, 2, dtype=torch.float64, requires_grad=True)
    y = torch.randn(4, 6, 2, dtype=torch.float64, requires_grad=True)
    want = torch.autograd.grad(torch.cdist(x, y, 0.0).sum(), [x, y])
    got = torch.autograd.grad(routes.cdist_by_broadcast(x, y, 0.0).sum(), [x, y])
    assert all(torch.equal(a, b) for a, b in zip(got, want)) and not any(bool(a.any()) for a in got)


def test_the_routed_cdist_reference_passes_a_right_call_and_catches_an_unwritten_tail(catalogue, monkeypatch):
    from kernelaudit.sweep.judge.execution import execute
    from kernelaudit.sweep.ops.catalog import op_spec

    from .test_opinfo_catalogue import _one_case

    assert op_spec("cdist").ref_call is not None
    used = []
    broadcast = routes.cdist_by_broadcast
    monkeypatch.setattr(routes, "ROUTE_DEVICES", {"cpu", "cuda"})
    monkeypatch.setattr(routes, "cdist_by_broadcast", lambda *a, **k: used.append(1) or broadcast(*a, **k))
    for direction in ("fwd", "bwd"):
        case, tol = _one_case("cdist", direction=direction)
        assert execute(case, "cpu", tolerances=tol).verdict.status.value == "ok", direction
    case, tol = _one_case("cdist")
    # what cdist does on the H200 past 2^32 outputs: only the first (count mod 2^32) are written
    v = execute(case, "cpu", fault_model="unwritten-tail", tolerances=tol).verdict
    assert v.status.value == "wrong" and v.first_bad_index == case.thresholds.t32, v.message
    assert used
