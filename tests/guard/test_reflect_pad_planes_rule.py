"""``reflect_pad_planes.json``: reflect padding's backward over a 3-d input with more planes
(dim 1) than its CUDA grid holds runs in pieces of planes; a 2-d input, whose dim 1 is the
padded width, is never cut along it. On the CPU, the rule moved there at a small limit."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kernelaudit.errors import InvalidArgument
from kernelaudit.guard.cli import predicate_text
from kernelaudit.guard.intercept import guarding
from kernelaudit.guard.rules import KnownFault, load_rules

KNOWN = Path(__file__).resolve().parents[2] / "src/kernelaudit/guard/known_faults"


def _rules(at_least: int):
    return [dataclasses.replace(r, device="cpu", versions={}, when={**r.when, "at_least": at_least})
            for r in load_rules(KNOWN / "reflect_pad_planes.json")]


def _grad(x: torch.Tensor, go: torch.Tensor) -> torch.Tensor:
    xs = x.clone().requires_grad_()
    F.pad(xs, (1, 2), "reflect").backward(go)
    return xs.grad


def test_a_3d_input_with_planes_past_the_limit_runs_its_backward_in_pieces_of_planes():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 40, 5, generator=g)
    go = torch.randn(2, 40, 8, generator=g)
    bare = _grad(x, go)
    with guarding("fix", rules=_rules(16)) as engine:
        got = _grad(x, go)
    st = engine.stats()
    assert st.fixed == 1 and st.refused == 0, st.summary()
    assert torch.equal(got, bare)


def test_a_2d_input_is_not_cut_along_its_padded_width():
    # dim 1 of a (C, W) input is W: the rule reads 3-d tensors only
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 40, generator=g)
    go = torch.randn(3, 43, generator=g)
    bare = _grad(x, go)
    with guarding("fix", rules=_rules(16)) as engine:
        got = _grad(x, go)
    st = engine.stats()
    assert st.flagged == 0, st.summary()
    assert torch.equal(got, bare)


def test_a_dim_predicate_names_its_rank_in_words_and_refuses_one_at_or_below_its_dim():
    (rule,) = load_rules(KNOWN / "reflect_pad_planes.json")
    assert predicate_text(rule.when) == "dim 1 of a 3-d tensor >= 65533"
    bad = {**rule.to_json(), "when": {**rule.when, "ndim": 1}}
    with pytest.raises(InvalidArgument, match="ndim"):
        KnownFault.from_json(bad, "a rule")
