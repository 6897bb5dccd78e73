"""Oracles on purpose-built candidates: tamper's checks one by one, and errors as verdicts."""

from __future__ import annotations

import textwrap

import pytest

from kernelaudit.zoo.oracles import Subject, make_oracle
from kernelaudit.zoo.problems import CORPUS_DIR, MUTANTS_DIR, ProblemCase, load_candidate, load_problem, solution_path
from kernelaudit.verdict import Status

pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning"), pytest.mark.usefixtures("triton_interpreter")]


def _candidate(tmp_path, body: str, init: str = "pass"):
    p = tmp_path / "cand.py"
    p.write_text(textwrap.dedent(f"""
        import torch
        import torch.nn as nn
        from kernelaudit.zoo.problems.solution_kernels import unary

        class ModelNew(nn.Module):
            def __init__(self, *args):
                super().__init__()
                {init}

            def forward(self, x):
                {body}
    """))
    return Subject(load_candidate(p))


def _case(name: str) -> ProblemCase:
    return ProblemCase.make(load_problem(CORPUS_DIR / f"{name}.py"), small=True)


def test_tamper_passes_the_verified_solution():
    v = make_oracle("tamper").judge(_case("relu"), Subject(load_candidate(solution_path("relu"))))
    assert v.ok and v.details["poisoned_allocations"] >= 1


POOL = "import concurrent.futures; self.pool = concurrent.futures.ThreadPoolExecutor(1)"


def test_tamper_passes_a_candidate_whose_thread_pool_waits_idle_after_its_call(tmp_path):
    # what torch.compile's Inductor leaves behind its first call: a pool worker waiting for work
    v = make_oracle("tamper").judge(_case("relu"), _candidate(tmp_path, "return self.pool.submit(torch.relu, x).result()",
                                                              init=POOL))
    assert v.ok, v.message


def test_tamper_catches_work_a_candidate_left_running_on_a_thread_pool(tmp_path):
    body = "y = torch.relu(x); self.pool.submit(lambda: (__import__('time').sleep(0.3), y.add_(0))); return y"
    v = make_oracle("tamper").judge(_case("relu"), _candidate(tmp_path, body, init=POOL))
    assert v.status is Status.WRONG and "threads left running" in v.message + str(v.details), v.message


def test_tamper_catches_an_output_aliasing_its_input_that_model_does_not_alias(tmp_path):
    # hardtanh is the identity on torch.rand inputs: returning x is right in value, wrong in memory
    v = make_oracle("tamper").judge(_case("hardtanh"), _candidate(tmp_path, "return x"))
    assert v.status is Status.WRONG and "shares memory with input 0" in v.message


def test_tamper_catches_a_nondeterministic_kernel(tmp_path):
    v = make_oracle("tamper").judge(_case("relu"), _candidate(tmp_path, "return unary(x, 'relu') + torch.rand(()) * 1e-7"))
    assert v.status is Status.WRONG and "differs bit for bit between two identical runs" in v.message


def test_tamper_catches_unwritten_tail_elements_and_locates_the_first(tmp_path):
    body = "y = torch.empty_like(x)\n                y[:, :100] = torch.relu(x[:, :100])\n                return y"
    v = make_oracle("tamper").judge(_case("relu"), _candidate(tmp_path, body))
    assert v.status is Status.WRONG and "never wrote" in v.message
    assert v.first_bad_index == 100


def test_tamper_restores_inputs_a_candidate_clobbers_so_later_oracles_are_not_fooled():
    case = _case("leaky_relu")
    before = case.inputs[0].clone()
    subject = Subject(load_candidate(MUTANTS_DIR / "leaky_relu__zeroes_input.py"))
    v = make_oracle("tamper,bound").judge(case, subject)
    assert v.status is Status.WRONG and v.details["checks"]["bound"]["status"] == "ok"
    assert case.inputs[0].equal(before)


@pytest.mark.parametrize("oracle", ["kernelbench", "assert-close", "ulp", "bound", "shapes", "values", "tamper"])
def test_a_candidate_that_raises_is_an_error_verdict_naming_the_exception(tmp_path, oracle):
    v = make_oracle(oracle).judge(_case("relu"), _candidate(tmp_path, "raise ValueError('kernel launch failed')"))
    assert v.status is Status.ERROR and "ValueError" in v.message and "kernel launch failed" in v.message


def test_a_candidate_returning_the_wrong_shape_is_wrong_with_both_shapes(tmp_path):
    v = make_oracle("bound").judge(_case("relu"), _candidate(tmp_path, "return x[:, :10]"))
    assert v.status is Status.WRONG and "(4, 10), expected (4, 200)" in v.message


def test_sequence_keeps_every_members_evidence():
    subject = Subject(load_candidate(MUTANTS_DIR / "relu__drops_negative_branch.py"))
    v = make_oracle("kernelbench,values").judge(_case("relu"), subject)
    checks = v.details["checks"]
    assert checks["kernelbench"]["status"] == "ok" and checks["values"]["status"] == "wrong"
    assert v.status is Status.WRONG and "values negative" in str(checks["values"])


def test_tamper_delays_each_side_stream_once_and_restores_torch(monkeypatch):
    """The CUDA stream hook, exercised on the CPU with a fake stream API."""
    import torch

    from kernelaudit.zoo.oracles.tamper import SIDE_STREAM_DELAY_CYCLES, delayed_side_streams

    class FakeStream:
        def __init__(self, sid):
            self.cuda_stream = sid

        def __eq__(self, other):
            return isinstance(other, FakeStream) and other.cuda_stream == self.cuda_stream

        def __repr__(self):
            return f"<stream {self.cuda_stream}>"

    state = {"cur": FakeStream(0)}
    fake_set = lambda s: state.__setitem__("cur", s)  # noqa: E731
    sleeps: list[int] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: state["cur"])
    monkeypatch.setattr(torch.cuda, "set_stream", fake_set)
    monkeypatch.setattr(torch.cuda, "_sleep", sleeps.append, raising=False)
    used: list[str] = []
    with delayed_side_streams("cuda", used):
        torch.cuda.set_stream(FakeStream(7))
        torch.cuda.set_stream(FakeStream(7))
        torch.cuda.set_stream(FakeStream(0))
    assert sleeps == [SIDE_STREAM_DELAY_CYCLES] and used == ["<stream 7>"]
    assert torch.cuda.set_stream is fake_set and "__enter__" not in torch.cuda.Stream.__dict__


NONDETERMINISTIC_PROBLEM = '''
import torch
import torch.nn as nn

N = 64


class Model(nn.Module):
    """A relu plus noise that changes every run: nondeterministic by design, like cuDNN's
    transposed convolutions, whose atomics sum in another order each run."""

    def forward(self, x):
        return torch.relu(x) + torch.rand(()) * 1e-7


def get_inputs():
    return [torch.randn(4, N)]


def get_init_inputs():
    return []
'''


def _nondeterministic_case(tmp_path) -> ProblemCase:
    p = tmp_path / "noisy_relu.py"
    p.write_text(NONDETERMINISTIC_PROBLEM)
    return ProblemCase.make(load_problem(p))


def test_tamper_does_not_require_determinism_where_the_problems_own_model_lacks_it(tmp_path):
    v = make_oracle("tamper").judge(_nondeterministic_case(tmp_path),
                                    _candidate(tmp_path, "return torch.relu(x) + torch.rand(()) * 1e-7"))
    assert v.ok, v.message
    assert v.details["nondeterministic_by_design"] is True


def test_tamper_still_catches_unwritten_elements_of_a_nondeterministic_problem(tmp_path):
    body = ("y = torch.empty_like(x)\n                y[:, :10] = torch.relu(x[:, :10]) + torch.rand(()) * 1e-7"
            "\n                return y")
    v = make_oracle("tamper").judge(_nondeterministic_case(tmp_path), _candidate(tmp_path, body))
    assert v.status is Status.WRONG and "never wrote" in v.message and "nondeterministic here" in v.message
    # the history check may come first, its first bad index wherever stale memory happens
    # to differ from the reference; the unwritten finding's own is the first unwritten one
    unwritten = [f for f in v.details["findings"] if f["metric"] == "unwritten output elements"]
    assert len(unwritten) == 1 and unwritten[0]["first_bad_index"] == 10


def test_candidates_run_without_tf32_on_cuda_unless_the_problem_allows_it_and_own_changes_stay_visible():
    """PyTorch lets cuDNN use TF32 by default; the checker's runs of a float32 candidate do
    not, so a correct candidate calling F.conv2d rounds like float32. A switch the candidate
    turns on itself is left on for the checks of changed switches."""
    import types

    import torch

    from kernelaudit.zoo.problems.problem_case import problem_precision

    case = types.SimpleNamespace(device="cuda:0", problem=types.SimpleNamespace(allow_tf32=False))
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    saved = cudnn.allow_tf32, matmul.allow_tf32
    try:
        cudnn.allow_tf32, matmul.allow_tf32 = True, False
        with problem_precision(case):
            assert (cudnn.allow_tf32, matmul.allow_tf32) == (False, False)
        assert (cudnn.allow_tf32, matmul.allow_tf32) == (True, False)
        with problem_precision(case):
            matmul.allow_tf32 = True  # the candidate's own change
        assert matmul.allow_tf32 is True
        matmul.allow_tf32 = False
        case.problem.allow_tf32 = True
        with problem_precision(case):
            assert cudnn.allow_tf32 is True  # ALLOW_TF32: PyTorch's switches as they are
    finally:
        cudnn.allow_tf32, matmul.allow_tf32 = saved
