"""The ``_chunk_cat`` rule (``known_faults/chunk_cat_grid_z.json``): CUDA's kernel runs on
a grid whose z dimension is the elements of the dims before ``dim``, at most 65,535. The
rule's ``leading`` predicate flags exactly those calls, and the guard's split along
dim 0 hands the kernel pieces under that limit. ``_chunk_cat`` has no CPU kernel of its
own (a composite there), so the screen is driven directly, with a kernel that refuses
a launch past the limit as CUDA does (the real sizes: a few hundred thousand elements)."""

from __future__ import annotations

import pytest
import torch

from kernelaudit.errors import UnsafeCallError
from kernelaudit.guard.engine import Engine
from kernelaudit.guard.intercept import policy_from_rules, screen_call
from kernelaudit.guard.rules import known_faults, screen_reason
from kernelaudit.guard.separable import CallArgs
from kernelaudit.thresholds import REAL

CHUNK_CAT = torch.ops.aten._chunk_cat.default
GRID_Z = 65535


def _rule():
    (rule,) = [r for r in known_faults() if r.aten == ("_chunk_cat",)]
    return rule


def _leading(tensors, dim: int) -> int:
    shape = tensors[0].shape
    n = 1
    for s in shape[:dim % len(shape)]:
        n *= s
    return n


def _screened(rule, tensors, dim: int, num_chunks: int, error: str = "CUDA error: invalid argument"):
    """The call through the guard's screen holding ``rule``; the kernel raises ``error``
    past the grid, as CUDA's launch does."""
    policy, _ = policy_from_rules([rule])
    engine = Engine(policy, "fix")
    launches = []

    def run(name, ts, d, k):
        launches.append(_leading(ts, d))
        if launches[-1] > GRID_Z:
            raise RuntimeError(error)
        return CHUNK_CAT(ts, d, k)

    out = screen_call(engine, "_chunk_cat", "cuda", [rule], REAL, CHUNK_CAT, (tensors, dim, num_chunks), {}, run)
    return out, engine.stats(), launches


def _guarded(tensors, dim: int, num_chunks: int):
    """The call through the guard's screen with the shipped rule (:func:`_screened`)."""
    return _screened(_rule(), tensors, dim, num_chunks)


def test_the_rule_flags_calls_whose_leading_dims_pass_the_grid_and_no_others():
    rule = _rule()
    x = torch.zeros(32768, 2, 3)
    assert screen_reason(rule, [x, x], [], args=CallArgs(CHUNK_CAT, ([x, x], -1, 5), {})) is not None   # 65,536
    y = torch.zeros(32767, 2, 3)
    assert screen_reason(rule, [y, y], [], args=CallArgs(CHUNK_CAT, ([y, y], -1, 5), {})) is None       # 65,534
    assert screen_reason(rule, [x, x], [], args=CallArgs(CHUNK_CAT, ([x, x], 0, 5), {})) is None        # none before dim 0


def test_chunk_cat_past_the_grid_runs_in_pieces_under_it_with_the_whole_calls_answer():
    g = torch.Generator().manual_seed(0)
    x0, x1 = torch.randn(40000, 2, 3, generator=g), torch.randn(40000, 2, 5, generator=g)
    want = CHUNK_CAT([x0, x1], -1, 5)
    got, st, launches = _guarded([x0, x1], -1, 5)
    assert st.fixed == 1 and st.refused == 0, st.summary()
    assert len(launches) >= 3 and max(launches) <= GRID_Z     # 80,000 leading elements: three pieces or more
    assert torch.equal(got, want)


def test_a_call_whose_one_row_passes_the_grid_is_refused_by_name():
    x = torch.zeros(2, 70000, 1)
    with pytest.raises(UnsafeCallError, match="chunk-cat-grid-z"):
        _guarded([x], 2, 1)


def test_pieces_a_kernel_refuses_for_size_are_halved_until_it_takes_them(caplog):
    # the sweep's own _chunk_cat rule counted elements (every size it tried failed): its
    # pieces were still past the grid, and raised again on an H100 (2026-12-06)
    import dataclasses

    rule = dataclasses.replace(_rule(), name="elements-only", when={"kind": "numel", "tensor": "any",
                                                                   "at_least": 4_000_000})
    g = torch.Generator().manual_seed(1)
    x0, x1 = torch.randn(400000, 2, 3, generator=g), torch.randn(400000, 2, 3, generator=g)
    with caplog.at_level("WARNING", logger="kernelaudit.guard"):
        got, st, launches = _screened(rule, [x0, x1], -1, 5)
    assert st.fixed == 1 and launches[0] > GRID_Z and max(launches[1:]) <= GRID_Z
    assert "were refused" in caplog.text and "trying pieces of" in caplog.text
    assert torch.equal(got, CHUNK_CAT([x0, x1], -1, 5))


def test_an_illegal_memory_access_is_not_tried_again_in_smaller_pieces():
    import dataclasses

    rule = dataclasses.replace(_rule(), name="elements-only", when={"kind": "numel", "tensor": "any",
                                                                   "at_least": 4_000_000})
    x = torch.zeros(400000, 2, 3)
    with pytest.raises(RuntimeError, match="illegal memory access"):
        _screened(rule, [x, x], -1, 5, error="CUDA error: an illegal memory access was encountered")
