"""``known_faults/mode_2_31.json``: ``torch.mode`` of float32 rows past 2^31 elements did
not return within 120 s on an H100 (2^31 - 398 elements took 2.6 s). The fix cuts the
rows along dim 0; on the CPU, the rule moved there and scaled down: the values and
indices equal the bare call's (ties included), a call below the limit runs as it is, and
a call along dim 0 is refused rather than cut along the dim it reduces."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from kernelaudit.errors import UnsafeCallError
from kernelaudit.guard.intercept import guarding
from kernelaudit.guard.rules import load_rules, screen_reason

SHIPPED = Path(__file__).resolve().parents[2] / "src/kernelaudit/guard/known_faults/mode_2_31.json"


def _rule(at_least: int):
    (rule,) = load_rules(SHIPPED)
    return dataclasses.replace(rule, device="cpu", versions={}, when={**rule.when, "at_least": at_least})


def test_the_shipped_rule_starts_between_the_sizes_the_grid_ran_and_splits_rows():
    (rule,) = load_rules(SHIPPED)
    assert (rule.effect, rule.action, rule.split_dim, rule.aten, rule.dtypes) == (
        "hang", "fix", 0, ("mode",), ("float32",))
    hung, ran = (torch.empty(n, 5, 5, device="meta") for n in (85_899_385, 85_899_330))
    assert screen_reason(rule, [hung], [hung.numel() // 5]) is not None
    assert screen_reason(rule, [ran], [ran.numel() // 5]) is None


def test_mode_in_pieces_of_rows_equals_the_whole_call():
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, 3, (400, 5, 5), generator=g).float()      # many ties: the index rule shows
    want = torch.mode(x)
    with guarding("fix", rules=[_rule(2000)]) as engine:
        got = torch.mode(x)
        small = torch.mode(x[:40])
        with pytest.raises(UnsafeCallError):
            torch.mode(x, 0)                                    # reduces along the dim a split would cut
    st = engine.stats()
    assert st.fixed == 1 and st.refused == 1, st.summary()
    assert torch.equal(got.values, want.values) and torch.equal(got.indices, want.indices)
    assert torch.equal(small.values, torch.mode(x[:40]).values)
