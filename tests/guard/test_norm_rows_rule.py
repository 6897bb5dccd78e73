"""The ``norm-rows`` rules (``known_faults/norm_backward_rows.json``): a layer or RMS
norm backward over several normalized dims past 65,536 rows, where CUDA's two-pass gamma
backward writes past its scratch (pytorch/pytorch PR #192016), is run with its
normalized dims flattened into one. On the CPU: which calls the predicate flags, and
that the flattened call gives the bare call's gradients (layer norm through the guard;
the fused RMS norm, which has no CPU kernel, through the fixer with a reference
kernel)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kernelaudit.errors import InvalidArgument
from kernelaudit.guard import intercept
from kernelaudit.guard import separable as sep
from kernelaudit.guard.rules import load_rules, parse_rules, screen_reason

SHIPPED = Path(__file__).resolve().parents[2] / "src/kernelaudit/guard/known_faults/norm_backward_rows.json"


def _rule(op: str):
    (rule,) = [r for r in load_rules(SHIPPED) if r.op == op]
    return rule


def _reason(rule, rows: int, shape: tuple) -> str | None:
    x = torch.empty(rows, *shape, device="meta")
    return screen_reason(rule, [x, x], [x.numel()], args={"normalized_shape": list(shape)})


def test_the_rule_flags_several_small_normalized_dims_past_65536_rows_only():
    rule = _rule("nn.functional.layer_norm")
    assert rule.aten == ("native_layer_norm_backward",) and (rule.action, rule.split_dim) == ("fix", None)
    assert "65537 >= 65537 rows over 2 normalized dims" in _reason(rule, 65537, (2, 3))
    assert _reason(rule, 65536, (2, 3)) is None          # one pass up to 64 * 1024 rows
    assert _reason(rule, 10**6, (6,)) is None            # one normalized dim: its scratch is right
    assert _reason(rule, 10**6, (64, 64)) is None        # N = 4096: the two-pass path is not taken
    assert _reason(rule, 10**6, (2, 3, 4)) is not None


def test_a_norm_rows_rule_needs_its_normalized_limit():
    rule = json.loads(SHIPPED.read_text())["rules"][0]
    del rule["when"]["below_normalized"]
    with pytest.raises(InvalidArgument, match="below_normalized=None: an integer >= 2"):
        parse_rules({"schema": 1, "rules": [rule]})


def _layer_norm_grads(x, w, b, g, shape):
    xs, ws, bs = (t.detach().clone().requires_grad_() for t in (x, w, b))
    F.layer_norm(xs, shape, ws, bs).backward(g)
    return xs.grad, ws.grad, bs.grad


def test_a_layer_norm_backward_under_the_rule_is_flattened_and_gives_the_bare_gradients():
    shape = (2, 3)
    g0 = torch.Generator().manual_seed(0)
    x, g = (torch.randn(300, *shape, generator=g0, dtype=torch.float64) for _ in range(2))
    w, b = (torch.randn(*shape, generator=g0, dtype=torch.float64) for _ in range(2))
    want = _layer_norm_grads(x, w, b, g, shape)
    rule = dataclasses.replace(_rule("nn.functional.layer_norm"), device="cpu", versions={},
                               when={"kind": "norm-rows", "at_least": 100, "below_normalized": 4096})
    try:
        engine = intercept.install("fix", rules=[rule], native=False)
        got = _layer_norm_grads(x, w, b, g, shape)
        stats = engine.stats()
    finally:
        intercept.uninstall()
    assert stats.fixed == 1 and stats.refused == 0, stats.summary()
    for a, e in zip(got, want):
        assert a.shape == e.shape
        torch.testing.assert_close(a, e, rtol=1e-12, atol=1e-12)


def _rms_backward(grad_out, input, normalized_shape, rstd, weight, output_mask):
    """RMS norm's backward from its definition (autograd over y = x * rstd * w), as the
    fused kernel computes it; any number of normalized dims."""
    dims = tuple(range(input.dim() - len(normalized_shape), input.dim()))
    xs, ws = input.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    y = xs * torch.rsqrt(xs.pow(2).mean(dims, keepdim=True) + 1e-6) * ws
    return torch.autograd.grad(y, (xs, ws), grad_out)


def test_the_fused_rms_norm_backward_flattened_gives_the_same_gradients_in_their_shapes():
    shape = (2, 3)
    g0 = torch.Generator().manual_seed(1)
    x, g = (torch.randn(50, 4, *shape, generator=g0, dtype=torch.float64) for _ in range(2))
    w = torch.randn(*shape, generator=g0, dtype=torch.float64)
    rstd = torch.rsqrt(x.pow(2).mean((-2, -1), keepdim=True) + 1e-6)
    want = _rms_backward(g, x, list(shape), rstd, w, [True, True])
    seen = {}

    def run(entry, *args):
        seen["entry"], seen["shapes"] = entry, [tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args]
        return _rms_backward(*args)

    got = sep.fix_flatten_normalized(torch.ops.aten._fused_rms_norm_backward.default,
                                     (g, x, list(shape), rstd, w, [True, True]), {}, run)
    assert seen["entry"] == "_fused_rms_norm_backward"
    assert seen["shapes"] == [(50, 4, 6), (50, 4, 6), [6], (50, 4, 1), (6,), [True, True]]
    for a, e in zip(got, want):
        assert a.shape == e.shape
        torch.testing.assert_close(a, e, rtol=1e-12, atol=1e-12)
