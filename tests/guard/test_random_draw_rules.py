"""The random-draw rules (``known_faults/random_draws.json``): rrelu in training,
bernoulli with a probability tensor and multinomial, fixed by drawing in pieces along
dim 0. On the CPU, the rules moved there and scaled down: with probabilities of 0 and 1
(and rrelu's positive inputs) the draws must come out exactly, so a piece that were
skipped, misplaced or written twice shows; the in-place entries return the caller's
tensor; a one-distribution multinomial is refused, never cut across its categories."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kernelaudit.errors import UnsafeCallError
from kernelaudit.guard.intercept import guarding
from kernelaudit.guard.rules import load_rules, screen_reason

SHIPPED = Path(__file__).resolve().parents[2] / "src/kernelaudit/guard/known_faults/random_draws.json"
ROWS = 64


def _rule(name: str, at_least: int):
    (rule,) = [r for r in load_rules(SHIPPED) if r.name == name]
    return dataclasses.replace(rule, device="cpu", versions={}, when={**rule.when, "at_least": at_least})


def test_the_shipped_rules_start_where_the_source_and_the_grid_say_and_say_how_they_split():
    rules = {r.name: r for r in load_rules(SHIPPED)}
    assert {r.action for r in rules.values()} == {"fix"}
    assert {n: r.split_dim for n, r in rules.items()} == {   # multinomial: its own fix (pieces of draws)
        "random-rrelu_with_noise": 0, "random-bernoulli-tensor": 0, "random-multinomial": None}
    rrelu = rules["random-rrelu_with_noise"]
    # the grid's smallest wrong size: wrong from index 0 at 2^31 - 16384 elements (2026-12-06)
    big, small = (torch.empty(n, device="meta") for n in (2**31 - 16384, 2**31 - 16385))
    assert screen_reason(rrelu, [big, big], [big.numel()]) is not None
    assert screen_reason(rrelu, [small, small], [small.numel()]) is None
    bern = rules["random-bernoulli-tensor"]   # the slow pass: 20 of 2^31 + 16 never written (H100)
    big, small = (torch.empty(n, device="meta") for n in (2**31 + 16, 2**31 + 15))
    assert screen_reason(bern, [big], [big.numel()]) is not None
    assert screen_reason(bern, [small], [small.numel()]) is None
    draws = rules["random-multinomial"].when["at_least"]
    assert draws == 2**31 - 16384                                                # an illegal access from there
    assert rules["random-multinomial"].when["tensor"] == "output"              # draws, not categories
    assert all(r.versions == {"torch": "==2.11.*"} for r in rules.values())


def test_bernoulli_of_probabilities_0_and_1_in_pieces_gives_exactly_them_in_place():
    g = torch.Generator().manual_seed(0)
    p = (torch.rand(ROWS, 5, generator=g) < 0.5).float()
    with guarding("fix", rules=[_rule("random-bernoulli-tensor", ROWS * 5 // 4)]) as engine:
        drawn = torch.bernoulli(p)
        x = torch.empty_like(p)
        same = x.bernoulli_(p)
        out = torch.empty(1)
        torch.bernoulli(p, out=out)
        tiny = torch.bernoulli(p[:2])
    assert torch.equal(drawn, p) and torch.equal(x, p) and torch.equal(out, p) and torch.equal(tiny, p[:2])
    assert same is x                                   # the in-place entry returns the caller's tensor
    st = engine.stats()
    assert st.fixed >= 3 and st.refused == 0, st.summary()


def test_rrelu_in_training_in_pieces_writes_every_output_and_noise_element():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(ROWS, 7, generator=g, dtype=torch.float64)
    noise = torch.full_like(x, float("nan"))
    lower, upper = 0.1, 0.3
    with guarding("fix", rules=[_rule("random-rrelu_with_noise", x.numel() // 4)]) as engine:
        y = torch.ops.aten.rrelu_with_noise(x, noise, lower, upper, True)
        xs = x.clone().requires_grad_()
        z = F.rrelu(xs, lower, upper, training=True)
        z.sum().backward()
        inplace = x.clone()
        r = F.rrelu(inplace, lower, upper, training=True, inplace=True)
    pos = x > 0
    assert torch.equal(noise[pos], torch.ones_like(x)[pos])                    # every noise element written
    assert bool(((noise[~pos] >= lower) & (noise[~pos] <= upper)).all())
    assert torch.equal(y, x * noise)
    assert torch.equal(z[pos], x[pos]) and bool(((z[~pos] / x[~pos]).sub(0.2).abs() <= 0.1 + 1e-12).all())
    assert torch.equal(xs.grad[pos], torch.ones_like(x)[pos])                   # the backward sees the pieces' noise
    assert r is inplace and torch.equal(inplace[pos], x[pos]) and not torch.equal(inplace, x)
    st = engine.stats()
    assert st.fixed >= 3 and st.refused == 0, st.summary()


def test_multinomial_draws_in_pieces_of_draws_or_rows_and_never_cuts_categories():
    g = torch.Generator().manual_seed(2)
    cats = torch.randint(0, 6, (ROWS,), generator=g)
    probs = F.one_hot(cats, 6).float()      # the rule's dtype: float32
    one = torch.zeros(6)
    one[4] = 1.0
    rule = _rule("random-multinomial", ROWS * 3 // 4)
    with guarding("fix", rules=[rule]) as engine:
        drawn = torch.multinomial(probs, 3, replacement=True)                  # one draw a row too many: rows
        assert torch.equal(drawn, cats[:, None].expand(ROWS, 3))
        wide = torch.multinomial(probs[:4], ROWS * 3, replacement=True)        # pieces of draws, every row
        assert torch.equal(wide, cats[:4, None].expand(4, ROWS * 3))
        many = torch.multinomial(one, ROWS * 3, replacement=True)             # the sweep's: one law, many draws
        assert torch.equal(many, torch.full((ROWS * 3,), 4))
        out = torch.empty(0, dtype=torch.int64)
        torch.multinomial(one, ROWS * 3, replacement=True, out=out)
        assert torch.equal(out, many)
        unique = torch.multinomial(probs, 1)                                   # without: pieces of rows
        assert torch.equal(unique[:, 0], cats)
        with pytest.raises(UnsafeCallError, match="depend on each other"):
            torch.multinomial(torch.ones(ROWS * 3), ROWS * 3)                  # without, one law: refused
    st = engine.stats()
    assert (st.fixed, st.refused) == (5, 1), st.summary()


def test_an_in_place_entry_split_returns_the_callers_tensor_and_allocates_no_whole_copy():
    from kernelaudit.guard import separable as sep

    p = (torch.arange(ROWS * 5).reshape(ROWS, 5) % 3 == 0).float()
    x = torch.full_like(p, 7.0)
    pieces = []

    def run(name, *args, **kwargs):
        pieces.append((name, tuple(args[0].shape), args[0].data_ptr()))
        return getattr(torch.ops.aten, name.split(".")[0]).Tensor(*args, **kwargs)

    got = sep.fix_split(torch.ops.aten.bernoulli_.Tensor, (x, p), {}, run,
                        lambda ts, outs: ts[0].shape[0] <= ROWS // 4, (0,), [x.numel()])
    assert got is x and torch.equal(x, p)
    assert [s for _, s, _ in pieces] == [(ROWS // 8, 5)] * 8                 # MIN_PIECES pieces, each a slice
    assert {ptr for _, _, ptr in pieces} == {x[i:i + ROWS // 8].data_ptr() for i in range(0, ROWS, ROWS // 8)}


def test_multinomial_with_replacement_draws_every_row_in_pieces_of_draws():
    from kernelaudit.guard import separable as sep

    probs = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    calls = []

    def run(name, p, m, replacement, generator=None):
        calls.append((name, tuple(p.shape), m, replacement))
        return torch.multinomial(p, m, replacement, generator=generator)

    got = sep.fix_multinomial(torch.ops.aten.multinomial.default, (probs, 100, True), {}, run,
                              lambda ts, outs: outs[0] < 60, [200])
    assert torch.equal(got, torch.tensor([[1] * 100, [2] * 100]))
    assert {(n, s, r) for n, s, _, r in calls} == {("multinomial", (2, 3), True)}     # every row, each piece
    assert sum(m for *_, m, _ in calls) == 100 and max(m for *_, m, _ in calls) <= 29
