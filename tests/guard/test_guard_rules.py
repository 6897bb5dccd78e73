"""Rules and policies: the guard flags exactly what the fault rules say, nothing more."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernelaudit import guard
from kernelaudit.sweep.cases import GridSpec, grid
from kernelaudit.faults import make_fault_model
from kernelaudit.faults.predicates import Effect, TensorMeta, mps_matmul_decision
from kernelaudit.guard.engine import Engine
from kernelaudit.guard.proof import precision
from kernelaudit.guard.policy import mps_rules
from kernelaudit.guard.split import make_plan
from kernelaudit.thresholds import REAL, Thresholds

TH = Thresholds(12)


@st.composite
def matmul_calls(draw):
    """A bmm or mm call on meta tensors: any layout (packed, transposed, offset)."""
    batched = draw(st.booleans())
    B = draw(st.integers(1, 80)) if batched else None
    M, K, N = (draw(st.integers(1, 96)) for _ in range(3))

    def operand(r, c):
        lead = (B,) if batched else ()
        t = draw(st.booleans())
        off = draw(st.sampled_from([0, 0, 1, 37]))
        shape = (*lead, c, r) if t else (*lead, r, c)
        if batched and draw(st.integers(0, 4)) == 0:  # one matrix shared by every batch
            x = torch.empty(1, *shape[1:], device="meta").expand(shape)
            return x.transpose(-1, -2) if t else x
        base = torch.empty(math.prod(shape) + off, device="meta")
        x = base[off:].view(shape)
        return x.transpose(-1, -2) if t else x

    return ("bmm" if batched else "mm"), operand(M, K), operand(K, N)


@settings(max_examples=300, deadline=None)
@given(matmul_calls())
def test_mps_policy_flags_exactly_the_calls_the_fault_rules_change(call):
    op, a, b = call
    c = guard.Call.of(op, (a, b))
    d = mps_matmul_decision(c.out_shape, [TensorMeta.of(a), TensorMeta.of(b)], TH)  # contiguity from strides
    policy = guard.mps_policy(TH, device_types=None)
    hits = policy.check(c)  # contiguity from torch's is_contiguous()
    assert bool(hits) == (d.effect is not Effect.OK)
    if hits:
        assert [h.rule.name for h in hits] == [d.rule]
        assert hits[0].reason == d.reason
    # the engine's cached path (the call built from the cache key) decides the same
    engine_call, action, engine_hits = Engine(policy).decide_cached(op, a, b)
    assert [h.rule.name for h in engine_hits] == [h.rule.name for h in hits]
    assert [h.reason for h in engine_hits] == [h.reason for h in hits]
    assert (engine_call.out_shape, engine_call.operands, engine_call.packed, engine_call.describe()) == \
        (c.out_shape, c.operands, c.packed, c.describe())
    assert action == ("fix" if hits else "pass")


@settings(max_examples=150, deadline=None)
@given(matmul_calls())
def test_every_piece_of_a_plan_is_safe_and_the_pieces_tile_the_output(call):
    op, a, b = call
    policy = guard.mps_policy(TH, device_types=None)
    c = guard.Call.of(op, (a, b))
    plan = make_plan(policy, c)
    if plan is None:
        return
    covered = 0
    for bs, rs, cs in plan.pieces():
        pa = a[bs, rs, :] if bs is not None else a[rs, :]
        pb = b[bs, :, cs] if bs is not None else b[:, cs]
        assert not policy.check(guard.Call.of(op, (pa, pb)))
        covered += (1 if bs is None else bs.stop - bs.start) * (rs.stop - rs.start) * (cs.stop - cs.start)
    assert covered == c.out_numel


def test_policy_for_a_fault_model_moves_with_its_scale():
    fm = make_fault_model("mps", Thresholds(16))
    p = guard.policy_for(fm)
    assert p.thresholds == Thresholds(16) and p.device_types is None
    assert [r.name for r in p.rules] == ["A", "B", "C", "attention-scores"]
    assert guard.policy_for("wrap32", Thresholds(16)).rules[0].min_elements == 2**16 + 1
    assert guard.policy_for("none").rules == ()


def test_default_policy_is_mps_at_the_study_thresholds_for_mps_tensors():
    p = guard.mps_policy()
    assert p.thresholds == REAL and p.device_types == ("mps",)
    assert p.floor("bmm", "mps") == REAL.t31
    assert p.floor("bmm", "cpu") == 2**62  # no rule for CPU tensors


def test_blanket_rule_blocks_correct_calls_that_mps_policy_lets_through():
    # the study's cases at a small scale, metadata only
    ops = ("bmm", "mm", "linear", "attention", "sdpa")
    p = precision(grid(GridSpec(ops=ops, dtypes=("float32",), scale=16)))
    assert p.ours_misses == 0 and p.ours_false_alarms == 0
    assert p.ours_blocks == p.wrong_cases
    assert p.blanket_misses_silent == 0
    assert p.blanket_blocks_correct > 0
    assert p.ours_lets_through_of_those == p.blanket_blocks_correct


def test_a_user_rule_takes_a_few_lines_and_can_pick_its_own_action():
    def wide(call):
        return f"{call.out_shape[-1]} output columns > 100" if call.out_shape[-1] > 100 else None

    rule = guard.Rule("wide", wide, "a made-up rule for the test", ops=("mm",), action="raise")
    policy = guard.mps_policy(TH, device_types=("cpu",)).with_rules(rule)
    with guard.guarding("fix", policy=policy) as g:
        torch.mm(torch.randn(3, 4), torch.randn(4, 100))
        with pytest.raises(guard.UnsafeCallError, match="rule wide"):
            torch.mm(torch.randn(3, 4), torch.randn(4, 101))
    assert g.stats().refused == 1 and g.stats().passed == 1


def test_rules_sharing_one_decision_report_hits_in_policy_order():
    # Rules A, B and C are evaluated once per call as a family; a rule placed between
    # them still reports in policy order, and a policy holding only rule C flags only C.
    def always(call):
        return "always"

    a_rule, b_rule, c_rule, _ = mps_rules(TH)
    mixed = guard.Policy("mixed", (guard.Rule("first", always, "test"), a_rule, guard.Rule("mid", always, "test"),
                                   b_rule, c_rule), None, TH)
    only_c = guard.Policy("only-c", (c_rule,), None, TH)
    B = 80
    # rule C: a contiguous operand past the scaled 2^32 (= 4096), a small output
    wrap = guard.Call.of("bmm", (torch.empty(B, 8, 512, device="meta"), torch.empty(B, 512, 1, device="meta")))
    # rule A: an output past 4096 with a transposed operand
    packed = guard.Call.of("bmm", (torch.empty(B, 64, 64, device="meta").transpose(1, 2),
                                   torch.empty(B, 64, 64, device="meta")))
    assert [h.rule.name for h in mixed.check(wrap)] == ["first", "mid", "C"]
    assert [h.rule.name for h in mixed.check(packed)] == ["first", "A", "mid"]
    assert [h.rule.name for h in only_c.check(wrap)] == ["C"]
    assert only_c.check(packed) == []


def test_policy_describes_itself():
    assert guard.mps_policy().describe() == "policy mps (4 rules, mps at 2^32 = 2^32)"


def _meta_pair(B, M, K, N, transpose_b=False):
    a = torch.empty(B, M, K, device="meta")
    b = torch.empty(B, N, K, device="meta").transpose(1, 2) if transpose_b else torch.empty(B, K, N, device="meta")
    return a, b


@pytest.mark.parametrize("shape, transpose_b, expected", [
    ((65, 64, 16, 64), True, "A"),     # output past 2^16 (scaled 2^32), transposed operand
    ((65, 64, 64, 8), False, "C"),     # a contiguous operand past 2^16 (scaled 2^32)
    ((65, 64, 16, 64), False, None),   # contiguous, output past 2^32: tiled path, correct
])
def test_engine_first_call_shortcut_decides_like_the_policy(shape, transpose_b, expected):
    # The engine's first-call shortcut (one family deciding on plain metadata) and the
    # generic path through Policy.check give the same call, action, hits and reasons.
    th = Thresholds(16)
    a, b = _meta_pair(*shape, transpose_b=transpose_b)
    policy = guard.mps_policy(th, device_types=None)
    engine = Engine(policy, "fix", {"C": "raise"})
    call, action, hits = engine.decide_cached("bmm", a, b)
    assert engine._fast["meta"]["bmm"]  # the shortcut was taken
    ref = guard.Call.of("bmm", (a, b))
    ref_hits = policy.check(ref)
    assert call.describe() == ref.describe() and call.packed == ref.packed and call.out_shape == ref.out_shape
    assert call.operands == ref.operands and call.operands[0].__class__ is TensorMeta
    assert [(h.rule.name, h.reason, h.explain()) for h in hits] == \
        [(h.rule.name, h.reason, h.explain()) for h in ref_hits]
    assert [h.rule.name for h in hits] == ([expected] if expected else [])
    assert action == {"A": "fix", "C": "raise", None: "pass"}[expected]
    # a policy with one more (generic) rule takes the generic path, with the same answer
    extra = policy.with_rules(guard.Rule("never", lambda c: None, "never fires", ops=("bmm",), min_elements=1))
    engine2 = Engine(extra, "fix", {"C": "raise"})
    _, action2, hits2 = engine2.decide_cached("bmm", a, b)
    assert engine2._fast["meta"]["bmm"] is False
    assert (action2, [(h.rule.name, h.reason) for h in hits2]) == (action, [(h.rule.name, h.reason) for h in hits])
    # the fault model's predicate still returns a Decision, with the same fields
    d = mps_matmul_decision(ref.out_shape, ref.operands, th, ref.packed)
    assert type(d).__name__ == "Decision" and d.rule == expected
    assert (d.reason == hits[0].reason) if hits else d.effect is Effect.OK


def test_engine_first_call_shortcut_with_part_of_the_family():
    # A policy holding rule A alone: a call that rule C would flag passes.
    th = Thresholds(16)
    rule_a = [r for r in mps_rules(th) if r.name == "A"]
    policy = guard.Policy("only-A", tuple(rule_a), None, th)
    a, b = _meta_pair(65, 64, 64, 8)
    _, action, hits = Engine(policy).decide_cached("bmm", a, b)
    assert (action, hits) == ("pass", [])
    a, b = _meta_pair(65, 64, 16, 64, transpose_b=True)
    _, action, hits = Engine(policy, "warn").decide_cached("bmm", a, b)
    assert action == "warn" and [h.rule.name for h in hits] == ["A"]
