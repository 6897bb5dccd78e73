"""The guard fixes (not only refuses) screened ops (``kernelaudit.guard.separable``):
factories in pieces of offset starts, and any op separable along a rule's
``split_dim``, forward and backward, on real kernels and under planted faults."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from kernelaudit.errors import InvalidArgument, UnsafeCallError
from kernelaudit.faults import make_fault_model
from kernelaudit.guard import intercept
from kernelaudit.guard.engine import Engine
from kernelaudit.guard.intercept import GuardMode, guarding
from kernelaudit.guard.rules import KnownFault, rules_policy
from kernelaudit.guard.separable import CannotSplit, _preconditions, split_dims
from kernelaudit.thresholds import Thresholds

SCALE = 12
TH = Thresholds(SCALE)
N = TH.t32 + 100  # just past 2^32 (scaled)
aten = torch.ops.aten


def _rule(name="r", op="arange", aten_=("arange.start_out",), when=None, **kw):
    when = when or {"kind": "numel", "tensor": "output", "at_least": TH.t32 + 1}
    return KnownFault(name=name, op=op, device=kw.pop("device", "cpu"), effect=kw.pop("effect", "wrong"), when=when,
                      aten=aten_, **kw)


ARANGE_CALLS = [  # (args, kwargs): every overload the modes see, integer and float, both step signs
    ((N,), {}),
    ((N,), {"dtype": torch.float32}),
    ((3, 3 + N * 0.5, 0.5), {}),
    ((-7, -7 + 3 * N, 3), {}),
    ((N, 0, -1), {"dtype": torch.float64}),
    ((2, 2 + N), {"dtype": torch.bfloat16}),
]


@pytest.mark.parametrize("args,kwargs", ARANGE_CALLS)
def test_arange_under_wrap32_is_wrong_and_the_guard_fixes_it_bitwise(args, kwargs):
    honest = torch.arange(*args, **kwargs)
    assert honest.numel() > TH.t32
    # the reference: start + i*step exact (float64 or int64), rounded once to the dtype
    # (CPU's own bfloat16 arange rounds twice: 515 -> 512 where 516 is nearest)
    wide = torch.float64 if honest.dtype.is_floating_point else torch.int64
    honest = torch.arange(*args, **{**kwargs, "dtype": wide}).to(honest.dtype)
    with make_fault_model("wrap32", TH):
        assert not torch.equal(torch.arange(*args, **kwargs), honest)  # the planted fault bites
    with guarding("fix", rules=[_rule(action="fix")], fault_model="wrap32", scale=SCALE) as engine:
        got = torch.arange(*args, **kwargs)
        out = torch.empty(5, dtype=honest.dtype)  # the out= variant, resized as arange_out does
        torch.arange(*args, out=out)
        small = torch.arange(100)
    assert torch.equal(got, honest) and torch.equal(out, honest) and torch.equal(small, torch.arange(100))
    st = engine.stats()
    assert (st.fixed, st.refused, st.passed, st.by_rule) == (2, 0, 1, {"r": 2}), st.summary()


@pytest.mark.parametrize("args,dtype", [((0, 1, N), torch.float32), ((-3.5, 7, N), torch.float64),
                                        ((0, 10000, N), torch.int64)])
def test_linspace_under_wrap32_is_wrong_and_the_guard_fixes_it(args, dtype):
    """Floats: within an ulp of the kernel's (the pieces use its two-sided formula in
    float64, rounded once; the kernel rounds in the dtype: both are within an ulp of
    the exact value); integers: exactly the kernel's."""
    honest = torch.linspace(*args, dtype=dtype)
    with make_fault_model("wrap32", TH):
        assert not torch.equal(torch.linspace(*args, dtype=dtype), honest)
    rule = _rule(op="linspace", aten_=("linspace.out",), action="fix")
    with guarding("fix", rules=[rule], fault_model="wrap32", scale=SCALE) as engine:
        got = torch.linspace(*args, dtype=dtype)
        out = torch.empty(3, dtype=dtype)
        torch.linspace(*args, out=out)
    assert engine.stats().fixed == 2
    for g in (got, out):
        if dtype.is_floating_point:
            ulp = torch.finfo(dtype).eps * honest.abs().max()
            assert g.shape == honest.shape and (g - honest).abs().max() <= ulp
        else:
            assert torch.equal(g, honest)


@pytest.mark.parametrize("args,kwargs,dtype", [((0, 1, N), {}, torch.float32), ((-2.0, 3.0, N), {"base": 2.0},
                                                  torch.float64), ((0, 9, N), {"base": 3.0}, torch.int64)])
def test_logspace_under_wrap32_is_wrong_and_the_guard_fixes_it(args, kwargs, dtype):
    """Floats: within an ulp of the kernel's (base to the power of linspace's points, in
    float64, rounded once); integers: exactly the kernel's (its float64 power, truncated)."""
    honest = torch.logspace(*args, **kwargs, dtype=dtype)
    with make_fault_model("wrap32", TH):
        assert not torch.equal(torch.logspace(*args, **kwargs, dtype=dtype), honest)
    rule = _rule(op="logspace", aten_=("logspace.out",), action="fix")
    with guarding("fix", rules=[rule], fault_model="wrap32", scale=SCALE) as engine:
        got = torch.logspace(*args, **kwargs, dtype=dtype)
        out = torch.empty(3, dtype=dtype)
        torch.logspace(*args, **kwargs, out=out)
    assert engine.stats().fixed == 2
    for g in (got, out):
        assert g.shape == honest.shape
        if dtype.is_floating_point:
            torch.testing.assert_close(g, honest, rtol=4 * torch.finfo(dtype).eps, atol=0)
        else:
            assert torch.equal(g, honest)


def test_arange_on_the_real_cpu_kernel_key_is_fixed_in_pieces():
    """The backend-key path the H200's CUDA arange takes: ``arange.start_out`` screened,
    its pieces run by the captured original kernel (the screen is not re-entered)."""
    try:
        engine = intercept.install("fix", rules=[_rule(when={"kind": "numel", "tensor": "output", "at_least": 1000},
                                                       action="fix")], native=False)
        assert ("arange.start_out", "screen", "cpu") in intercept.hooked()
        got = torch.arange(-3, 4997, dtype=torch.int64)
        out = torch.empty(0)
        torch.arange(0.0, 2500.0, 0.5, out=out)
        assert engine.stats().fixed == 2 and engine.stats().passed == 0
    finally:
        intercept.uninstall()
    assert torch.equal(got, torch.arange(-3, 4997)) and torch.equal(out, torch.arange(0.0, 2500.0, 0.5))


def test_a_dtype_gated_factory_rule_leaves_other_dtypes_and_raise_rules_refuse():
    with guarding("fix", rules=[_rule(action="fix", dtypes=("int64",))], fault_model="wrap32", scale=SCALE) as engine:
        torch.arange(N, dtype=torch.float32)  # not this rule's dtype: untouched (and wrong)
    assert engine.stats().fixed == 0 and engine.stats().passed == 1
    with guarding("fix", rules=[_rule(action="raise", split_dim=None)], fault_model="wrap32", scale=SCALE):
        with pytest.raises(UnsafeCallError, match=r"aten::arange on what-if: \[no tensors, dtype int64\] -> "
                                                  rf"\[{N}\] elements; rule r .*its rules say raise"):
            torch.arange(N)


def test_softmax_forward_and_backward_split_along_rows_under_wrap32():
    """Any op with a fix(split_dim) rule: softmax's forward and its backward (its own
    aten op) are wrong past 2^32 under wrap32; the guard splits both along dim 0."""
    rule = _rule(op="softmax", aten_=("_softmax", "_softmax_backward_data"), action="fix", split_dim=0,
                 when={"kind": "numel", "tensor": "any", "at_least": TH.t32 + 1}, dtypes=("float32",))
    g = torch.randn(70, 64)
    leaves = [torch.randn(70, 64, requires_grad=True) for _ in range(3)]  # 4480 > 2^12 elements
    for x in leaves[1:]:
        x.data.copy_(leaves[0].data)  # made outside the fault model: wrap32 wraps clone too

    def run(x):
        y = torch.softmax(x, dim=-1)
        y.backward(g)
        return y.detach(), x.grad

    honest = run(leaves[0])
    with make_fault_model("wrap32", TH):
        bare = run(leaves[1])
    assert not torch.equal(bare[0], honest[0]) and not torch.equal(bare[1], honest[1])
    with guarding("fix", rules=[rule], fault_model="wrap32", scale=SCALE) as engine:
        got = run(leaves[2])
    assert torch.equal(got[0], honest[0]) and torch.allclose(got[1], honest[1], rtol=1e-6, atol=1e-7)
    assert engine.stats().fixed == 2 and engine.stats().by_rule == {"r": 2}


# -- attention: the shape of the H200 finding (cuDNN SDPA backward past 2^32 scores) on
# the CPU's own fused attention backward, which has the same arguments ---------------------
CPU_SDPA_BWD = "_scaled_dot_product_flash_attention_for_cpu_backward"


def _attention_rule(at_least: int) -> KnownFault:
    return _rule(name="att", op="sdpa", aten_=(CPU_SDPA_BWD,), effect="error", action="fix", split_dim=0,
                 when={"kind": "attention-scores", "at_least": at_least, "query_arg": 1, "key_arg": 2})


def _attention_grads():
    torch.manual_seed(0)
    q, k, v = (torch.randn(4, 2, 8, 16, requires_grad=True) for _ in range(3))  # scores 4*2*8*8 = 512
    F.scaled_dot_product_attention(q, k, v).backward(torch.randn(4, 2, 8, 16))
    return q.grad, k.grad, v.grad


class _BackwardErrorsPastScores(TorchDispatchMode):
    """A planted fault: the fused attention backward raises past ``n`` scores (as cuDNN's
    does past 2^32 on the H200), and records the scores of every call it ran."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n, self.seen = n, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is getattr(aten, CPU_SDPA_BWD).default:
            scores = args[1].shape[:-1].numel() * args[2].shape[-2]
            self.seen.append(scores)
            if scores >= self.n:
                raise RuntimeError("mha_graph.execute(...).is_good() to be true, but got false")
        return func(*args, **(kwargs or {}))


# whole batches (one each: at least MIN_PIECES pieces); then heads of one batch
@pytest.mark.parametrize("at_least,pieces", [(300, 4), (100, 8)])
def test_attention_backward_past_the_scores_threshold_errors_and_the_guard_splits_it(at_least, pieces):
    honest = _attention_grads()
    with _BackwardErrorsPastScores(at_least), pytest.raises(RuntimeError, match="is_good"):
        _attention_grads()
    rule = _attention_rule(at_least)
    engine = Engine(rules_policy([rule]), "fix")
    with _BackwardErrorsPastScores(at_least) as fault, GuardMode(engine, [rule], Thresholds()):
        got = _attention_grads()
    assert len(fault.seen) == pieces and max(fault.seen) < at_least
    for g, h in zip(got, honest):
        assert torch.allclose(g, h, rtol=1e-5, atol=1e-6)
    assert engine.stats().fixed == 1


def test_attention_backward_on_the_real_cpu_kernel_key_and_a_refusal_that_says_why():
    """The same split on the backend key (how the H200's cuDNN backward is guarded)."""
    honest = _attention_grads()
    try:
        engine = intercept.install("fix", rules=[_attention_rule(100)], native=False)
        assert (CPU_SDPA_BWD, "screen", "cpu") in intercept.hooked()
        got = _attention_grads()
        assert all(torch.allclose(g, h, rtol=1e-5, atol=1e-6) for g, h in zip(got, honest))
        assert engine.stats().fixed == 1
        intercept.install("fix", rules=[_attention_rule(50)], native=False)  # one head alone is 64 scores
        with pytest.raises(UnsafeCallError, match=rf"aten::{CPU_SDPA_BWD} on cpu: .*attention scores have 512 >= 50 "
                                                  r"elements.*cannot be split into safe pieces: even one slice along "
                                                  "dim 1 is unsafe"):
            _attention_grads()
    finally:
        intercept.uninstall()


def test_splits_that_would_change_the_answer_are_refused_and_fix_rules_must_say_how():
    with pytest.raises(CannotSplit, match="dropout_p=0.1"):
        _preconditions({"dropout_p": 0.1})
    with pytest.raises(CannotSplit, match="cum_seq_q"):
        _preconditions({"dropout_p": 0.0, "cum_seq_q": torch.tensor([0, 3, 8])})
    with pytest.raises(CannotSplit, match="one dim is required"):
        split_dims([_rule("a", split_dim=0), _rule("b", split_dim=1)])
    assert split_dims([_attention_rule(10)]) == (0, 1)
    with pytest.raises(InvalidArgument, match="action='fix' on op='softmax' without split_dim"):
        _rule(op="softmax", aten_=("_softmax",), action="fix")


CPU_SDPA_FWD = "_scaled_dot_product_flash_attention_for_cpu"


class _GridLimitOnBatch(TorchDispatchMode):
    """A planted fault: the fused attention, forward and backward, raises ``invalid
    argument`` when the batch (dim 0; ``dim=1``: the heads) reaches ``n`` (as flash
    attention does at 65536 on the H200: batch and heads on grid dimensions); records that
    size of every call."""

    def __init__(self, n: int, dim: int = 0) -> None:
        super().__init__()
        self.n, self.dim, self.seen = n, dim, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (getattr(aten, CPU_SDPA_FWD).default, getattr(aten, CPU_SDPA_BWD).default):
            b = args[0].shape[self.dim]
            self.seen.append(b)
            if b >= self.n:
                raise RuntimeError("CUDA error: invalid argument")
        return func(*args, **(kwargs or {}))


def test_attention_past_a_batch_grid_limit_errors_and_a_dim_rule_splits_forward_and_backward():
    honest = _attention_grads()
    with _GridLimitOnBatch(3), pytest.raises(RuntimeError, match="invalid argument"):
        _attention_grads()
    rules = [_rule(name=f"grid-{d}", op="sdpa", aten_=(entry,), effect="error", action="fix", split_dim=0,
                   when={"kind": "dim", "dim": 0, "at_least": 3})
             for d, entry in (("fwd", CPU_SDPA_FWD), ("bwd", CPU_SDPA_BWD))]
    engine = Engine(rules_policy(rules), "fix")
    with _GridLimitOnBatch(3) as fault, GuardMode(engine, rules, Thresholds()):
        got = _attention_grads()
    assert fault.seen == [1] * 8  # batch 4 in four pieces of 1 (at least MIN_PIECES), forward then backward
    for g, h in zip(got, honest):
        assert torch.equal(g, h)  # attention is independent per batch: the pieces are bitwise the whole
    assert engine.stats().fixed == 2


def _heads_attention_grads():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 4, 8, 16, requires_grad=True) for _ in range(3))  # batch 1, 4 heads
    F.scaled_dot_product_attention(q, k, v).backward(torch.randn(1, 4, 8, 16))
    return q.grad, k.grad, v.grad


def test_attention_past_a_heads_grid_limit_errors_and_a_heads_rule_splits_forward_and_backward():
    """What a sweep's ``sdpa.heads`` finding becomes (a dim rule on dim 1, split along
    dim 1): the call in pieces of heads, each bitwise the whole's slice."""
    honest = _heads_attention_grads()
    with _GridLimitOnBatch(3, dim=1), pytest.raises(RuntimeError, match="invalid argument"):
        _heads_attention_grads()
    rules = [_rule(name=f"heads-{d}", op="sdpa", aten_=(entry,), effect="error", action="fix", split_dim=1,
                   when={"kind": "dim", "dim": 1, "at_least": 3})
             for d, entry in (("fwd", CPU_SDPA_FWD), ("bwd", CPU_SDPA_BWD))]
    assert split_dims(rules) == (1,)
    engine = Engine(rules_policy(rules), "fix")
    with _GridLimitOnBatch(3, dim=1) as fault, GuardMode(engine, rules, Thresholds()):
        got = _heads_attention_grads()
    assert fault.seen == [1] * 8  # 4 heads in four pieces of 1, forward then backward
    for g, h in zip(got, honest):
        assert torch.equal(g, h)
    assert engine.stats().fixed == 2


def test_a_split_takes_the_largest_safe_pieces_but_at_least_min_pieces_of_them():
    """The fix allocates the whole output once and copies each piece's into it: the
    more pieces, the less memory beyond the bare call's (1/MIN_PIECES of the outputs)."""
    from kernelaudit.guard.separable import MIN_PIECES, fix_split

    x = torch.randn(64, 3)
    sizes = []

    def run(_name, *a, **kw):
        sizes.append(a[0].shape[0])
        return torch.ops.aten.cumsum.default(*a, **kw)

    def safe(pieces, out_numels):
        return all(t.shape[0] <= 32 for t in pieces)

    for min_pieces, want in ((1, [32, 32]), (MIN_PIECES, [64 // MIN_PIECES] * MIN_PIECES), (100, [1] * 64)):
        sizes.clear()
        got = fix_split(torch.ops.aten.cumsum.default, (x, 1), {}, run, safe, (0,), [x.numel()],
                        min_pieces=min_pieces)
        assert sizes == want and torch.equal(got, torch.cumsum(x, 1))


def test_a_split_keeps_per_call_metadata_outputs_whole():
    """Fused attention returns sequence maxima (ints) and random-number state (0-d) beside
    its batch-sliced outputs: a split returns those once, and refuses when pieces disagree."""
    from kernelaudit.guard.separable import _alloc, _Whole

    seed = _alloc(torch.tensor([7, 1]), 0, 2, 4, "rng_state")  # flash attention's (seed, offset)
    assert isinstance(seed, _Whole)
    seed.check(torch.tensor([9, 3]))  # same kind and shape: the first piece's is kept
    with pytest.raises(CannotSplit, match="differs between pieces"):
        seed.check(torch.tensor([9, 3, 4]))
    assert isinstance(_alloc(128, 0, 2, 4, "max_q"), _Whole)
    assert isinstance(_alloc(torch.empty(0), 0, 2, 4, "debug_attn_mask"), _Whole)
    with pytest.raises(CannotSplit, match="differs between pieces"):
        _alloc(128, 0, 2, 4).check(64)
    assert _alloc(torch.ones(2, 3), 0, 2, 4, "output").shape == (4, 3)
    with pytest.raises(CannotSplit, match="not a slice along dim 0"):
        _alloc(torch.ones(3, 3), 0, 2, 4, "output")


def test_dim_and_bytes_predicates_read_shapes_and_storage_extents():
    from kernelaudit.guard.rules import screen_reason

    dim = _rule(op="sdpa", aten_=(CPU_SDPA_FWD,), when={"kind": "dim", "dim": 1, "at_least": 5}, split_dim=1)
    assert screen_reason(dim, [torch.empty(2, 4, 3)], [24]) is None
    assert "5 >= 5 along dim 1" in screen_reason(dim, [torch.empty(2, 4, 3), torch.empty(1, 5)], [24])
    byt = _rule(op="clone", aten_=("clone",), when={"kind": "bytes", "at_least": 64}, split_dim=0)
    base = torch.empty(40, dtype=torch.int8)
    assert screen_reason(byt, [base[:30]], [30]) is None
    assert "storage reaches 64 >= 64 bytes" in screen_reason(byt, [torch.empty(16)], [16])  # 16 float32
    assert "reaches 64" in screen_reason(byt, [torch.empty(80, dtype=torch.int8)[34:64]], [30])  # offset counts
    with pytest.raises(InvalidArgument, match="when.dim=-1"):
        _rule(when={"kind": "dim", "dim": -1, "at_least": 5}, split_dim=0)


@pytest.mark.parametrize("entries,call", [
    (("_cdist_forward", "_cdist_backward"),
     lambda x: torch.cdist(x[:, :5], x[:, 5:])),
    (("_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward"),
     lambda x: F.adaptive_avg_pool1d(x.flatten(1), 5)),
])
def test_opinfo_findings_entry_points_split_along_batch_bitwise(entries, call):
    """The H200 quick sweep's cdist and adaptive_avg_pool1d rules screen these aten entry
    points; on the CPU kernels (a rule at a small size) the split is bitwise the whole."""
    torch.manual_seed(0)
    x = torch.randn(64, 11, 2, requires_grad=True)
    g = None

    def run():
        x.grad = None
        y = call(x)
        y.backward(g if g is not None else torch.ones_like(y))
        return y.detach(), x.grad.clone()
    honest = run()
    rules = [_rule(name=e, op=entries[0], aten_=(e,), effect="wrong", action="fix", split_dim=0,
                   when={"kind": "numel", "tensor": "any", "at_least": 200}) for e in entries]
    engine = Engine(rules_policy(rules), "fix")
    with GuardMode(engine, rules, Thresholds()):
        got = run()
    assert all(torch.equal(a, b) for a, b in zip(got, honest))
    assert engine.stats().fixed >= 2  # the forward and at least one backward


def test_a_split_keeps_an_empty_output_the_call_did_not_compute_whole():
    # _linalg_eigh without compute_v returns its vectors as an empty (0,) tensor, not a
    # slice along the batch: the split returns it as is, the eigenvalues assembled
    from kernelaudit.guard.separable import fix_split

    x = torch.randn(40, 4, 4, generator=torch.Generator().manual_seed(2))
    x = x + x.mT
    func = torch.ops.aten._linalg_eigh.default
    want = func(x, "L", False)
    got = fix_split(func, (x, "L", False), {}, lambda n, *a, **k: func(*a, **k),
                    lambda ts, outs: ts[0].shape[0] <= 8, (0,), [160, 0])
    assert torch.equal(got[0], want[0]) and got[1].shape == want[1].shape == (0,)


def test_unique_consecutive_is_never_cut_generically_even_where_its_pieces_happen_to_agree():
    # a split of unique_consecutive would leave equal neighbours at a cut unmerged: the
    # generic splitter refuses it (its own fix merges them), even on data without any
    from kernelaudit.guard.separable import fix_split

    x = torch.arange(64.0)
    func = torch.ops.aten.unique_consecutive.default
    with pytest.raises(CannotSplit, match="whole input"):
        fix_split(func, (x,), {}, lambda n, *a, **k: func(*a, **k), lambda ts, outs: ts[0].numel() <= 8, (0,), [64])


def _bytes_fix(x, at_least):
    """``adaptive_avg_pool2d`` of ``x`` through :func:`fix_split` under a bytes rule; the
    result, and each piece's input as its kernel saw it: (storage extent in bytes,
    whether it is a view of ``x``'s storage)."""
    from kernelaudit.guard.rules import _extent, screen_reason
    from kernelaudit.guard.separable import fix_split

    rule = _rule(op="nn.functional.adaptive_avg_pool2d", aten_=("_adaptive_avg_pool2d",), split_dim=0,
                 when={"kind": "bytes", "at_least": at_least}, action="fix")
    seen = []

    def run(name, *args, **kwargs):
        t = args[0]
        seen.append((_extent(t.shape, t.stride(), t.storage_offset()) * t.element_size(),
                     t.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()))
        return aten._adaptive_avg_pool2d(*args, **kwargs)

    def safe(ts, out_numels):
        return screen_reason(rule, ts, out_numels) is None

    out = fix_split(aten._adaptive_avg_pool2d.default, (x, [3, 2]), {}, run, safe, (0,), [x.shape[0] * 6])
    return out, seen


def test_a_bytes_rules_pieces_run_on_copies_where_their_offset_would_reach_the_limit():
    """A bytes rule reads a view's storage offset: the later pieces of a big call, as
    views, reach as far as the whole. They run on copies that start their own storage,
    each within the limit, and the answer is bitwise the bare call's."""
    x = torch.randn(64, 3, 8, 8)          # 48 KiB: the limit at 16 KiB
    out, seen = _bytes_fix(x, 16 * 1024)
    assert torch.equal(out, aten._adaptive_avg_pool2d(x, [3, 2]))
    assert len(seen) >= 4 and max(e for e, _ in seen) < 16 * 1024, seen
    assert seen[0][1] is False  # even the first piece: one way for all


def test_a_small_call_on_a_view_far_into_a_big_storage_is_fixed_not_refused():
    """What a user splitting a big tensor by hand passes: x[k:k+2], small, but lying past
    the limit in its storage. Refused before (every slice kept the offset); now run on
    a copy."""
    big = torch.randn(64, 3, 8, 8)
    view = big[60:62]
    out, seen = _bytes_fix(view, 16 * 1024)
    assert torch.equal(out, aten._adaptive_avg_pool2d(view, [3, 2]))
    assert max(e for e, _ in seen) < 16 * 1024 and not any(v for _, v in seen), seen


def test_a_view_whose_pieces_are_within_the_limit_runs_uncopied():
    x = torch.randn(8, 3, 8, 8)           # 6 KiB, under a 16 KiB limit: pieces of the view itself
    out, seen = _bytes_fix(x[2:6], 16 * 1024)
    assert torch.equal(out, aten._adaptive_avg_pool2d(x[2:6], [3, 2]))
    assert seen and all(v for _, v in seen), seen   # views of x: nothing copied


def test_a_bytes_rule_no_copy_can_satisfy_is_refused_by_name():
    x = torch.randn(4, 3, 8, 8)           # one 768-byte slice is over a 512-byte limit
    with pytest.raises(CannotSplit, match="even one slice along dim 0 is unsafe"):
        _bytes_fix(x, 512)
