"""``known_faults/scan_with_indices_2_31.json``: ``torch.cummax`` / ``cummin`` of a 1-d CUDA
tensor of 2^31 - 16 elements raised an illegal memory access (H100, torch 2.11), where
2^31 - 16,384 ran right. The rule refuses the call: on the shipped sizes it flags the
crashing call and passes the one that ran; on the CPU, moved there and scaled down, the
guard raises ``UnsafeCallError`` above the threshold and leaves a call below it (and a
2-d input) alone."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from kernelaudit.errors import UnsafeCallError
from kernelaudit.guard.intercept import guarding
from kernelaudit.guard.rules import known_faults, load_rules, screen_reason

SHIPPED = Path(__file__).resolve().parents[2] / "src/kernelaudit/guard/known_faults/scan_with_indices_2_31.json"


def _rules(at_least: int):
    return [dataclasses.replace(r, device="cpu", versions={}, when={**r.when, "at_least": at_least})
            for r in load_rules(SHIPPED)]


def test_the_shipped_rules_refuse_from_just_past_the_largest_size_that_ran():
    rules = load_rules(SHIPPED)
    assert {(r.op, r.aten, r.action, r.effect) for r in rules} == {
        ("cummax", ("_cummax_helper",), "raise", "crash"), ("cummin", ("_cummin_helper",), "raise", "crash")}
    assert {r.name for r in rules} <= {r.name for r in known_faults()}     # in the shipped database
    crashed, ran = torch.empty(2**31 - 16, device="meta"), torch.empty(2**31 - 16384, device="meta")
    rows = torch.empty(2, 2**31 - 16, device="meta")                      # another rank: not what the grid ran
    for r in rules:
        assert screen_reason(r, [crashed], [crashed.numel()]) is not None
        assert screen_reason(r, [ran], [ran.numel()]) is None
        assert screen_reason(r, [rows], [rows.numel()]) is None


@pytest.mark.parametrize("op", [torch.cummax, torch.cummin])
def test_a_1d_scan_past_the_threshold_is_refused_and_one_below_runs(op):
    x = torch.randn(300)
    want = op(x[:200], 0)
    with guarding("fix", rules=_rules(256)) as engine:
        small = op(x[:200], 0)
        with pytest.raises(UnsafeCallError, match="illegal memory access"):
            op(x, 0)
        op(torch.randn(2, 300), 1)                    # 2-d: not screened
    st = engine.stats()
    assert st.refused == 1 and st.fixed == 0, st.summary()
    assert torch.equal(small.values, want.values) and torch.equal(small.indices, want.indices)
