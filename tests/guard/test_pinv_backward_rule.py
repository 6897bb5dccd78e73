"""``pinv_backward_tall.json``: ``linalg.pinv``'s backward of a tall matrix without an
m x m product. On the CPU, the rules moved there at a small limit: the gradient under
the guard is PyTorch's, and no matmul of the backward has an m x m output."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelaudit.guard.intercept import guarding
from kernelaudit.guard.rules import load_rules

KNOWN = Path(__file__).resolve().parents[2] / "src/kernelaudit/guard/known_faults"


def _rules(at_least: int):
    return [dataclasses.replace(r, device="cpu", versions={}, when={**r.when, "at_least": at_least})
            for r in load_rules(KNOWN / "pinv_backward_tall.json")]


class _Products(TorchDispatchMode):
    """The largest output of a matmul-family op called under it."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.bmm, torch.ops.aten.addmm,
                                   torch.ops.aten.baddbmm):
            self.largest = max(self.largest, out.numel())
        return out


def _grad(a: torch.Tensor, g: torch.Tensor, **kw):
    x = a.clone().requires_grad_()
    with _Products() as seen:
        torch.linalg.pinv(x, **kw).backward(g)
    return x.grad, seen.largest


@pytest.mark.parametrize("shape", [(300, 4), (2, 200, 3)])
def test_a_tall_pinv_gets_pytorchs_gradient_without_an_m_by_m_product(shape):
    g = torch.Generator().manual_seed(2)
    a = torch.randn(*shape, dtype=torch.float64, generator=g)
    up = torch.randn(*shape[:-2], shape[-1], shape[-2], dtype=torch.float64, generator=g)
    m = shape[-2]
    bare, bare_largest = _grad(a, up, rtol=1e-12)
    assert bare_largest >= m * m                 # PyTorch's own formula builds m x m
    with guarding("fix", rules=_rules(64)) as engine:
        got, largest = _grad(a, up, rtol=1e-12)
    st = engine.stats()
    assert st.fixed == 1 and st.refused == 0, st.summary()
    assert largest < m * m
    torch.testing.assert_close(got, bare, rtol=1e-10, atol=1e-12)


def test_a_pinv_without_grad_or_not_tall_runs_as_it_is():
    g = torch.Generator().manual_seed(3)
    tall = torch.randn(300, 4, dtype=torch.float64, generator=g)
    wide = torch.randn(4, 300, dtype=torch.float64, generator=g)
    with guarding("fix", rules=_rules(64)) as engine:
        with torch.no_grad():
            y = torch.linalg.pinv(tall)
        x = wide.clone().requires_grad_()
        torch.linalg.pinv(x).sum().backward()
    assert torch.equal(y, torch.linalg.pinv(tall))
    x2 = wide.clone().requires_grad_()
    torch.linalg.pinv(x2).sum().backward()
    assert torch.equal(x.grad, x2.grad)
    # flagged (the rule reads the shape), then run through the original kernel
    assert engine.stats().refused == 0
