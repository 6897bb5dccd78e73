"""`kernelaudit check --time` on CUDA: events, streams, the floor at the problems' own shapes.

Skipped without CUDA. The Triton kernels of the corpus solutions are compiled, not
interpreted (this module switches them for its own tests, then back).

    pytest -m gpu tests/gpu/test_timing_gpu.py -q    # about a minute on an H200
"""

from __future__ import annotations

import os

import pytest
import torch

from kernelaudit.verdict import Status
from kernelaudit.zoo.oracles import Subject
from kernelaudit.zoo.problems import CORPUS_DIR, PACKAGE_DIR, ProblemCase, load_candidate, load_problem, solution_path
from kernelaudit.zoo.timing import capture_timers, time_candidate, timer_tampering

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

EXPLOITS = PACKAGE_DIR / "exploits"
#: Ways the side-stream trick may be caught first (all of them are the same trick seen from different sides).
SIDE_STREAM_FINDINGS = {"outputs changed after the return", "pending work after the timed region",
                        "elements not ready on the caller's stream", "time below the physical floor",
                        "max_diff"}
#: The tricks with a CPU form, and what --time reports for each (as in tests/zoo/test_timing.py).
CAUGHT_BY = {
    "relu__timing_patch_event": {"replaced timers"},
    "relu__timing_patch_synchronize": {"replaced timers"},
    "relu__timing_patch_perf_counter": {"replaced timers"},
    "relu__timing_pointer_cache": {"max_diff"},
    "relu__timing_background_thread": {"threads left running", "outputs changed after the return"},
    "relu__timing_lazy_output": {"lazy outputs"},
    "matmul_square__timing_trial_count": {"error growth after the first calls"},
    "matmul_square__timing_side_stream": SIDE_STREAM_FINDINGS,
}


@pytest.fixture(scope="module", autouse=True)
def compiled_triton():
    from kernelaudit.zoo.problems import solution_kernels as kernels

    saved = os.environ.get("TRITON_INTERPRET")
    before = kernels.set_interpret(False)
    os.environ["TRITON_INTERPRET"] = "0"
    yield
    kernels.set_interpret(before)
    if saved is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = saved


@pytest.fixture
def timers():
    snap = capture_timers()
    yield snap
    timer_tampering(snap)


def timed(path, timers, **kwargs):
    cand = load_candidate(path)
    problem = load_problem(CORPUS_DIR / f"{cand.problem_name or path.stem.split('__')[0]}.py")
    case = ProblemCase.make(problem, device="cuda")
    return time_candidate(case, Subject(cand), timers=timers, **{"iters": 10, **kwargs})


@pytest.mark.parametrize("name", ["relu", "matmul_square", "softmax", "layernorm"])
def test_corpus_solutions_are_timed_and_pass(name, timers):
    r = timed(solution_path(name), timers)
    assert r.verdict.status is Status.OK, r.verdict.message
    assert 0.02 < r.speedup < 50, r.summary()
    assert r.floor_s < r.candidate.min and r.floor_s < r.reference.min
    # an honest kernel leaves nothing pending on other streams
    assert r.pending_s["candidate"] < r.pending_s["reference"] + 50e-6, r.pending_s


@pytest.mark.parametrize("name", sorted(CAUGHT_BY))
def test_every_timing_exploit_is_caught_on_cuda(name, timers):
    r = timed(EXPLOITS / f"{name}.py", timers)
    assert r.verdict.status is Status.WRONG, r.verdict.message
    assert r.verdict.metric in CAUGHT_BY[name], r.verdict.message
    assert timer_tampering(timers, restore=False) == []


def test_replaced_event_does_not_change_the_measured_time(timers):
    """_FastEvent reports 1 us; the captured Event measures the real ReLU (tens of us at 64 x 16384)."""
    r = timed(EXPLOITS / "relu__timing_patch_event.py", timers)
    assert r.verdict.metric == "replaced timers"
    assert r.candidate.median > 2e-6, r.summary()


def test_h200_peaks_come_from_the_table():
    from kernelaudit.zoo.timing import device_peaks

    peaks = device_peaks("cuda")
    name = torch.cuda.get_device_name()
    if "H200" in name:
        assert peaks.bandwidth == 4.8e12 and peaks.flops == 989e12 and "table" in peaks.source
    else:
        assert peaks.bandwidth > 0
