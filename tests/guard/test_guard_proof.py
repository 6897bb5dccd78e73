"""Part 5 of the guard's promise, on CPU: under the ``mps`` fault model at a small scale,
every case the fault model corrupts comes out correct under ``fix``, raises under
``raise`` and is caught under ``verify``; every case no rule flags runs untouched.
Forward and backward, every covered op (mm, bmm, baddbmm, addmm, matmul, einsum,
linear, SDPA's math path, eager attention) and every layout the sweep knows.
"""

from __future__ import annotations

import collections

import pytest
import torch

from kernelaudit.sweep.cases import GridSpec, grid
from kernelaudit.errors import UnsafeCallError
from kernelaudit.guard.proof import prove, tolerance

#: Scale of the proof: 2^32 becomes 2^14, so every case runs in milliseconds.
PROOF_SCALE = 14
COVERED_OPS = ("bmm", "baddbmm", "mm", "addmm", "matmul3d", "matmul4d", "einsum", "linear", "sdpa", "attention")
#: fp16 is slow on CPU: the ops where fp16 adds a distinct path (batched, 4-D, attention).
FP16_OPS = ("bmm", "matmul4d", "attention")


def _cases(ops, dtypes, positions):
    return grid(GridSpec(ops=ops, dtypes=dtypes, thresholds=("2^31", "2^32", "2*2^32"), positions=positions,
                         scale=PROOF_SCALE))


def _check(cases):
    tally = collections.Counter()
    failures = []
    for case in cases:
        p = prove(case)
        fix, raised, verified = p.runs["fix"], p.runs["raise"], p.runs["verify"]
        err = p.fix_error()
        if err > tolerance(case):
            failures.append(f"{case.id} B={case.batch}: fix error {err:.3g} ({fix.error})")
        if p.corrupted:
            tally["corrupted"] += 1
            tally["fixed bitwise" if p.fix_bitwise() else "fixed within tolerance"] += 1
            if not isinstance(raised.error, UnsafeCallError):
                failures.append(f"{case.id} B={case.batch}: raise did not refuse ({raised.error!r})")
            # verify runs the op and checks it: a silent wrong answer becomes an
            # UnsafeCallError; a rule-B call raises the backend's own error.
            if verified.error is None:
                failures.append(f"{case.id} B={case.batch}: verify missed a corrupted result")
            if fix.stats.fixed == 0:
                failures.append(f"{case.id} B={case.batch}: corrupted, yet the guard fixed no call")
        else:
            tally["untouched"] += 1
            tally["untouched calls"] += fix.stats.passed
            if fix.stats.flagged or not p.fix_bitwise() or raised.error or verified.error:
                failures.append(f"{case.id} B={case.batch}: a case no rule flags was touched ({fix.stats})")
        assert fix.stats.inspected == fix.stats.passed + fix.stats.fixed
    return tally, failures


@pytest.mark.parametrize("op", COVERED_OPS)
def test_guard_fixes_refuses_and_verifies_every_corrupted_case_fp32(op):
    cases = _cases((op,), ("float32",), ("below", "above"))
    tally, failures = _check(cases)
    assert not failures, "\n".join(failures[:20])
    assert tally["corrupted"] > 0, "the grid must contain cases the fault model corrupts"
    assert tally["untouched"] > 0, "the grid must contain cases no rule flags"


@pytest.mark.parametrize("op", FP16_OPS)
def test_guard_fixes_every_corrupted_case_fp16(op):
    cases = _cases((op,), ("float16",), ("above",))
    tally, failures = _check(cases)
    assert not failures, "\n".join(failures[:20])
    assert tally["corrupted"] > 0


def test_batch_split_fixes_are_bitwise_equal_to_the_honest_result():
    # bmm/baddbmm/einsum/matmul split by whole batches: the same arithmetic per batch
    cases = [c for c in _cases(("bmm", "baddbmm", "einsum"), ("float32",), ("above",)) if c.direction == "fwd"]
    for case in cases:
        p = prove(case, actions=("fix",))
        if p.corrupted:
            assert p.fix_bitwise(), f"{case.id} B={case.batch}: fix is not bitwise equal"


def test_gradients_of_a_transposed_bmm_are_fixed_too():
    # BACKGROUND: (256x64)@(64x256), B=65537, contiguous: forward right, grads wrong in
    # the last batch (rule C in the backward's bmm). Scaled: the same shape family.
    case = next(c for c in _cases(("bmm",), ("float32",), ("above",))
                if c.direction == "bwd" and c.layout == "contig" and c.series == "out" and c.threshold == "2^32")
    p = prove(case)
    assert p.corrupted
    assert p.runs["fix"].stats.fixed >= 1
    assert p.fix_error() <= tolerance(case)
    assert torch.is_tensor(p.runs["fix"].outs[0])
