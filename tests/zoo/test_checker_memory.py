"""The checker's own memory: out-of-memory in the checker is "could not judge", never the
candidate's fault; comparisons in chunks give the whole comparison's verdict; a sequence
holds one oracle's working set at a time.

The peak-memory figures (before/after, resident size of an elementwise problem of a few
hundred MB) are measured by ``benchmarks/checker_memory.py``, not here (too slow for CI).
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from kernelaudit.verdict import Status
from kernelaudit.zoo.check import exit_code, run_check
from kernelaudit.zoo.oracles import compare, derived, tamper
from kernelaudit.zoo.oracles.base import SequenceOracle, Subject
from kernelaudit.zoo.oracles.bound import BoundOracle
from kernelaudit.zoo.oracles.compare import chunked_compare, max_abs_finite, mismatch_verdict, nonfinite_mismatch
from kernelaudit.zoo.problems import ProblemCase, load_candidate, load_problem

PROBLEM = """
import torch
import torch.nn as nn

M, N = 6, 40


class Model(nn.Module):
    def forward(self, x):
        return torch.sigmoid(x) * 3.0


def get_inputs():
    return [torch.randn(M, N)]


def get_init_inputs():
    return []
"""

RIGHT = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.sigmoid(x) * 3.0
"""

#: Wrong in rows 2 and 4 only (an off-by-one-row style fault).
WRONG_ROWS = RIGHT.replace("        return torch.sigmoid(x) * 3.0",
                           "        y = torch.sigmoid(x) * 3.0\n        y[2, 5:9] += 0.5\n        y[4, 0] = float('nan')\n"
                           "        return y")

#: Raises an out-of-memory error in its own forward.
OOM_IN_FORWARD = RIGHT.replace("        return torch.sigmoid(x) * 3.0",
                               "        raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 12.00 GiB')")


def _files(tmp_path, candidate=RIGHT):
    p, c = tmp_path / "problem.py", tmp_path / "cand.py"
    p.write_text(textwrap.dedent(PROBLEM))
    c.write_text(textwrap.dedent(candidate))
    return p, c


def _oom(*args, **kwargs):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 12.00 GiB")


@pytest.mark.parametrize("where", ["reference", "derive", "compare"])
def test_checker_out_of_memory_is_could_not_judge_with_what_it_held(tmp_path, monkeypatch, where):
    if where == "reference":
        monkeypatch.setattr(ProblemCase, "reference", _oom)
    elif where == "derive":
        monkeypatch.setattr(derived, "_derive", _oom)
    else:
        monkeypatch.setattr("kernelaudit.zoo.oracles.bound.chunked_compare", _oom)
    v = run_check(*_files(tmp_path), "bound", device="cpu").verdict
    assert v.status is Status.SKIPPED, v.message
    assert exit_code(v) == 3
    assert "ran out of memory" in v.message and "the checker held" in v.message, v.message
    assert "not the candidate's fault" in v.message


def test_tamper_out_of_memory_in_its_own_comparison_is_could_not_judge(tmp_path, monkeypatch):
    # the L1 5/7/9/33 false rejections on the H200: tamper's history comparison ran out
    # of memory and was reported as the candidate's error
    monkeypatch.setattr(tamper, "_judge_history_call", _oom)
    v = run_check(*_files(tmp_path), "bound,tamper", device="cpu").verdict
    checks = v.details["checks"]
    assert checks["bound"]["status"] == "ok"
    assert checks["tamper"]["status"] == "skipped", checks["tamper"]["message"]
    assert "ran out of memory" in checks["tamper"]["message"] and "tamper's copies" in checks["tamper"]["message"]
    assert v.status is Status.SKIPPED and exit_code(v) == 3


def test_out_of_memory_in_the_candidates_forward_stays_its_error(tmp_path):
    v = run_check(*_files(tmp_path, OOM_IN_FORWARD), "bound,tamper", device="cpu").verdict
    checks = v.details["checks"]
    assert checks["bound"]["status"] == checks["tamper"]["status"] == "error"
    assert "candidate raised OutOfMemoryError" in checks["tamper"]["message"]
    assert "the checker held" in checks["tamper"]["message"]  # so a reader can tell whose memory it was


def test_chunked_comparison_gives_the_whole_comparisons_verdict(tmp_path, monkeypatch):
    problem_path, cand_path = _files(tmp_path, WRONG_ROWS)
    problem = load_problem(problem_path)
    case = ProblemCase.make(problem)
    got = Subject(load_candidate(cand_path))(case)
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", 7)  # many chunks, none aligned with a row
    v = BoundOracle().compare(case, got)
    # the same figures from one whole-tensor pass
    ref, bnd = case.reference()[0], derived.derive(case).allowed[0]
    err = (got[0].to(torch.float64) - ref).abs()
    bad = nonfinite_mismatch(got[0], ref) | (torch.isfinite(err) & (err > bnd))
    whole = mismatch_verdict(case, 0, got[0], ref, bad, metric="err/bound", value=v.value, tolerance=1.0,
                             allowed=bnd, extra=derived.derive(case).describe())
    assert v.status is Status.WRONG
    assert v.message == whole.message
    assert (v.first_bad_index, v.bad_batches) == (whole.first_bad_index, whole.bad_batches)
    assert v.bad_batches.first == 2 and v.bad_batches.last == 4 and v.bad_batches.count == 2
    assert v.details["mismatched"] == int(bad.sum()) == 5


def test_chunked_exact_comparison_finds_one_flipped_bit():
    ref = torch.arange(50, dtype=torch.float64).reshape(5, 10)
    got = ref.to(torch.float32)
    assert chunked_compare(got, ref, None, chunk=3).mismatched == 0
    got[3, 7] = torch.nextafter(got[3, 7], torch.tensor(1e9))
    res = chunked_compare(got, ref, None, chunk=3)
    assert (res.mismatched, res.first, res.bad_batches().first) == (1, 37, 3)


def test_a_sequence_frees_each_oracles_large_tensors(tmp_path):
    problem_path, cand_path = _files(tmp_path)
    case = ProblemCase.make(load_problem(problem_path))
    v = SequenceOracle([BoundOracle(), tamper.TamperOracle()]).judge(case, Subject(load_candidate(cand_path)))
    assert v.status is Status.OK, v.message
    held = [k for k, x in case._cache.items()
            if isinstance(x, torch.Tensor) or isinstance(x, (list, derived.DerivedModel))
            and k != "derived-floor"]
    assert held == []  # no reference, no derived model kept past its oracle
    assert case._cache["derived-floor"][0] > 0  # the scalar summary tamper reads is kept


def test_chunks_are_larger_on_a_gpu_so_launches_do_not_dominate():
    from kernelaudit.zoo.oracles import compare, derived

    assert compare.chunk_elements("cuda:0") == compare.CUDA_CHUNK_ELEMENTS > compare.chunk_elements("cpu")
    n = 3 * compare.CHUNK_ELEMENTS
    assert len(list(derived._spans(n))) == 3  # the CPU's chunks outside a derivation
    token = derived._DEVICE.set("cuda")
    try:
        assert list(derived._spans(n)) == [(0, n)]
    finally:
        derived._DEVICE.reset(token)


def test_models_are_built_on_the_cases_device_and_on_the_cpu_when_their_constructor_needs_it():
    """Off the CPU a constructor runs under the case's device (initialisation there, not on
    one CPU thread); one that reads values back is built on the CPU and moved. ``meta``
    stands in for a GPU here: values cannot be read back from it."""
    import torch

    from kernelaudit.zoo.problems.problem_case import new_model

    seen = []

    class Plain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)
            seen.append(self.lin.weight.device.type)

    class ReadsBack(Plain):
        def __init__(self):
            super().__init__()
            self.scale = float(self.lin.weight.abs().max())  # a value read back: not on meta

    m = new_model(Plain, [], "meta")
    assert seen == ["meta"] and m.lin.weight.device.type == "meta" and m.training
    seen.clear()
    r = new_model(ReadsBack, [], "meta")
    assert seen == ["meta", "cpu"] and r.lin.weight.device.type == "meta" and r.scale > 0
    seen.clear()
    a, b = new_model(Plain, [], "cpu"), new_model(Plain, [], "cpu")
    assert seen == ["cpu", "cpu"] and torch.equal(a.lin.weight, b.lin.weight)  # seeded alike


def test_out_of_memory_in_the_candidate_on_a_shared_device_is_could_not_judge(tmp_path, monkeypatch):
    # On the H200 with 4 checks side by side, candidates' own allocations ran out of memory
    # that other processes held: tamper reported the reference itself as an error.
    from kernelaudit.zoo.oracles import base

    problem_path, cand_path = _files(tmp_path, OOM_IN_FORWARD)
    problem = load_problem(problem_path)
    case = ProblemCase.make(problem)
    try:
        Subject(load_candidate(cand_path))(case)
    except torch.OutOfMemoryError as exc:
        raised = exc
    monkeypatch.setattr(base, "memory_of_others_gib", lambda device: 90.0)
    v = base.candidate_error(case, raised)
    assert v.status is Status.SKIPPED and exit_code(v) == 3
    assert "other processes held 90.0 GiB" in v.message and "device to itself" in v.message
    monkeypatch.setattr(base, "memory_of_others_gib", lambda device: 0.6)  # its own CUDA context only
    assert base.candidate_error(case, raised).status is Status.ERROR


def _whole(got, ref, allowed):
    """The comparison's figures from whole-tensor float64 passes (the definition)."""
    g = got.to(torch.float64)
    err = (g - ref).abs()
    finite = torch.isfinite(err)
    diff = err.nan_to_num(nan=float("inf"))
    tiny = torch.finfo(torch.float64).tiny
    ratio = torch.where(finite, err / allowed.clamp_min(tiny), torch.zeros_like(err))
    return {"max_err": float(torch.where(finite, err, -1.0).max().clamp_min(0)), "worst_diff": float(diff.max()),
            "worst_index": int(diff.argmax()), "worst_ratio": float(ratio.max()),
            "mismatched": int((nonfinite_mismatch(got, ref) | (finite & (err > allowed))).sum())}


@pytest.mark.parametrize("case", ["finite", "ties", "zero allowed", "nan and inf", "overflowing ref"])
def test_chunked_figures_equal_the_whole_tensor_definitions(case):
    """The fewer-pass comparison (error promoted inside the subtraction, the finite check
    and the worst element from one max, the ratio divided in place) gives the figures of
    the definition, chunk after chunk, in each case of its fast and slow paths."""
    g = torch.Generator().manual_seed(5)
    ref = torch.randn(6, 50, generator=g, dtype=torch.float64)
    got = (ref + 1e-3 * torch.randn(6, 50, generator=g, dtype=torch.float64)).to(torch.float32)
    allowed = torch.full_like(ref, 2e-3)
    if case == "ties":
        got = (ref + 0.5).to(torch.float32)
        ref = got.to(torch.float64) - 0.25          # every error exactly 0.25: the first index wins
    elif case == "zero allowed":
        allowed[2, 3] = 0.0                            # a quotient 0/0 or x/0: the clamped ratio
    elif case == "nan and inf":
        got[1, 4], ref[1, 4] = float("nan"), float("nan")
        got[4, 9] = float("inf")
    elif case == "overflowing ref":
        ref[3, 3] = 1e39                               # rounds to inf in float32: the slow path
        got[3, 3] = float("inf")
    res = chunked_compare(got, ref, lambda r, lo, hi: allowed.reshape(-1)[lo:hi], chunk=7)
    want = _whole(got, ref, allowed)
    assert {k: getattr(res, k) for k in want} == pytest.approx(want, rel=1e-12), case


def test_max_abs_finite_skips_nan_and_inf_chunk_by_chunk():
    t = torch.tensor([[0.5, -3.0, float("nan")], [float("-inf"), 2.0, -0.25], [1.0, 1.5, -2.5]])
    assert max_abs_finite(t, chunk=2) == 3.0
    assert max_abs_finite(t.to(torch.bfloat16), chunk=4) == 3.0
    assert max_abs_finite(torch.full((5,), float("nan")), chunk=2, empty=7.0) == 7.0
    assert max_abs_finite(torch.tensor([-4, 3, 2]), chunk=2) == 4.0


def test_float64_backend_turns_cudnn_off_on_cuda_only_unless_asked(monkeypatch):
    """By default (``KERNELAUDIT_FLOAT64_CUDNN=0``) float64 evaluations on a CUDA device run
    with cuDNN off (im2col and float64 GEMMs); ``=1``, a CPU device, and other dtypes change nothing."""
    from kernelaudit.config import FLOAT64_CUDNN
    from kernelaudit.zoo.problems.problem_case import float64_backend

    before = torch.backends.cudnn.enabled
    monkeypatch.setenv(FLOAT64_CUDNN.name, "1")
    with float64_backend("cuda:0"):
        assert torch.backends.cudnn.enabled == before
    monkeypatch.delenv(FLOAT64_CUDNN.name)
    with float64_backend("cuda:0", torch.float32):
        assert torch.backends.cudnn.enabled == before
    with float64_backend("cpu"):
        assert torch.backends.cudnn.enabled == before
    with float64_backend("cuda:0"):
        assert torch.backends.cudnn.enabled is False
    assert torch.backends.cudnn.enabled == before
    monkeypatch.setenv(FLOAT64_CUDNN.name, "2")
    with pytest.raises(Exception, match="KERNELAUDIT_FLOAT64_CUDNN"):
        float64_backend("cuda:0")
