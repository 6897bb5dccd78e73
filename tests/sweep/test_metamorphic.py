"""Metamorphic judges: each relation passes a correct op and catches planted faults
(wrap32, unwritten-tail, unwritten-head) at a tiny scale; the fault models leave out=
tails (heads) as they were."""

from __future__ import annotations

import math

import pytest
import torch

from kernelaudit.faults import make_fault_model
from kernelaudit.sweep.judge.metamorphic import RELATIONS, check, chunk_len, spots, windows
from kernelaudit.sweep.judge.metamorphic_ops import META_OPS
from kernelaudit.thresholds import Thresholds
from kernelaudit.verdict import Status

SCALE = 8  # thresholds 2^7, 2^8, 2^9 elements
TH = Thresholds(SCALE)
N = TH.t32 + TH.t32 // 2  # past 2^31 and 2^32, a tail of 128 elements past 2^32

# One op per relation (and per kind of chunk relation), with the faults that change its answer.
CASES = [
    ("arange", "float32", ("wrap32", "unwritten-tail")),
    ("linspace", "float32", ("wrap32", "unwritten-tail")),
    ("tril_indices", "int64", ("wrap32", "unwritten-tail")),
    ("var_mean.unbiased", "float32", ("wrap32",)),
    ("max.reduction_no_dim", "bfloat16", ("wrap32",)),
    ("cumsum.flat", "float32", ("wrap32", "unwritten-tail")),
    ("randn", "float32", ("wrap32", "unwritten-tail", "unwritten-head")),
    ("uniform", "float16", ("wrap32", "unwritten-tail")),
    ("bernoulli", "float32", ("wrap32", "unwritten-tail", "unwritten-head")),
    ("take", "float32", ("wrap32", "unwritten-tail")),
    ("nonzero", "float32", ("wrap32",)),
    ("searchsorted", "int64", ("wrap32", "unwritten-tail")),
    ("native_dropout_backward", "float32", ("wrap32", "unwritten-tail")),
]


def test_cases_cover_every_relation():
    assert {META_OPS[name].relation for name, _, _ in CASES} == set(RELATIONS)


@pytest.mark.parametrize("name,dtype,faults", CASES, ids=[c[0] for c in CASES])
def test_relation_passes_correct_op_and_catches_planted_faults(name, dtype, faults):
    torch.manual_seed(0)
    ok = check(name, N, dtype=dtype, scale=SCALE)
    assert ok.ok, ok.message
    for fm in faults:
        torch.manual_seed(0)
        v = check(name, N, dtype=dtype, scale=SCALE, fault_model=fm)
        assert v.details["fault_calls_changed"], f"{fm} did not touch {name}"
        assert v.status.value == "wrong", f"{name} under {fm} judged ok: {v.message}"
        assert META_OPS[name].relation in v.message and name in v.message


def test_no_false_rejection_on_every_op_and_dtype():
    """Every op the relations judge, every dtype it takes, on the correct CPU."""
    rejected = []
    for name, op in META_OPS.items():
        for dt in op.dtypes:
            torch.manual_seed(1)
            v = check(name, N + 37, dtype=dt, scale=SCALE)
            if not v.ok:
                rejected.append(v.message)
    assert rejected == []


def test_poisoned_out_shows_an_unwritten_tail_whose_right_value_is_zero():
    v = check("zeros", N, scale=SCALE, fault_model="unwritten-tail")
    assert v.status.value == "wrong" and v.first_bad_index is not None and v.first_bad_index >= TH.t32
    # Without an out= buffer to poison, a tail left at zero is indistinguishable (and right).
    assert check("new_zeros", N, scale=SCALE, fault_model="unwritten-tail").ok


def test_poisoned_out_shows_a_few_unwritten_draws_among_many():
    """bernoulli's fault on an H100: its first n - 2^31 + 4 elements never written, 20 of
    2^31 + 16. As zeros of a fresh allocation they lie in the law's support and move its
    share of ones by 20 in 2^31; in the poisoned out= buffer every one is outside it."""
    scale = 16
    th = Thresholds(scale)
    n = th.t31 + 16                                      # 20 unwritten of 32,784 draws
    for name in ("bernoulli", "randint", "multinomial"):
        torch.manual_seed(0)
        v = check(name, n, scale=scale, fault_model="unwritten-head")
        assert v.status.value == "wrong" and v.first_bad_index == 0, (name, v.message)
        assert "support" in v.message
        torch.manual_seed(0)
        assert check(name, n, scale=scale).ok
    with make_fault_model("unwritten-head", th):          # a fresh output: the 20 read 0
        y = torch.bernoulli(torch.full((n,), 0.3))
    assert int((y[:20] == 0).sum()) == 20 and bool(((y == 0) | (y == 1)).all())


def test_fault_models_leave_out_buffer_tails_as_they_were():
    for name in ("wrap32", "unwritten-tail"):
        buf = torch.full((N,), math.nan)
        with make_fault_model(name, TH):
            torch.arange(N, out=buf)
        assert torch.isnan(buf[TH.t32:]).all(), name
        assert not torch.isnan(buf[:TH.t32]).any(), name
    with make_fault_model("unwritten-tail", TH):
        y = torch.ones(N) * 2
    assert (y[:TH.t32] == 2).all() and (y[TH.t32:] == 0).all()
    head = N - TH.t31 + 4                                 # the kernel writes the last 2^31 - 4
    buf = torch.full((N,), math.nan)
    with make_fault_model("unwritten-head", TH):
        torch.arange(N, out=buf)
        y = torch.ones(N) * 2
    assert torch.isnan(buf[:head]).all() and not torch.isnan(buf[head:]).any()
    assert (y[:head] == 0).all() and (y[head:] == 2).all()
    with make_fault_model("unwritten-head", TH):          # at most 2^31 elements: all written
        assert (torch.ones(TH.t31) * 2 == 2).all()


def test_spots_and_windows_reach_every_threshold_and_the_end():
    n = TH.t33 + 5
    s = spots(n, TH)
    assert s.dtype == torch.int64 and int(s.min()) == 0 and int(s.max()) == n - 1
    for t in (TH.t31, TH.t32, TH.t33):
        assert {t - 1, t, t + 1} <= set(s.tolist())
    c = chunk_len(TH, n)
    assert c < TH.t31
    w = windows(n, TH)
    assert w[0] == 0 and w[-1] == n - c and any(x <= TH.t32 < x + c for x in w)


def test_sweep_case_is_judged_by_its_relation():
    from kernelaudit.sweep.cases import GridSpec, grid
    from kernelaudit.sweep.judge.execution import execute
    from kernelaudit.sweep.ops.coverage import rows

    cases = grid(GridSpec(ops=("cumsum.flat", "arange.meta"), dtypes=("float32",), layouts=("contig",),
                          directions=("fwd",), thresholds=("2^32",), positions=("above",), scale=10).validate())
    assert len(cases) == 2
    for c in cases:
        assert execute(c, "cpu", tolerances={}).verdict.ok
        v = execute(c, "cpu", tolerances={}, fault_model="wrap32").verdict
        assert v.status.value == "wrong" and v.metric.endswith(":exact"), v
    judged = {r.name: r for r in rows()[0]}
    assert judged["cumsum.flat"].judge == "metamorphic: chunk" and judged["cumsum.flat"].fwd
    assert judged["arange.meta"].judge == "metamorphic: closed_form"


def _judge_draws(name: str, draws: torch.Tensor):
    from kernelaudit.sweep.judge.metamorphic import judge_outputs

    return judge_outputs(META_OPS[name], draws.numel(), draws.dtype, Thresholds(28), (), (draws,))


def test_uniform_draws_on_a_16_bit_grid_are_not_a_biased_law_but_moved_mass_is():
    # CUDA draws 16-bit uniforms on a grid (bfloat16: multiples of 2^-8), so P(X <= 0.25)
    # is 65/256, 40 sigma off 0.25 over 2^24 draws: the law within two epsilons of q is
    # right; 5% of the draws moved to 0.95 is not
    g = torch.Generator().manual_seed(5)
    u = torch.rand(2**24, generator=g, dtype=torch.float64)
    grid = (torch.floor(u * 256) / 256).to(torch.bfloat16)
    v = _judge_draws("rand_like", grid)
    assert v.status is Status.OK, v.message
    moved = torch.where(u < 0.05, 0.95, u).to(torch.bfloat16)
    v = _judge_draws("rand_like", moved)
    assert v.status is Status.WRONG and "cdf" in v.metric, v.message


def test_a_float16_norm_past_the_dtype_range_is_right_as_inf_and_a_wrong_inf_is_caught():
    from kernelaudit.sweep.judge.metamorphic import judge_outputs

    op, th = META_OPS["norm.fro"], Thresholds(10)
    x = torch.full((2**12,), 2048.0, dtype=torch.float16)  # norm 131072 > 65504: inf in float16
    v = judge_outputs(op, x.numel(), x.dtype, th, (x,), (torch.norm(x, "fro"),))
    assert v.status is Status.OK, v.message
    y = torch.full((2**12,), 0.5, dtype=torch.float16)  # norm 32: an inf there is wrong
    v = judge_outputs(op, y.numel(), y.dtype, th, (y,), (torch.tensor(float("inf"), dtype=torch.float16),))
    assert v.status is Status.WRONG, v.message


def test_index_ops_are_not_rejected_for_generated_values_that_are_exactly_zero(monkeypatch):
    """At 2^31 bytes the uniform float32 values hold exact zeros (16 among the masked
    2^28 on an H100): nonzero and argwhere must not then read as missing elements."""
    from kernelaudit.sweep.judge import metamorphic_ops as mo

    real = mo.gen_input

    def with_zeros(n, key, dtype, device, *args):
        x = real(n, key, dtype, device, *args)
        x[::7] = 0.0
        return x

    monkeypatch.setattr(mo, "gen_input", with_zeros)
    for name in ("nonzero", "argwhere"):
        v = check(name, N, dtype="float32", scale=SCALE)
        assert v.ok, v.message
        assert check(name, N, dtype="float32", scale=SCALE, fault_model="wrap32").status is Status.WRONG


def test_true_positions_counted_in_chunks_equal_the_whole_masks_and_the_index_ops_stay_right(monkeypatch):
    from kernelaudit.sweep.judge import metamorphic_ops as mo

    monkeypatch.setattr(mo, "MAX_PASS", 64)      # N = 768 elements: 12 chunks, most with a spot
    whole = torch.nonzero(mo._mask_at(torch.arange(N))).flatten()
    js = spots(N, TH)
    got, total = mo._true_positions(N, TH, js)
    assert total == whole.numel()
    inside = js < total
    assert torch.equal(got[inside], whole[js[inside]]) and bool((got[~inside] == -1).all())
    for name in ("masked_select", "nonzero", "argwhere"):
        torch.manual_seed(0)
        assert check(name, N, dtype="float32", scale=SCALE).ok
        v = check(name, N, dtype="float32", scale=SCALE, fault_model="wrap32")
        assert v.status is Status.WRONG, f"{name} under wrap32: {v.message}"
