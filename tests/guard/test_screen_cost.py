"""What a screened entry point costs each call: the outputs' sizes come from the op's
meta kernel (torch's Python decompositions, about 1 ms a call on a CPU), so they are
asked for only by a rule that reads them, and once per call metadata."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernelaudit.guard import intercept
from kernelaudit.guard.rules import KnownFault


def _rule(kind: dict, entry: str, op: str) -> KnownFault:
    return KnownFault(name=f"r-{entry}", op=op, device="cpu", effect="wrong", when=kind, action="raise",
                      aten=(entry,))


def _count_meta(monkeypatch) -> list:
    calls = []
    real = intercept._meta_out_numels

    def counted(*a, **k):
        calls.append(a[0])
        return real(*a, **k)

    monkeypatch.setattr(intercept, "_meta_out_numels", counted)
    intercept._OUT_NUMELS.clear()
    return calls


def _softmax_backward(rows: int) -> None:
    x = torch.randn(rows, 7, requires_grad=True)
    F.softmax(x, -1).sum().backward()


def test_a_rule_reading_the_outputs_runs_the_meta_kernel_once_per_call_shape(monkeypatch):
    calls = _count_meta(monkeypatch)
    rule = _rule({"kind": "numel", "tensor": "any", "at_least": 10**9}, "_softmax_backward_data",
                 "nn.functional.softmax")
    try:
        intercept.install("fix", rules=[rule], native=False)
        for _ in range(3):
            _softmax_backward(16)
        assert len(calls) == 1
        _softmax_backward(32)
        assert len(calls) == 2
    finally:
        intercept.uninstall()


def test_a_rule_that_reads_no_outputs_never_runs_the_meta_kernel(monkeypatch):
    calls = _count_meta(monkeypatch)
    rule = _rule({"kind": "norm-rows", "at_least": 10**9, "below_normalized": 4096}, "native_layer_norm_backward",
                 "nn.functional.layer_norm")
    try:
        engine = intercept.install("fix", rules=[rule], native=False)
        x = torch.randn(16, 2, 3, requires_grad=True)
        F.layer_norm(x, (2, 3)).sum().backward()
        assert engine.stats().inspected >= 1
    finally:
        intercept.uninstall()
    assert calls == []


def test_a_call_s_arguments_are_read_by_name_positional_or_keyword():
    from kernelaudit.guard.separable import CallArgs

    f = torch.ops.aten._softmax_backward_data.default
    g = torch.zeros(2, 3)
    positional = CallArgs(f, (g, g, 1, torch.float32), {})
    assert positional.get("dim") == 1 and positional.get("input_dtype") == torch.float32
    keyword = CallArgs(f, (g, g), {"dim": 0, "input_dtype": torch.float16})
    assert keyword.get("dim") == 0 and keyword.get("no_such_argument", "absent") == "absent"
