"""The full grid's ``unique_consecutive`` rules (``known_faults/full_grid_2_31.json``): CUDA
refuses ``unique_consecutive`` of 2^31 or more elements (CUB's int item count); the guard
computes it in pieces of the flattened input and merges runs across the cuts. On the CPU, the rule scaled down: the same
output, inverse and counts as the whole call, NaN runs (never equal) included; along a
dim of a 2-d tensor the call is refused."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from kernelaudit.errors import UnsafeCallError
from kernelaudit.guard import separable as sep
from kernelaudit.guard.intercept import guarding
from kernelaudit.guard.rules import load_rules

SHIPPED = Path(__file__).resolve().parents[2] / "src/kernelaudit/guard/known_faults/full_grid_2_31.json"


def _runs(seed: int, n_runs: int = 40) -> torch.Tensor:
    """Runs of 1-40 equal values from {0, 1, 2, 3, NaN}: many runs cross any cut."""
    g = torch.Generator().manual_seed(seed)
    vals = torch.randint(0, 4, (n_runs,), generator=g).float()
    vals[torch.rand(n_runs, generator=g) < 0.15] = float("nan")
    return vals.repeat_interleave(torch.randint(1, 41, (n_runs,), generator=g))


def _same(got, want) -> None:
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a.nan_to_num(-7.0), b.nan_to_num(-7.0))


@pytest.mark.parametrize("seed", range(40))
def test_pieces_merged_across_their_cuts_give_the_whole_calls_answer(seed):
    x = _runs(seed)
    g = torch.Generator().manual_seed(100 + seed)
    for inverse in (False, True):
        for counts in (False, True):
            limit = int(torch.randint(2, 50, (1,), generator=g))
            pieces = []

            def run(name, piece, *flags):
                pieces.append(piece.numel())
                return torch.ops.aten.unique_consecutive(piece, *flags)

            got = sep.fix_unique_consecutive(torch.ops.aten.unique_consecutive.default, (x, inverse, counts), {}, run,
                                             lambda ts, outs: ts[0].numel() < limit, [x.numel()])
            _same(got, torch.ops.aten.unique_consecutive(x, inverse, counts))
            assert sum(pieces) == x.numel() and max(pieces) < limit and len(pieces) >= sep.MIN_PIECES


def test_the_shipped_rule_fixes_calls_past_its_size_and_refuses_a_dim_of_a_2d_tensor():
    rules = [r for r in load_rules(SHIPPED) if r.op == "unique_consecutive"]
    assert {(r.action, r.split_dim, r.aten) for r in rules} == {("fix", None, ("unique_consecutive",))}
    (rule,) = [r for r in rules if r.dtypes == ("float32",)]
    assert rule.when["at_least"] == 2147467265       # one past the grid's right case below 2^31
    x = _runs(7)
    cpu = dataclasses.replace(rule, device="cpu", versions={}, when={**rule.when, "at_least": x.numel() // 3})
    want = torch.unique_consecutive(x, return_inverse=True, return_counts=True)
    with guarding("fix", rules=[cpu]) as engine:
        got = torch.unique_consecutive(x, return_inverse=True, return_counts=True)
        plain = x.unique_consecutive()
        square = x[: (x.numel() // 2) * 2].reshape(2, -1)
        with pytest.raises(UnsafeCallError, match="compares slices"):
            torch.unique_consecutive(square, dim=1)
    _same(got, want)
    _same((plain,), (want[0],))
    st = engine.stats()
    assert (st.fixed, st.refused) == (2, 1), st.summary()
